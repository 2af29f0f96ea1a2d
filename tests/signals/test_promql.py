"""Turning Prometheus results into Signals: idle vs no data, renamed metrics, per-service percentiles."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from llama_operator.autoscale.promql import (
    MAX_PERCENTILE_QUERIES,
    ServiceView,
    SignalLabels,
    assemble_signals,
    quantile_query_name,
    resolve_kv_metric,
    signal_queries,
)
from llama_operator.autoscale.signals import SignalStatus
from llama_operator.catalog.vllm import KV_CACHE_METRICS

L = SignalLabels()
A = ("team-a", "chat")
B = ("team-b", "code")


def lab(key: tuple[str, str], **extra: str) -> dict[str, str]:
    return {"namespace": key[0], "llamaservice": key[1], **extra}


def view(percentile: float = 95, ready: int = 2) -> ServiceView:
    return ServiceView(
        percentile=percentile, ready_replicas=ready, starting_replicas=1, current_replicas=ready + 1
    )


def buckets(key: tuple[str, str], per_bucket: Mapping[str, float]) -> list[tuple[dict[str, str], float]]:
    running = 0.0
    out = []
    for le, count in per_bucket.items():
        running += count
        out.append((lab(key, le=le), running))
    return out


def test_one_query_per_signal_grouped_by_service() -> None:
    queries = signal_queries(L, kv_metric=KV_CACHE_METRICS[0], window_seconds=60)
    assert all("by (namespace, llamaservice" in q for q in queries.values())
    assert "rate(vllm:time_to_first_token_seconds_bucket[60s])" in queries["ttft_buckets"]


def test_renamed_kv_metric_is_probed() -> None:
    assert (
        resolve_kv_metric([({"__name__": "vllm:gpu_cache_usage_perc"}, 1.0)]) == "vllm:gpu_cache_usage_perc"
    )
    assert resolve_kv_metric([({"__name__": "vllm:kv_cache_usage_perc"}, 1.0)]) == "vllm:kv_cache_usage_perc"


def test_ok_idle_and_no_data_are_told_apart() -> None:
    results = {
        "targets_up": [(lab(A), 2.0), (lab(B), 1.0)],
        "waiting": [(lab(A), 6.0), (lab(B), 0.0)],
        "running": [(lab(A), 4.0), (lab(B), 0.0)],
        "request_rate": [(lab(A), 3.0), (lab(B), 0.0)],
        "ttft_buckets": buckets(A, {"0.25": 50, "0.5": 30, "1.0": 15, "2.5": 5, "+Inf": 0}),
        "kv_cache": [(lab(A), 0.5)],
    }
    c = ("team-c", "down")
    signals = assemble_signals(results, {A: view(), B: view(), c: view()}, L, window_seconds=60)
    assert signals[A].status is SignalStatus.OK
    assert signals[A].queue_waiting_total == 6.0 and signals[A].kv_cache_usage == 0.5
    assert signals[A].ttft_percentile_seconds == pytest.approx(1.0)  # rank 95 ends the (0.5, 1.0] bucket
    assert signals[A].starting_replicas == 1 and signals[A].ready_replicas == 2
    assert signals[B].status is SignalStatus.IDLE and signals[B].ttft_percentile_seconds is None
    assert signals[c].status is SignalStatus.NO_DATA


def test_targets_down_is_no_data_even_with_old_rates() -> None:
    results = {"targets_up": [(lab(A), 0.0)], "waiting": [(lab(A), 0.0)], "request_rate": [(lab(A), 1.0)]}
    assert assemble_signals(results, {A: view()}, L, window_seconds=60)[A].status is SignalStatus.NO_DATA


def test_failed_query_is_no_data() -> None:
    results = {"targets_up": [(lab(A), 1.0)], "request_rate": [(lab(A), 1.0)]}  # "waiting" failed
    assert assemble_signals(results, {A: view()}, L, window_seconds=60)[A].status is SignalStatus.NO_DATA


def test_no_data_keeps_the_configured_signal_window() -> None:
    """A service without metrics (a wake whose pod never came up) is judged over the configured window
    too: the activator's last report of a held request counted as recent for a fixed 60 s instead of the
    20 s configured, so a failed wake went back to zero 90 s after it rather than about 30 s."""
    no_data = assemble_signals({}, {A: view()}, L, window_seconds=20)[A]
    assert no_data.status is SignalStatus.NO_DATA and no_data.window_seconds == 20


def test_the_share_within_the_objective_is_one_query_for_every_bound_in_use() -> None:
    """Each service's rate of requests within its objective's TTFT bucket (the error-budget controller's
    input): one query at the bounds in use, each service reading its own."""
    queries = signal_queries(L, kv_metric=KV_CACHE_METRICS[0], window_seconds=20, ttft_bounds={1.0, 0.5})
    assert queries["ttft_within"] == (
        "sum by (namespace, llamaservice, le) "
        '(rate(vllm:time_to_first_token_seconds_bucket{le=~"0\\.5|1\\.0"}[20s]))'
    )
    assert "ttft_within" not in signal_queries(L, kv_metric=KV_CACHE_METRICS[0], window_seconds=20)
    results = {
        "targets_up": [(lab(A), 1.0), (lab(B), 1.0)],
        "waiting": [(lab(A), 0.0), (lab(B), 0.0)],
        "request_rate": [(lab(A), 3.0), (lab(B), 2.0)],
        "ttft_within": [
            (lab(A, le="0.5"), 2.0), (lab(A, le="1.0"), 2.9), (lab(B, le="0.5"), 1.5), (lab(B, le="1.0"), 2.0),
        ],
    }  # fmt: skip
    one_second = replace(view(), ttft_bound=1.0)
    half = replace(view(), ttft_bound=0.5)
    signals = assemble_signals(results, {A: one_second, B: half}, L, window_seconds=20)
    assert signals[A].within_slo_request_rate == 2.9 and signals[B].within_slo_request_rate == 1.5
    unasked = assemble_signals(results, {A: view()}, L, window_seconds=20)
    assert unasked[A].within_slo_request_rate is None


def test_percentile_per_service_from_one_bucket_query() -> None:
    per_bucket = {"0.1": 50, "0.5": 40, "1.0": 9, "+Inf": 1}
    results = {
        "targets_up": [(lab(A), 1.0), (lab(B), 1.0)],
        "waiting": [(lab(A), 0.0), (lab(B), 0.0)],
        "request_rate": [(lab(A), 1.0), (lab(B), 1.0)],
        "ttft_buckets": buckets(A, per_bucket) + buckets(B, per_bucket),
    }
    signals = assemble_signals(results, {A: view(50), B: view(99)}, L, window_seconds=60)
    p50, p99 = signals[A].ttft_percentile_seconds, signals[B].ttft_percentile_seconds
    assert p50 is not None and p99 is not None
    assert p50 == pytest.approx(0.1)
    assert p99 == pytest.approx(1.0)


def test_tpot_is_read_from_vllms_inter_token_latency_histogram() -> None:
    queries = signal_queries(L, kv_metric=KV_CACHE_METRICS[0], window_seconds=60)
    # vLLM 0.32 observes every inter-token interval here; time_per_output_token_seconds is gone.
    assert "rate(vllm:inter_token_latency_seconds_bucket[60s])" in queries["tpot_buckets"]
    assert "time_per_output_token" not in " ".join(queries.values())
    results = {
        "targets_up": [(lab(A), 1.0), (lab(B), 1.0)],
        "waiting": [(lab(A), 0.0), (lab(B), 0.0)],
        "request_rate": [(lab(A), 1.0), (lab(B), 1.0)],
        "tpot_buckets": buckets(A, {"0.025": 80, "0.05": 15, "0.075": 5, "+Inf": 0}),
    }
    signals = assemble_signals(results, {A: view(95), B: view(95)}, L, window_seconds=60)
    assert signals[A].tpot_percentile_seconds == pytest.approx(0.05)  # rank 95 ends the (0.025, 0.05] bucket
    assert signals[B].tpot_percentile_seconds is None  # no token followed another


def test_the_long_prompts_are_read_from_vllms_prompt_length_histogram() -> None:
    queries = signal_queries(L, kv_metric=KV_CACHE_METRICS[0], window_seconds=20)
    assert "rate(vllm:request_prompt_tokens_bucket[20s])" in queries["prompt_buckets"]
    results = {
        "targets_up": [(lab(A), 1.0), (lab(B), 1.0)],
        "waiting": [(lab(A), 0.0), (lab(B), 0.0)],
        "request_rate": [(lab(A), 1.0), (lab(B), 1.0)],
        # vLLM's 1-2-5 bounds: 90 prompts up to 1000 tokens, 10 between 1000 and 5000.
        "prompt_buckets": buckets(A, {"500.0": 50, "1000.0": 40, "2000.0": 5, "5000.0": 5, "+Inf": 0}),
    }
    signals = assemble_signals(results, {A: view(95), B: view(95)}, L, window_seconds=20)
    assert signals[A].prompt_tokens_percentile == pytest.approx(
        2000.0
    )  # rank 95 ends the (1000, 2000] bucket
    assert signals[B].prompt_tokens_percentile is None  # no request finished: unknown, not short


def test_prometheus_computes_the_percentiles_in_use_one_series_per_service() -> None:
    queries = signal_queries(L, kv_metric=KV_CACHE_METRICS[0], window_seconds=60, percentiles=[95, 99, 95.0])
    assert not any(name.endswith("_buckets") for name in queries)
    for name, metric in (
        ("ttft", "vllm:time_to_first_token_seconds_bucket"),
        ("tpot", "vllm:inter_token_latency_seconds_bucket"),
        ("prompt", "vllm:request_prompt_tokens_bucket"),
    ):
        rates = f"sum by (namespace, llamaservice, le) (rate({metric}[60s]))"
        assert queries[quantile_query_name(name, 95)] == f"histogram_quantile(0.95, {rates})"
        assert queries[quantile_query_name(name, 99)] == f"histogram_quantile(0.99, {rates})"
    # The mean inter-token interval, the mean engine step the step model's calibration fits.
    assert queries["mean_inter_token"] == (
        "sum by (namespace, llamaservice) (rate(vllm:inter_token_latency_seconds_sum[60s])) / "
        "sum by (namespace, llamaservice) (rate(vllm:inter_token_latency_seconds_count[60s]))"
    )
    assert len(queries) == 8 + 3 * 2


def test_past_the_cap_of_percentiles_the_bucket_rates_come_back() -> None:
    many = [90, 95, 99, 99.9][: MAX_PERCENTILE_QUERIES + 1]
    queries = signal_queries(L, kv_metric=KV_CACHE_METRICS[0], window_seconds=60, percentiles=many)
    assert {"ttft_buckets", "tpot_buckets", "prompt_buckets"} <= set(queries)
    assert not any("histogram_quantile" in q for q in queries.values())


def test_each_service_reads_the_quantile_of_its_own_percentile() -> None:
    results = {
        "targets_up": [(lab(A), 1.0), (lab(B), 1.0)],
        "waiting": [(lab(A), 0.0), (lab(B), 0.0)],
        "request_rate": [(lab(A), 1.0), (lab(B), 1.0)],
        quantile_query_name("ttft", 95): [(lab(A), 0.3), (lab(B), 0.35)],
        quantile_query_name("ttft", 99): [(lab(A), 0.8), (lab(B), 0.9)],
        # No token followed another in A's window: Prometheus answers NaN, which is "not observed".
        quantile_query_name("tpot", 95): [(lab(A), float("nan"))],
        quantile_query_name("tpot", 99): [(lab(B), 0.04)],
        quantile_query_name("prompt", 95): [(lab(A), 800.0)],
    }
    signals = assemble_signals(results, {A: view(95), B: view(99)}, L, window_seconds=60)
    assert signals[A].ttft_percentile_seconds == 0.3
    assert signals[B].ttft_percentile_seconds == 0.9
    assert signals[B].tpot_percentile_seconds == 0.04
    assert signals[A].tpot_percentile_seconds is None
    assert signals[A].prompt_tokens_percentile == 800.0
    assert signals[B].prompt_tokens_percentile is None


def test_the_burst_window_is_the_latest_scrape_interval() -> None:
    queries = signal_queries(L, kv_metric=KV_CACHE_METRICS[0], window_seconds=60, burst_window_seconds=5)
    assert queries["burst_request_rate"] == (
        "sum by (namespace, llamaservice) (irate(vllm:time_to_first_token_seconds_count[15s]))"
    )
    assert (
        queries["burst_prompt_tokens"]
        == "sum by (namespace, llamaservice) (irate(vllm:prompt_tokens_total[15s]))"
    )
    assert "burst_request_rate" not in signal_queries(L, kv_metric=KV_CACHE_METRICS[0], window_seconds=60)


def test_burst_rates_reach_the_signals_only_when_both_came_back() -> None:
    results = {
        "targets_up": [(lab(A), 2.0), (lab(B), 1.0)],
        "waiting": [(lab(A), 0.0), (lab(B), 0.0)],
        "request_rate": [(lab(A), 3.0), (lab(B), 1.0)],
        "burst_request_rate": [(lab(A), 12.0), (lab(B), 2.0)],
        "burst_prompt_tokens": [(lab(A), 12_000.0)],
    }
    signals = assemble_signals(results, {A: view(), B: view()}, L, window_seconds=60, burst_window_seconds=5)
    assert (signals[A].burst_request_rate, signals[A].burst_prompt_token_rate) == (12.0, 12_000.0)
    assert signals[A].burst_window_seconds == 5
    assert signals[B].burst_request_rate is None and signals[B].burst_window_seconds is None
    unasked = assemble_signals(results, {A: view()}, L, window_seconds=60)
    assert unasked[A].burst_request_rate is None


def test_the_mean_inter_token_interval_reaches_the_signals() -> None:
    results = {
        "targets_up": [(lab(A), 1.0), (lab(B), 1.0)],
        "waiting": [(lab(A), 0.0), (lab(B), 0.0)],
        "request_rate": [(lab(A), 1.0), (lab(B), 1.0)],
        # No token followed another in B's window: 0/0 is NaN, "not observed".
        "mean_inter_token": [(lab(A), 0.021), (lab(B), float("nan"))],
    }
    signals = assemble_signals(results, {A: view(), B: view()}, L, window_seconds=60)
    assert signals[A].mean_inter_token_seconds == 0.021
    assert signals[B].mean_inter_token_seconds is None
