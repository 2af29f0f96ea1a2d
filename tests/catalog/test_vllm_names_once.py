"""vLLM's metric names are spelled once, in catalog/vllm.py: the autoscaler's queries, the dashboard and
rules (observability/names.py) and the bench's simulated replicas all take them from there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import llama_bench
import llama_operator

HOME = "llama_operator/catalog/vllm.py"


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (they may name a series in prose)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def spellings() -> dict[str, set[str]]:
    """Module path -> the vLLM series names written in it as code (f-string parts included; a regular
    expression that matches any series, as observability/usage.py has, names none)."""
    found: dict[str, set[str]] = {}
    for package in (llama_operator, llama_bench):
        root = Path(package.__path__[0])
        for path in root.rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            skip = docstrings(tree)
            names = {
                word
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                for word in re.findall(r"vllm:[a-z0-9_:]+", node.value)
            }
            if names:
                found[f"{package.__name__}/{path.relative_to(root).as_posix()}"] = names
    return found


def test_vllm_series_are_spelled_only_in_the_catalog() -> None:
    found = spellings()
    assert "vllm:num_requests_waiting" in found.get(HOME, set())  # the scan reads the catalog's spelling
    elsewhere = {module: sorted(names) for module, names in found.items() if module != HOME}
    assert elsewhere == {}, (
        f"vLLM series written outside {HOME}: {elsewhere}; import them from llama_operator.catalog.vllm "
        "(VLLM_WAITING, VLLM_RUNNING, KV_CACHE_METRICS, ...), adding any that is missing there"
    )
