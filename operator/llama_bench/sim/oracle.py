"""The clairvoyant reference: for each minute of the trace, the fewest replicas that meet the SLO
for that minute's requests, found by simulating the minute (with the half minute before it, so
requests still running carry over) at fixed replica counts. Executed one cold start ahead, it is
what perfect foresight would pay; static peak provisioning is its maximum.

"Meet the SLO" is the SLO's own test by default (the minute's TTFT percentile within the objective);
with an attainment target it is "at least that fraction of the minute's requests within the
objective", which prices a target such as "99 % of requests" with the same foresight."""

from __future__ import annotations

import math
from collections.abc import Sequence

from llama_bench.sim.fleet import FleetConfig, simulate
from llama_bench.sim.metrics import MetricsView
from llama_bench.sim.report import quantile
from llama_bench.sim.trace import Trace, TraceRequest

MINUTE = 60.0
LEAD_IN = 30.0


class FixedReplicas:
    """A constant replica count (static provisioning)."""

    evaluation_interval = 60

    def __init__(self, replicas: int, name: str = "static") -> None:
        self.replicas = replicas
        self.name = name

    def initial_replicas(self) -> int:
        return self.replicas

    def evaluate(self, view: MetricsView, now: float) -> int:
        return self.replicas


class ScheduledReplicas:
    """Follows a per-minute schedule, requesting each minute's replicas one cold start ahead."""

    evaluation_interval = 1

    def __init__(self, schedule: Sequence[int], lead_seconds: float, name: str = "oracle") -> None:
        self.schedule = list(schedule)
        self.lead_seconds = lead_seconds
        self.name = name

    def _at(self, minute: int) -> int:
        return self.schedule[min(max(minute, 0), len(self.schedule) - 1)] if self.schedule else 1

    def initial_replicas(self) -> int:
        return self.desired_at(0.0)

    def desired_at(self, now: float) -> int:
        first = int(now // MINUTE)
        last = int((now + self.lead_seconds) // MINUTE)
        return max(self._at(m) for m in range(first, last + 1))

    def evaluate(self, view: MetricsView, now: float) -> int:
        return self.desired_at(now)


def _minute_meets_slo(
    requests: list[TraceRequest],
    start: float,
    replicas: int,
    *,
    config: FleetConfig,
    slo: float,
    q: float,
    attainment: float | None,
) -> bool:
    window = Trace(
        "minute",
        tuple(TraceRequest(r.arrival - start + LEAD_IN, r.prompt_tokens, r.output_tokens) for r in requests),
    )
    result = simulate(window, FixedReplicas(replicas), config)
    ttfts = sorted(r.first_token_time - r.arrival for r in result.requests if r.arrival >= LEAD_IN)
    if not ttfts:
        return True
    if attainment is not None:
        return sum(1 for ttft in ttfts if ttft <= slo) >= attainment * len(ttfts)
    return quantile(ttfts, q) <= slo


def oracle_schedule(
    trace: Trace,
    config: FleetConfig,
    *,
    slo_seconds: float,
    percentile: float,
    min_replicas: int,
    max_replicas: int,
    attainment: float | None = None,
) -> list[int]:
    """Fewest replicas per minute (within min..max) whose minute meets the SLO percentile or, when
    `attainment` is given, has at least that fraction of its requests within the objective."""
    minutes = math.floor(trace.duration / MINUTE) + 1
    buckets: list[list[TraceRequest]] = [[] for _ in range(minutes)]
    for request in trace.requests:
        # A minute's simulation includes the half minute before it, so its requests land in two.
        buckets[int(request.arrival // MINUTE)].append(request)
    schedule: list[int] = []
    q = percentile / 100.0
    for minute in range(minutes):
        start = minute * MINUTE
        own = buckets[minute]
        if not own:
            schedule.append(min_replicas)
            continue
        earlier = [r for r in buckets[minute - 1] if r.arrival >= start - LEAD_IN] if minute else []
        requests = earlier + own
        low, high = min_replicas, max_replicas
        if not _minute_meets_slo(
            requests, start, high, config=config, slo=slo_seconds, q=q, attainment=attainment
        ):
            schedule.append(high)
            continue
        while low < high:
            middle = (low + high) // 2
            if _minute_meets_slo(
                requests, start, middle, config=config, slo=slo_seconds, q=q, attainment=attainment
            ):
                high = middle
            else:
                low = middle + 1
        schedule.append(low)
    return schedule


def reactive_schedule(schedule: Sequence[int], hold_minutes: int, initial: int) -> list[int]:
    """`schedule` as a reactive autoscaler with perfect sizing would follow it: a minute's need is
    known only once the minute has been seen, then kept for `hold_minutes` (a stabilization window).
    Executed without lead, it shows what sizing without foresight reaches with that hold, however
    well it sizes."""
    return [
        max(schedule[max(0, minute - hold_minutes) : minute], default=initial)
        for minute in range(len(schedule))
    ]
