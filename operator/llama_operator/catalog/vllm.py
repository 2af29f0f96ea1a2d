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


# CUDA-graph capture sizes as the pinned vLLM computes them by default (vllm/config/vllm.py,
# VllmConfig._set_cudagraph_sizes, read at vllm-project/vllm@000fc94b): the largest captured batch is
# min(max_num_seqs * decode_query_len * 2, 512; 1024 on data-center Blackwell), at most
# max_num_batched_tokens; the sizes are 1, 2, 4, every multiple of 8 below 256, every multiple of 16 from
# 256, and max_num_batched_tokens itself when it fits. A batch between two sizes is padded up to the next
# one; a batch above the largest runs without a graph.
CUDA_GRAPH_MAX_CAPTURE = 512
CUDA_GRAPH_MAX_CAPTURE_BLACKWELL = 1024
CUDA_GRAPH_FINE_STRIDE = 8
CUDA_GRAPH_COARSE_FROM = 256
CUDA_GRAPH_COARSE_STRIDE = 16


def cuda_graph_capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    *,
    decode_query_len: int = 1,
    blackwell: bool = False,
) -> tuple[int, ...]:
    """The batch sizes (in tokens) vLLM captures CUDA graphs for, without an explicit compilation config.

    `decode_query_len` is 1 + num_speculative_tokens with speculative decoding: a uniform decode batch of n
    requests is n * decode_query_len tokens, and vLLM adds those sizes (up to its default ceiling)."""
    ceiling = CUDA_GRAPH_MAX_CAPTURE_BLACKWELL if blackwell else CUDA_GRAPH_MAX_CAPTURE
    largest = min(max_num_seqs * decode_query_len * 2, ceiling)
    uniform_decode: set[int] = set()
    if decode_query_len > 1:
        requests = min(max_num_seqs, ceiling)
        counts = {n for n in (1, 2, 4) if n <= requests} | {requests}
        counts |= set(
            range(CUDA_GRAPH_FINE_STRIDE, min(requests + 1, CUDA_GRAPH_COARSE_FROM), CUDA_GRAPH_FINE_STRIDE)
        )
        counts |= set(range(CUDA_GRAPH_COARSE_FROM, requests + 1, CUDA_GRAPH_COARSE_STRIDE))
        uniform_decode = {n * decode_query_len for n in counts if n * decode_query_len <= largest}
    largest = min(max_num_batched_tokens, largest)
    sizes = {n for n in (1, 2, 4) if n <= largest}
    sizes |= set(
        range(CUDA_GRAPH_FINE_STRIDE, min(largest + 1, CUDA_GRAPH_COARSE_FROM), CUDA_GRAPH_FINE_STRIDE)
    )
    sizes |= set(range(CUDA_GRAPH_COARSE_FROM, largest + 1, CUDA_GRAPH_COARSE_STRIDE))
    if max_num_batched_tokens <= largest:
        sizes.add(max_num_batched_tokens)
    sizes |= {n for n in uniform_decode if n <= max_num_batched_tokens}
    return tuple(sorted(sizes))


def captured_batch_at_most(batch: int) -> int:
    """The largest batch at or below `batch` that vLLM captures a CUDA graph for whatever its other settings:
    its size list's fixed part (1, 2, 4, multiples of 8, from 256 multiples of 16). A full batch of that size
    replays its own graph, with no padding."""
    if batch < 1:
        return 1
    if batch < CUDA_GRAPH_FINE_STRIDE:
        return 1 << (batch.bit_length() - 1)
    if batch < CUDA_GRAPH_COARSE_FROM:
        return batch - batch % CUDA_GRAPH_FINE_STRIDE
    return batch - (batch - CUDA_GRAPH_COARSE_FROM) % CUDA_GRAPH_COARSE_STRIDE
