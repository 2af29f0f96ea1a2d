"""The runtime's shape, measured from its source: the import-linter contracts (pyproject.toml) hold only if
no module imports inside a function, where an import cycle or a layer breach would hide until the function
runs (desired/objects.py once imported the LeaderWorkerSet builder that way); and modules the size of one
idea: no module over 600 lines, no function over 60 (the router's package is measured by its own tests)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import llama_operator

RUNTIME = Path(llama_operator.__path__[0])
# Command entry points that load a heavy dependency only for the command that needs it (kopf, the
# Kubernetes client): the top layer, so no contract is dodged by it.
DEFERRED_IMPORTS_ALLOWED = frozenset({"cli.py", "activator/commands.py", "router/commands.py"})


def runtime_modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(RUNTIME.rglob("*.py")):
        yield path.relative_to(RUNTIME).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def imports_inside_functions(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    for scope in ast.walk(tree):
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield from (n for n in ast.walk(scope) if isinstance(n, ast.Import | ast.ImportFrom))


def test_no_runtime_module_imports_inside_a_function() -> None:
    found = [
        f"{name}:{node.lineno}: {ast.unparse(node)}"
        for name, tree in runtime_modules()
        if name not in DEFERRED_IMPORTS_ALLOWED
        for node in imports_inside_functions(tree)
    ]
    assert found == []


def test_the_scan_finds_an_import_inside_a_function() -> None:
    tree = ast.parse("import os\n\ndef f():\n    from x import y\n    return y\n")
    assert [ast.unparse(n) for n in imports_inside_functions(tree)] == ["from x import y"]


MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
# Modules still over the limit, to be split: the list only shrinks (a module under the limit must leave it,
# a module not on it must stay under the limit).
MODULES_OVER_THE_LIMIT = frozenset(
    {
        "api/chart_values.py",
        "api/settings.py",
        "api/spec.py",
        "catalog/accelerators.py",
        "cli.py",
        "planning/engine.py",
        "planning/extra_args.py",
    }
)
MEASURED_ELSEWHERE = ("activator/", "router/")


def measured_modules() -> Iterator[tuple[str, str, ast.Module]]:
    for path in sorted(RUNTIME.rglob("*.py")):
        name = path.relative_to(RUNTIME).as_posix()
        if not name.startswith(MEASURED_ELSEWHERE):
            text = path.read_text(encoding="utf-8")
            yield name, text, ast.parse(text)


def function_lines(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """Each function's name and length in lines, decorators included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            yield node.name, (node.end_lineno or node.lineno) - start + 1


def test_no_module_over_600_lines_but_those_listed() -> None:
    sizes = {name: len(text.splitlines()) for name, text, _ in measured_modules()}
    over = {name for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert over - MODULES_OVER_THE_LIMIT == set(), {
        name: sizes[name] for name in over - MODULES_OVER_THE_LIMIT
    }
    assert MODULES_OVER_THE_LIMIT - over == set(), "split: take them off MODULES_OVER_THE_LIMIT"


def test_no_function_over_60_lines() -> None:
    long = [
        f"{name}: {function} ({lines} lines)"
        for name, _, tree in measured_modules()
        for function, lines in function_lines(tree)
        if lines > MAX_FUNCTION_LINES
    ]
    assert long == []


def test_the_measure_counts_decorators_and_body() -> None:
    tree = ast.parse("@cache\ndef f():\n    a = 1\n    return a\n")
    assert list(function_lines(tree)) == [("f", 4)]
