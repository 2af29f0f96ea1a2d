"""The autoscaler: ONE loop per operator, on the leader. Each cycle queries Prometheus once for every
autoscaled LlamaService (a constant number of queries, whatever their count), asks the pure policy for
each, and writes only what changed: the replica count when the decision moves it, the status when a
decision, the policy's state or a condition changes (observations at a bounded rate)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from llama_operator.api.autoscaling import AutoscalerState
from llama_operator.api.plan import status_plan
from llama_operator.api.resource import InvalidSpecError, has_autoscaling, service_spec, stored_status
from llama_operator.api.spec import DEFAULT_SLO_OBJECTIVE, AutoscalingSpec, LlamaServiceSpec
from llama_operator.autoscale.decision import Decision
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.promql import ServiceKey, ServiceView
from llama_operator.autoscale.signals import Signals, SignalStatus, slo_bucket
from llama_operator.catalog.accelerators import accelerator
from llama_operator.desired.labels import (
    ACTIVATION_REQUESTED_ANNOTATION,
    LAST_ACTIVATION_ANNOTATION,
    SERVICE_LABEL,
)
from llama_operator.handlers.events import post_events
from llama_operator.handlers.indexes import Indexes, activator_route
from llama_operator.handlers.memo import OperatorMemo
from llama_operator.handlers.written_status import WrittenStatus
from llama_operator.infra.execute import set_deployment_replicas
from llama_operator.infra.metrics import Holding, OperatorMetrics, ServiceObservation
from llama_operator.infra.prometheus import PrometheusUnavailableError
from llama_operator.infra.status_writes import (
    StatusWrite,
    last_evaluation_time,
    pick_refreshes,
    refresh_budget,
    status_write,
)
from llama_operator.reconcile.autoscaling import (
    AutoscaleOutcome,
    autoscale_outcome,
    autoscaler_state,
    condition_transitions,
    parse_demand_time,
    parse_last_activation,
)
from llama_operator.reconcile.ownership import object_uid
from llama_operator.reconcile.replicas import WorkloadReplicas
from llama_operator.reconcile.scale_down import Replica, count_other_pods, scale_down_annotations

log = logging.getLogger(__name__)


def service_view(autoscaling: AutoscalingSpec, deployment: dict[str, Any] | None) -> ServiceView | None:
    """Replica counts from the Deployment; None until it exists."""
    if deployment is None:
        return None
    replicas = WorkloadReplicas.of(deployment)
    current, ready = replicas.desired, replicas.ready
    return ServiceView(
        percentile=autoscaling.slo.percentile,
        ttft_bound=slo_bucket(autoscaling.slo.ttft_seconds),
        ready_replicas=ready,
        starting_replicas=max(0, current - ready),
        current_replicas=current,
    )


@dataclass
class CycleReport:
    services: int = 0
    queries: int = 0
    replica_writes: int = 0
    status_writes: int = 0
    failures: int = 0  # services whose write failed (decided again next cycle)
    refreshes_deferred: int = 0  # observation refreshes due but past this cycle's fleet budget


@dataclass(frozen=True)
class BlindHold:
    """A service the last cycle held without metrics, changing nothing. The policy's no-data rule reads no
    clock (it holds the replicas, whatever the time): while every input is the same, the next decision is
    the same too, so the cycle skips it and only moves its no-data clock. 1,000 services with pods still
    loading cost next to nothing."""

    inputs: tuple[Any, ...]
    observation: ServiceObservation
    no_data_since: float


@dataclass
class AutoscalerMemory:
    """The policy's latest state per LlamaService (uid), between the bounded-rate status refreshes. Status
    stays the durable copy: after a restart the policy resumes from it."""

    states: dict[ServiceKey, tuple[str, AutoscalerState]] = field(default_factory=dict)
    written: WrittenStatus = field(default_factory=WrittenStatus)  # shared with the reconcile workers
    # The parsed spec per LlamaService, by (uid, generation): the spec changes only with the generation,
    # and parsing 1,000 specs every cycle was a third of an idle fleet's CPU.
    specs: dict[ServiceKey, tuple[tuple[str, Any], LlamaServiceSpec]] = field(default_factory=dict)
    blind: dict[ServiceKey, BlindHold] = field(default_factory=dict)

    def state(self, key: ServiceKey, uid: str, status: Any) -> AutoscalerState:
        cached = self.states.get(key)
        # The plan's step model is re-read from status either way: a new plan replaces it.
        return autoscaler_state(status, cached[1] if cached is not None and cached[0] == uid else None)

    def spec(self, key: ServiceKey, body: dict[str, Any], *, default_objective: float) -> LlamaServiceSpec:
        """The LlamaService's spec, parsed once per generation, with the platform's SLO objective where it
        states none (`default_objective`, from the operator's config); raises InvalidSpecError."""
        meta = body["metadata"]
        version = (str(meta.get("uid")), meta.get("generation"))
        cached = self.specs.get(key)
        if cached is not None and cached[0] == version and version[1] is not None:
            return cached[1]
        spec = service_spec(body).with_default_objective(default_objective)
        self.specs[key] = (version, spec)
        return spec

    def forget_except(self, live: set[ServiceKey]) -> None:
        for gone in set(self.states) - live:
            del self.states[gone]
        for gone in set(self.specs) - live:
            del self.specs[gone]
        for gone in set(self.blind) - live:
            del self.blind[gone]


@dataclass(frozen=True)
class DueRefresh:
    """An observation refresh the cycle wants to write, once the fleet's budget allows it."""

    key: ServiceKey
    body: dict[str, Any]
    decided_from: dict[str, Any]  # the status the patch was computed from
    patch: dict[str, Any]


def holding(key: ServiceKey, body: dict[str, Any], deployment: dict[str, Any] | None) -> Holding | None:
    """GPUs one LlamaService holds now: its Deployment's replicas x the plan's GPUs per replica."""
    plan = status_plan(stored_status(body))
    if deployment is None or plan is None:
        return None
    count = plan.count * plan.nodes if _is_gpu(plan.accelerator) else 0
    replicas = WorkloadReplicas.of(deployment).desired
    return Holding(
        namespace=key[0],
        name=key[1],
        gpus=replicas * count,
        price_per_gpu_hour=plan.price_per_hour / count if count else None,
    )


def _is_gpu(accelerator_type: str) -> bool:
    try:
        return accelerator(accelerator_type).is_gpu
    except (KeyError, ValueError):  # a type this version's catalog does not know: a GPU it cannot price
        return True


def autoscale_cycle(
    memo: OperatorMemo, indexes: Indexes, memory: AutoscalerMemory, *, now: float
) -> CycleReport:
    """One cycle for every autoscaled LlamaService (runs in a worker thread)."""
    report = CycleReport()
    services, held = _autoscaled_services(indexes, memory, memo.settings.slo_objective)
    live_keys = {key for key, *_ in services}
    memory.forget_except(live_keys)
    metrics: OperatorMetrics = memo.metrics
    metrics.hold(held, now)
    metrics.forget(live_keys)
    report.services = len(services)
    if not services:
        metrics.refresh_backlog.set(0)
        return report
    signals, error = _fetch_signals(memo, report, {key: view for key, _, _, view in services})
    ready = activator_route(indexes.endpoint_slices) is not None
    due: list[DueRefresh] = []
    for key, body, deployment, view in services:
        # One service's failed write (a conflict, a Deployment re-created meanwhile, a timeout) must not
        # cost the others their decision this cycle: it is logged, and the next cycle decides again.
        with _one_service(report, metrics, key), memory.written.writer(key):
            refresh = _autoscale_one(
                memo, memory, report, key=key, body=body, deployment=deployment, view=view, signals=signals,
                error=error, now=now, ready=ready,
            )  # fmt: skip
            if refresh is not None:
                due.append(refresh)
    _write_refreshes(memo, memory, report, due)
    log.debug(
        "autoscaler cycle: %d services, %d queries, %d replica writes, %d status writes (%d refreshes "
        "deferred), %d failed",
        report.services,
        report.queries,
        report.replica_writes,
        report.status_writes,
        report.refreshes_deferred,
        report.failures,
    )
    return report


Autoscaled = tuple[ServiceKey, dict[str, Any], dict[str, Any], ServiceView]


def _autoscaled_services(
    indexes: Indexes, memory: AutoscalerMemory, default_objective: float
) -> tuple[list[Autoscaled], list[Holding]]:
    """The autoscaled LlamaServices with their Deployment, and the GPUs every LlamaService holds."""
    services: list[Autoscaled] = []
    held: list[Holding] = []
    for key, store in list(indexes.llamaservices.items()):
        for body in list(store):
            deployment = indexes.workload(key, body["metadata"].get("uid"))
            gpus = holding(key, body, deployment)
            if gpus is not None:
                held.append(gpus)
            if body["metadata"].get("deletionTimestamp") or not has_autoscaling(body):
                continue  # going, or no autoscaling to parse (parsed specs are kept for autoscaled ones only)
            try:
                autoscaling = memory.spec(key, body, default_objective=default_objective).active_autoscaling
            except InvalidSpecError:
                continue  # the reconciler reports a bad spec
            if autoscaling is None:
                continue
            view = service_view(autoscaling, deployment)
            if deployment is not None and view is not None:
                services.append((key, body, deployment, view))
    return services, held


def _write_refreshes(
    memo: OperatorMemo, memory: AutoscalerMemory, report: CycleReport, due: list[DueRefresh]
) -> None:
    """Observation refreshes last, within the fleet's budget and oldest first: the decisions and their
    replica writes never wait behind them."""
    budget = refresh_budget(
        refreshes_per_second=memo.settings.status_refreshes_per_second,
        cycle_seconds=memo.settings.autoscale_interval_seconds,
    )
    chosen = pick_refreshes([(last_evaluation_time(r.decided_from), r) for r in due], budget)
    report.refreshes_deferred = len(due) - len(chosen)
    memo.metrics.refresh_backlog.set(report.refreshes_deferred)
    for refresh in chosen:
        with _one_service(report, memo.metrics, refresh.key), memory.written.writer(refresh.key):
            # A reconcile may have written this status since the decision: then the next cycle decides
            # from the new one, rather than this patch overwriting the reconciler's conditions.
            if memory.written.current(refresh.key, refresh.body) != refresh.decided_from:
                continue
            _write_status(memo, memory, report, key=refresh.key, body=refresh.body, patch=refresh.patch)


@contextlib.contextmanager
def _one_service(report: CycleReport, metrics: OperatorMetrics, key: ServiceKey) -> Iterator[None]:
    try:
        yield
    except ApiException as err:
        report.failures += 1
        metrics.api_error("unknown", err.status)
        log.warning("autoscaler: %s/%s: %s %s; deciding again next cycle", *key, err.status, err.reason)


def _write_status(
    memo: OperatorMemo,
    memory: AutoscalerMemory,
    report: CycleReport,
    *,
    key: ServiceKey,
    body: dict[str, Any],
    patch: dict[str, Any],
) -> None:
    namespace, name = key
    memory.written.record(
        key, body, memo.kube.patch_llamaservice_status(namespace=namespace, name=name, status=patch)
    )
    report.status_writes += 1
    memo.metrics.wrote("status")


def _service_signals(
    observed: Signals | None,
    view: ServiceView,
    annotations: dict[str, str],
    *,
    activator_available: bool,
    window_seconds: float,
) -> Signals:
    """This cycle's signals for one service (no data when Prometheus had none), with the demand the router
    reported on it and whether a router can hold its requests."""
    seen = observed or Signals.no_data(
        ready_replicas=view.ready_replicas,
        starting_replicas=view.starting_replicas,
        current_replicas=view.current_replicas,
        window_seconds=window_seconds,
    )
    return replace(
        seen,
        demand_time=parse_demand_time(annotations.get(ACTIVATION_REQUESTED_ANNOTATION)),
        activator_available=activator_available,
    )


def _observation(
    key: ServiceKey,
    autoscaling: AutoscalingSpec,
    *,
    view: ServiceView,
    seen: Signals,
    decision: Decision,
    outcome: AutoscaleOutcome,
    now: float,
) -> ServiceObservation:
    """What the cycle saw and decided for one service, as its metrics show it."""
    no_data_since = decision.state.no_data_since
    return ServiceObservation(
        namespace=key[0],
        name=key[1],
        desired_replicas=decision.desired_replicas,
        current_replicas=view.current_replicas,
        ready_replicas=view.ready_replicas,
        min_replicas=autoscaling.min_replicas,
        max_replicas=autoscaling.max_replicas,
        ttft_seconds=seen.ttft_percentile_seconds,
        slo_ttft_seconds=autoscaling.slo.ttft_seconds,
        slo_objective=autoscaling.slo.objective_ratio(DEFAULT_SLO_OBJECTIVE),
        slo_objective_window_seconds=autoscaling.slo.objective_window_seconds,
        slo_tpot_seconds=autoscaling.slo.tpot_seconds,
        slo_met=decision.slo_met,
        no_data_seconds=max(0.0, now - no_data_since) if no_data_since is not None else 0.0,
        scaled_to_zero=decision.desired_replicas == 0,
        activation_seconds=outcome.activation.seconds if outcome.activation is not None else None,
    )


def _scale(
    memo: OperatorMemo,
    report: CycleReport,
    key: ServiceKey,
    deployment: dict[str, Any],
    *,
    current: int,
    replicas: int,
) -> None:
    """The one write of an owned Deployment's replicas (its scale subresource, uid-checked)."""
    namespace, name = key
    if replicas < current and str(deployment.get("kind") or "Deployment") == "Deployment":
        _mark_scale_down(memo, key, remove=current - replicas)
    set_deployment_replicas(
        memo.kube,
        api_version=str(deployment.get("apiVersion") or "apps/v1"),
        kind=str(deployment.get("kind") or "Deployment"),
        namespace=namespace,
        name=name,
        uid=str(object_uid(deployment)),
        replicas=replicas,
        field_manager=memo.settings.autoscaler_field_manager,
    )
    report.replica_writes += 1
    memo.metrics.wrote(str(deployment.get("kind") or "Deployment"))  # a replicas-only write
    memo.metrics.scaled(namespace, name, current=current, replicas=replicas)


def _mark_scale_down(memo: OperatorMemo, key: ServiceKey, *, remove: int) -> None:
    """Before a scale-down: each replica's deletion cost is the other pods on its node, so the ReplicaSet
    removes the one whose node can then go, and those leaving are kept from provisioners while they drain
    (reconcile/scale_down.py). Best effort: a refused read or write leaves the ReplicaSet's own choice."""
    namespace, name = key
    try:
        pods = memo.kube.list("v1", "Pod", namespace=namespace, label_selector=f"{SERVICE_LABEL}={name}")
        live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
        replicas = [Replica(p["metadata"]["name"], (p.get("spec") or {}).get("nodeName")) for p in live]
        others = {
            node: count_other_pods(memo.kube.pods_on_node(node), name)
            for node in {r.node for r in replicas if r.node is not None}
        }
        for pod, annotations in scale_down_annotations(replicas, others, remove).items():
            memo.kube.annotate_pod(namespace=namespace, name=pod, annotations=annotations)
    except ApiException as err:
        log.warning(
            "autoscaler: %s/%s: replicas to remove not marked (%s %s)",
            namespace,
            name,
            err.status,
            err.reason,
        )


def _apply_outcome(
    memo: OperatorMemo,
    memory: AutoscalerMemory,
    report: CycleReport,
    *,
    key: ServiceKey,
    body: dict[str, Any],
    deployment: dict[str, Any],
    status: Any,
    outcome: AutoscaleOutcome,
    current: int,
    reason: str,
    wall: datetime,
) -> StatusWrite | None:
    """The writes of one decision: the replicas, the status when it has news, the Events; the status
    write it classified (a refresh is left to the cycle's budget)."""
    namespace, name = key
    if outcome.replicas is not None:
        _scale(memo, report, key, deployment, current=current, replicas=outcome.replicas)
        log.info(
            "autoscaler: %s/%s: %s -> %s replicas: %s", namespace, name, current, outcome.replicas, reason
        )
    for moved in condition_transitions(status, outcome.status_patch):
        log.info("autoscaler: %s/%s %s", namespace, name, moved)
    write = status_write(
        status, outcome.status_patch, now=wall, refresh_seconds=memo.settings.status_refresh_seconds
    )
    if write is StatusWrite.NEWS:
        _write_status(memo, memory, report, key=key, body=body, patch=outcome.status_patch)
    post_events(memo.kube, body, outcome.events)
    for event in outcome.events:
        log.info("autoscaler: %s/%s %s: %s", namespace, name, event.reason, event.message)
    return write


def _fetch_signals(
    memo: OperatorMemo, report: CycleReport, views: dict[ServiceKey, ServiceView]
) -> tuple[dict[ServiceKey, Signals], str | None]:
    """This cycle's signals of every service from Prometheus, or none and why (the policy then holds)."""
    source = memo.prometheus
    sent = source.queries
    try:
        signals = source.fetch(
            views,
            window_seconds=memo.settings.signal_window_seconds,
            burst_window_seconds=memo.settings.burst_window_seconds or None,
        )
        error = None
    except PrometheusUnavailableError as err:
        signals, error = {}, str(err)
        memo.metrics.prometheus_errors.inc()
    report.queries = source.queries - sent
    return signals, error


def _still_blind(
    memory: AutoscalerMemory, metrics: OperatorMetrics, key: ServiceKey, inputs: object, *, now: float
) -> bool:
    """Nothing changed since a decision held without data: its observation is refreshed, nothing decided."""
    held = memory.blind.pop(key, None)
    if held is None or held.inputs != inputs:
        return False
    metrics.observe(replace(held.observation, no_data_seconds=max(0.0, now - held.no_data_since)))
    memory.blind[key] = held
    return True


def _blind(
    seen: Signals, decision: Decision, view: ServiceView, outcome: AutoscaleOutcome, write: StatusWrite | None
) -> bool:
    """A decision held without data that changed nothing: until its inputs change, the next is the same."""
    return (
        seen.status is SignalStatus.NO_DATA
        and decision.no_data
        and view.current_replicas > 0  # at zero, waking is timed
        and outcome.replicas is None
        and not outcome.events
        and write is None
    )


def _autoscaled_spec(
    memo: OperatorMemo, memory: AutoscalerMemory, key: ServiceKey, body: dict[str, Any]
) -> LlamaServiceSpec | None:
    """The LlamaService's spec (the operator's default objective filled in); None when it is bad: the
    reconciler reports that."""
    try:
        return memory.spec(key, body, default_objective=memo.settings.slo_objective)
    except InvalidSpecError:
        return None


def _autoscale_one(
    memo: OperatorMemo,
    memory: AutoscalerMemory,
    report: CycleReport,
    *,
    key: ServiceKey,
    body: dict[str, Any],
    deployment: dict[str, Any],
    view: ServiceView,
    signals: dict[ServiceKey, Signals],
    error: str | None,
    now: float,
    ready: bool,
) -> DueRefresh | None:
    """Decide for one LlamaService and write what changed; an observation refresh is returned instead,
    for the cycle to write within its budget."""
    wall = datetime.fromtimestamp(now, UTC)
    spec = _autoscaled_spec(memo, memory, key, body)
    if spec is None or spec.autoscaling is None:
        return None
    uid = str(body["metadata"].get("uid"))
    annotations = body["metadata"].get("annotations") or {}
    seen = _service_signals(
        signals.get(key),
        view,
        annotations,
        activator_available=ready,
        window_seconds=memo.settings.signal_window_seconds,
    )
    status = memory.written.current(key, body)
    inputs = (uid, body["metadata"].get("resourceVersion"), status, seen, view, error)
    if _still_blind(memory, memo.metrics, key, inputs, now=now):
        return None
    decision = decide(spec.autoscaling, seen, memory.state(key, uid, status), now)
    memory.states[key] = (uid, decision.state)
    outcome = autoscale_outcome(
        status,
        decision,
        seen,
        slo=spec.autoscaling.slo,
        prometheus_error=error,
        generation=body["metadata"].get("generation"),
        now=wall,
        scale_to_zero=spec.autoscaling.scale_to_zero,
        activation=parse_last_activation(annotations.get(LAST_ACTIVATION_ANNOTATION)),
    )
    no_data_since = decision.state.no_data_since
    observation = _observation(
        key, spec.autoscaling, view=view, seen=seen, decision=decision, outcome=outcome, now=now
    )
    memo.metrics.observe(observation)
    write = _apply_outcome(
        memo, memory, report, key=key, body=body, deployment=deployment, status=status,
        outcome=outcome, current=view.current_replicas, reason=decision.reason, wall=wall,
    )  # fmt: skip
    if no_data_since is not None and _blind(seen, decision, view, outcome, write):
        memory.blind[key] = BlindHold(inputs=inputs, observation=observation, no_data_since=no_data_since)
    if write is StatusWrite.REFRESH:
        return DueRefresh(key=key, body=body, decided_from=status, patch=outcome.status_patch)
    return None
