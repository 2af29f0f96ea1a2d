"""Drift judged on everything that matters: fields someone else owns in a controlled object's spec mean a
hand edit (replace the spec); a changed field the operator sets means an apply; status writes are only
made when the merge patch would change something."""

from __future__ import annotations

from typing import Any

import pytest

from llama_operator.api.resource import parse_spec
from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.reconcile.drift import (
    Repair,
    merge_patch_changes,
    repair_needed,
    spec_managers,
    writes_as_applied,
)
from llama_operator.reconcile.execution import Event
from llama_operator.reconcile.replicas import ignored_replicas_event, replicas_out_of_bounds

OURS = frozenset({"llama-operator", "llama-operator-autoscaler"})


def entry(manager: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {"manager": manager, "operation": "Update", "fieldsV1": fields}


def test_spec_managers_ignore_replicas_status_and_template_metadata() -> None:
    managed = [
        entry("llama-operator", {"f:spec": {"f:template": {"f:spec": {"f:containers": {}}}}}),
        entry("kube-controller-manager", {"f:status": {"f:replicas": {}}}),
        entry("kubectl", {"f:spec": {"f:replicas": {}}}),  # `kubectl scale`: bounds and the autoscaler own it
        entry("kubectl-rollout", {"f:spec": {"f:template": {"f:metadata": {"f:annotations": {}}}}}),
        entry("kubectl-edit", {"f:spec": {"f:template": {"f:spec": {"f:hostNetwork": {}}}}}),
        entry("kubectl-patch", {"f:spec": {"f:maxUnavailable": {}}}),
    ]
    assert spec_managers(managed) == ["kubectl-edit", "kubectl-patch", "llama-operator"]


@pytest.mark.parametrize("managed", [None, "x", [None, 1, {"fieldsV1": None}, {"fieldsV1": {"f:spec": []}}]])
def test_spec_managers_tolerate_malformed_input(managed: Any) -> None:
    assert spec_managers(managed) == []


def live(spec: dict[str, Any], managers: list[str]) -> dict[str, Any]:
    return {"metadata": {"labels": {"a": "b"}, "specManagers": managers}, "spec": spec}


def test_repair_kinds() -> None:
    desired = {"metadata": {"labels": {"a": "b"}}, "spec": {"x": 1, "y": {"z": "2"}}}
    assert (
        repair_needed(desired, live({"x": 1, "y": {"z": 2}, "default": 0}, ["llama-operator"]), OURS)
        is Repair.NONE
    )
    assert repair_needed(desired, live({"x": 2, "y": {"z": 2}}, ["llama-operator"]), OURS) is Repair.APPLY
    assert (
        repair_needed(desired, live({"x": 1, "y": {"z": 2}}, ["llama-operator", "kubectl-edit"]), OURS)
        is Repair.REPLACE
    )


def test_merge_patch_changes() -> None:
    current = {
        "phase": "Ready",
        "plan": {"args": ["--a", "1"]},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    assert not merge_patch_changes({"phase": "Ready", "gone": None}, current)
    assert merge_patch_changes({"phase": "Pending"}, current)
    assert merge_patch_changes({"phase": None}, current)
    assert merge_patch_changes({"plan": {"args": ["--a", "2"]}}, current)
    assert merge_patch_changes({"plan": {"args": ["--a"]}}, current)
    assert not merge_patch_changes(
        {"conditions": [{"type": "Ready", "status": "True", "reason": None}]}, current
    )
    assert merge_patch_changes({"conditions": [{"type": "Ready", "status": "False"}]}, current)
    assert merge_patch_changes({"new": 1}, current)


MODEL = {"name": "meta-llama/Llama-3.2-1B-Instruct"}


def spec(**fields: Any) -> LlamaServiceSpec:
    return parse_spec({"model": MODEL, **fields})


AUTOSCALED = spec(replicas=5, autoscaling={"minReplicas": 1, "maxReplicas": 3})


def test_kubectl_scale_on_an_autoscaled_service_is_reported_once() -> None:
    event = ignored_replicas_event(AUTOSCALED, {"specReplicas": 1})
    assert isinstance(event, Event) and event.reason == "ReplicasIgnored"
    assert "spec.replicas=5 is ignored" in event.message and "maxReplicas (3)" in event.message
    assert ignored_replicas_event(AUTOSCALED, {"specReplicas": 5}) is None  # already reported
    assert ignored_replicas_event(AUTOSCALED, {}) is None  # first sight: nothing changed
    fixed = spec(replicas=5, autoscaling={"enabled": False})
    assert ignored_replicas_event(fixed, {"specReplicas": 1}) is None
    assert ignored_replicas_event(spec(replicas=5), {"specReplicas": 1}) is None


@pytest.mark.parametrize(
    ("autoscaling", "replicas", "outside"),
    [
        ({"minReplicas": 1, "maxReplicas": 3}, 50, True),  # kubectl scale past maxReplicas
        ({"minReplicas": 2, "maxReplicas": 3}, 1, True),
        ({"minReplicas": 1, "maxReplicas": 3}, 0, True),  # zero only for a service that scales to zero
        ({"minReplicas": 0, "maxReplicas": 3}, 0, False),
        ({"minReplicas": 1, "maxReplicas": 3}, 3, False),
        ({"enabled": False, "maxReplicas": 3}, 50, False),  # spec.replicas fixes the count
    ],
)
def test_a_hand_scale_past_the_bounds_is_noticed(
    autoscaling: dict[str, Any], replicas: int, outside: bool
) -> None:
    deployment = {"spec": {"replicas": replicas}}
    assert replicas_out_of_bounds(spec(autoscaling=autoscaling), deployment) is outside
    assert not replicas_out_of_bounds(spec(autoscaling=autoscaling), None)  # no Deployment yet


def test_a_create_s_fields_become_the_operator_s_applied_ones_the_replica_count_aside() -> None:
    created = {
        "f:metadata": {"f:labels": {"f:app": {}}},
        "f:spec": {
            "f:replicas": {},
            "f:template": {"f:spec": {"f:volumes": {'k:{"name":"cache"}': {"f:hostPath": {}}}}},
        },
    }
    entries = [
        {"manager": "llama-operator", "operation": "Update", "apiVersion": "apps/v1", "fieldsV1": created},
        {
            "manager": "llama-operator",
            "operation": "Apply",
            "apiVersion": "apps/v1",
            "fieldsV1": {"f:spec": {"f:paused": {}}},
        },
        {
            "manager": "llama-operator-autoscaler",
            "operation": "Apply",
            "fieldsV1": {"f:spec": {"f:replicas": {}}},
        },
        {
            "manager": "llama-operator",
            "operation": "Update",
            "subresource": "status",
            "fieldsV1": {"f:status": {}},
        },
    ]
    moved = writes_as_applied(entries, "llama-operator", replicas_applied=False)
    assert moved is not None
    assert [(e["manager"], e["operation"], e.get("subresource")) for e in moved] == [
        ("llama-operator-autoscaler", "Apply", None),
        ("llama-operator", "Update", "status"),
        ("llama-operator", "Apply", None),
    ]
    applied = moved[-1]["fieldsV1"]
    assert applied["f:metadata"] == {"f:labels": {"f:app": {}}}
    assert set(applied["f:spec"]) == {"f:paused", "f:template"}  # the autoscaler keeps the count
    with_count = writes_as_applied(entries, "llama-operator", replicas_applied=True)
    assert with_count is not None and "f:replicas" in with_count[-1]["fieldsV1"]["f:spec"]
    # Nothing to move: nothing is written.
    assert writes_as_applied(moved, "llama-operator", replicas_applied=False) is None
    assert writes_as_applied(None, "llama-operator", replicas_applied=False) is None
