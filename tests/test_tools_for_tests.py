"""The upstream tools the tests run are built before any test starts, never inside one (a cold build outran a
test's timeout on a fresh machine only): every tool a test looks up is in the set-up step's list
(e2e/localcluster/tools.py), no test calls a build, a build a test reaches anyway fails at once, and the
set-up step run from an empty cache (LLAMA_OPERATOR_CACHE pointed at an empty directory) plans to build every
cached tool. No network: the set-up step runs as a dry run."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
E2E = REPO / "e2e"
sys.path.insert(0, str(E2E))  # localcluster is e2e's package (e2e/ is not itself one)

from localcluster import tools  # noqa: E402
from localcluster.binaries import ensure_endpoint_picker  # noqa: E402
from localcluster.config import CachePaths  # noqa: E402
from localcluster.util import NO_BUILDS_ENV, SETUP_COMMAND, ClusterError, apt_install  # noqa: E402

LOOKUPS = {"require_tool", "require_tools", "require"}  # support.require_tool(s), tools.require
# What builds or installs an upstream tool; only the set-up step (localcluster, imagebuild) calls them.
BUILDS = re.compile(r"^(ensure_(?!pki$|all$).+|_go_install|_go_build|_pip_download|apt_install|wheelhouse)$")
LIBRARY_PACKAGES = ("localcluster", "imagebuild")
LIBRARIES = tuple(E2E / package for package in LIBRARY_PACKAGES)


def sources_of_the_tests() -> Iterator[Path]:
    """Every Python file of the tests and what they run, less the libraries that hold the builds and this
    file (it calls a build and a name nobody listed, to see them refused)."""
    for path in sorted([*E2E.rglob("*.py"), *(REPO / "tests").rglob("*.py")]):
        if path != Path(__file__).resolve() and not any(path.is_relative_to(lib) for lib in LIBRARIES):
            yield path


def builds_called(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, name) of each build function imported from the libraries, or called on a library module."""
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARY_PACKAGES:
            for alias in node.names:
                if BUILDS.match(alias.name):
                    yield node.lineno, alias.name
                modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in modules
            and BUILDS.match(node.func.attr)
        ):
            yield node.lineno, f"{node.func.value.id}.{node.func.attr}"


def called_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def test_every_tool_a_test_looks_up_is_in_the_set_up_steps_list() -> None:
    looked_up: dict[str, list[str]] = {}
    for path in sources_of_the_tests():
        tree = ast.parse(path.read_text(), str(path))
        wrappers = {f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name in LOOKUPS}
        inside_wrappers = {id(node) for f in wrappers for node in ast.walk(f)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and called_name(node) in LOOKUPS
                and id(node) not in inside_wrappers
            ):
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                for arg in node.args:
                    assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), (
                        f"{where}: look a tool up by its name written out, so that this check sees it"
                    )
                    looked_up.setdefault(arg.value, []).append(where)
    unlisted = {name: where for name, where in looked_up.items() if name not in tools.TOOL_NAMES}
    assert not unlisted, f"tools looked up that the set-up step does not build: {unlisted}"
    # The lookups the cold failures came from are among them (the check reads what it should).
    assert {"lwepp", "lws-controller", "registry", "skopeo", "image-base"} <= looked_up.keys()


def test_no_test_calls_a_build() -> None:
    calls = [
        f"{path.relative_to(REPO)}:{line} {name}"
        for path in sources_of_the_tests()
        for line, name in builds_called(ast.parse(path.read_text(), str(path)))
    ]
    assert not calls, f"builds in tests (look the tool up with require_tool, add it to TOOLS): {calls}"
    # The check sees an import and a call on a module.
    sample = (
        "from localcluster.binaries import ensure_kwok\nfrom imagebuild import image\nimage.ensure_base()\n"
    )
    assert [name for _, name in builds_called(ast.parse(sample))] == ["ensure_kwok", "image.ensure_base"]


def test_the_set_up_step_from_an_empty_cache_plans_to_build_every_cached_tool(tmp_path: Path) -> None:
    """`make test`'s set-up step as a dry run, with an empty LLAMA_OPERATOR_CACHE: the cold path's plan,
    checked in every run although the machine's own cache is warm."""
    done = subprocess.run(
        ["bash", "e2e/cluster.sh", *SETUP_COMMAND.split()[2:], "--dry-run"],
        cwd=REPO,
        env={**os.environ, "LLAMA_OPERATOR_CACHE": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    planned = re.findall(r"\] (\S+): would (?:build|install)", done.stdout + done.stderr)
    cached = [tool.name for tool in tools.TOOLS if tool.cached]
    assert [name for name in planned if name in cached] == cached, done.stdout + done.stderr
    assert not list(tmp_path.iterdir()), "a dry run wrote to the cache"


def test_make_test_runs_the_set_up_step_before_any_test() -> None:
    script = (E2E / "run-tests.sh").read_text()
    assert SETUP_COMMAND in script
    assert script.index(SETUP_COMMAND) < script.index("pytest")


def test_a_build_a_test_reaches_fails_at_once_naming_the_set_up_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NO_BUILDS_ENV, "1")
    monkeypatch.setenv("LLAMA_OPERATOR_CACHE", str(tmp_path))
    with pytest.raises(ClusterError, match=re.escape(SETUP_COMMAND)):
        ensure_endpoint_picker(CachePaths(tmp_path))
    with pytest.raises(ClusterError, match=re.escape(SETUP_COMMAND)):
        apt_install("no-such-package", tmp_path / "no-such-tool")
    with pytest.raises(ClusterError, match=f"lwepp is not built.*{re.escape(SETUP_COMMAND)}"):
        tools.require("lwepp")
    with pytest.raises(KeyError):
        tools.require("a-tool-nobody-listed")
    assert not (tmp_path / "bin").exists()
