"""Status from the Deployment the operator owns: replicas, phase and the Ready/Progressing conditions,
with the scheduler's reason when pods cannot be placed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from llama_operator.api.conditions import (
    ConditionStatus,
    ConditionType,
    ConditionUpdate,
    conditions_of,
    conditions_wire,
    find_condition,
    set_conditions,
)
from llama_operator.api.status import Phase
from llama_operator.reconcile.replicas import WorkloadReplicas


def unschedulable_message(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """The scheduler's message for the first pending pod it could not place (names the short resource)."""
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Pending":
            continue
        for cond in (pod.get("status") or {}).get("conditions") or []:
            scheduled = cond.get("type") == "PodScheduled" and cond.get("status") == "False"
            if scheduled and cond.get("reason") == "Unschedulable":
                return str(cond.get("message") or "unschedulable")
    return None


def rollout_status(
    status: Mapping[str, Any] | None,
    deployment: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    *,
    generation: int | None,
    now: datetime,
    zero_message: str | None = None,
) -> dict[str, Any]:
    """The status fields that follow the Deployment (a merge patch for the LlamaService's status).
    `zero_message`: what zero replicas mean for this LlamaService, if it scales to zero."""
    conditions = conditions_of(status)
    degraded = find_condition(conditions, ConditionType.DEGRADED)
    if degraded is not None and degraded.status == ConditionStatus.TRUE:
        return {}  # the spec is bad; reconcile owns the status until it is fixed
    if deployment is None:
        missing = [
            (
                ConditionType.READY,
                ConditionStatus.FALSE,
                "DeploymentMissing",
                "the vLLM Deployment does not exist yet",
            )
        ]
        conditions = set_conditions(conditions, missing, now=now, generation=generation)
        return {"phase": Phase.PENDING.value, "conditions": conditions_wire(conditions)}

    replicas = WorkloadReplicas.of(deployment)
    desired, ready, updated = replicas.desired, replicas.ready, replicas.updated
    rolled_out = replicas.rolled_out

    pending = unschedulable_message(pods)
    phase, updates = _rollout_conditions(
        rolled_out=rolled_out, desired=desired, ready=ready, updated=updated, pending=pending,
        zero_message=zero_message,
    )  # fmt: skip
    conditions = set_conditions(conditions, updates, now=now, generation=generation)
    return {
        "phase": phase.value,
        "replicas": desired,
        "readyReplicas": ready,
        "updatedReplicas": updated,
        "conditions": conditions_wire(conditions),
    }


def _rollout_conditions(
    *, rolled_out: bool, desired: int, ready: int, updated: int, pending: str | None, zero_message: str | None
) -> tuple[Phase, list[ConditionUpdate]]:
    """The phase and the Schedulable, Ready and Progressing conditions of a Deployment's rollout."""
    updates: list[ConditionUpdate] = [
        (
            ConditionType.SCHEDULABLE,
            ConditionStatus.FALSE,
            "Unschedulable",
            f"pods cannot be placed: {pending}",
        )
        if pending is not None
        else (ConditionType.SCHEDULABLE, ConditionStatus.TRUE, "Scheduled", "all pods are placed")
    ]
    if rolled_out and desired == 0:
        # At zero by choice (the autoscaler after idleness, or replicas: 0): nothing is wrong or pending.
        phase = Phase.SCALED_TO_ZERO
        why = "no replica: " + (zero_message or "spec.replicas is 0")
        updates += [
            (ConditionType.READY, ConditionStatus.FALSE, "ScaledToZero", why),
            (ConditionType.PROGRESSING, ConditionStatus.FALSE, "ScaledToZero", why),
        ]
    elif rolled_out and desired > 0:
        phase = Phase.READY
        updates += [
            (ConditionType.READY, ConditionStatus.TRUE, "ReplicasReady", f"{ready}/{desired} replicas ready"),
            (
                ConditionType.PROGRESSING,
                ConditionStatus.FALSE,
                "RolloutComplete",
                "all replicas run the current spec",
            ),
        ]
    else:
        phase = Phase.DEGRADED if pending is not None and ready == 0 else Phase.PROGRESSING
        why = f"{ready}/{desired} replicas ready, {updated} updated"
        if pending is not None:
            why += f"; pods cannot be placed: {pending}"
        some_ready = ConditionStatus.TRUE if ready > 0 else ConditionStatus.FALSE
        updates += [
            (ConditionType.READY, some_ready, "ReplicasReady" if ready > 0 else "ReplicasNotReady", why),
            (
                ConditionType.PROGRESSING,
                ConditionStatus.TRUE,
                "Unschedulable" if pending is not None else "RollingOut",
                why,
            ),
        ]
    return phase, updates
