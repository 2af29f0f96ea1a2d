"""What the autoscaler observes about one LlamaService in one evaluation cycle, and the histogram
arithmetic shared with the simulator.

The infra layer fills `Signals` from Prometheus (one query per signal for all services); the
simulator fills it from its own scrapes. Intended PromQL, summed per LlamaService over window `w`:

- ttft_percentile_seconds: histogram_quantile(q, sum by (le) (rate(
                             vllm:time_to_first_token_seconds_bucket[w])))
- tpot_percentile_seconds: histogram_quantile(q, sum by (le) (rate(
                             vllm:inter_token_latency_seconds_bucket[w])))
                           (vLLM 0.32's per-token TPOT; vllm:time_per_output_token_seconds is gone)
- queue_waiting_total:     sum(vllm:num_requests_waiting)
- running_total:           sum(vllm:num_requests_running)
- kv_cache_usage:          avg(vllm:kv_cache_usage_perc)   (or vllm:gpu_cache_usage_perc on older vLLM)
- request_rate:            sum(rate(vllm:time_to_first_token_seconds_count[w]))
- prompt_token_rate:       sum(rate(vllm:prompt_tokens_total[w]))
- generation_token_rate:   sum(rate(vllm:generation_tokens_total[w]))
- prompt_tokens_percentile: histogram_quantile(q, sum by (le) (rate(
                             vllm:request_prompt_tokens_bucket[w])))
- mean_inter_token_seconds: sum(rate(vllm:inter_token_latency_seconds_sum[w]))
                           / sum(rate(vllm:inter_token_latency_seconds_count[w]))
- burst_request_rate, burst_prompt_token_rate: request_rate and prompt_token_rate over the burst
                           window `b` (a scrape or two) instead of `w`
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

# vLLM V1's bucket bounds for vllm:time_to_first_token_seconds (vllm/v1/metrics/loggers.py); +Inf is implied.
VLLM_TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip


def build_1_2_5_buckets(max_value: int) -> tuple[int, ...]:
    """vLLM's bounds for its token-count histograms (vllm:request_prompt_tokens, ...): 1, 2, 5, 10, 20,
    50, ... up to `max_value` (its max-model-len); +Inf is implied."""
    bounds: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(bounds)
            bounds.append(value)
        exponent += 1


# vllm:request_prompt_tokens' bounds for a 131072-token max-model-len (Llama 3.2's); the operator's query
# reads whatever bounds the server exports.
VLLM_PROMPT_TOKEN_BUCKETS: tuple[int, ...] = build_1_2_5_buckets(131072)


class SignalStatus(StrEnum):
    """Whether this cycle's signals can be trusted."""

    OK = "OK"
    IDLE = "Idle"  # the counters are present and say no request arrived in the window
    NO_DATA = "NoData"  # targets down, stale or missing series: nothing may be concluded


@dataclass(frozen=True, slots=True)
class Signals:
    """One LlamaService's observations in one cycle. Rates are per second over the signal window."""

    status: SignalStatus
    ttft_percentile_seconds: float | None  # at the SLO's percentile; None when no request in the window
    queue_waiting_total: float
    running_total: float
    kv_cache_usage: float  # mean over ready replicas, 0..1
    request_rate: float
    prompt_token_rate: float
    generation_token_rate: float
    ready_replicas: int  # serving and scraped
    starting_replicas: int  # requested, not ready yet (model loading)
    current_replicas: int  # the Deployment's spec.replicas
    window_seconds: float = 60.0  # the rate window the rates and the TTFT percentile were taken over
    # Inter-token latency at the SLO percentile; None when no token followed another in the window
    tpot_percentile_seconds: float | None = None
    # Prompt length (tokens) at the SLO percentile of the requests finished in the window
    # (vllm:request_prompt_tokens); None when unknown. Long prompts' own prefill is part of their TTFT.
    prompt_tokens_percentile: float | None = None
    # Scale to zero. The latest time the activator reported holding a request for this service (it
    # repeats the report while it holds one); None when it never did.
    demand_time: float | None = None
    # Whether an activator is there to hold requests: without one, zero replicas would refuse them.
    activator_available: bool = False
    # The burst window: the request and prompt-token rates over a short window ending now (a scrape or
    # two), where a sudden rise shows before the rate window has filled. None: not measured.
    burst_request_rate: float | None = None
    burst_prompt_token_rate: float | None = None
    burst_window_seconds: float | None = None
    # The mean inter-token interval over the window (rate of vllm:inter_token_latency_seconds' sum over
    # its count): the mean engine step, which calibrates the step model (autoscale/calibration.py).
    mean_inter_token_seconds: float | None = None
    # Requests per second whose TTFT fell within the objective's histogram bucket (`slo_bucket`) over the
    # window: with request_rate, the share of requests that kept the objective (the error-budget
    # controller's input, autoscale/budget.py). None: not measured.
    within_slo_request_rate: float | None = None

    @classmethod
    def no_data(
        cls, *, ready_replicas: int, starting_replicas: int, current_replicas: int, window_seconds: float
    ) -> Signals:
        """Signals of a cycle in which Prometheus gave nothing usable, over the configured rate window: the
        activator's report of a held request is recent within it, metrics or not."""
        return cls(
            status=SignalStatus.NO_DATA,
            ttft_percentile_seconds=None,
            queue_waiting_total=0.0,
            running_total=0.0,
            kv_cache_usage=0.0,
            request_rate=0.0,
            prompt_token_rate=0.0,
            generation_token_rate=0.0,
            ready_replicas=ready_replicas,
            starting_replicas=starting_replicas,
            current_replicas=current_replicas,
            window_seconds=window_seconds,
        )


def slo_bucket(slo_seconds: float, bounds: Sequence[float] = VLLM_TTFT_BUCKETS) -> float:
    """The bound of vLLM's TTFT histogram that counts requests within the objective: the largest at or
    below it (conservative: a 0.6 s objective is judged at 0.5 s), else the smallest bound there is."""
    below = [b for b in bounds if b <= slo_seconds + 1e-12]
    return max(below) if below else min(bounds)


def histogram_quantile(quantile: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets `(upper_bound, count)`, sorted by bound,
    the last one +Inf. Linear interpolation inside the bucket, the lowest bucket starting at 0, and the
    upper bound of the last finite bucket when the rank falls in +Inf. None when there are no observations."""
    if quantile < 0:
        return -math.inf
    if quantile > 1:
        return math.inf
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = quantile * total
    index = 0
    while index < len(buckets) - 1 and buckets[index][1] < rank:
        index += 1
    if index == len(buckets) - 1:
        return buckets[-2][0]
    upper, count = buckets[index]
    if index == 0:
        if upper <= 0:
            return upper
        lower, below = 0.0, 0.0
    else:
        lower, below = buckets[index - 1]
    in_bucket = count - below
    if in_bucket <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket


def cumulative_buckets(bounds: Sequence[float], counts: Sequence[float]) -> list[tuple[float, float]]:
    """Pair per-bucket (non-cumulative) counts with their bounds, +Inf last, as Prometheus exposes them.
    `counts` has one more entry than `bounds`: the observations above the last bound."""
    out: list[tuple[float, float]] = []
    running = 0.0
    for bound, count in zip((*bounds, math.inf), counts, strict=True):
        running += count
        out.append((bound, running))
    return out
