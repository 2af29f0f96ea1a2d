"""How the operator runs vLLM, where the planner's arguments and the desired objects must agree: the port
the server listens on (its `--port`, the container port, the Service's target, the probes, the metrics
scrape) and where the model cache is mounted. The pinned vLLM version is the flag contract's
(data/vllm_flags.json, read by catalog/vllm_flags.py): the operator deploys the vLLM whose parser checks
its arguments."""

from __future__ import annotations

import math

VLLM_PORT = 8000
MODEL_CACHE_PATH = "/models"

# The series of the pinned vLLM (V1 engine) the operator reads: the autoscaler's queries, the dashboard and
# the rules (observability/names.py), and the bench's simulated replicas. Histograms by family name.
VLLM_TTFT = "vllm:time_to_first_token_seconds"  # includes the time queued
# TPOT: vLLM 0.32 observes every inter-token interval here (vllm:time_per_output_token_seconds, its old
# name, is removed; vllm:request_time_per_output_token_seconds is one mean per request).
VLLM_ITL = "vllm:inter_token_latency_seconds"
# Its bucket bounds (vllm/v1/metrics/buckets.py, INTER_TOKEN_LATENCY_BUCKETS in 0.32); +Inf is implied.
VLLM_ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip


def measurable_tpot(objective: float) -> float:
    """The inter-token latency a TPOT objective is planned and sized for: the largest bound of
    vllm:inter_token_latency_seconds at or below it (the objective itself below the smallest bound).

    The percentile the autoscaler and the alerts read is Prometheus' histogram_quantile, which places it
    between two bounds by linear interpolation: with a 30 ms objective between the 25 and 50 ms bounds, steps
    of 26-29 ms (every one within the objective) read as up to 49 ms; the percentile reads within 30 ms only
    once ~94 % of the tokens come within 25 ms. Tokens planned within the bound below read as met."""
    below = [bound for bound in VLLM_ITL_BUCKETS if bound <= objective + 1e-12]
    return max(below) if below else objective


def tpot_judged_at(objective: float) -> float:
    """What a TPOT percentile read from vllm:inter_token_latency_seconds is judged against: the objective,
    or the histogram's smallest bound when the objective is below it. There the percentile falls in the
    first bucket, which histogram_quantile spreads from 0 to the bound: every token within 10 ms reads as
    9.5 ms at p95, so a 6 ms objective would read as missed however fast the steps (the SLO alerts judge it
    at that bound too: infra/metrics.py slo_bucket_bound)."""
    return max(objective, VLLM_ITL_BUCKETS[0])


def measurable_tpot_at_least(floor_seconds: float) -> float:
    """The smallest TPOT objective whose measurable value (`measurable_tpot`) is at least `floor_seconds`:
    the floor rounded up to the millisecond with 10 % to spare below the smallest bound, else the smallest
    bound at or above it."""
    spared = math.ceil(floor_seconds * 1000 * 1.1) / 1000
    if spared < VLLM_ITL_BUCKETS[0]:
        return spared
    return min(
        (bound for bound in VLLM_ITL_BUCKETS if bound >= floor_seconds - 1e-12), default=VLLM_ITL_BUCKETS[-1]
    )


VLLM_E2E_LATENCY = "vllm:e2e_request_latency_seconds"
VLLM_QUEUE_TIME = "vllm:request_queue_time_seconds"
VLLM_REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"  # per request: the prompt lengths
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens_total"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_REQUEST_SUCCESS = "vllm:request_success_total"
VLLM_CACHE_CONFIG = "vllm:cache_config_info"
# vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc (deprecated in one minor, removed two later): the
# current name first, then the former one an older pinned image still exports.
KV_CACHE_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
# With --enable-lora: one sample per label set it has had (running_lora_adapters, waiting_lora_adapters,
# max_lora), valued with the time it was set; the router reads which adapters a pod has in its batch.
VLLM_LORA_INFO = "vllm:lora_requests_info"
