"""The simulated fleet: conservation, physical bounds, monotonicity in replicas, cold start, metrics."""

from __future__ import annotations

import math
import statistics

import pytest

from llama_bench.sim.accelerators import ACCELERATORS, replica_profile
from llama_bench.sim.fleet import FleetConfig, SimulationResult, simulate
from llama_bench.sim.metrics import MetricsView
from llama_bench.sim.oracle import FixedReplicas, ScheduledReplicas
from llama_bench.sim.report import flap_count, summarize
from llama_bench.sim.trace import Trace, TraceRequest
from llama_operator.autoscale.signals import SignalStatus

from .conftest import T4, synthetic_trace


def run(trace: Trace, replicas: int, cold_start: float = 40.0) -> SimulationResult:
    return simulate(trace, FixedReplicas(replicas), FleetConfig(T4, cold_start_seconds=cold_start))


def test_every_request_completes_once_and_in_order(small_trace: Trace) -> None:
    result = run(small_trace, 2)
    assert len(result.requests) == len(small_trace.requests)
    for request in result.requests:
        assert request.arrival <= request.first_token_time <= request.finish_time
        assert request.prefill_left == 0


def test_ttft_is_at_least_the_prefill_time(small_trace: Trace) -> None:
    result = run(small_trace, 3)
    for request in result.requests:
        prefill = request.prompt_tokens * T4.steps.seconds_per_prefill_token + T4.steps.weight_read_seconds
        assert request.first_token_time - request.arrival >= prefill - 1e-9


def test_decode_time_follows_the_step_model() -> None:
    lone = Trace("one", (TraceRequest(0.5, 100, 101),))
    request = run(lone, 1).requests[0]
    decode = request.finish_time - request.first_token_time
    # 100 decode steps at batch 1: each >= the weights' read time.
    assert decode >= 100 * T4.steps.weight_read_seconds
    assert decode <= 100 * (T4.steps.weight_read_seconds + 300 * T4.steps.seconds_per_context_token)


def test_more_replicas_never_worse_on_a_fixed_load() -> None:
    trace = synthetic_trace(rate=6.0)
    means = []
    for replicas in (1, 2, 3, 4):
        ttfts = [r.first_token_time - r.arrival for r in run(trace, replicas).requests]
        means.append(statistics.fmean(ttfts))
    assert means == sorted(means, reverse=True)


def test_new_replicas_serve_only_after_their_cold_start(small_trace: Trace) -> None:
    policy = ScheduledReplicas([1, 3, 3, 3, 3, 3], lead_seconds=0.0)
    result = simulate(small_trace, policy, FleetConfig(T4, cold_start_seconds=40.0))
    late = [r for r in result.replicas if r.created > 0]
    assert len(late) == 2
    for replica in late:
        assert replica.ready_at == pytest.approx(replica.created + 40.0)
    assert result.scaling_events[0].time == pytest.approx(60.0)
    ready_counts = {s.time: s.ready for s in result.snapshots}
    assert ready_counts[99.0] == 1
    assert ready_counts[101.0] == 3


def test_gpu_time_includes_cold_start(small_trace: Trace) -> None:
    result = run(small_trace, 2)
    assert result.gpu_seconds() == pytest.approx(2 * result.end_time)


def test_signals_seen_by_policies_come_from_scrapes(small_trace: Trace) -> None:
    result = run(small_trace, 2)
    view = MetricsView(scrape_interval=15)
    for snapshot in result.snapshots:
        view.record(snapshot)
    view.ready_replicas = view.current_replicas = 2
    signals = view.signals(now=200.0, window=60.0, percentile=95.0)
    assert signals.status is SignalStatus.OK
    assert signals.window_seconds == pytest.approx(60.0)  # scrapes at 135 s and 195 s
    assert signals.ttft_percentile_seconds is not None
    assert 0.0 < signals.ttft_percentile_seconds < 10.0
    served = [r for r in result.requests if 135.0 < r.first_token_time <= 195.0]
    assert signals.request_rate == pytest.approx(len(served) / 60.0)
    assert view.latest_scrape(200.0) is result.snapshots[195]
    # vllm:request_prompt_tokens counts requests as they finish, in vLLM's 1-2-5 buckets: the percentile
    # prompt lies in the bucket holding the finished requests' own percentile.
    finished = sorted(r.prompt_tokens for r in result.requests if 135.0 < r.finish_time <= 195.0)
    exact = finished[math.ceil(0.95 * len(finished)) - 1]
    assert signals.prompt_tokens_percentile is not None
    bounds = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
    low = max(b for b in bounds if b < exact)
    high = min(b for b in bounds if b >= exact)
    assert low < signals.prompt_tokens_percentile <= high


def test_idle_and_no_data_are_told_apart() -> None:
    quiet = Trace("quiet", (TraceRequest(1.0, 100, 2), TraceRequest(400.0, 100, 2)))
    result = run(quiet, 1)
    view = MetricsView(scrape_interval=5)
    for snapshot in result.snapshots:
        view.record(snapshot)
    view.ready_replicas = view.current_replicas = 1
    assert view.signals(now=300.0, window=60.0, percentile=95.0).status is SignalStatus.IDLE
    empty = MetricsView(scrape_interval=5)
    assert empty.signals(now=0.0, window=60.0, percentile=95.0).status is SignalStatus.NO_DATA


def test_summary_measures(small_trace: Trace) -> None:
    summary = summarize(run(small_trace, 2), slo_seconds=1.0, percentile=95.0)
    assert 0.0 <= summary.requests_within_slo <= 1.0
    assert summary.ttft_p50 <= summary.ttft_p95 <= summary.ttft_p99
    assert summary.replica_changes_per_hour == 0.0
    assert summary.cost == pytest.approx(summary.gpu_hours * T4.price_per_hour)


def test_flaps_are_ups_followed_by_downs_within_five_minutes() -> None:
    assert flap_count([(0.0, 1), (200.0, -1), (1000.0, 1), (1400.0, -1)]) == 1


@pytest.mark.parametrize("accelerator", sorted(ACCELERATORS))
def test_every_accelerator_has_a_plausible_profile(accelerator: str) -> None:
    profile = replica_profile(accelerator)
    assert 0.003 < profile.steps.weight_read_seconds < 0.03  # batch-1 decode step, ms range of the brief
    assert 5_000 < profile.prefill_tokens_per_second < 500_000
    assert profile.kv_capacity_tokens > 10_000
    assert math.isfinite(profile.price_per_hour)


def test_a_model_that_does_not_fit_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        replica_profile("a100-40gb-1g.5gb", "llama-3.1-8b")
