"""docs/status-reference.md lists every condition reason, Event reason, phase, printer column and status
field the operator has: read from its source and its API models, so a new reason or field the doc does
not list fails here (and so does a row for one the code no longer has)."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from llama_operator.api.conditions import ConditionType
from llama_operator.api.crd import PRINTER_COLUMNS
from llama_operator.api.status import LlamaServiceStatus, Phase
from tests.docs.emitted import Emitted, scan_package, scan_sources
from tests.docs.markdown import table_with_header, tables

REPO = Path(__file__).resolve().parents[2]
DOC_PATH = REPO / "docs" / "status-reference.md"
PACKAGE = REPO / "operator" / "llama_operator"


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC_PATH.read_text()


@pytest.fixture(scope="module")
def emitted() -> Emitted:
    return scan_package(PACKAGE)


def test_the_scanner_reads_every_reason_in_the_operator(emitted: Emitted) -> None:
    assert emitted.unresolved == [], (
        "reasons the doc test cannot read: use a string literal or a module-level constant"
    )
    without = {t.value for t in ConditionType} - {type_ for type_, _ in emitted.conditions}
    assert not without, f"condition types the operator never sets (or the scanner missed): {sorted(without)}"


def test_every_condition_reason_is_documented(doc: str, emitted: Emitted) -> None:
    rows = table_with_header(doc, "Condition")
    documented = {(row[0], row[2]) for row in rows}
    missing = emitted.conditions - documented
    assert not missing, f"add to {DOC_PATH.name}'s Conditions table: {sorted(missing)}"
    stale = documented - emitted.conditions
    assert not stale, f"{DOC_PATH.name} lists conditions the operator no longer sets: {sorted(stale)}"
    with_status = {(row[0], row[1], row[2]) for row in rows}
    wrong = emitted.condition_statuses - with_status
    assert not wrong, f"the doc gives another status for: {sorted(wrong)}"


def test_every_event_reason_is_documented_with_its_type(doc: str, emitted: Emitted) -> None:
    documented = {(row[0], row[1]) for row in table_with_header(doc, "Event reason")}
    missing = emitted.events - documented
    assert not missing, f"add to {DOC_PATH.name}'s Events table (reason, type): {sorted(missing)}"
    stale = documented - emitted.events
    assert not stale, f"{DOC_PATH.name} lists Events the operator no longer posts: {sorted(stale)}"


def test_every_phase_is_documented(doc: str) -> None:
    documented = [row[0] for row in table_with_header(doc, "Phase")]
    assert sorted(documented) == sorted(p.value for p in Phase)


def test_every_printer_column_is_documented(doc: str) -> None:
    documented = [(row[0], row[1]) for row in table_with_header(doc, "Column")]
    assert documented == [(c["name"], c["jsonPath"]) for c in PRINTER_COLUMNS]


def _models_in(annotation: object) -> tuple[list[type[BaseModel]], bool]:
    """The pydantic models an annotation holds (through Optional and list), and whether as list items."""
    models: list[type[BaseModel]] = []
    in_list = False
    stack = [annotation]
    while stack:
        current = stack.pop()
        if isinstance(current, type) and issubclass(current, BaseModel):
            models.append(current)
            continue
        in_list = in_list or typing.get_origin(current) is list
        stack += typing.get_args(current)
    return models, in_list


def _fields(model: type[BaseModel], prefix: str) -> list[str]:
    """Wire paths of the fields that carry a description (ours, not Kubernetes-shaped leaves such as a
    toleration's); a list's items are `field[].child`."""
    paths: list[str] = []
    for name, info in model.model_fields.items():
        if info.description is None:
            continue
        path = f"{prefix}.{info.alias or name}"
        paths.append(path)
        models, in_list = _models_in(info.annotation)
        for inner in models:
            paths += _fields(inner, path + ("[]" if in_list else ""))
    return paths


def test_every_status_field_is_documented(doc: str) -> None:
    fields = set(_fields(LlamaServiceStatus, "status"))
    documented = {row[0] for table in tables(doc) if table[0][0] == "Field" for row in table[1:]}
    missing = fields - documented
    assert not missing, f"add to {DOC_PATH.name}'s field tables: {sorted(missing)}"
    stale = documented - fields
    assert not stale, f"{DOC_PATH.name} lists status fields that do not exist: {sorted(stale)}"


# --- the scanner itself ------------------------------------------------------------------------------

SAMPLE = """
from x import ConditionType, ConditionStatus, Event
TAKEN = "NameTaken"

class Reasons:
    GONE = "Gone"

def report(ok, conflict):
    reason = TAKEN if conflict else "Refused"
    updates = [(ConditionType.DEGRADED, ConditionStatus.TRUE, reason, "m")]
    cond(ConditionType.SLO_MET, ConditionStatus.UNKNOWN, "NoObservation", "m")
    set_condition([], type=ConditionType.READY, status=ConditionStatus.FALSE, reason=Reasons.GONE, message="")
    events = [Event("Scaled", "m", warning=False), Event(reason="Odd", message="m")]
    post_event(body, reason="Direct", message="m", warning=True, component="c")
    post_event(body, reason=event.reason, message="m", warning=True, component="c")

def degraded_event(after):
    return Event(reason=after.reason, message=after.message)
"""


def test_the_scanner_finds_reasons_in_every_form_the_code_uses() -> None:
    found = scan_sources({"sample.py": SAMPLE})
    assert found.unresolved == []
    assert found.conditions == {
        ("Degraded", "NameTaken"),
        ("Degraded", "Refused"),
        ("SLOMet", "NoObservation"),
        ("Ready", "Gone"),
    }
    assert ("Degraded", "True", "Refused") in found.condition_statuses
    # Degraded=True reasons are re-posted as Warning Events by degraded_event.
    assert found.events == {
        ("Scaled", "Normal"),
        ("Odd", "Warning"),
        ("Direct", "Warning"),
        ("NameTaken", "Warning"),
        ("Refused", "Warning"),
    }


@pytest.mark.parametrize(
    "source",
    [
        'cond(ConditionType.READY, ConditionStatus.TRUE, f"Ready{n}", "m")',
        'Event(make_reason(), "m")',
        'Event("Scaled", "m", warning=flag)',
        "def other(x):\n    return Event(reason=x.reason, message='m')",
    ],
)
def test_the_scanner_reports_a_reason_it_cannot_read(source: str) -> None:
    assert scan_sources({"sample.py": source}).unresolved
