"""Offered loads: Poisson rates, lengths drawn from a trace, trace slices replayed faster and thinned."""

from __future__ import annotations

import itertools
import random

import pytest
from pydantic import ValidationError

from llama_bench.fleetsim.load import LoadSpec, arrivals, cached_trace, check


def drain(spec: LoadSpec, start: float = 100.0, until: float = float("inf")) -> list[tuple[float, int, int]]:
    source = arrivals(spec, start, random.Random(1))
    out = []
    while (item := source.next()) is not None and item[0] < until:
        out.append(item)
    return out


def test_poisson_arrivals_have_the_rate_and_fixed_lengths() -> None:
    got = drain(LoadSpec(rate=8.0, prompt_tokens=321, output_tokens=12), until=100.0 + 500.0)
    assert 8.0 * 500 * 0.93 < len(got) < 8.0 * 500 * 1.07
    assert {(p, o) for _, p, o in got} == {(321, 12)}
    assert all(b[0] >= a[0] >= 100.0 for a, b in itertools.pairwise(got))


def test_zero_rate_offers_nothing() -> None:
    assert drain(LoadSpec()) == []


def test_lengths_can_come_from_a_trace() -> None:
    got = drain(LoadSpec(rate=50.0, lengths="conversation"), until=100.0 + 20.0)
    trace_pairs = {(r.prompt_tokens, r.output_tokens) for r in cached_trace("conversation").requests}
    assert len({(p, o) for _, p, o in got}) > 100
    assert {(p, o) for _, p, o in got} <= trace_pairs


def test_a_trace_slice_replays_faster_and_thinned() -> None:
    trace = cached_trace("conversation")
    offset, duration = 600.0, 600.0
    original = [r for r in trace.requests if offset <= r.arrival < offset + duration]
    got = drain(LoadSpec(trace="conversation", offset=offset, duration=duration, speedup=20.0, sample=0.25))
    assert 0.2 * len(original) < len(got) < 0.3 * len(original)
    assert got[0][0] >= 100.0 and got[-1][0] < 100.0 + duration / 20.0
    first_ten = drain(LoadSpec(trace="conversation", offset=offset, duration=duration))[:10]
    assert [t - 100.0 for t, _, _ in first_ten] == pytest.approx([r.arrival - offset for r in original[:10]])


def test_sample_above_one_replays_copies_and_loop_starts_over() -> None:
    once = drain(LoadSpec(trace="conversation", duration=60.0))
    doubled = drain(LoadSpec(trace="conversation", duration=60.0, sample=2.0))
    assert len(doubled) == 2 * len(once)
    looped = drain(LoadSpec(trace="conversation", duration=60.0, loop=True), until=100.0 + 180.0)
    assert 2.5 * len(once) < len(looped) <= 3 * len(once) + 1


def test_bad_loads_are_refused() -> None:
    with pytest.raises(ValidationError):
        LoadSpec(rate=2.0, trace="conversation")
    with pytest.raises(ValidationError):
        LoadSpec.model_validate({"rate": -1})
    with pytest.raises(ValidationError):
        LoadSpec.model_validate({"rate": 1, "burst": 3})
    with pytest.raises(ValueError, match="neither a file nor"):
        check(LoadSpec(trace="no-such-trace"))
    with pytest.raises(ValueError, match="no request"):
        arrivals(LoadSpec(trace="conversation", offset=99_999.0), 0.0, random.Random(1))
