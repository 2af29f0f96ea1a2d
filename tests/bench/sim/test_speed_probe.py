"""Speed probes beside a replay: how much faster or slower the host runs than when it was profiled, and the
profile at that speed, which the replay's simulation then uses (`llama-bench replay --speed-probes`)."""

from __future__ import annotations

import pytest

from llama_bench.sim.agreement import Latencies, pooled
from llama_bench.sim.profile import HostSpeed, MeasuredProfile, at_speed, drift, speed_probe_points
from tests.bench.sim.test_profile import CHUNK, measured


def probe_at(profile: MeasuredProfile, prefill_factor: float, decode_factor: float) -> HostSpeed:
    """What a probe of a host `factor` times slower than the profiled one measures."""
    prompt, batch = speed_probe_points(profile)
    ttft = next(p.ttft_seconds for p in profile.prefill if p.prompt_tokens == prompt)
    step = min((d for d in profile.decode if d.batch == batch), key=lambda d: d.context_tokens).step_seconds
    return HostSpeed(prompt, ttft * prefill_factor, batch, step * decode_factor)


def test_the_probe_measures_a_long_prompt_within_one_chunk_and_the_largest_batch() -> None:
    assert speed_probe_points(measured()) == (CHUNK, 8)


def test_a_slower_host_slows_the_profile_by_the_probes_mean_ratio() -> None:
    profile = measured()
    probes = [probe_at(profile, 1.2, 1.3), probe_at(profile, 1.4, 1.1)]
    assert probes[0].ratios(profile) == pytest.approx((1.2, 1.3))
    slow = at_speed(profile, probes)
    fast_fit, slow_fit = profile.fit(), slow.fit()
    # Every prefill by 1.3 (the mean of 1.2 and 1.4), every decode step by 1.2: the fit scales with them.
    assert slow_fit.ttft_alone(1000, CHUNK) == pytest.approx(1.3 * fast_fit.ttft_alone(1000, CHUNK), rel=0.02)
    assert slow_fit.decode_step(8, 1000) == pytest.approx(1.2 * fast_fit.decode_step(8, 1000), rel=0.02)
    assert (
        slow.replica_profile().prefill_tokens_per_second < profile.replica_profile().prefill_tokens_per_second
    )
    assert at_speed(profile, []) == profile


def test_drift_is_the_larger_move_of_the_two_points() -> None:
    profile = measured()
    before, after = probe_at(profile, 1.0, 1.0), probe_at(profile, 1.05, 0.8)
    assert drift(before, after) == pytest.approx(0.2)
    assert drift(before, before) == 0.0


def test_a_levels_replays_are_judged_as_one_sample() -> None:
    first = Latencies(ttft=(0.1, 0.2), tpot=(0.01,))
    second = Latencies(ttft=(0.3, 0.4, 0.5), tpot=(0.02, 0.03))
    both = pooled([first, second])
    assert both.ttft == (0.1, 0.2, 0.3, 0.4, 0.5) and both.tpot == (0.01, 0.02, 0.03)
    assert both.figures()["ttft_p50"] == 0.3
