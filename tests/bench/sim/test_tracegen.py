"""The trace generator: seeded and pure, and each modulation shapes the arrivals and lengths as named."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace

import pytest

from llama_bench.sim.trace import Trace
from llama_bench.sim.tracegen import (
    DEV_FAMILY,
    Diurnal,
    FlashCrowd,
    Lengths,
    Mmpp,
    OnOff,
    TraceSpec,
    family,
    generate,
    head,
)

CHAT = Lengths("lognormal", 900, 0.8)
OUT = Lengths("lognormal", 150, 0.9, high=2048)


def per_minute(trace: Trace, minutes: int) -> list[int]:
    counts = [0] * minutes
    for request in trace.requests:
        counts[min(int(request.arrival // 60), minutes - 1)] += 1
    return counts


def test_the_same_spec_gives_the_same_trace_and_another_seed_another() -> None:
    spec = TraceSpec("t", 1, 10, 3.0, CHAT, OUT, mmpp=Mmpp(3.0, 60, 20))
    assert generate(spec) == generate(spec)
    assert generate(replace(spec, seed=2)).requests != generate(spec).requests


def test_poisson_rate_and_lengths_match_the_spec() -> None:
    trace = generate(TraceSpec("p", 3, 60, 4.0, Lengths("lognormal", 800, 0.5), OUT))
    rate = len(trace.requests) / 3600
    assert rate == pytest.approx(4.0, rel=0.05)
    prompts = [r.prompt_tokens for r in trace.requests]
    assert statistics.median(prompts) == pytest.approx(800, rel=0.05)
    # Poisson: inter-arrival gaps have a coefficient of variation of 1.
    gaps = [b.arrival - a.arrival for a, b in zip(trace.requests, trace.requests[1:], strict=False)]
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, abs=0.05)


def test_gamma_arrivals_have_the_coefficient_of_variation_asked() -> None:
    trace = generate(TraceSpec("g", 4, 60, 4.0, CHAT, OUT, arrival_cv=3.0))
    gaps = [b.arrival - a.arrival for a, b in zip(trace.requests, trace.requests[1:], strict=False)]
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(3.0, rel=0.15)
    assert len(trace.requests) / 3600 == pytest.approx(4.0, rel=0.2)


def test_a_flash_crowd_multiplies_the_rate_in_its_minutes_only() -> None:
    trace = generate(TraceSpec("f", 5, 30, 2.0, CHAT, OUT, flash_crowds=(FlashCrowd(600, 300, 8.0, ramp=5),)))
    counts = per_minute(trace, 30)
    before = statistics.mean(counts[:10])
    during = statistics.mean(counts[11:15])
    after = statistics.mean(counts[17:])
    assert during / before == pytest.approx(8.0, rel=0.2)
    assert after / before == pytest.approx(1.0, rel=0.2)


def test_on_off_leaves_idle_gaps_with_no_request() -> None:
    trace = generate(TraceSpec("o", 6, 30, 5.0, CHAT, OUT, on_off=OnOff(120, 120, jitter=0.0)))
    counts = per_minute(trace, 30)
    assert counts[0] > 200 and counts[1] > 200
    assert counts[2] == counts[3] == 0
    assert counts[4] > 200


def test_a_diurnal_cycle_swings_the_rate_by_its_amplitude() -> None:
    trace = generate(TraceSpec("d", 7, 60, 4.0, CHAT, OUT, diurnal=(Diurnal(3600, 0.8),)))
    counts = per_minute(trace, 60)
    trough = statistics.mean(counts[:3] + counts[-3:])
    peak = statistics.mean(counts[28:32])
    assert trough / 60 == pytest.approx(4.0 * 0.2, rel=0.35)
    assert peak / 60 == pytest.approx(4.0 * 1.8, rel=0.15)


def test_mmpp_bursts_raise_the_variance_of_counts() -> None:
    calm = generate(TraceSpec("c", 8, 60, 3.0, CHAT, OUT))
    bursty = generate(TraceSpec("b", 8, 60, 3.0, CHAT, OUT, mmpp=Mmpp(5.0, 120, 30)))

    def dispersion(trace: Trace) -> float:
        counts = per_minute(trace, 60)
        return statistics.pvariance(counts) / statistics.mean(counts)

    assert dispersion(calm) < 2.0  # Poisson: variance ~ mean
    assert dispersion(bursty) > 10.0


def test_length_tails_heavy_and_light_and_clipped() -> None:
    rng = random.Random(9)
    light = [Lengths("lognormal", 1000, 0.3).sample(rng) for _ in range(5000)]
    heavy = [Lengths("lognormal", 1000, 1.5, high=100_000).sample(rng) for _ in range(5000)]
    pareto = [Lengths("pareto", 200, 1.1, high=8192).sample(rng) for _ in range(5000)]

    def p99_over_median(values: list[int]) -> float:
        ordered = sorted(values)
        return ordered[int(0.99 * len(ordered))] / statistics.median(ordered)

    assert p99_over_median(light) < 2.5
    assert p99_over_median(heavy) > 20
    assert min(pareto) >= 200 and max(pareto) == 8192
    with pytest.raises(ValueError, match="bad length distribution"):
        Lengths("lognormal", 0, 1.0)


def test_the_dev_family_covers_the_shapes_in_30_to_60_minutes() -> None:
    specs = family("dev")
    assert 12 <= len(specs) <= 20
    assert len({s.name for s in specs}) == len(specs) and len({s.seed for s in specs}) == len(specs)
    assert all(30 <= s.minutes <= 60 for s in specs)
    assert any(s.mmpp for s in specs) and any(s.on_off for s in specs) and any(s.diurnal for s in specs)
    assert {c.factor for s in specs for c in s.flash_crowds} >= {2.0, 4.0, 8.0}
    assert any(s.arrival_cv > 1 for s in specs)
    assert any(s.prompt.kind == "pareto" for s in specs)
    assert max(s.prompt.shape for s in specs if s.prompt.kind == "lognormal") == 1.5
    with pytest.raises(ValueError, match="unknown trace family"):
        family("nope")


def test_the_holdout_family_shares_no_name_seed_or_shape_with_dev() -> None:
    """The holdout family estimates how the policy does on traffic it was not tuned on: nothing in it may
    repeat a dev trace (a shared seed and shape would make it a second look at the same traffic)."""
    dev, holdout = family("dev"), family("holdout")
    assert len(holdout) >= 8
    assert not {s.name for s in dev} & {s.name for s in holdout}
    assert not {s.seed for s in dev} & {s.seed for s in holdout}

    def shape(spec: TraceSpec) -> TraceSpec:
        return replace(spec, name="", seed=0, description="")

    assert not {shape(s) for s in dev} & {shape(s) for s in holdout}
    assert all(generate(s).requests for s in holdout)


def test_head_keeps_the_first_minutes() -> None:
    trace = generate(DEV_FAMILY[0])
    short = head(trace, 5)
    assert short.requests and all(r.arrival < 300 for r in short.requests)
    assert short.requests == trace.requests[: len(short.requests)]
    assert math.isclose(trace.duration / 60, DEV_FAMILY[0].minutes, rel_tol=0.02)
