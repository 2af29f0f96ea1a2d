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
from llama_operator.planning.provisioning import nodeclaims_on_the_way, nodepools_admitting
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


def _unschedulable_pods(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        pod
        for pod in pods
        if (pod.get("status") or {}).get("phase") == "Pending"
        and any(
            c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
            for c in (pod.get("status") or {}).get("conditions") or []
        )
    ]


def nodes_being_created(
    pods: Iterable[Mapping[str, Any]],
    nodeclaims: Iterable[Mapping[str, Any]],
    nodepools: Iterable[Mapping[str, Any]] = (),
) -> str | None:
    """Where every pod the scheduler cannot place waits for a node a provisioner is creating, or will create,
    for it (a Karpenter NodeClaim not yet joined, or a NodePool that can still create one, carrying the labels
    the pod selects), what to say of it; else None. Such a replica is loading, not missing."""
    waiting = _unschedulable_pods(pods)
    claims, pools = list(nodeclaims), list(nodepools)
    if not waiting or not (claims or pools):
        return None
    named_claims: set[str] = set()
    named_pools: set[str] = set()
    for pod in waiting:
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        on_the_way = nodeclaims_on_the_way(claims, selector)
        can_create = nodepools_admitting(pools, selector) if not on_the_way else ()
        if not on_the_way and not can_create:
            return None
        named_claims.update(on_the_way)
        named_pools.update(can_create)
    where = []
    if named_claims:
        where.append(f"Karpenter NodeClaim {', '.join(sorted(named_claims))} on its way")
    if named_pools:
        where.append(f"Karpenter NodePool {', '.join(sorted(named_pools))} to create one")
    return f"{len(waiting)} pod(s) wait for nodes being created ({'; '.join(where)})"


def rollout_status(
    status: Mapping[str, Any] | None,
    deployment: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    *,
    generation: int | None,
    now: datetime,
    zero_message: str | None = None,
    nodeclaims: Iterable[Mapping[str, Any]] = (),
    nodepools: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The status fields that follow the Deployment (a merge patch for the LlamaService's status).
    `zero_message`: what zero replicas mean for this LlamaService, if it scales to zero. `nodeclaims`:
    `nodepools`: Karpenter's, so that a pod waiting for a node being created is told from one no node will take."""
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

    pods = list(pods)
    provisioning = nodes_being_created(pods, nodeclaims, nodepools)
    pending = unschedulable_message(pods) if provisioning is None else None
    phase, updates = _rollout_conditions(
        rolled_out=rolled_out, desired=desired, ready=ready, updated=updated, pending=pending,
        zero_message=zero_message, provisioning=provisioning,
    )  # fmt: skip
    conditions = set_conditions(conditions, updates, now=now, generation=generation)
    return {
        "phase": phase.value,
        "replicas": desired,
        "readyReplicas": ready,
        "updatedReplicas": updated,
        "conditions": conditions_wire(conditions),
    }


def _schedulable(pending: str | None, provisioning: str | None) -> ConditionUpdate:
    """Schedulable: every pod placed, or why not (no node can take one, or nodes are being created)."""
    if pending is not None:
        return (
            ConditionType.SCHEDULABLE,
            ConditionStatus.FALSE,
            "Unschedulable",
            f"pods cannot be placed: {pending}",
        )
    if provisioning is not None:
        return (ConditionType.SCHEDULABLE, ConditionStatus.FALSE, "NodeProvisioning", provisioning)
    return (ConditionType.SCHEDULABLE, ConditionStatus.TRUE, "Scheduled", "all pods are placed")


def _rollout_conditions(
    *,
    rolled_out: bool,
    desired: int,
    ready: int,
    updated: int,
    pending: str | None,
    zero_message: str | None,
    provisioning: str | None = None,
) -> tuple[Phase, list[ConditionUpdate]]:
    """The phase and the Schedulable, Ready and Progressing conditions of a Deployment's rollout.
    `provisioning`: the pods not placed wait for nodes being created (they are loading, not missing)."""
    updates: list[ConditionUpdate] = [_schedulable(pending, provisioning)]
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
        elif provisioning is not None:
            why += f"; {provisioning}"
        some_ready = ConditionStatus.TRUE if ready > 0 else ConditionStatus.FALSE
        updates += [
            (ConditionType.READY, some_ready, "ReplicasReady" if ready > 0 else "ReplicasNotReady", why),
            (
                ConditionType.PROGRESSING,
                ConditionStatus.TRUE,
                "Unschedulable"
                if pending is not None
                else "NodeProvisioning"
                if provisioning
                else "RollingOut",
                why,
            ),
        ]
    return phase, updates
