"""docs/metrics.md lists exactly the metrics the operator defines."""

from __future__ import annotations

import re
from pathlib import Path

from llama_operator.infra.metrics import METRIC_NAMES

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_the_reference_lists_every_metric_and_no_other() -> None:
    listed = re.findall(r"^\| `(llama_operator_[a-z_]+)` \|", DOC.read_text(), flags=re.MULTILINE)
    assert sorted(listed) == sorted(METRIC_NAMES)
