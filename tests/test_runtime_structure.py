"""The runtime's shape, measured from its source: the import-linter contracts (pyproject.toml) hold only if
no module imports inside a function, where an import cycle or a layer breach would hide until the function
runs (desired/objects.py once imported the LeaderWorkerSet builder that way)."""

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
