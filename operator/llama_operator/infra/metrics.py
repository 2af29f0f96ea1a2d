"""The operator's own metrics and health endpoints.

Metric names are a contract: the Grafana dashboard and the PrometheusRule are built from them (and a test
checks they exist here). Per-LlamaService series carry `namespace` and `llamaservice`, the same labels
as the vLLM series the operator's PodMonitors produce, so PromQL can join the two; scrape the operator
with honorLabels so that Prometheus keeps them.

Two small HTTP servers run in threads of their own, started before kopf: /healthz and /readyz on the
health port, /metrics on the metrics port. A thread answers even while kopf's start-up retries (a slow
API server must not get the pod killed); liveness still fails when the event loop stops beating."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.utils import floatToGoString

from llama_operator.autoscale.signals import VLLM_TTFT_BUCKETS, slo_bucket
from llama_operator.catalog.vllm import VLLM_ITL_BUCKETS
from llama_operator.observability import names as n

SERVICE_LABELS = ("namespace", "llamaservice")
disable_created_metrics()  # type: ignore[no-untyped-call] # the *_created series double the exposition and no panel or rule reads them


def exported_names(registry: CollectorRegistry) -> tuple[str, ...]:
    """The operator's series names a registry exports (counters with their _total), sorted."""
    names = {
        f"{family.name}_total" if family.type == "counter" else family.name
        for family in registry.collect()
        if family.name.startswith(n.OPERATOR_PREFIX)
    }
    return tuple(sorted(names))


def slo_bucket_bound(slo_seconds: float, bounds: Iterable[float] = VLLM_TTFT_BUCKETS) -> str:
    """The `le` of vLLM's TTFT histogram that counts requests within the SLO: the largest bound at or
    below it (conservative: a 0.6 s SLO is judged at 0.5 s), as vLLM's exposition prints it."""
    return str(floatToGoString(slo_bucket(slo_seconds, tuple(bounds))))  # type: ignore[no-untyped-call]


@dataclass(frozen=True, slots=True)
class ServiceObservation:
    """What one autoscaler cycle saw and decided for one LlamaService."""

    namespace: str
    name: str
    desired_replicas: int
    current_replicas: int
    ready_replicas: int
    min_replicas: int
    max_replicas: int
    ttft_seconds: float | None  # observed, at the SLO's percentile; None without requests
    slo_ttft_seconds: float
    slo_objective: float  # share of requests the objectives hold for (spec.autoscaling.slo.objective)
    slo_objective_window_seconds: float  # spec.autoscaling.slo.objectiveWindow
    slo_met: bool | None
    no_data_seconds: float
    scaled_to_zero: bool = False
    activation_seconds: float | None = None  # the last wake from zero, as the activator timed it
    slo_tpot_seconds: float | None = None  # the TPOT objective, when the service has one


@dataclass(frozen=True, slots=True)
class Holding:
    """GPUs one LlamaService holds now (any LlamaService, autoscaled or not)."""

    namespace: str
    name: str
    gpus: int
    price_per_gpu_hour: float | None


# The per-LlamaService gauges (observability/names.py PER_SERVICE_GAUGES), with their help texts.
PER_SERVICE_HELP: tuple[tuple[str, str], ...] = (
    ("desired_replicas", "Replicas the autoscaler wants (within min/max)."),
    ("current_replicas", "The Deployment's spec.replicas."),
    ("ready_replicas", "Replicas ready and serving."),
    ("min_replicas", "spec.autoscaling.minReplicas."),
    ("max_replicas", "spec.autoscaling.maxReplicas."),
    ("ttft_observed_seconds", "Observed TTFT at the SLO's percentile over the signal window."),
    ("slo_ttft_seconds", "The TTFT objective (spec.autoscaling.slo.ttftSeconds)."),
    (
        "slo_objective_ratio",
        "Share of requests that must meet the latency objectives over the objective's window "
        "(spec.autoscaling.slo.objective, else the operator's config.sloObjective): 1 - it is the "
        "error budget the burn-rate alerts and the dashboard measure.",
    ),
    (
        "slo_objective_window_seconds",
        "The window the objective is kept over (spec.autoscaling.slo.objectiveWindow), in seconds.",
    ),
    (
        "slo_met",
        "1 when the observed TTFT percentile is within the SLO, 0 when not (absent: no data).",
    ),
    ("signal_no_data_seconds", "Seconds since the autoscaler last had signals (0 when it has them)."),
    ("scaled_to_zero", "1 while the LlamaService is scaled to zero (idle, no replica), else 0."),
    (
        "activation_seconds",
        "The last wake from zero: first request the activator held to its first token (absent: none).",
    ),
    ("slo_tpot_seconds", "The TPOT objective (spec.autoscaling.slo.tpotSeconds; absent: none)."),
    ("gpus", "GPUs held: replicas x GPUs per replica."),
    ("gpu_price_per_hour", "Price of one GPU-hour of the LlamaService's accelerator."),
)


class OperatorMetrics:
    """The operator's metrics in a registry of their own (tests build fresh ones)."""

    def __init__(self, registry: CollectorRegistry | None = None, *, version: str = "unknown") -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._define_process_and_controller_series(r, version)
        self._define_service_series(r)
        self._define_autoscaler_series(r)
        self._lock = threading.Lock()
        self._services: set[tuple[str, str]] = set()
        self._slo_bounds: dict[tuple[str, str], str] = {}
        self._tpot_bounds: dict[tuple[str, str], str] = {}
        self._states: set[tuple[str, str]] = set()
        self._unknown_products: set[str] = set()
        self._held_since: dict[tuple[str, str], float] = {}
        # The last observation per LlamaService, and its no-data gauge: a cycle that changes nothing but
        # that clock costs no label lookups.
        self._observed: dict[tuple[str, str], ServiceObservation] = {}
        self._no_data_gauges: dict[tuple[str, str], Gauge] = {}
        # Each held service's GPU series and last price: 1,000 services, three label lookups fewer each cycle.
        self._held_series: dict[tuple[str, str], tuple[Gauge, Counter]] = {}
        self._held_prices: dict[tuple[str, str], float | None] = {}

    def _define_process_and_controller_series(self, r: CollectorRegistry, version: str) -> None:
        """The process, the operator's identity and leadership, its reconciles and API writes."""
        # process_* (CPU, memory, open files) and python_info: what every Prometheus exporter is expected to
        # have, and what the operator's memory alerts and capacity figures read.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self.info = Gauge(n.OP_INFO, "The operator's version (always 1).", ["version"], registry=r)
        self.info.labels(version=version).set(1)
        self.leader = Gauge(n.OP_LEADER, "1 when this instance leads, 0 on standby.", registry=r)
        self.leader_election_blocked = Gauge(
            n.OP_LEADER_ELECTION_BLOCKED,
            "1 while the API server refuses this instance's Lease requests for good (RBAC, credentials, a "
            "missing namespace), by the server's reason; the instance is then not ready.",
            ["reason"],
            registry=r,
        )
        self.reconciles = Counter(
            n.OP_RECONCILES, "Reconciles of a LlamaService, by result.", ["result"], registry=r
        )
        self.reconcile_seconds = Histogram(
            n.OP_RECONCILE_SECONDS,
            "Time one reconcile of a LlamaService took.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.writes = Counter(n.OP_WRITES, "Writes to the API server, by object kind.", ["kind"], registry=r)
        self.api_errors = Counter(
            n.OP_API_ERRORS,
            "Requests the API server refused or failed, by object kind and HTTP status.",
            ["kind", "code"],
            registry=r,
        )
        self.queue_depth = Gauge(n.OP_QUEUE_DEPTH, "LlamaServices waiting to be reconciled.", registry=r)
        self.plan_refusals = Counter(
            n.OP_PLAN_REFUSALS,
            "Plans refused (no fitting accelerator, bad input...), by the condition reason given.",
            ["reason"],
            registry=r,
        )

    def _define_service_series(self, r: CollectorRegistry) -> None:
        """Per LlamaService: replicas, the SLO and its observation, GPUs held, readiness; unknown GPUs."""
        self.service_gauges: dict[str, Gauge] = {
            name: Gauge(n.PER_SERVICE_GAUGES[name], help_text, SERVICE_LABELS, registry=r)
            for name, help_text in PER_SERVICE_HELP
        }
        # Seconds, the base unit: GPU-hours are increase(...) / 3600.
        self.gpu_seconds = Counter(
            n.OP_GPU_SECONDS,
            "GPU-seconds held by a LlamaService since the operator started (/ 3600 x the hourly price: cost).",
            SERVICE_LABELS,
            registry=r,
        )
        # Not a histogram: an info series naming the bound (`bound`, as vLLM's exposition prints its `le`)
        # that the SLO rules join vLLM's histogram on (label_replace into `le`).
        self.slo_bound = Gauge(
            n.OP_SLO_BOUND,
            "1 for the vLLM TTFT histogram bound (label bound, as vLLM's le) that counts a LlamaService's "
            "requests within its TTFT objective.",
            [*SERVICE_LABELS, "bound"],
            registry=r,
        )
        self.tpot_bound = Gauge(
            n.OP_TPOT_BOUND,
            "1 for the vLLM inter-token latency histogram bound (label bound, as vLLM's le) that counts a "
            "LlamaService's tokens within its TPOT objective (absent: no TPOT objective).",
            [*SERVICE_LABELS, "bound"],
            registry=r,
        )
        self.ready = Gauge(
            n.OP_SERVICE_READY,
            "1 while a LlamaService's Ready condition is True or it is scaled to zero on purpose, else 0 (any "
            "LlamaService, autoscaled or not).",
            SERVICE_LABELS,
            registry=r,
        )
        self.degraded = Gauge(
            n.OP_SERVICE_DEGRADED,
            "1 while a LlamaService's Degraded condition is True (its spec cannot be served as written).",
            SERVICE_LABELS,
            registry=r,
        )
        self.unknown_gpu_nodes = Gauge(
            n.OP_UNKNOWN_GPU_NODES,
            "Nodes with GPUs whose nvidia.com/gpu.product matches no accelerator of the catalog (or "
            "config.accelerators), by product: accelerator.type auto cannot use them.",
            ["product"],
            registry=r,
        )

    def _define_autoscaler_series(self, r: CollectorRegistry) -> None:
        """The autoscaler's decisions, its cycle, its status backlog and Prometheus' errors."""
        self.decisions = Counter(
            n.OP_DECISIONS,
            "Replica changes the autoscaler made, by direction (up, down).",
            [*SERVICE_LABELS, "direction"],
            registry=r,
        )
        self.cycle_seconds = Histogram(
            n.OP_CYCLE_SECONDS,
            "Time one autoscaler cycle (all LlamaServices) took.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.refresh_backlog = Gauge(
            n.OP_REFRESH_BACKLOG,
            "Observation refreshes of status due in the last cycle but past the fleet-wide budget "
            "(statusRefreshesPerSecond): written in later cycles, oldest first.",
            registry=r,
        )
        self.prometheus_errors = Counter(
            n.OP_PROMETHEUS_ERRORS,
            "Autoscaler cycles that could not read Prometheus.",
            registry=r,
        )

    def reconciled(self, result: str, seconds: float) -> None:
        self.reconciles.labels(result=result).inc()
        self.reconcile_seconds.observe(seconds)

    def wrote(self, kind: str, count: int = 1) -> None:
        if count:
            self.writes.labels(kind=kind).inc(count)

    def api_error(self, kind: str, code: int | str | None) -> None:
        self.api_errors.labels(kind=kind, code=str(code or "none")).inc()

    def plan_refused(self, reason: str) -> None:
        self.plan_refusals.labels(reason=reason).inc()

    def scaled(self, namespace: str, name: str, *, current: int, replicas: int) -> None:
        if replicas != current:
            direction = "up" if replicas > current else "down"
            self.decisions.labels(namespace=namespace, llamaservice=name, direction=direction).inc()

    def observe(self, seen: ServiceObservation) -> None:
        key = (seen.namespace, seen.name)
        with self._lock:
            before = self._observed.get(key)
            if before is not None and replace(before, no_data_seconds=seen.no_data_seconds) == seen:
                # Only the no-data clock moved (1,000 services at rest): one gauge, no label lookups.
                self._no_data_gauges[key].set(seen.no_data_seconds)
                self._observed[key] = seen
                return
            g = {name: gauge.labels(*key) for name, gauge in self.service_gauges.items()}
            self._services.add(key)
            g["desired_replicas"].set(seen.desired_replicas)
            g["current_replicas"].set(seen.current_replicas)
            g["ready_replicas"].set(seen.ready_replicas)
            g["min_replicas"].set(seen.min_replicas)
            g["max_replicas"].set(seen.max_replicas)
            g["slo_ttft_seconds"].set(seen.slo_ttft_seconds)
            g["slo_objective_ratio"].set(seen.slo_objective)
            g["slo_objective_window_seconds"].set(seen.slo_objective_window_seconds)
            self._optional(self.service_gauges["slo_tpot_seconds"], key, seen.slo_tpot_seconds)
            g["signal_no_data_seconds"].set(seen.no_data_seconds)
            g["scaled_to_zero"].set(1 if seen.scaled_to_zero else 0)
            self._optional(self.service_gauges["activation_seconds"], key, seen.activation_seconds)
            self._optional(self.service_gauges["ttft_observed_seconds"], key, seen.ttft_seconds)
            met = None if seen.slo_met is None else float(seen.slo_met)
            self._optional(self.service_gauges["slo_met"], key, met)
            bound = slo_bucket_bound(seen.slo_ttft_seconds)
            previous = self._slo_bounds.get(key)
            if previous is not None and previous != bound:
                self.slo_bound.remove(*key, previous)
            self._slo_bounds[key] = bound
            self.slo_bound.labels(*key, bound).set(1)
            tpot = (
                None
                if seen.slo_tpot_seconds is None
                else slo_bucket_bound(seen.slo_tpot_seconds, VLLM_ITL_BUCKETS)
            )
            previous_tpot = self._tpot_bounds.get(key)
            if previous_tpot is not None and previous_tpot != tpot:
                self.tpot_bound.remove(*key, previous_tpot)
                del self._tpot_bounds[key]
            if tpot is not None:
                self._tpot_bounds[key] = tpot
                self.tpot_bound.labels(*key, tpot).set(1)
            self._observed[key] = seen
            self._no_data_gauges[key] = g["signal_no_data_seconds"]

    def hold(self, holdings: Iterable[Holding], now: float) -> None:
        """GPUs held now by every LlamaService; integrates GPU-hours since the last call."""
        with self._lock:
            live = set()
            for h in holdings:
                key = (h.namespace, h.name)
                live.add(key)
                gpus, seconds = self._held_series.get(key) or (
                    self.service_gauges["gpus"].labels(*key),
                    self.gpu_seconds.labels(*key),  # the series exists from the first sighting
                )
                self._held_series[key] = (gpus, seconds)
                gpus.set(h.gpus)
                if self._held_prices.get(key) != h.price_per_gpu_hour:
                    self._optional(self.service_gauges["gpu_price_per_hour"], key, h.price_per_gpu_hour)
                    self._held_prices[key] = h.price_per_gpu_hour
                since = self._held_since.get(key)
                if since is not None and now > since:
                    seconds.inc(h.gpus * (now - since))
                self._held_since[key] = now
            for key in set(self._held_since) - live:
                del self._held_since[key]
                self._held_series.pop(key, None)
                self._held_prices.pop(key, None)
                for gauge in (self.service_gauges["gpus"], self.service_gauges["gpu_price_per_hour"]):
                    _remove(gauge, key)
                _remove(self.gpu_seconds, key)

    def forget(self, keep: Iterable[tuple[str, str]]) -> None:
        """Drop the autoscaler's series of LlamaServices that are gone or no longer autoscaled."""
        keep = set(keep)
        with self._lock:
            for key in self._services - keep:
                for name, gauge in self.service_gauges.items():
                    if name not in ("gpus", "gpu_price_per_hour"):
                        _remove(gauge, key)
                bound = self._slo_bounds.pop(key, None)
                if bound is not None:
                    _remove(self.slo_bound, (*key, bound))
                tpot = self._tpot_bounds.pop(key, None)
                if tpot is not None:
                    _remove(self.tpot_bound, (*key, tpot))
                for direction in ("up", "down"):
                    _remove(self.decisions, (*key, direction))
                self._observed.pop(key, None)
                self._no_data_gauges.pop(key, None)
            self._services &= keep

    def service_state(self, namespace: str, name: str, *, ready: bool, degraded: bool) -> None:
        """A LlamaService's Ready and Degraded conditions as the reconciler last wrote them."""
        key = (namespace, name)
        with self._lock:
            self._states.add(key)
            self.ready.labels(*key).set(1 if ready else 0)
            self.degraded.labels(*key).set(1 if degraded else 0)

    def service_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Ready and Degraded from a LlamaService's status as written: a service scaled to zero on purpose
        counts as ready (its Ready is False by design, and nothing is wrong)."""
        conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}
        ready = conditions.get("Ready") or {}
        degraded = conditions.get("Degraded") or {}
        self.service_state(
            namespace,
            name,
            ready=ready.get("status") == "True" or ready.get("reason") == "ScaledToZero",
            degraded=degraded.get("status") == "True",
        )

    def forget_state(self, namespace: str, name: str) -> None:
        """The LlamaService is gone (or no longer this instance's to report)."""
        key = (namespace, name)
        with self._lock:
            self._states.discard(key)
            _remove(self.ready, key)
            _remove(self.degraded, key)

    def forget_states(self) -> None:
        """A standby reports no LlamaService (the leader does)."""
        with self._lock:
            for key in self._states:
                _remove(self.ready, key)
                _remove(self.degraded, key)
            self._states.clear()

    def unknown_gpus(self, products: dict[str, int]) -> None:
        """GPU nodes by product label that the catalog does not know (all of them, each inventory)."""
        with self._lock:
            for product in self._unknown_products - products.keys():
                _remove(self.unknown_gpu_nodes, (product,))
            for product, nodes in products.items():
                self.unknown_gpu_nodes.labels(product).set(nodes)
            self._unknown_products = set(products)

    @staticmethod
    def _optional(gauge: Gauge, key: tuple[str, str], value: float | None) -> None:
        if value is None:
            _remove(gauge, key)
        else:
            gauge.labels(*key).set(value)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _remove(metric: Gauge | Counter, labels: tuple[str, ...]) -> None:
    with contextlib.suppress(KeyError):  # never set
        metric.remove(*labels)


@dataclass
class Health:
    """Liveness and readiness, as the probes ask for them."""

    stall_seconds: float = 120.0  # an event loop that has not beaten for this long is stuck
    clock: Callable[[], float] = time.monotonic
    synced: bool = False  # kopf filled every index (it holds event handlers back until then)
    controller_started: bool = False
    leader_election_problem: str | None = None  # the Lease is refused: this instance can never lead
    last_beat: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def beat(self) -> None:
        with self._lock:
            self.last_beat = self.clock()

    def alive(self) -> tuple[bool, str]:
        with self._lock:
            if self.last_beat is None:
                return True, "starting"
            stalled = self.clock() - self.last_beat
        if stalled > self.stall_seconds:
            return False, f"event loop stalled for {stalled:.0f}s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """Ready once the watches are synced and the controller runs, leader or standby alike: a standby
        is a healthy replica, ready to take over. One that may not even read its Lease can never take
        over, so it is not ready."""
        if not self.controller_started:
            return False, "starting: the controller is not running yet"
        if not self.synced:
            return False, "starting: waiting for the watches to list every object"
        if self.leader_election_problem:
            return False, self.leader_election_problem
        return self.alive()


METRICS = OperatorMetrics(version="unset")  # the process's instance; `run` sets the version
# Every series the operator exports, by name, from its own registry: the dashboard and the alert rules may
# use only these (and vLLM's own); names are spelled once, in observability/names.py.
METRIC_NAMES: tuple[str, ...] = exported_names(METRICS.registry)
HEALTH = Health()


def _handler(metrics: OperatorMetrics, health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, metrics.exposition(), CONTENT_TYPE_LATEST)
                return
            probe = {"/healthz": health.alive, "/livez": health.alive, "/readyz": health.ready}.get(path)
            if probe is None:
                self._send(404, b"not found\n", "text/plain")
                return
            ok, why = probe()
            self._send(200 if ok else 503, f"{why}\n".encode(), "text/plain")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds: not worth a log line each

    return Handler


def serve(address: str, port: int, metrics: OperatorMetrics, health: Health) -> ThreadingHTTPServer:
    """Serve /metrics, /healthz and /readyz on one port, from a daemon thread."""
    server = ThreadingHTTPServer((address, port), _handler(metrics, health))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=f"http-{port}", daemon=True).start()
    return server
