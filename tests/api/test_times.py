"""One formatter of times (api/times.py), and no other in the runtime."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path

import llama_operator
from llama_operator.api.autoscaling import unix_time
from llama_operator.api.times import micro_rfc3339, rfc3339

WHEN = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)


def test_seconds_and_microseconds_as_kubernetes_writes_them() -> None:
    assert rfc3339(WHEN) == "2026-01-02T03:04:05Z"
    assert micro_rfc3339(WHEN) == micro_rfc3339(WHEN.timestamp()) == "2026-01-02T03:04:05.000006Z"
    assert unix_time(micro_rfc3339(WHEN.timestamp())) == WHEN.timestamp()  # a round trip keeps precision


def test_no_other_module_formats_a_time() -> None:
    root = Path(llama_operator.__path__[0])
    formatting = {
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("%Y-%m-%dT")
    }
    assert formatting == {"api/times.py"}
