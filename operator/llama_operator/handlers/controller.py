"""The level-triggered controller, as controller-runtime and kube-rs build one: every watch event (the
LlamaService, any object it owns, a Node's placement facts) only enqueues the LlamaService's key; workers
run one reconcile per key (handlers/reconciler.py), on the elected leader only; a periodic resync
enqueues every key, catching what no event reported."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any, Protocol

import kopf
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from llama_operator.api.resource import InvalidSpecError, service_spec
from llama_operator.api.settings import Settings
from llama_operator.api.spec import GROUP, PLURAL, VERSION
from llama_operator.desired.inference_pool import InferencePoolSchema
from llama_operator.desired.labels import (
    ACTIVATION_REQUESTED_ANNOTATION,
    ENDPOINT_SLICE_MANAGER,
    SERVICE_LABEL,
    SERVICE_NAME_LABEL,
    SLICE_MANAGED_BY_LABEL,
)
from llama_operator.handlers.adapters import ADAPTER_SYNC_SECONDS, adapter_cycle
from llama_operator.handlers.autoscaler import AutoscalerMemory, autoscale_cycle
from llama_operator.handlers.events import COMPONENT
from llama_operator.handlers.indexes import (
    Indexes,
    endpoint_facts,
    node_facts,
    nodeclaim_facts,
    nodepool_facts,
)
from llama_operator.handlers.memo import OperatorMemo
from llama_operator.handlers.reconciler import reconcile_llamaservice, report_unknown_gpus
from llama_operator.infra.kube import own_namespace
from llama_operator.infra.leader import LeaderElection, LeaseProblem
from llama_operator.infra.workqueue import WorkQueue
from llama_operator.reconcile.execution import retry_delay_seconds

log = logging.getLogger(__name__)

Key = tuple[str, str]
# The API server unreachable or slow (a dropped connection, a timeout, a restart): retried like an API
# error, with one warning line and no traceback (a traceback is kept for what is a bug).
TRANSIENT_ERRORS = (TransportError, ConnectionError, TimeoutError)


class Controller:
    """The queue, its workers, the resync and the leader election; created at startup."""

    def __init__(self, memo: OperatorMemo, indexes: Indexes, leader: LeaderElection | None) -> None:
        self.memo, self.indexes, self.leader = memo, indexes, leader
        settings = memo.settings
        self.queue: WorkQueue[Key] = WorkQueue()
        self.workers = settings.reconcile_workers
        self.resync_seconds = settings.resync_seconds
        self.pool = concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="reconcile")
        self.failures: dict[Key, int] = {}  # consecutive failed attempts per key (for backoff)
        self.generations: dict[Key, Any] = {}  # last generation enqueued per LlamaService
        self.node_facts: dict[str, str | None] = {}
        self.tasks: list[asyncio.Task[None]] = []
        # The autoscaler has a thread of its own: a backlog of reconciles never delays a scaling decision.
        self.autoscaler_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="autoscaler")
        self.autoscaler_memory = AutoscalerMemory()
        # LoRA adapters are loaded into replicas in a thread of their own: a slow load delays no decision.
        self.adapter_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="adapters")
        # Set when an autoscaler cycle should not wait for its period: a request held at zero.
        self.autoscaler_wake = asyncio.Event()
        self.activations: dict[Key, str | None] = {}  # the last activation-requested-at seen per key
        self.activator_facts: dict[str, Any] = {}  # the activator's EndpointSlices as last seen

    @property
    def leading(self) -> bool:
        return self.leader is None or self.leader.is_leader

    async def enqueue_all(self) -> None:
        # At every resync: GPU nodes no accelerator matches are counted even with no LlamaService.
        report_unknown_gpus(self.memo, self.indexes)
        for key in list(self.indexes.llamaservices.keys()):
            await self.queue.add(key)

    async def _wait_leading(self) -> None:
        if self.leader is not None:
            await self.leader.leading.wait()

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wait_leading()
            key = await self.queue.get()
            if not self.leading:
                await self.queue.done(key, requeue_after=0.0)  # kept for whoever leads next
                continue
            attempt = self.failures.get(key, 0)
            requeue: float | None = None
            started, outcome = loop.time(), "error"
            try:
                result = await loop.run_in_executor(
                    self.pool,
                    functools.partial(
                        reconcile_llamaservice,
                        key,
                        memo=self.memo,
                        indexes=self.indexes,
                        written=self.autoscaler_memory.written,
                        attempt=attempt,
                    ),
                )
                requeue = result.requeue_after
                outcome = "success" if requeue is None else "requeue"
                if result.replicas_out_of_bounds:
                    self.autoscaler_wake.set()  # the autoscaler writes replicas; it brings them back now
            except ApiException as err:
                self.memo.metrics.api_error("unknown", err.status)
                requeue = retry_delay_seconds(attempt, base=2.0, cap=300.0)
                log.warning(
                    "reconcile %s/%s: %s %s; retrying in %.0fs", *key, err.status, err.reason, requeue
                )
            except TRANSIENT_ERRORS as err:
                self.memo.metrics.api_error("unknown", type(err).__name__)
                requeue = retry_delay_seconds(attempt, base=2.0, cap=300.0)
                log.warning(
                    "reconcile %s/%s: API server unreachable (%s); retrying in %.0fs", *key, err, requeue
                )
            except Exception:
                requeue = retry_delay_seconds(attempt, base=2.0, cap=300.0)
                log.exception("reconcile %s/%s failed; retrying in %.0fs", *key, requeue)
            self.memo.metrics.reconciled(outcome, loop.time() - started)
            if requeue is None:
                self.failures.pop(key, None)
            else:
                self.failures[key] = attempt + 1
            await self.queue.done(key, requeue_after=requeue)

    async def _heartbeat(self) -> None:
        """The liveness probe's evidence that the event loop runs; the leader and queue gauges."""
        while True:
            self.memo.health.beat()
            self.memo.metrics.leader.set(1 if self.leading else 0)
            if not self.leading:  # the leader reports per LlamaService; a standby must not double them
                self.memo.metrics.forget(())
                self.memo.metrics.hold((), time.time())
                self.memo.metrics.forget_states()
            self.memo.metrics.queue_depth.set(len(self.queue))
            await asyncio.sleep(5.0)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_seconds)
            await self.enqueue_all()

    async def _autoscale(self) -> None:
        """One autoscaler loop for every LlamaService, on the leader only."""
        loop = asyncio.get_running_loop()
        interval = float(self.memo.settings.autoscale_interval_seconds)
        while True:
            await self._wait_leading()
            started = loop.time()
            try:
                await loop.run_in_executor(
                    self.autoscaler_pool,
                    functools.partial(
                        autoscale_cycle, self.memo, self.indexes, self.autoscaler_memory, now=time.time()
                    ),
                )
            except ApiException as err:
                self.memo.metrics.api_error("unknown", err.status)
                log.warning("autoscaler cycle: %s %s; next cycle in %.0fs", err.status, err.reason, interval)
            except TRANSIENT_ERRORS as err:
                self.memo.metrics.api_error("unknown", type(err).__name__)
                log.warning(
                    "autoscaler cycle: API server unreachable (%s); next cycle in %.0fs", err, interval
                )
            except Exception:
                log.exception("autoscaler cycle failed; next cycle in %.0fs", interval)
            self.memo.metrics.cycle_seconds.observe(loop.time() - started)
            self.autoscaler_wake.clear()
            # The next cycle after the period, or at once when a held request asks for a replica.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.autoscaler_wake.wait(), max(0.0, started + interval - loop.time())
                )

    async def _adapters(self) -> None:
        """spec.adapters into every ready replica, on the leader only (handlers/adapters.py)."""
        loop = asyncio.get_running_loop()
        cycle = functools.partial(adapter_cycle, self.memo, self.indexes, self.autoscaler_memory.written)
        while True:
            await self._wait_leading()
            try:
                await loop.run_in_executor(self.adapter_pool, cycle)
            except (ApiException, *TRANSIENT_ERRORS) as err:
                log.warning("adapter cycle: %s; next cycle in %.0fs", err, ADAPTER_SYNC_SECONDS)
            except Exception:
                log.exception("adapter cycle failed; next cycle in %.0fs", ADAPTER_SYNC_SECONDS)
            await asyncio.sleep(ADAPTER_SYNC_SECONDS)

    async def _on_leadership(self) -> None:
        """Whenever this instance becomes the leader, look at everything: the last leader may have left
        work half done."""
        assert self.leader is not None
        while True:
            await self.leader.leading.wait()
            await self.enqueue_all()
            while self.leader.is_leader:
                await asyncio.sleep(1.0)

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        self.tasks.append(asyncio.create_task(self._resync()))
        self.tasks.append(asyncio.create_task(self._heartbeat()))
        self.tasks.append(asyncio.create_task(self._autoscale()))
        self.tasks.append(asyncio.create_task(self._adapters()))
        if self.leader is not None:
            self.tasks.append(asyncio.create_task(self.leader.run()))
            self.tasks.append(asyncio.create_task(self._on_leadership()))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.leader is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.leader.release)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.autoscaler_pool.shutdown(wait=False, cancel_futures=True)
        self.adapter_pool.shutdown(wait=False, cancel_futures=True)


def lease_namespace(settings: Settings) -> tuple[str, str]:
    """The Lease's namespace and why: the setting when given, else the operator's own namespace."""
    if settings.leader_election_namespace:
        return settings.leader_election_namespace, "leaderElectionNamespace"
    return own_namespace(os.environ)


class ControllerMemo(OperatorMemo, Protocol):
    """The memo once the start-up handler has added the controller (handlers/startup.py): what the
    handlers that feed its queue read."""

    controller: Controller


def report_lease_problem(memo: OperatorMemo, problem: LeaseProblem | None) -> None:
    """Where on-call looks: readiness (with the reason as its body), a gauge by reason, and a Warning Event
    on this instance's own Pod when it runs in one (POD_NAME and POD_NAMESPACE, set by the chart)."""
    memo.health.leader_election_problem = problem.message if problem else None
    memo.metrics.leader_election_blocked.clear()
    if problem is None:
        return
    memo.metrics.leader_election_blocked.labels(reason=problem.reason).set(1)
    pod, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if pod and namespace:
        memo.kube.post_event(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": namespace}},
            reason="LeaderElectionBlocked",
            message=problem.message,
            warning=True,
            component=COMPONENT,
        )


def start_controller(memo: OperatorMemo, indexes: Indexes) -> Controller:
    """The controller with its leader election, as the settings ask; started."""
    settings = memo.settings
    leader = None
    if settings.leader_election:
        namespace, source = lease_namespace(settings)
        log.info(
            "leader election: Lease %s/%s (namespace from %s)",
            namespace,
            settings.leader_election_lease,
            source,
        )
        leader = LeaderElection(
            memo.kube.api_client,
            namespace=namespace,
            name=settings.leader_election_lease,
            lease_seconds=settings.leader_lease_seconds,
            renew_seconds=settings.leader_renew_seconds,
            renew_deadline_seconds=settings.leader_lease_seconds * 0.8,
            on_problem=functools.partial(report_lease_problem, memo),
        )
    controller = Controller(memo, indexes, leader)
    controller.start()
    memo.health.controller_started = True
    return controller


# --- events only enqueue ------------------------------------------------------------------------


@kopf.on.event(GROUP, VERSION, PLURAL)
async def llamaservice_event(
    *, event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str, memo: ControllerMemo, **_: Any
) -> None:
    controller = memo.controller
    memo.health.synced = True  # kopf holds event handlers back until every index is filled
    key = (str(namespace), name)
    if event.get("type") == "DELETED":
        controller.generations.pop(key, None)
        controller.failures.pop(key, None)
        controller.autoscaler_memory.written.forget(key)
        controller.activations.pop(key, None)
        memo.metrics.forget_state(*key)
        return
    # A request the activator holds for this (scaled-to-zero) service: decide now, not at the next period.
    requested = (body.metadata.annotations or {}).get(ACTIVATION_REQUESTED_ANNOTATION)
    if controller.activations.get(key) != requested:
        if key in controller.activations or requested is not None:
            controller.autoscaler_wake.set()
        controller.activations[key] = requested
    # Status writes (ours, the autoscaler's) come back as events too; only a new generation is news.
    generation = (body.metadata.get("generation"), body.metadata.get("deletionTimestamp"))
    if controller.generations.get(key) != generation:
        controller.generations[key] = generation
        await controller.queue.add(key)


def _owner_key(namespace: str | None, labels: kopf.Labels) -> Key:
    return (str(namespace), str(labels.get(SERVICE_LABEL, "")))


@kopf.on.event("apps", "v1", "deployments", labels={SERVICE_LABEL: kopf.PRESENT})
@kopf.on.event("apps", "v1", "daemonsets", labels={SERVICE_LABEL: kopf.PRESENT})
@kopf.on.event("", "v1", "services", labels={SERVICE_LABEL: kopf.PRESENT})
@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels={SERVICE_LABEL: kopf.PRESENT})
@kopf.on.event("monitoring.coreos.com", "v1", "podmonitors", labels={SERVICE_LABEL: kopf.PRESENT})
@kopf.on.event("", "v1", "pods", labels={SERVICE_LABEL: kopf.PRESENT})
@kopf.on.event(
    "discovery.k8s.io",
    "v1",
    "endpointslices",
    labels={SERVICE_LABEL: kopf.PRESENT, SLICE_MANAGED_BY_LABEL: ENDPOINT_SLICE_MANAGER},
)
async def owned_event(*, namespace: str | None, labels: kopf.Labels, memo: ControllerMemo, **_: Any) -> None:
    memo.health.synced = True
    await memo.controller.queue.add(_owner_key(namespace, labels))


@kopf.on.event("discovery.k8s.io", "v1", "endpointslices", labels={SERVICE_NAME_LABEL: kopf.PRESENT})
async def activator_endpoints_event(
    *,
    event: kopf.RawEvent,
    body: kopf.Body,
    namespace: str | None,
    name: str,
    labels: kopf.Labels,
    memo: ControllerMemo,
    **_: Any,
) -> None:
    """The activator's ready pods changed: services that may scale to zero re-route (their activator
    EndpointSlice follows the pods), and the autoscaler learns whether zero is safe."""
    controller = memo.controller
    settings = controller.memo.settings
    if not settings.activator_service or namespace != settings.activator_namespace:
        return
    if labels.get(SERVICE_NAME_LABEL) != settings.activator_service:
        return
    facts = None if event.get("type") == "DELETED" else endpoint_facts(body)
    if controller.activator_facts.get(name) == facts:
        return
    controller.activator_facts[name] = facts
    for key, store in list(controller.indexes.llamaservices.items()):
        if any(scales_to_zero(service) for service in store):
            await controller.queue.add(key)
    controller.autoscaler_wake.set()


def scales_to_zero(body: Mapping[str, Any]) -> bool:
    try:
        return service_spec(body).scales_to_zero
    except InvalidSpecError:
        return False  # the reconciler reports a bad spec


POD_MONITOR_CRD = "podmonitors.monitoring.coreos.com"
INFERENCE_POOL_CRD = "inferencepools.inference.networking.k8s.io"


def crd_serves_v1(event_type: str | None, crd: Mapping[str, Any]) -> bool:
    """Whether this event leaves the CRD's v1 kind usable: the CRD is there, not being deleted, serves v1,
    and the API server has established it (before that, creating one fails)."""
    if event_type == "DELETED" or (crd.get("metadata") or {}).get("deletionTimestamp"):
        return False
    serves_v1 = any(
        v.get("name") == "v1" and v.get("served") for v in (crd.get("spec") or {}).get("versions") or []
    )
    established = any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (crd.get("status") or {}).get("conditions") or []
    )
    return serves_v1 and established


def served_inference_pool(event_type: str | None, crd: Mapping[str, Any]) -> InferencePoolSchema | None:
    """What the InferencePool CRD of this event accepts, None where its v1 kind is not usable."""
    return InferencePoolSchema.from_crd(crd) if crd_serves_v1(event_type, crd) else None


async def _optional_kind_changed(controller: Controller, attribute: str, kind: str, served: object) -> None:
    # The operator's memo, not the handler's: kopf hands each object's handlers a shallow copy of it.
    shared = controller.memo
    if served == getattr(shared, attribute):
        return
    setattr(shared, attribute, served)
    log.info("%s kind %s: re-planning every LlamaService", kind, "served" if served else "gone")
    await controller.enqueue_all()


@kopf.on.event(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", field="metadata.name", value=POD_MONITOR_CRD
)
async def pod_monitor_crd_event(
    *, event: kopf.RawEvent, body: kopf.Body, memo: ControllerMemo, **_: Any
) -> None:
    """`podMonitor: auto` follows the Prometheus Operator's CRD while running: installed after the operator
    (kube-prometheus-stack after us), every LlamaService gets its PodMonitor without a restart; removed,
    the vLLM pods go back to prometheus.io scrape annotations."""
    controller = memo.controller
    if controller.memo.settings.pod_monitor == "auto":
        await _optional_kind_changed(
            controller, "pod_monitor", "PodMonitor", crd_serves_v1(event.get("type"), body)
        )


@kopf.on.event(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", field="metadata.name", value=INFERENCE_POOL_CRD
)
async def inference_pool_crd_event(
    *, event: kopf.RawEvent, body: kopf.Body, memo: ControllerMemo, **_: Any
) -> None:
    """`inferencePool: auto` follows the Gateway API Inference Extension's CRD while running: installed after
    the operator (an inference gateway added to a running cluster), every LlamaService gets its InferencePool
    without a restart; removed, the API server deletes the pools with their CRD."""
    controller = memo.controller
    if controller.memo.settings.inference_pool == "auto":
        await _optional_kind_changed(
            controller, "inference_pool", "InferencePool", served_inference_pool(event.get("type"), body)
        )


async def _placement_facts(controller: Controller, key: str, facts: str | None) -> None:
    """Re-plan all when what placement reads of a node or NodePool changed (None: it was deleted)."""
    if controller.node_facts.get(key) == facts:
        return
    if facts is None:
        controller.node_facts.pop(key, None)
    else:
        controller.node_facts[key] = facts
    await controller.enqueue_all()


@kopf.on.event("nodes")
async def node_event(
    *, event: kopf.RawEvent, body: kopf.Body, name: str, memo: ControllerMemo, **_: Any
) -> None:
    """A node's placement facts changed (added, removed, relabelled, capacity, taints): re-plan all, since
    `auto` and any placement no node could take may now land elsewhere. Heartbeats change nothing."""
    controller = memo.controller
    memo.health.synced = True
    facts = None if event.get("type") == "DELETED" else json.dumps(node_facts(body), sort_keys=True)
    await _placement_facts(controller, name, facts)


@kopf.on.event("karpenter.sh", "v1", "nodepools")
async def nodepool_event(
    *, event: kopf.RawEvent, body: kopf.Body, name: str, memo: ControllerMemo, **_: Any
) -> None:
    """A Karpenter NodePool came, went, or changed the GPUs it can create (or its limit's use): re-plan all."""
    facts = None if event.get("type") == "DELETED" else json.dumps(nodepool_facts(body), sort_keys=True)
    await _placement_facts(memo.controller, f"NodePool/{name}", facts)


@kopf.on.event("karpenter.sh", "v1", "nodeclaims")
async def nodeclaim_event(
    *, event: kopf.RawEvent, body: kopf.Body, name: str, memo: ControllerMemo, **_: Any
) -> None:
    """A Karpenter NodeClaim came, joined or went: a Pending replica may be waiting for its node (loading, not
    missing), so every LlamaService's rollout status is looked at again."""
    facts = (
        None
        if event.get("type") == "DELETED"
        else json.dumps(nodeclaim_facts(body), sort_keys=True, default=str)
    )
    await _placement_facts(memo.controller, f"NodeClaim/{name}", facts)
