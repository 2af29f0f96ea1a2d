"""The benchmark's measures of one simulated run."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from llama_bench.sim.fleet import SimulationResult
from llama_bench.sim.metrics import FleetSnapshot
from llama_operator.autoscale.signals import cumulative_buckets, histogram_quantile
from llama_operator.catalog.vllm import VLLM_ITL_BUCKETS, tpot_judged_at

FLAP_SECONDS = 300.0
WINDOW_SECONDS = 60.0


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (q in 0..1) of already sorted values; NaN when empty. Values may end
    in infinities (a request answered 503): a quantile that falls on one is infinite."""
    if not sorted_values:
        return math.nan
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    lower, upper = sorted_values[low], sorted_values[high]
    if position == low or lower == upper:
        return lower
    return lower + (upper - lower) * (position - low)


@dataclass(frozen=True, slots=True)
class RunSummary:
    policy: str
    trace: str
    requests_within_slo: float  # fraction of requests whose TTFT met the SLO
    windows_within_slo: float  # fraction of 1-minute windows whose TTFT percentile met it
    gpu_hours: float
    cost: float  # USD
    replica_changes_per_hour: float
    flaps: int  # scale-ups followed by a scale-down within 5 minutes
    ttft_p50: float
    ttft_p95: float
    ttft_p99: float
    peak_replicas: int
    # Time per output token of each request of two tokens or more, (last - first token) / (tokens - 1);
    # the share within the TPOT objective when the scenario sets one (None otherwise).
    tpot_p50: float = math.nan
    tpot_p95: float = math.nan
    requests_within_tpot_slo: float | None = None
    # One-minute windows whose inter-token latency percentile met the TPOT objective, per token from
    # vllm:inter_token_latency_seconds as the operator reads it (windows that decoded nothing left out).
    windows_within_tpot_slo: float | None = None

    def to_json(self) -> dict[str, float | int | str]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ObjectiveKept:
    """A run against the objective it was asked to keep (the SLA's promise): the requests within the SLO
    against it, the error budget left (1: untouched, 0: spent exactly, below 0: overspent), and its
    GPU-hours against the clairvoyant oracle sized for that objective (oracle@objective)."""

    objective: float
    requests_within_slo: float
    oracle_gpu_hours: float
    gpu_hours: float

    @property
    def met(self) -> bool:
        return self.requests_within_slo >= self.objective

    @property
    def budget_left(self) -> float:
        return 1.0 - (1.0 - self.requests_within_slo) / max(1.0 - self.objective, 1e-9)

    @property
    def gpu_hours_vs_oracle(self) -> float:
        return self.gpu_hours / self.oracle_gpu_hours if self.oracle_gpu_hours > 0 else math.inf

    def to_json(self) -> dict[str, float | bool]:
        return {
            "objective": self.objective,
            "objective_met": self.met,
            "error_budget_left": self.budget_left,
            "oracle_at_objective_gpu_hours": self.oracle_gpu_hours,
            "gpu_hours_vs_oracle_at_objective": self.gpu_hours_vs_oracle,
        }


def objective_kept(run: RunSummary, objective: float, oracle: RunSummary) -> ObjectiveKept:
    return ObjectiveKept(objective, run.requests_within_slo, oracle.gpu_hours, run.gpu_hours)


def flap_count(times_and_directions: Sequence[tuple[float, int]]) -> int:
    """Scale-ups (+1) that a scale-down (-1) follows within FLAP_SECONDS."""
    flaps = 0
    for i, (time, direction) in enumerate(times_and_directions):
        if direction <= 0:
            continue
        for later, later_direction in times_and_directions[i + 1 :]:
            if later - time > FLAP_SECONDS:
                break
            if later_direction < 0:
                flaps += 1
                break
    return flaps


def itl_windows_within(
    snapshots: Sequence[FleetSnapshot], percentile: float, slo_seconds: float, from_seconds: float = 0.0
) -> float:
    """The share of one-minute windows whose inter-token latency percentile, from the fleet's cumulative
    vllm:inter_token_latency_seconds buckets (each window: the counts at its last snapshot less those
    at the previous window's), is within `slo_seconds`. Windows with no token decoded, and those that
    start before `from_seconds`, are left out; 1.0 when none is left. An objective below the histogram's
    smallest bound is judged at that bound, as the operator judges it (catalog/vllm.py tpot_judged_at)."""
    last: dict[int, tuple[int, ...]] = {}
    for snapshot in snapshots:
        if snapshot.itl_bucket_counts:
            last[int(snapshot.time // WINDOW_SECONDS)] = snapshot.itl_bucket_counts
    met = total = 0
    previous: tuple[int, ...] = ()
    for window in sorted(last):
        counts = last[window]
        delta = [a - b for a, b in zip(counts, previous, strict=True)] if previous else list(counts)
        previous = counts
        if sum(delta) == 0 or window * WINDOW_SECONDS < from_seconds:
            continue
        value = histogram_quantile(percentile / 100.0, cumulative_buckets(VLLM_ITL_BUCKETS, delta))
        total += 1
        met += value is not None and value <= tpot_judged_at(slo_seconds)
    return met / total if total else 1.0


def ttft_windows_within(
    result: SimulationResult, percentile: float, slo_seconds: float, from_seconds: float = 0.0
) -> float:
    """The share of one-minute windows (requests by arrival) whose TTFT percentile is within
    `slo_seconds`, a request the activator answered 503 counting as an infinite TTFT. Windows that start
    before `from_seconds` are left out; 1.0 when none is left."""
    by_window: dict[int, list[float]] = defaultdict(list)
    for request in result.requests:
        if (window := int(request.arrival // WINDOW_SECONDS)) * WINDOW_SECONDS < from_seconds:
            continue
        ttft = request.first_token_time - request.arrival
        by_window[window].append(math.inf if math.isnan(ttft) else ttft)
    windows_ok = sum(
        1 for values in by_window.values() if quantile(sorted(values), percentile / 100.0) <= slo_seconds
    )
    return windows_ok / len(by_window) if by_window else 1.0


def summarize(
    result: SimulationResult, slo_seconds: float, percentile: float, tpot_slo_seconds: float | None = None
) -> RunSummary:
    # A request the activator answered 503 (scale to zero) has no TTFT (NaN): a miss, outside the
    # TTFT and TPOT percentiles, an infinite TTFT in its window.
    ttfts = [r.first_token_time - r.arrival for r in result.requests]
    tpots = sorted(
        (r.finish_time - r.first_token_time) / (r.output_tokens - 1)
        for r in result.requests
        if r.output_tokens > 1 and not math.isnan(r.finish_time)
    )
    within_tpot = windows_tpot = None
    if tpot_slo_seconds is not None:
        within_tpot = sum(1 for t in tpots if t <= tpot_slo_seconds) / len(tpots) if tpots else 1.0
        windows_tpot = itl_windows_within(result.snapshots, percentile, tpot_slo_seconds)
    ordered = sorted(t for t in ttfts if not math.isnan(t)) if result.dropped else sorted(ttfts)
    within = sum(1 for t in ttfts if t <= slo_seconds) / len(ttfts) if ttfts else 1.0
    hours = max(result.end_time, 1.0) / 3600.0
    gpu_hours = result.gpu_seconds() / 3600.0
    events = [(e.time, 1 if e.after > e.before else -1) for e in result.scaling_events]
    peak = max((e.after for e in result.scaling_events), default=0)
    initial = sum(1 for r in result.replicas if r.created == 0.0)
    return RunSummary(
        policy=result.policy,
        trace=result.trace,
        requests_within_slo=within,
        windows_within_slo=ttft_windows_within(result, percentile, slo_seconds),
        gpu_hours=gpu_hours,
        cost=gpu_hours * result.price_per_hour,
        replica_changes_per_hour=len(result.scaling_events) / hours,
        flaps=flap_count(events),
        ttft_p50=quantile(ordered, 0.50),
        ttft_p95=quantile(ordered, 0.95),
        ttft_p99=quantile(ordered, 0.99),
        peak_replicas=max(peak, initial),
        tpot_p50=quantile(tpots, 0.50),
        tpot_p95=quantile(tpots, 0.95),
        requests_within_tpot_slo=within_tpot,
        windows_within_tpot_slo=windows_tpot,
    )
