"""One reconcile of one LlamaService: read the indexes, plan, build, converge every owned object, report.
Runs in a worker thread of the controller (handlers/controller.py), on the leader only."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from llama_operator.api.plan import Plan, status_plan
from llama_operator.api.resource import service_spec
from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.desired.objects import DesiredState
from llama_operator.handlers.events import post_events
from llama_operator.handlers.indexes import (
    Indexes,
    OwnerKey,
    activator_route,
    one,
)
from llama_operator.handlers.memo import OperatorMemo
from llama_operator.handlers.written_status import WrittenStatus
from llama_operator.infra.execute import execute
from llama_operator.planning.inventory import Inventory, inventory_from_nodes
from llama_operator.reconcile.drift import merge_patch_changes
from llama_operator.reconcile.engine import engine_replanned_event
from llama_operator.reconcile.execution import (
    Event,
    ExecutionReport,
    ObjectRef,
    degraded_event,
    inference_pool_event,
    report_execution,
    retry_delay_seconds,
)
from llama_operator.reconcile.outcome import ReconcileOutcome, planning_config, reconcile
from llama_operator.reconcile.replicas import WorkloadReplicas, ignored_replicas_event, replicas_out_of_bounds
from llama_operator.reconcile.rollout import rollout_status

log = logging.getLogger(__name__)


@dataclass
class ReconcileResult:
    requeue_after: float | None = None
    writes: int = 0
    # The owned Deployment's replicas are past the autoscaling bounds (a hand scale): the autoscaler, the
    # one writer of spec.replicas, is woken to bring them back now.
    replicas_out_of_bounds: bool = False
    status_written: bool = False
    events: list[Event] = field(default_factory=list)


def node_inventory(memo: OperatorMemo, indexes: Indexes) -> Inventory | None:
    """The indexed nodes as the planner sees them (the platform's catalog and pod node selector)."""
    nodes = [node for store in indexes.nodes.values() for node in store]
    if not nodes:
        return None
    pools = [pool for store in (indexes.nodepools or {}).values() for pool in store]
    settings = memo.settings
    return inventory_from_nodes(
        [*nodes, *pools], planning_config(settings).catalog, settings.pod_node_selector, settings.platform
    )


def report_unknown_gpus(memo: OperatorMemo, indexes: Indexes) -> None:
    """llama_operator_unknown_gpu_nodes from the nodes alone: also where no LlamaService is reconciled."""
    inventory = node_inventory(memo, indexes)
    memo.metrics.unknown_gpus(dict(inventory.unknown_gpus) if inventory is not None else {})


def compute_outcome(
    body: Mapping[str, Any], memo: OperatorMemo, indexes: Indexes, deployment: Mapping[str, Any] | None
) -> ReconcileOutcome:
    """What should exist for one LlamaService, from the indexed nodes (no API reads)."""
    inventory = node_inventory(memo, indexes)
    memo.metrics.unknown_gpus(dict(inventory.unknown_gpus) if inventory is not None else {})
    return reconcile(
        body,
        memo.settings,
        inventory=inventory,
        pod_monitor=memo.pod_monitor,
        now=datetime.now(UTC),
        activator=activator_route(indexes.endpoint_slices),
        ready_replicas=WorkloadReplicas.of(deployment).ready if deployment is not None else 0,
        inference_pool=getattr(memo, "inference_pool", None),
    )


def zero_message(spec: LlamaServiceSpec, route_ready: bool) -> str | None:
    """What zero replicas mean for a LlamaService that may scale to zero."""
    if not spec.scales_to_zero:
        return None
    if not route_ready:
        return "idle; no activator is ready, so a request would find nothing to serve it"
    return "idle; the activator holds the next request and wakes one replica"


def unknown_gpus_event(before: Plan | None, plan: Plan | None) -> Event | None:
    """A Warning when auto's plan newly says it left GPU nodes out (their product is in no catalog entry)."""
    now = plan.unknown_gpus if plan is not None else None
    if now is None or now == (before.unknown_gpus if before is not None else None):
        return None
    return Event("UnknownGPUs", now, warning=True)


def reconcile_llamaservice(
    key: OwnerKey, *, memo: OperatorMemo, indexes: Indexes, written: WrittenStatus, attempt: int
) -> ReconcileResult:
    """Converge one LlamaService. Raises ApiException for failures a retry may fix (the caller backs off)."""
    with written.writer(key):
        return _reconcile(key, memo=memo, indexes=indexes, written=written, attempt=attempt)


def _reconcile(
    key: OwnerKey, *, memo: OperatorMemo, indexes: Indexes, written: WrittenStatus, attempt: int
) -> ReconcileResult:
    body = one(indexes.llamaservices, key)
    result = ReconcileResult()
    if body is None or body["metadata"].get("deletionTimestamp"):
        return result  # gone or going: the garbage collector removes what it owned
    namespace, name = key
    meta = body["metadata"]
    before = written.current(key, body)  # the index may not show our last status write yet
    now = datetime.now(UTC)
    # Judged against the status as last written (by us or the autoscaler), not the index's older copy: a
    # condition the autoscaler has just set must not be written back to what it was.
    outcome = compute_outcome(
        {**body, "status": before}, memo, indexes, indexes.workload(key, meta.get("uid"))
    )
    status = dict(outcome.status_patch)
    if outcome.desired is not None:
        converged = _converge(
            key, body, before, status, outcome.desired, memo=memo, indexes=indexes, result=result,
            attempt=attempt, now=now,
        )  # fmt: skip
        if converged is None:
            return result
        status = converged
    memo.metrics.service_status(namespace, name, {**before, **status})
    unknown = unknown_gpus_event(status_plan(before), status_plan(status))
    if unknown is not None:
        result.events.append(unknown)
    replanned = engine_replanned_event(before, status)
    if replanned is not None:
        result.events.append(replanned)
    pool_event = inference_pool_event(before, status)
    if pool_event is not None:
        result.events.append(pool_event)
    degraded = degraded_event(before, status)
    if degraded is not None:
        result.events.insert(0, degraded)
        memo.metrics.plan_refused(degraded.reason)  # once per new problem, not per retry
    if merge_patch_changes(status, before):  # only a real change is written
        written.record(
            key, body, memo.kube.patch_llamaservice_status(namespace=namespace, name=name, status=status)
        )
        result.status_written = True
        memo.metrics.wrote("status")
    if result.writes or result.status_written:
        log.info(
            "reconciled %s/%s: %d object write(s)%s",
            namespace,
            name,
            result.writes,
            ", status updated" if result.status_written else "",
        )
    post_events(memo.kube, body, result.events)
    return result


def _execute(
    memo: OperatorMemo, indexes: Indexes, desired: DesiredState, *, namespace: str, owner_uid: str
) -> ExecutionReport:
    """Apply the desired objects as this operator's field manager, reading the live ones from the indexes."""
    settings = memo.settings
    return execute(
        memo.kube,
        desired,
        namespace=namespace,
        owner_uid=owner_uid,
        field_manager=settings.field_manager,
        own_managers=frozenset({settings.field_manager, settings.autoscaler_field_manager}),
        live=lambda kind, obj_name: indexes.owned(kind, namespace, obj_name),
    )


def _count_writes(memo: OperatorMemo, report: ExecutionReport) -> None:
    """The writes by kind and the API server's refusals by kind and status, as metrics."""
    for kind, count in {**report.writes_by_kind}.items():
        memo.metrics.wrote(kind, count)
    for rejection in report.rejections:
        memo.metrics.api_error(rejection.ref.kind, rejection.status)


def _inference_pool(desired: DesiredState, namespace: str) -> ObjectRef | None:
    """The InferencePool among the desired objects, where one is made."""
    return next(
        (
            ObjectRef(o["kind"], namespace, o["metadata"]["name"])
            for o in desired.objects
            if o["kind"] == "InferencePool"
        ),
        None,
    )


def _converge(
    key: OwnerKey,
    body: dict[str, Any],
    before: dict[str, Any],
    status: dict[str, Any],
    desired: DesiredState,
    *,
    memo: OperatorMemo,
    indexes: Indexes,
    result: ReconcileResult,
    attempt: int,
    now: datetime,
) -> dict[str, Any] | None:
    """Apply the desired objects and add what it did to the status (None: the namespace is going)."""
    namespace, _ = key
    meta = body["metadata"]
    report = _execute(memo, indexes, desired, namespace=namespace, owner_uid=str(meta.get("uid") or ""))
    if report.namespace_terminating:
        return None
    deployment = indexes.workload(key, meta.get("uid"))
    parsed = service_spec(body)  # valid: desired objects were built from it
    result.replicas_out_of_bounds = replicas_out_of_bounds(parsed, deployment)
    result.writes = report.writes
    _count_writes(memo, report)
    status = report_execution(
        before,
        status,
        report,
        now=now,
        generation=meta.get("generation"),
        inference_pool=_inference_pool(desired, namespace),
    )
    status.update(
        rollout_status(
            {**before, **status},
            deployment,
            indexes.pods.get(key, []),
            generation=meta.get("generation"),
            now=now,
            zero_message=zero_message(parsed, activator_route(indexes.endpoint_slices) is not None),
            nodeclaims=[c for store in (indexes.nodeclaims or {}).values() for c in store],
            nodepools=[p for store in (indexes.nodepools or {}).values() for p in store],
        )
    )
    status["specReplicas"] = parsed.replicas
    ignored = ignored_replicas_event(parsed, before)
    if ignored is not None:
        result.events.append(ignored)
    result.events += [
        Event("DriftRepaired", f"{ref} had fields added by hand; they were removed", warning=False)
        for ref in report.repaired
    ]
    if not report.clean:
        result.requeue_after = retry_delay_seconds(attempt)
    return status
