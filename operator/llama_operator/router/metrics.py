"""The router's own metrics (its /metrics on the admin port): what it held, forwarded, refused and picked."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from llama_operator.observability import names as n

LABELS = ("namespace", "llamaservice")
WAKE_BUCKETS = (1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600)
OVERHEAD_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5)


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=r)  # process_*: what every exporter has (memory, CPU, open files)
        PlatformCollector(registry=r)
        self.held = Gauge(n.ROUTER_HELD, "Requests held now, waiting for a replica.", LABELS, registry=r)
        self.inflight = Gauge(n.ROUTER_INFLIGHT, "Requests forwarded and not finished.", registry=r)
        self.requests = Counter(
            n.ROUTER_REQUESTS,
            "Requests by outcome: forwarded (a pod was ready), held_forwarded (held, then served), timed_out "
            "(503 after the hold time), rejected (a limit: 503, or 413 for a body too big), draining (503: "
            "this replica is stopping), unknown (no such LlamaService for this caller), forbidden (a source "
            "that is no pod of a served namespace), upstream_error (no pod accepted the connection), "
            "client_gone (the client left while held), models (/v1/models answered here).",
            ["outcome"],
            registry=r,
        )
        self.picks = Counter(
            n.ROUTER_PICKS,
            "Pods picked, by reason: affinity (the prompt's prefix pod), spill (its next pod on the ring: the "
            "affine one was above its bounded load), saturated (least-loaded: every pod at its bound), "
            "least_loaded (no prompt), retry (another pod after a refused connection).",
            ["reason"],
            registry=r,
        )
        self.rejected = Counter(
            n.ROUTER_REJECTED, "Requests refused by a limit, by limit.", ["limit"], registry=r
        )
        self._timings(r)
        self.model_requests = Counter(
            n.ROUTER_MODEL_REQUESTS,
            "Requests routed to a LlamaService, by the model they named: its served name (kind base) or one of "
            "its LoRA adapters (kind adapter); an empty model when the request named the service another way.",
            [*LABELS, "model", "kind"],
            registry=r,
        )
        self.adapter_picks = Counter(
            n.ROUTER_ADAPTER_PICKS,
            "Requests for a LoRA adapter, by the pods they could go to: loaded (pods with the adapter in vLLM's "
            "batch), held (every pod that has it loaded), unplaced (no ready pod has it yet: every pod).",
            ["reason"],
            registry=r,
        )
        self.demand_reports = Counter(
            n.ROUTER_DEMAND_REPORTS,
            "Demand reports written (one per held service every few seconds, on the service's Lease).",
            registry=r,
        )

    def _timings(self, r: CollectorRegistry) -> None:
        self.overhead = Histogram(
            n.ROUTER_ADDED_LATENCY,
            "Time the router adds before the upstream request: reading the body, resolving, picking, "
            "connecting (not holding).",
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.activation = Histogram(
            n.ROUTER_ACTIVATION_SECONDS,
            "A wake from zero: first request held to its first token.",
            LABELS,
            buckets=WAKE_BUCKETS,
            registry=r,
        )
        self.hold = Histogram(
            n.ROUTER_HOLD_SECONDS,
            "How long each held request waited for a ready replica.",
            buckets=WAKE_BUCKETS,
            registry=r,
        )
