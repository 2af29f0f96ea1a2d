"""Create, never adopt: only a controller ownerReference with this LlamaService's uid makes an object ours."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from llama_operator.reconcile.execution import (
    APPLY_REJECTED,
    NAME_CONFLICT,
    ExecutionReport,
    ObjectRef,
    Rejection,
    degraded_event,
    is_permanent_refusal,
    report_execution,
    retry_delay_seconds,
)
from llama_operator.reconcile.ownership import Ownership, controller_uid, ownership

UID = "7d1c2f4e-0000-4000-8000-000000000001"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def obj(*refs: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "cache", "uid": "other", "ownerReferences": list(refs)}}


def ref(
    uid: str = UID, *, controller: bool = True, kind: str = "LlamaService", api: str = ""
) -> dict[str, Any]:
    return {
        "apiVersion": api or "serving.llama-operator.dev/v1alpha1",
        "kind": kind,
        "name": "cache",
        "uid": uid,
        "controller": controller,
    }


@pytest.mark.parametrize(
    ("live", "expected"),
    [
        (None, Ownership.ABSENT),
        (obj(ref()), Ownership.OURS),
        ({"metadata": {"name": "cache"}}, Ownership.FOREIGN),  # a tenant's object, no references
        (obj(ref("another-uid")), Ownership.FOREIGN),  # an older LlamaService of the same name
        (obj(ref(controller=False)), Ownership.FOREIGN),  # a reference alone does not make us its controller
        (obj(ref(kind="Deployment", api="apps/v1")), Ownership.FOREIGN),
        (obj(ref(api="evil.example.com/v1")), Ownership.FOREIGN),  # same kind name, another group
        (obj(ref(uid="")), Ownership.FOREIGN),
    ],
)
def test_ownership(live: dict[str, Any] | None, expected: Ownership) -> None:
    assert ownership(live, UID) is expected


def test_an_empty_owner_uid_owns_nothing() -> None:
    assert ownership(obj(ref(uid="")), "") is Ownership.FOREIGN


def test_controller_uid_tolerates_malformed_metadata() -> None:
    assert controller_uid({"metadata": {"ownerReferences": "x"}}) is None
    assert controller_uid({"metadata": None}) is None
    assert controller_uid({"metadata": {"ownerReferences": [None, 3]}}) is None


@pytest.mark.parametrize(
    ("status", "permanent"),
    [
        (400, True),
        (403, True),
        (422, True),
        (404, False),
        (409, False),
        (429, False),
        (500, False),
        (None, False),
    ],
)
def test_permanent_refusals(status: int | None, permanent: bool) -> None:
    assert is_permanent_refusal(status) is permanent


def _conditions(patch: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in patch["conditions"]}


def test_a_conflict_degrades_and_names_kind_and_object() -> None:
    report = ExecutionReport(conflicts=[ObjectRef("Service", "team-a", "cache")])
    patch = report_execution(None, {"observedGeneration": 1}, report, now=NOW, generation=1)
    degraded = _conditions(patch)["Degraded"]
    assert degraded["status"] == "True"
    assert degraded["reason"] == NAME_CONFLICT
    assert "Service team-a/cache" in degraded["message"]
    assert "Rename the LlamaService" in degraded["message"]
    assert patch["phase"] == "Degraded"


def test_a_refusal_degrades_with_the_api_servers_message() -> None:
    report = ExecutionReport(
        rejections=[Rejection(ObjectRef("Deployment", "team-a", "chat"), 403, "denied by policy no-gpus")]
    )
    patch = report_execution(None, {}, report, now=NOW, generation=2)
    degraded = _conditions(patch)["Degraded"]
    assert degraded["reason"] == APPLY_REJECTED
    assert "Deployment team-a/chat (403): denied by policy no-gpus" in degraded["message"]


def test_a_clean_report_changes_nothing() -> None:
    assert report_execution(None, {"a": 1}, ExecutionReport(), now=NOW, generation=1) == {"a": 1}


def test_one_event_per_problem_not_per_attempt() -> None:
    report = ExecutionReport(conflicts=[ObjectRef("PodDisruptionBudget", "team-a", "cache")])
    first = report_execution(None, {}, report, now=NOW, generation=1)
    event = degraded_event(None, first)
    assert event is not None and event.reason == NAME_CONFLICT and event.warning
    # The next attempt sees the same problem in the status it wrote: no second Event.
    again = report_execution(first, {}, report, now=NOW, generation=1)
    assert degraded_event(first, again) is None
    # Another problem is news.
    other = ExecutionReport(conflicts=[ObjectRef("Service", "team-a", "cache")])
    assert degraded_event(first, report_execution(first, {}, other, now=NOW, generation=1)) is not None


def test_backoff_is_capped() -> None:
    delays = [retry_delay_seconds(n) for n in range(0, 40)]
    assert delays[0] == 15
    assert delays == sorted(delays)
    assert max(delays) == 600
