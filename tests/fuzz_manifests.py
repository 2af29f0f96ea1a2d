"""Hypothesis strategies for hostile LlamaService manifests: the examples, mutated at random paths with
wrong types at every level, deep nesting, huge and odd strings, and hostile extraArgs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

EXAMPLES = [
    yaml.safe_load(p.read_text())
    for p in sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.yaml"))
]

HOSTILE_ARGS = [
    "--por",
    "9000",
    "--model.x",
    "--help",
    "--hf-token=hf_x",
    "--enforce-eager=1",
    "--max-num-batched-tokens",
    "8k",
    "-O3",
    "-O",
    "--compilation-config.mode",
    "{",
    '{"mode": [1, {"x": null}]}',
    "--",
    "-",
    "---",
    "--\u00e9t\u00e9",
    "--kv-cache-dtype",
    "fp8",
    "--seed",
    "-1",
    "1e309",
    "nan",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.text(min_size=2000, max_size=5000, alphabet="ab\u00e9\u4e2d\u0000\n-."),
    st.sampled_from(["auto", "", "0", "-1", "none", "t4", "1g.10gb", "20Gi", "lots", "None", "true"]),
)
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


def deep(depth: int) -> Any:
    node: Any = "x"
    for i in range(depth):
        node = {"a": node} if i % 2 else [node]
    return node


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return doc


@st.composite
def manifests(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(0, 3))):  # 0: only hostile extraArgs, below, may change it
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        choice = draw(st.integers(0, 9))
        if choice <= 4:
            doc = _set(doc, path, draw(values))
        elif choice == 5 and path and isinstance(doc, dict):
            parent = doc
            for part in path[:-1]:
                parent = parent[part]
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
        elif choice == 6:
            doc = _set(doc, path, deep(draw(st.integers(50, 400))))
        elif choice == 7 and isinstance(doc, dict) and isinstance(doc.get("spec"), dict):
            engine = doc["spec"].setdefault("engine", {})
            if isinstance(engine, dict):
                engine["extraArgs"] = draw(
                    st.lists(st.sampled_from(HOSTILE_ARGS) | st.text(max_size=30), max_size=8)
                )
        elif choice == 8 and isinstance(doc, dict):
            doc["metadata"] = draw(
                st.sampled_from([[], "x", 123, {"name": 123}, {"name": "x" * 64}, {"name": "a.b"}])
            )
        else:
            doc = _set(doc, path, draw(st.sampled_from([[], {}, "", 0, -1, 10**18, 0.5, "auto"])))
    if draw(st.booleans()) and isinstance(doc, dict) and isinstance(doc.get("spec"), dict):
        engine = doc["spec"].setdefault("engine", {})
        if isinstance(engine, dict):
            engine["extraArgs"] = draw(st.lists(st.sampled_from(HOSTILE_ARGS), max_size=4))
    return doc
