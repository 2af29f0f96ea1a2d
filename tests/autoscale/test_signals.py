"""histogram_quantile follows Prometheus' semantics."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llama_operator.autoscale.signals import VLLM_TTFT_BUCKETS, cumulative_buckets, histogram_quantile


def test_interpolates_inside_the_bucket() -> None:
    buckets = [(0.5, 0.0), (1.0, 10.0), (2.0, 20.0), (math.inf, 20.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(1.0)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.75)
    assert histogram_quantile(0.75, buckets) == pytest.approx(1.5)


def test_lowest_bucket_starts_at_zero() -> None:
    assert histogram_quantile(0.5, [(1.0, 4.0), (math.inf, 4.0)]) == pytest.approx(0.5)


def test_rank_in_inf_bucket_gives_last_finite_bound() -> None:
    assert histogram_quantile(0.99, [(1.0, 1.0), (2.0, 2.0), (math.inf, 10.0)]) == 2.0


def test_no_observations_is_none() -> None:
    assert histogram_quantile(0.95, [(1.0, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(0.95, []) is None


def test_out_of_range_quantiles() -> None:
    buckets = [(1.0, 1.0), (math.inf, 1.0)]
    assert histogram_quantile(-0.1, buckets) == -math.inf
    assert histogram_quantile(1.1, buckets) == math.inf


def test_vllm_ttft_buckets_are_vllms() -> None:
    assert VLLM_TTFT_BUCKETS[0] == 0.001
    assert VLLM_TTFT_BUCKETS[-1] == 2560.0
    assert 1.0 in VLLM_TTFT_BUCKETS
    assert list(VLLM_TTFT_BUCKETS) == sorted(VLLM_TTFT_BUCKETS)


@given(
    st.lists(st.integers(min_value=0, max_value=50), min_size=len(VLLM_TTFT_BUCKETS) + 1, max_size=23),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_quantile_lies_within_the_bucket_holding_the_rank(counts: list[int], q: float) -> None:
    buckets = cumulative_buckets(VLLM_TTFT_BUCKETS, counts)
    value = histogram_quantile(q, buckets)
    if sum(counts) == 0:
        assert value is None
        return
    assert value is not None
    assert 0.0 <= value <= VLLM_TTFT_BUCKETS[-1]
    higher = histogram_quantile(min(1.0, q + 0.1), buckets)
    assert higher is not None
    assert higher >= value - 1e-9
