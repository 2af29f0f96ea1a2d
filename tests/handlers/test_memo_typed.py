"""The state start-up puts in kopf's memo is typed: every handler reads it through OperatorMemo (mypy checks
each attribute), and the protocols name exactly what start-up sets: OperatorMemo, and the controller it adds
last (ControllerMemo)."""

from __future__ import annotations

import ast
from pathlib import Path

from llama_operator.handlers import memo as memo_module
from llama_operator.handlers.controller import ControllerMemo
from llama_operator.handlers.memo import OperatorMemo

HANDLERS = Path(memo_module.__file__).parent


def _set_by_startup() -> set[str]:
    tree = ast.parse((HANDLERS / "startup.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                names |= {
                    t.attr
                    for t in elements
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "memo"
                }
    return names


def test_the_protocol_names_what_startup_sets() -> None:
    assert set(OperatorMemo.__annotations__) | set(ControllerMemo.__annotations__) == _set_by_startup()


def test_no_handler_takes_an_untyped_memo() -> None:
    untyped = [p.name for p in HANDLERS.glob("*.py") if "memo: kopf.Memo" in p.read_text()]
    assert not untyped, f"read kopf's memo through OperatorMemo: {untyped}"
