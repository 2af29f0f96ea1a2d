"""Golden tests: `llama-operator render` for one example per accelerator family, byte for byte.

After an intended change, refresh with UPDATE_GOLDEN=1 pytest tests/desired/test_golden.py and review
the diff of tests/golden/ like any other change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llama_operator.cli import main

CASES = [
    # (golden name, example, extra CLI args)
    ("t4", "examples/t4-chat.yaml", []),
    ("a10g", "examples/a10g-chat.yaml", []),
    ("mig-mixed", "examples/mig-mixed.yaml", ["--mig-strategy", "mixed"]),
    # No flag: the example says its strategy itself (accelerator.migStrategy), as a user would plan it.
    ("mig-single", "examples/mig-single.yaml", []),
    ("cpu", "examples/cpu-tiny.yaml", []),
    ("auto-on-local-cluster", "examples/auto.yaml", ["--nodes", "e2e/nodes"]),
]


@pytest.mark.parametrize(("golden", "example", "extra"), CASES, ids=[c[0] for c in CASES])
def test_render_matches_golden(
    golden: str,
    example: str,
    extra: list[str],
    repo: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(repo)
    assert main(["render", "-f", example, *extra]) == 0
    rendered = capsys.readouterr().out
    path = repo / "tests" / "golden" / f"{golden}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(rendered)
    assert rendered == path.read_text(), f"render of {example} changed; see the docstring to refresh"
