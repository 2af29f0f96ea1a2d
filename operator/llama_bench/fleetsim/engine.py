"""The fleet simulator's core: simulated vLLM replicas for real pods, stepped in real time.

Time is passed in (seconds on the caller's clock), so the core is deterministic and testable; the
server calls `advance(now)` from a loop that sleeps until `next_event_time()`. Events are processed at
their own simulated times, in order, however late the loop wakes up: a TTFT is exact, not rounded to
the loop's latency.

A pod gets a replica (the `sim.replica` engine) when it turns Ready: that is the cold start, kwok's
readiness delay standing in for model loading. A Ready pod receives requests; a pod that is
terminating, or lost its readiness, receives no new ones and finishes what it holds (the endpoints
dropped it); a pod that disappears drops what it held. Requests that find no Ready pod are rejected,
as a Service without endpoints refuses connections.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from llama_bench.fleetsim.exposition import PodGauges, PodStats, render
from llama_bench.fleetsim.load import Arrivals, LoadSpec, arrivals
from llama_bench.sim.accelerators import ReplicaProfile, at_speed, replica_profile
from llama_bench.sim.replica import Phase, Replica, SimRequest, StepResult

ServiceKey = tuple[str, str]  # (namespace, llamaservice)
PodPhase = Literal["starting", "ready", "draining"]

# A decode run is one event in `sim.replica`; cutting it at this length keeps the token counters a
# scrape reads within half a second of the truth, for a few events per second per busy replica.
MAX_SEGMENT_SECONDS = 0.5
RECENT_SECONDS = 60.0
FALLBACK_ACCELERATOR = "t4"
FALLBACK_MODEL = "llama-3.2-1b"  # how much arrival and TTFT history `state()` keeps per service


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """What the simulator needs of a LlamaService (from its status.plan)."""

    accelerator: str | None = None  # a `sim.accelerators` name; None: the simulator's default
    model: str | None = None  # a `sim.accelerators.MODELS` name; None: the default
    served_model_name: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None  # the planned step budget; None: vLLM's default


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the simulator needs of a pod."""

    namespace: str
    name: str
    uid: str
    service: str
    ready: bool
    terminating: bool = False
    model_name: str | None = None  # vLLM's --served-model-name, when the pod says

    @property
    def service_key(self) -> ServiceKey:
        return (self.namespace, self.service)


@dataclass(slots=True)
class SimPod:
    info: PodInfo
    stats: PodStats = field(default_factory=PodStats)
    replica: Replica | None = None
    model_name: str = ""
    routed: int = 0

    @property
    def phase(self) -> PodPhase:
        if self.replica is None:
            return "starting"
        return "ready" if self.replica.phase is Phase.READY else "draining"


@dataclass(slots=True)
class ServiceSim:
    key: ServiceKey
    spec: LoadSpec
    arrivals: Arrivals
    explicit: bool  # set through the control endpoint or the load file, not the default
    generation: int = 0
    seen: bool = False  # present in the cluster at some sync
    info: ServiceInfo = field(default_factory=ServiceInfo)
    offered: int = 0
    routed: int = 0
    rejected: int = 0
    dropped: int = 0
    completed: int = 0
    recent_arrivals: deque[float] = field(default_factory=deque)
    recent_ttft: deque[tuple[float, float]] = field(default_factory=deque)


class FleetEngine:
    """Pods, their replicas, the offered loads and the router. Not thread-safe: the server locks it."""

    def __init__(
        self,
        *,
        accelerator: str | None = None,
        model: str | None = None,
        default_load: LoadSpec | None = None,
        seed: int = 0,
        hardware_speed: float = 1.0,
    ) -> None:
        """`accelerator`, `model`: `sim.accelerators` names for every replica; None (default): each
        LlamaService's plan, else t4 / llama-3.2-1b. `hardware_speed`: the replicas' hardware this many
        times as fast as the catalog says (what the operator's step calibration should find)."""
        if hardware_speed <= 0:
            raise ValueError(f"hardware speed must be positive, not {hardware_speed}")
        self.hardware_speed = hardware_speed
        replica_profile(accelerator or FALLBACK_ACCELERATOR, model or FALLBACK_MODEL)  # fail early
        self.accelerator = accelerator
        self.model = model
        self.default_load = default_load or LoadSpec()
        self._rng = random.Random(seed)
        self._pods: dict[str, SimPod] = {}  # by uid
        self._by_name: dict[tuple[str, str], str] = {}
        # Each service's pods, by uid: routing an arrival looks at its own service's pods only (a fleet
        # of 1,000 services receives hundreds of arrivals a second).
        self._by_service: dict[ServiceKey, dict[str, SimPod]] = {}
        self._services: dict[ServiceKey, ServiceSim] = {}
        self._steps: list[tuple[float, int, str, int]] = []  # (end, order, pod uid, replica version)
        self._arrivals: list[tuple[float, int, ServiceKey, int, int, int]] = []  # (t, order, key, gen, p, o)
        self._order = itertools.count()
        self._profiles: dict[tuple[str, str, int, int | None], ReplicaProfile] = {}
        self._request_index = itertools.count()
        self._replica_index = itertools.count()
        self.now = 0.0

    # -- control -------------------------------------------------------------------------------
    def set_load(self, key: ServiceKey, spec: LoadSpec, now: float, *, explicit: bool = True) -> None:
        """Offer `spec` to a service from `now` on (replacing what it was offered)."""
        self.advance(now)
        service = self._services.get(key)
        source = arrivals(
            spec, now, random.Random(spec.seed if spec.seed is not None else self._rng.random())
        )
        if service is None:
            service = ServiceSim(key, spec, source, explicit)
            self._services[key] = service
        else:
            service.spec, service.arrivals, service.explicit = spec, source, explicit
            service.generation += 1  # pending arrivals of the previous load are void
        self._draw_arrival(service)

    def clear_load(self, key: ServiceKey, now: float) -> None:
        """Back to the default load."""
        self.set_load(key, self.default_load, now, explicit=False)

    def sync(
        self, pods: Iterable[PodInfo], services: Mapping[ServiceKey, ServiceInfo] | None, now: float
    ) -> None:
        """Bring the simulated pods in line with the cluster's. `services` None: unknown this time
        (listing them failed), so no service is forgotten."""
        self.advance(now)
        current = {p.uid: p for p in pods}
        if services is not None:
            for key, service_info in services.items():
                self._service(key, now).info = service_info
        for uid in [u for u in self._pods if u not in current]:
            self._remove(uid)
        for uid, info in current.items():
            pod = self._pods.get(uid)
            if pod is None:
                pod = SimPod(info)
                self._pods[uid] = pod
                self._by_name[(info.namespace, info.name)] = uid
            elif pod.info.service_key != info.service_key:  # relabelled to another service
                self._by_service.get(pod.info.service_key, {}).pop(uid, None)
            pod.info = info
            self._by_service.setdefault(info.service_key, {})[uid] = pod
            self._service(info.service_key, now)
            self._update_phase(pod, now)
        if services is not None:
            live = set(services) | {p.service_key for p in current.values()}
            for key in [k for k, s in self._services.items() if s.seen and k not in live]:
                del self._services[key]  # the LlamaService is gone; a new one starts from the default
            for key in live:
                self._services[key].seen = True

    def _service(self, key: ServiceKey, now: float) -> ServiceSim:
        service = self._services.get(key)
        if service is None:
            self.set_load(key, self.default_load, now, explicit=False)
            service = self._services[key]
        return service

    def _profile(self, service: ServiceSim) -> ReplicaProfile:
        info = service.info
        key = (
            self.accelerator or info.accelerator or FALLBACK_ACCELERATOR,
            self.model or info.model or FALLBACK_MODEL,
            info.max_num_seqs or 256,
            info.max_num_batched_tokens,
        )
        profile = self._profiles.get(key)
        if profile is None:
            try:
                profile = replica_profile(key[0], key[1], max_num_seqs=key[2])
            except ValueError:  # e.g. the model does not fit that slice: the default stands in
                profile = replica_profile(FALLBACK_ACCELERATOR, FALLBACK_MODEL, max_num_seqs=key[2])
            if key[3] is not None:
                profile = replace(profile, max_num_batched_tokens=key[3])
            profile = at_speed(profile, self.hardware_speed)
            self._profiles[key] = profile
        return profile

    def _update_phase(self, pod: SimPod, now: float) -> None:
        info = pod.info
        serving = info.ready and not info.terminating
        if pod.replica is None:
            if serving:
                service = self._services[info.service_key]
                # Created ready: its cold start was the pod's wait for readiness.
                pod.replica = Replica(next(self._replica_index), self._profile(service), now, now)
                pod.model_name = info.model_name or service.info.served_model_name or info.service
            return
        if serving:
            pod.replica.phase = Phase.READY
        elif pod.replica.phase is Phase.READY:
            pod.replica.phase = Phase.DRAINING

    def _remove(self, uid: str) -> None:
        pod = self._pods.pop(uid)
        self._by_name.pop((pod.info.namespace, pod.info.name), None)
        siblings = self._by_service.get(pod.info.service_key)
        if siblings is not None:
            siblings.pop(uid, None)
            if not siblings:
                del self._by_service[pod.info.service_key]
        service = self._services.get(pod.info.service_key)
        if pod.replica is not None:
            if service is not None:
                service.dropped += pod.replica.load
            pod.replica.phase = Phase.GONE  # its pending step event is void

    # -- the event loop ------------------------------------------------------------------------
    def next_event_time(self) -> float | None:
        times = [q[0][0] for q in (self._steps, self._arrivals) if q]
        return min(times) if times else None

    def advance(self, now: float) -> None:
        """Process every event up to `now`, each at its own time."""
        steps, arrivals_ = self._steps, self._arrivals
        while True:
            step_time = steps[0][0] if steps else math.inf
            arrival_time = arrivals_[0][0] if arrivals_ else math.inf
            if min(step_time, arrival_time) > now:
                break
            if step_time <= arrival_time:
                t, _, uid, version = heapq.heappop(steps)
                self.now = max(self.now, t)
                self._step_end(uid, version, t)
            else:
                t, _, key, generation, prompt, output = heapq.heappop(arrivals_)
                self.now = max(self.now, t)
                self._arrive(key, generation, prompt, output, t)
        self.now = max(self.now, now)

    def _draw_arrival(self, service: ServiceSim) -> None:
        drawn = service.arrivals.next()
        if drawn is not None:
            t, prompt, output = drawn
            entry = (t, next(self._order), service.key, service.generation, prompt, output)
            heapq.heappush(self._arrivals, entry)

    def _arrive(self, key: ServiceKey, generation: int, prompt: int, output: int, t: float) -> None:
        service = self._services.get(key)
        if service is None or service.generation != generation:
            return
        self._draw_arrival(service)
        service.offered += 1
        service.recent_arrivals.append(t)
        _trim(service.recent_arrivals, t - RECENT_SECONDS)
        target = self._least_loaded(key)
        if target is None or target.replica is None:
            service.rejected += 1
            return
        service.routed += 1
        target.routed += 1
        replica = target.replica
        replica.enqueue(SimRequest(next(self._request_index), t, prompt, output, prompt))
        if replica.busy_until is None:
            self._schedule(target, t)
        else:
            end = replica.interrupt(t)  # a decode run ends at the next step, which takes the request
            if end is not None:
                heapq.heappush(self._steps, (end, next(self._order), target.info.uid, replica.version))

    def _least_loaded(self, key: ServiceKey) -> SimPod | None:
        best: SimPod | None = None
        best_key = (math.inf, math.inf)
        for pod in self._by_service.get(key, {}).values():
            replica = pod.replica
            if replica is None or replica.phase is not Phase.READY:
                continue
            # Ties go to the pod that got fewer requests so far: an idle fleet shares the load.
            rank = (float(replica.load), float(pod.routed))
            if rank < best_key:
                best, best_key = pod, rank
        return best

    def _schedule(self, pod: SimPod, t: float) -> None:
        replica = pod.replica
        assert replica is not None
        if replica.start_next(t) is None:
            return
        replica.version += 1
        replica.interrupt(t + MAX_SEGMENT_SECONDS)  # no-op unless a long decode run
        end = replica.busy_until
        assert end is not None
        heapq.heappush(self._steps, (end, next(self._order), pod.info.uid, replica.version))

    def _step_end(self, uid: str, version: int, t: float) -> None:
        pod = self._pods.get(uid)
        replica = pod.replica if pod is not None else None
        if pod is None or replica is None or replica.version != version or replica.phase is Phase.GONE:
            return
        self._account(pod, replica.finish_step(t), t)
        self._schedule(pod, t)

    def _account(self, pod: SimPod, result: StepResult, t: float) -> None:
        stats = pod.stats
        stats.prompt_tokens += result.prompt_tokens
        stats.generation_tokens += result.generation_tokens
        if result.inter_token_count:
            stats.inter_token.observe(result.inter_token_seconds, result.inter_token_count)
        service = self._services.get(pod.info.service_key)
        for request in result.first_tokens:
            ttft = request.first_token_time - request.arrival
            stats.ttft.observe(ttft)
            if service is not None:
                service.recent_ttft.append((t, ttft))
        for request in result.finished:
            stats.e2e_latency.observe(request.finish_time - request.arrival)
            stats.prompt_lengths.observe(request.prompt_tokens)
            stats.successes += 1
        if service is not None:
            service.completed += len(result.finished)
            while service.recent_ttft and service.recent_ttft[0][0] < t - RECENT_SECONDS:
                service.recent_ttft.popleft()

    # -- what is observed ----------------------------------------------------------------------
    def pod_phase(self, namespace: str, name: str) -> PodPhase | None:
        uid = self._by_name.get((namespace, name))
        return None if uid is None else self._pods[uid].phase

    def pod_metrics(self, namespace: str, name: str) -> str | None:
        """The pod's /metrics body, or None when it does not serve them (unknown, or still starting:
        vLLM's HTTP server only listens once the model is loaded)."""
        uid = self._by_name.get((namespace, name))
        if uid is None:
            return None
        pod = self._pods[uid]
        if pod.replica is None:
            return None
        replica = pod.replica
        gauges = PodGauges(replica.num_waiting, replica.num_running, replica.kv_usage)
        return render(pod.model_name, pod.stats, gauges)

    def state(self, now: float) -> dict[str, Any]:
        """The simulator's view, for tests and the demo (`GET /state`)."""
        self.advance(now)
        services = []
        for key in sorted(self._services):
            service = self._services[key]
            pods = sorted(
                (p for p in self._pods.values() if p.info.service_key == key), key=lambda p: p.info.name
            )
            ttfts = sorted(v for t, v in service.recent_ttft if t >= now - 30.0)
            recent = sum(1 for t in service.recent_arrivals if t >= now - 10.0)
            profile = self._profile(service)
            services.append(
                {
                    "namespace": key[0],
                    "name": key[1],
                    "load": service.spec.model_dump(exclude_defaults=True),
                    "nominal_rate": service.arrivals.nominal_rate(),
                    "offered_rate_10s": recent / 10.0,
                    "accelerator": profile.accelerator,
                    "model": profile.model,
                    "offered": service.offered,
                    "routed": service.routed,
                    "rejected": service.rejected,
                    "dropped": service.dropped,
                    "completed": service.completed,
                    "ttft_p95_30s": _quantile(ttfts, 0.95),
                    "ttft_p50_30s": _quantile(ttfts, 0.50),
                    "waiting": sum(p.replica.num_waiting for p in pods if p.replica is not None),
                    "running": sum(p.replica.num_running for p in pods if p.replica is not None),
                    "ready": sum(1 for p in pods if p.phase == "ready"),
                    "pods": [
                        {
                            "name": p.info.name,
                            "phase": p.phase,
                            "model_name": p.model_name,
                            "routed": p.routed,
                            "waiting": p.replica.num_waiting if p.replica else 0,
                            "running": p.replica.num_running if p.replica else 0,
                            "kv_cache_usage": round(p.replica.kv_usage, 4) if p.replica else 0.0,
                        }
                        for p in pods
                    ],
                }
            )
        return {"time": now, "services": services}


def _trim(times: deque[float], before: float) -> None:
    while times and times[0] < before:
        times.popleft()


def _quantile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1)]
