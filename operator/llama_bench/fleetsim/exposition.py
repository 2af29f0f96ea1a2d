"""One simulated pod's metrics in the Prometheus text format (0.0.4), as vLLM's V1 engine exports them.

Names, HELP texts, label names (`model_name`, `engine`) and histogram buckets follow vLLM
(vllm/v1/metrics/loggers.py), and the layout follows prometheus_client, which vLLM uses: counters'
HELP/TYPE lines name the `_total` series, floats are printed the way Go prints them (`le="1.0"`,
`le="2560.0"`). The scrape adds `namespace`, `pod` and `llamaservice` (relabeling), as for a real pod.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

from llama_operator.autoscale.signals import VLLM_PROMPT_TOKEN_BUCKETS, VLLM_TTFT_BUCKETS
from llama_operator.catalog import vllm
from llama_operator.catalog.vllm import VLLM_ITL_BUCKETS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")  # vllm.v1.engine.FinishReason

# vLLM V1's bounds for vllm:e2e_request_latency_seconds (request_latency_buckets); +Inf is implied.
VLLM_E2E_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class Histogram:
    """Per-bucket counts (+Inf last), the sum and the count of the observations."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        # Buckets are `le`: a value equal to a bound belongs to that bound's bucket.
        self.counts[bisect_left(self.bounds, value)] += times
        self.total += value * times
        self.count += times


@dataclass(slots=True)
class PodStats:
    """The cumulative metrics of one pod (a restarted pod is a new pod: counters start at zero)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    successes: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(VLLM_TTFT_BUCKETS))
    # Every interval between two tokens of a sequence (vLLM 0.32's TPOT; its old name
    # vllm:time_per_output_token_seconds is gone).
    inter_token: Histogram = field(default_factory=lambda: Histogram(VLLM_ITL_BUCKETS))
    e2e_latency: Histogram = field(default_factory=lambda: Histogram(VLLM_E2E_LATENCY_BUCKETS))
    # Prompt length of each finished request (the policy sizes for the long ones' own prefill).
    prompt_lengths: Histogram = field(default_factory=lambda: Histogram(VLLM_PROMPT_TOKEN_BUCKETS))


@dataclass(frozen=True, slots=True)
class PodGauges:
    waiting: int
    running: int
    kv_cache_usage: float  # 0..1


def go_float(value: float) -> str:
    """A float as prometheus_client prints it (Go's formatting): 1.0, 0.001, +Inf, 1.234567e+06."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    dot = text.find(".")
    # Go switches to an exponent sooner than Python does.
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    # Sorted by name, as prometheus_client (0.2x) prints them.
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs)) + "}"


@functools.lru_cache(maxsize=64)
def _static_labels(model_name: str) -> tuple[str, tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """The label sets of one model's series, formatted once: a fleet of 1,000 pods is scraped 200 times
    a second, and formatting every bucket's labels on each scrape was most of a scrape's cost."""
    base = (("engine", "0"), ("model_name", model_name))
    reasons = tuple(_labels((*base, ("finished_reason", reason))) for reason in FINISH_REASONS)
    buckets = tuple(
        tuple(_labels((*base, ("le", go_float(bound)))) for bound in (*bounds, math.inf))
        for bounds in (
            VLLM_TTFT_BUCKETS,
            VLLM_ITL_BUCKETS,
            VLLM_E2E_LATENCY_BUCKETS,
            VLLM_PROMPT_TOKEN_BUCKETS,
        )
    )
    return _labels(base), reasons, buckets


def render(model_name: str, stats: PodStats, gauges: PodGauges) -> str:
    """The body of `GET /metrics` of a vLLM server serving `model_name`."""
    labels, reason_labels, bucket_labels = _static_labels(model_name)
    out: list[str] = []

    def family(name: str, kind: str, help_text: str) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")

    def sample(name: str, value: float, text_labels: str = labels) -> None:
        out.append(f"{name}{text_labels} {go_float(value)}")

    family(vllm.VLLM_RUNNING, "gauge", "Number of requests in model execution batches.")
    sample(vllm.VLLM_RUNNING, gauges.running)
    family(vllm.VLLM_WAITING, "gauge", "Number of requests waiting to be processed.")
    sample(vllm.VLLM_WAITING, gauges.waiting)
    family(vllm.KV_CACHE_METRICS[0], "gauge", "KV-cache usage. 1 means 100 percent usage.")
    sample(vllm.KV_CACHE_METRICS[0], gauges.kv_cache_usage)
    # Preemption is not modelled (admission reserves whole sequences): the counter stays at zero.
    family(vllm.VLLM_PREEMPTIONS, "counter", "Cumulative number of preemption from the engine.")
    sample(vllm.VLLM_PREEMPTIONS, 0)
    family(vllm.VLLM_PROMPT_TOKENS, "counter", "Number of prefill tokens processed.")
    sample(vllm.VLLM_PROMPT_TOKENS, stats.prompt_tokens)
    family(vllm.VLLM_GENERATION_TOKENS, "counter", "Number of generation tokens processed.")
    sample(vllm.VLLM_GENERATION_TOKENS, stats.generation_tokens)
    family(vllm.VLLM_REQUEST_SUCCESS, "counter", "Count of successfully processed requests.")
    for reason, reason_label in zip(FINISH_REASONS, reason_labels, strict=True):
        # vLLM creates every reason's series; simulated requests all stop
        sample(vllm.VLLM_REQUEST_SUCCESS, stats.successes if reason == "stop" else 0, reason_label)
    for (name, help_text, histogram), bounds_labels in zip(
        (
            (vllm.VLLM_TTFT, "Histogram of time to first token in seconds.", stats.ttft),
            (
                vllm.VLLM_ITL,
                "Histogram of inter-token latency in seconds.",
                stats.inter_token,
            ),
            (
                vllm.VLLM_E2E_LATENCY,
                "Histogram of e2e request latency in seconds.",
                stats.e2e_latency,
            ),
            (vllm.VLLM_REQUEST_PROMPT_TOKENS, "Number of prefill tokens processed.", stats.prompt_lengths),
        ),
        bucket_labels,
        strict=True,
    ):
        family(name, "histogram", help_text)
        running = 0
        for bucket_label, count in zip(bounds_labels, histogram.counts, strict=True):
            running += count
            sample(f"{name}_bucket", running, bucket_label)
        sample(f"{name}_count", histogram.count)
        sample(f"{name}_sum", histogram.total)
    return "\n".join(out) + "\n"
