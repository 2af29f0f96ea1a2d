"""The discrete-event simulation of a fleet of vLLM replicas under an autoscaler.

Events: request arrivals (from the trace), replica step ends, replicas becoming ready after their
cold start, and a 1 s tick that snapshots the fleet's metrics and, on the policy's interval, asks
the policy for a replica count. Requests go to a ready replica by `FleetConfig.routing`: the least-loaded
one (the default), round robin over the ready ones (what a Kubernetes Service gives, per connection), or
prefix-affine (the operator's router: `llama_operator.router.picker.pick` on the prompt's leading
blocks and the replicas' in-flight requests, exactly as the router calls it); removed replicas
(starting ones first, then the least loaded) stop receiving requests and drain what they hold.
A replica costs GPU time from its creation (the cold start holds the GPU) to its removal.

Scale to zero (`FleetConfig.activation_timeout_seconds` set): an activator stands in front of the fleet
while no replica is ready, as the operator's does. It holds the requests that arrive then (their TTFT
clock runs; vLLM's own TTFT histogram starts when the request is forwarded), reports the latest arrival
it holds to the policy at each evaluation (`Signals.demand_time`, with `activator_available`), hands what
it holds to the first replica that becomes ready, and answers 503 to a request held longer than the
activation timeout. The policy may then remove the last replica; at zero the fleet costs nothing and the
policy sees no metrics, as the operator would.

A new engine (an `EnginePlanning` policy's flags changed: the operator re-planned the engine for the
hardware it measured, reconcile/engine.py) rolls out as the operator's Deployment does (maxSurge 1,
maxUnavailable 0): replicas added from then on run it, and each replica on the old engine is replaced
one at a time, the new one starting first (its cold start costs GPU time like any other) and the old one
draining once it is ready, still serving meanwhile."""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from llama_bench.sim.accelerators import ReplicaProfile
from llama_bench.sim.metrics import (
    FleetSnapshot,
    ItlHistogram,
    MetricsView,
    PromptHistogram,
    TtftHistogram,
)
from llama_bench.sim.replica import Phase, Replica, SimRequest, StepResult
from llama_bench.sim.trace import Trace
from llama_operator.router.picker import BLOCK_CHARS, KV_FULL, PREFIX_CHARS, RecentKeys, pick

# prefix-affine-count: the operator's picker on request counts alone, as it was before it counted each pod's
# pending prefill (an ablation, docs/bench/routing.md).
ROUTERS = ("round-robin", "least-loaded", "prefix-affine", "prefix-affine-count")
# The blocks whose hash picks the pod: the router hashes a completion prompt's first PREFIX_CHARS
# characters in BLOCK_CHARS blocks (~16 tokens each, vLLM's block), so as many of the trace's token blocks.
# (A chat request's key also takes its first user message, so every conversation has its own key however
# long a system prompt it shares; the traces' block hashes carry no message boundaries, so the simulator
# keys every request as a completion: a lower bound for the router on chat traces.)
AFFINITY_BLOCKS = PREFIX_CHARS // BLOCK_CHARS
_MASK64 = (1 << 64) - 1
_UNIQUE_SALT = 0x5EED0FA1112E90E5  # keys of block-less requests, off any block hash


def affinity_key(prefix_blocks: tuple[int, ...]) -> int | None:
    """The router's prefix key for a request of the trace: its leading blocks' identity (the hash of the
    last of them names them all, block hashes being chained), spread over the picker's 64-bit ring
    (splitmix64's finaliser: the trace's hashes need not be uniform). None without blocks."""
    if not prefix_blocks:
        return None
    return _mix64(prefix_blocks[min(len(prefix_blocks), AFFINITY_BLOCKS) - 1])


def _mix64(value: int) -> int:
    """splitmix64's finaliser."""
    key = value & _MASK64
    key = ((key ^ (key >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    key = ((key ^ (key >> 27)) * 0x94D049BB133111EB) & _MASK64
    return key ^ (key >> 31)


def request_key(request: SimRequest) -> int:
    """The router's key for a request: its prompt's leading blocks; a trace without block hashes (the
    family's, the Azure traces) shares no prefix, and each of its requests gets a key of its own, as each
    prompt does at the router (spread over the ring like the rest; the salt keeps it off block hashes)."""
    key = affinity_key(request.prefix_blocks)
    return key if key is not None else _mix64(request.index ^ _UNIQUE_SALT)


@runtime_checkable
class EnginePlanning(Protocol):
    """A policy whose service's engine may be re-planned while it runs (the operator's, with its
    reconciler): the engine flags its replicas should run now."""

    def engine_flags(self) -> tuple[int, int] | None: ...  # (max-num-batched-tokens, max-num-seqs)


class SimPolicy(Protocol):
    """What the simulator needs of an autoscaler: a start, an interval and a replica count."""

    @property
    def name(self) -> str: ...

    @property
    def evaluation_interval(self) -> int: ...  # seconds between two evaluations

    def initial_replicas(self) -> int: ...

    def evaluate(self, view: MetricsView, now: float) -> int: ...


@dataclass(frozen=True, slots=True)
class FleetConfig:
    profile: ReplicaProfile
    cold_start_seconds: float = 40.0
    scrape_interval: int = 5
    # Scale to zero: an activator holds requests while no replica is ready, for at most this long
    # (then 503), and the fleet may go to zero replicas. None: no activator, at least one replica.
    activation_timeout_seconds: float | None = None
    routing: str = "least-loaded"  # one of ROUTERS

    def __post_init__(self) -> None:
        if self.routing not in ROUTERS:
            raise ValueError(f"unknown routing {self.routing!r}; known: {', '.join(ROUTERS)}")


@dataclass(frozen=True, slots=True)
class ScalingEvent:
    time: float
    before: int
    after: int


@dataclass(slots=True)
class SimulationResult:
    """Everything measured in one run."""

    policy: str
    trace: str
    requests: list[SimRequest]
    replicas: list[Replica]
    scaling_events: list[ScalingEvent]
    snapshots: list[FleetSnapshot]
    end_time: float
    price_per_hour: float
    notes: list[str] = field(default_factory=list)
    # Scale to zero: every request the activator held (arrived while no replica was ready), and those of
    # them it answered 503 after the activation timeout (no first token; `dropped_time` set).
    held: list[SimRequest] = field(default_factory=list)
    dropped: list[SimRequest] = field(default_factory=list)

    def gpu_seconds(self) -> float:
        return sum(
            (r.removed if not math.isnan(r.removed) else self.end_time) - r.created for r in self.replicas
        )


_STEP_END = 0
_READY = 1


class Fleet:
    """The replicas, the router and the actuator."""

    def __init__(self, config: FleetConfig, initial: int) -> None:
        self.config = config
        self.replicas: list[Replica] = []
        self.events: list[tuple[float, int, int, Replica, int]] = []
        self._order = itertools.count()
        self.unrouted: deque[SimRequest] = deque()
        self.histogram = TtftHistogram()
        self.itl = ItlHistogram()
        self.prompts = PromptHistogram()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.first_tokens = 0
        self.arrivals = 0
        self.completed = 0
        self.scaling_events: list[ScalingEvent] = []
        # The activator (scale to zero): what it held, what it answered 503, the demand it last reported.
        self.activator = config.activation_timeout_seconds is not None
        self.held: list[SimRequest] = []
        self.dropped: list[SimRequest] = []
        self._turn = 0  # round robin's next ready replica
        self.recent_keys = RecentKeys()  # the prefix-affine router's keys sent lately
        self.profile = config.profile  # the engine new replicas run (a rollout changes it)
        # Rollout: the replica starting in place of an old-engine one, and that one (serving until then).
        self._surge: tuple[Replica, Replica] | None = None
        for _ in range(max(1, initial)):
            self.replicas.append(Replica(len(self.replicas), config.profile, 0.0, 0.0))

    # -- routing -----------------------------------------------------------------------------
    def ready(self) -> list[Replica]:
        return [r for r in self.replicas if r.phase is Phase.READY]

    def live(self) -> list[Replica]:
        """The replicas the Deployment counts: ready or starting, less the one a surge replica replaces."""
        retiring = None if self._surge is None else self._surge[1]
        return [
            r
            for r in self.replicas
            if (r.phase is Phase.READY or r.phase is Phase.STARTING) and r is not retiring
        ]

    def _pick(self, request: SimRequest) -> Replica | None:
        routing = self.config.routing
        if routing == "least-loaded":
            target: Replica | None = None
            best = math.inf
            for replica in self.replicas:
                if replica.phase is Phase.READY and replica.load < best:
                    target, best = replica, replica.load
            return target
        ready = self.ready()
        if not ready:
            return None
        if routing == "round-robin":
            self._turn += 1
            return ready[self._turn % len(ready)]
        by_endpoint = {f"r{replica.ident}": replica for replica in ready}
        key = request_key(request)
        # prefix-affine-count: the picker on counts alone (no pending prefill: every key taken as warm).
        counts_only = routing == "prefix-affine-count"
        chosen = pick(
            tuple(by_endpoint),
            {endpoint: replica.load for endpoint, replica in by_endpoint.items()},
            key,
            saturated_at=self.profile.max_num_seqs,
            tiebreak=request.index,
            kv_full=frozenset(ep for ep, replica in by_endpoint.items() if replica.kv_usage >= KV_FULL),
            prefill=None
            if counts_only
            else {endpoint: replica.pending_prompt_tokens for endpoint, replica in by_endpoint.items()},
            prompt_tokens=request.prompt_tokens,
            warm=counts_only or self.recent_keys.seen(key),
        )
        return None if chosen is None else by_endpoint[chosen.endpoint]

    def route(self, request: SimRequest, now: float) -> None:
        self.arrivals += 1
        target = self._pick(request)
        if target is None:
            # No ready replica: the Service has no endpoint (or, with scale to zero, the activator holds
            # it). A request handed on by `become_ready` always finds the replica that became ready.
            self.unrouted.append(request)
            if self.activator:
                self.held.append(request)
            return
        self._enqueue(target, request, now)

    def _enqueue(self, replica: Replica, request: SimRequest, now: float) -> None:
        request.replica = replica.ident
        replica.enqueue(request)
        if replica.busy_until is None:
            self._schedule(replica, replica.start_next(now))
        else:
            end = replica.interrupt(now)
            if end is not None:
                heapq.heappush(self.events, (end, next(self._order), _STEP_END, replica, replica.version))

    def _schedule(self, replica: Replica, end: float | None) -> None:
        if end is not None:
            replica.version += 1
            heapq.heappush(self.events, (end, next(self._order), _STEP_END, replica, replica.version))

    # -- events ------------------------------------------------------------------------------
    def step_end(self, replica: Replica, version: int, now: float) -> None:
        if version != replica.version or replica.phase is Phase.GONE:
            return
        self._account(replica.finish_step(now))
        self._schedule(replica, replica.start_next(now))
        if replica.phase is Phase.DRAINING and replica.idle:
            replica.phase = Phase.GONE
            replica.removed = now

    def _account(self, result: StepResult) -> None:
        self.prompt_tokens += result.prompt_tokens
        self.generation_tokens += result.generation_tokens
        if result.inter_token_count:
            self.itl.observe(result.inter_token_seconds, result.inter_token_count)
        for request in result.first_tokens:
            # vLLM's TTFT starts when the request reaches it: after the activator's hold, if any.
            forwarded = request.forwarded_time
            start = request.arrival if math.isnan(forwarded) else forwarded  # NaN: not held
            self.histogram.observe(request.first_token_time - start)
        self.first_tokens += len(result.first_tokens)
        self.completed += len(result.finished)
        for request in result.finished:
            self.prompts.observe(request.prompt_tokens)

    def expire_held(self, now: float) -> None:
        """The activator answers 503 to the requests it has held for the activation timeout."""
        timeout = self.config.activation_timeout_seconds
        if timeout is None:
            return
        unrouted = self.unrouted
        while unrouted and unrouted[0].arrival + timeout <= now:
            request = unrouted.popleft()
            request.dropped_time = request.arrival + timeout
            self.dropped.append(request)

    @property
    def demand_time(self) -> float | None:
        """What the activator reports: the latest arrival among the requests it holds (None: none held)."""
        return self.unrouted[-1].arrival if self.activator and self.unrouted else None

    def become_ready(self, replica: Replica, now: float) -> None:
        if replica.phase is not Phase.STARTING:
            return
        replica.phase = Phase.READY
        if self._surge is not None and self._surge[0] is replica:
            self._retire(self._surge[1], now)
            self._surge = None
            self.advance_rollout(now)
        self.expire_held(now)
        while self.unrouted:
            request = self.unrouted.popleft()
            if self.activator:
                request.forwarded_time = now
            self.arrivals -= 1  # counted when it first arrived
            self.route(request, now)

    # -- actuation ---------------------------------------------------------------------------
    def roll_to(self, flags: tuple[int, int], now: float) -> None:
        """Run the engine with (max-num-batched-tokens, max-num-seqs) `flags` from now on."""
        budget, seqs = flags
        if (self.profile.max_num_batched_tokens, self.profile.max_num_seqs) != (budget, seqs):
            self.profile = replace(self.profile, max_num_batched_tokens=budget, max_num_seqs=seqs)
        self.advance_rollout(now)

    def advance_rollout(self, now: float) -> None:
        """Start replacing the next ready replica on an old engine, unless a replacement is starting."""
        if self._surge is not None:
            return
        old = next((r for r in self.live() if r.phase is Phase.READY and r.profile != self.profile), None)
        if old is None:
            return
        self._surge = (self._start(now), old)

    def _start(self, now: float) -> Replica:
        replica = Replica(len(self.replicas), self.profile, now, now + self.config.cold_start_seconds)
        self.replicas.append(replica)
        if replica.phase is Phase.STARTING:
            heapq.heappush(self.events, (replica.ready_at, next(self._order), _READY, replica, 0))
        return replica

    @staticmethod
    def _retire(replica: Replica, now: float) -> None:
        """Remove a replica: at once when it holds nothing (or never started), else after its drain."""
        if replica.phase is Phase.STARTING or replica.idle:
            replica.phase = Phase.GONE
            replica.removed = now
        else:
            replica.phase = Phase.DRAINING

    def scale_to(self, desired: int, now: float) -> None:
        # Zero replicas only with an activator to hold what arrives.
        desired = max(0 if self.activator else 1, desired)
        live = self.live()
        if desired == len(live):
            return
        self.scaling_events.append(ScalingEvent(now, len(live), desired))
        if desired > len(live):
            for _ in range(desired - len(live)):
                self._start(now)
            return
        if self._surge is not None:
            # Kubernetes deletes not-ready pods first: the starting replacement goes, and the replica it was
            # to replace counts again (on the old engine, until the rollout comes back to it).
            self._retire(self._surge[0], now)
            self._surge = None
            live = self.live()
        surplus = len(live) - desired
        # Kubernetes deletes not-ready pods first; among ready ones we pick the least loaded.
        starting = sorted((r for r in live if r.phase is Phase.STARTING), key=lambda r: -r.created)
        ready = sorted((r for r in live if r.phase is Phase.READY), key=lambda r: r.load)
        for replica in (starting + ready)[:surplus]:
            self._retire(replica, now)

    def snapshot(self, now: float) -> FleetSnapshot:
        waiting = running = ready = starting = draining = 0
        kv = 0.0
        for replica in self.replicas:
            phase = replica.phase
            if phase is Phase.GONE:
                continue
            if phase is Phase.STARTING:
                starting += 1
                continue
            waiting += replica.num_waiting
            running += replica.num_running
            if phase is Phase.READY:
                ready += 1
                kv += replica.kv_usage
            else:
                draining += 1
        return FleetSnapshot(
            time=now,
            waiting=waiting + len(self.unrouted),
            running=running,
            kv_usage=kv / ready if ready else 0.0,
            prompt_tokens_total=self.prompt_tokens,
            generation_tokens_total=self.generation_tokens,
            first_tokens_total=self.first_tokens,
            ttft_bucket_counts=tuple(self.histogram.counts),
            arrivals_total=self.arrivals,
            ready=ready,
            starting=starting,
            draining=draining,
            itl_bucket_counts=tuple(self.itl.counts),
            itl_sum_seconds=self.itl.sum,
            prompt_bucket_counts=tuple(self.prompts.counts),
        )


def simulate(
    trace: Trace,
    policy: SimPolicy,
    config: FleetConfig,
    progress: Callable[[float], None] | None = None,
    initial: int | None = None,
) -> SimulationResult:
    """Replay `trace` against a fleet scaled by `policy`; runs until every request has finished. `initial`:
    the fleet starts with this many ready replicas instead of the policy's own start (a warm start)."""
    requests = [
        SimRequest(
            i, r.arrival, r.prompt_tokens, r.output_tokens, r.prompt_tokens, prefix_blocks=r.prefix_blocks
        )
        for i, r in enumerate(trace.requests)
    ]
    fleet = Fleet(config, policy.initial_replicas() if initial is None else initial)
    view = MetricsView(config.scrape_interval)
    interval = max(1, policy.evaluation_interval)
    events = fleet.events
    total = len(requests)
    next_arrival = 0
    tick = 0
    now = 0.0
    while fleet.completed + len(fleet.dropped) < total:
        arrival_time = requests[next_arrival].arrival if next_arrival < total else math.inf
        event_time = events[0][0] if events else math.inf
        if tick <= arrival_time and tick <= event_time:
            now = float(tick)
            if fleet.activator:
                fleet.expire_held(now)
            view.record(fleet.snapshot(now))
            if tick % interval == 0:
                live = fleet.live()
                view.current_replicas = len(live)
                view.ready_replicas = sum(1 for r in live if r.phase is Phase.READY)
                view.starting_replicas = len(live) - view.ready_replicas
                if fleet.activator:
                    # The activator re-reports while it holds a request; the operator keeps the latest.
                    view.activator_available = True
                    demand = fleet.demand_time
                    if demand is not None:
                        view.demand_time = demand
                fleet.scale_to(policy.evaluate(view, now), now)
                if isinstance(policy, EnginePlanning) and (flags := policy.engine_flags()) is not None:
                    fleet.roll_to(flags, now)
            if progress is not None and tick % 600 == 0:
                progress(now)
            tick += 1
        elif event_time <= arrival_time:
            now, _, kind, replica, version = heapq.heappop(events)
            if kind == _STEP_END:
                fleet.step_end(replica, version, now)
            else:
                fleet.become_ready(replica, now)
        else:
            now = arrival_time
            fleet.route(requests[next_arrival], now)
            next_arrival += 1
    end = max(now, trace.duration)
    for replica in fleet.replicas:
        if replica.phase is not Phase.GONE:
            replica.removed = end
    return SimulationResult(
        policy=policy.name,
        trace=trace.name,
        requests=requests,
        replicas=fleet.replicas,
        scaling_events=fleet.scaling_events,
        snapshots=view.snapshots,
        end_time=end,
        price_per_hour=config.profile.price_per_hour,
        held=fleet.held,
        dropped=fleet.dropped,
    )
