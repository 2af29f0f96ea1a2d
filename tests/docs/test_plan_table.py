"""docs/plan-table.md is what `make plan-table` generates from the planner as it stands (issue 43)."""

from __future__ import annotations

from pathlib import Path

from tests.docs.plan_table import MODELS, render_plan_table

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_plan_table_is_current() -> None:
    table = render_plan_table()
    assert (REPO / "docs/plan-table.md").read_text() == table, "run `make plan-table`"
    # Every model plans on some GPU, Scout and Maverick among them.
    for label, _ in MODELS:
        rows = [line for line in table.splitlines() if line.startswith(f"| {label} |")]
        assert rows and any("does not plan" not in row for row in rows), label
