"""The PromQL the autoscaler runs, and turning its results into Signals. Pure: the HTTP is in infra.

One query per signal for every LlamaService at once (grouped by the namespace and LlamaService labels),
so the cost of a cycle does not grow with the number of services. The TTFT percentile is computed here
from the bucket rates, so services with different SLO percentiles still share one query.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llama_operator.autoscale.signals import Signals, SignalStatus, histogram_quantile

# vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc (deprecated in one minor, removed two later).
KV_CACHE_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")

# TPOT: vLLM 0.32 observes every inter-token interval here (vllm:time_per_output_token_seconds, its old
# name, is removed; vllm:request_time_per_output_token_seconds is one mean per request).
ITL_METRIC = "vllm:inter_token_latency_seconds"
_BUCKET_QUERIES = ("ttft_buckets", "tpot_buckets", "prompt_buckets")

Labels = Mapping[str, str]
Sample = tuple[Labels, float]
ServiceKey = tuple[str, str]  # (namespace, llamaservice)


@dataclass(frozen=True)
class SignalLabels:
    """Label names the scrape configuration adds (operator configuration)."""

    namespace: str = "namespace"
    service: str = "llamaservice"


@dataclass(frozen=True)
class ServiceView:
    """What Kubernetes says about one autoscaled LlamaService this cycle."""

    percentile: float  # 0..100
    ready_replicas: int
    starting_replicas: int
    current_replicas: int


def probe_query() -> str:
    """Which KV-cache metric name this vLLM exports."""
    names = "|".join(KV_CACHE_METRICS)
    return f'group by (__name__) ({{__name__=~"{names}"}})'


def resolve_kv_metric(probe: Sequence[Sample]) -> str:
    present = {labels.get("__name__") for labels, _ in probe}
    return next((name for name in KV_CACHE_METRICS if name in present), KV_CACHE_METRICS[0])


def signal_queries(labels: SignalLabels, *, kv_metric: str, window_seconds: float) -> dict[str, str]:
    by = f"{labels.namespace}, {labels.service}"
    w = f"{max(1, round(window_seconds))}s"
    return {
        "ttft_buckets": f"sum by ({by}, le) (rate(vllm:time_to_first_token_seconds_bucket[{w}]))",
        "tpot_buckets": f"sum by ({by}, le) (rate({ITL_METRIC}_bucket[{w}]))",
        "prompt_buckets": f"sum by ({by}, le) (rate(vllm:request_prompt_tokens_bucket[{w}]))",
        "request_rate": f"sum by ({by}) (rate(vllm:time_to_first_token_seconds_count[{w}]))",
        "waiting": f"sum by ({by}) (vllm:num_requests_waiting)",
        "running": f"sum by ({by}) (vllm:num_requests_running)",
        "kv_cache": f"avg by ({by}) ({kv_metric})",
        "prompt_tokens": f"sum by ({by}) (rate(vllm:prompt_tokens_total[{w}]))",
        "generation_tokens": f"sum by ({by}) (rate(vllm:generation_tokens_total[{w}]))",
        # Scrape health of the service's targets: up is 1 per target scraped in the last interval.
        "targets_up": f'sum by ({by}) (up{{{labels.service}!=""}})',
    }


def _by_service(samples: Sequence[Sample], labels: SignalLabels) -> dict[ServiceKey, float]:
    out: dict[ServiceKey, float] = {}
    for metric, value in samples:
        key = (metric.get(labels.namespace, ""), metric.get(labels.service, ""))
        if math.isfinite(value):
            out[key] = value
    return out


def _buckets_by_service(
    samples: Sequence[Sample], labels: SignalLabels
) -> dict[ServiceKey, list[tuple[float, float]]]:
    out: dict[ServiceKey, list[tuple[float, float]]] = defaultdict(list)
    for metric, value in samples:
        key = (metric.get(labels.namespace, ""), metric.get(labels.service, ""))
        le = metric.get("le")
        if le is None or math.isnan(value):
            continue
        out[key].append((math.inf if le == "+Inf" else float(le), value))
    return {k: sorted(v) for k, v in out.items()}


def assemble_signals(
    results: Mapping[str, Sequence[Sample]],
    services: Mapping[ServiceKey, ServiceView],
    labels: SignalLabels,
    *,
    window_seconds: float,
) -> dict[ServiceKey, Signals]:
    """Signals per service from one cycle's query results. A query that failed is absent from `results`."""
    per = {
        name: _by_service(results.get(name, ()), labels) for name in results if name not in _BUCKET_QUERIES
    }
    buckets = _buckets_by_service(results.get("ttft_buckets", ()), labels)
    tpot_buckets = _buckets_by_service(results.get("tpot_buckets", ()), labels)
    prompt_buckets = _buckets_by_service(results.get("prompt_buckets", ()), labels)
    out: dict[ServiceKey, Signals] = {}
    for key, view in services.items():
        counts = {
            "ready_replicas": view.ready_replicas,
            "starting_replicas": view.starting_replicas,
            "current_replicas": view.current_replicas,
        }
        up = per.get("targets_up", {}).get(key)
        waiting = per.get("waiting", {}).get(key)
        rate = per.get("request_rate", {}).get(key)
        # Missing series or no healthy target is "no data", never "no load" (KEDA's empty-result-as-0 bug).
        if up is None or up < 1 or waiting is None or rate is None:
            out[key] = Signals.no_data(**counts)
            continue
        running = per.get("running", {}).get(key, 0.0)
        ttft = histogram_quantile(view.percentile / 100.0, buckets[key]) if key in buckets else None
        tpot = histogram_quantile(view.percentile / 100.0, tpot_buckets[key]) if key in tpot_buckets else None
        prompt = (
            histogram_quantile(view.percentile / 100.0, prompt_buckets[key])
            if key in prompt_buckets
            else None
        )
        idle = rate <= 0 and waiting <= 0 and running <= 0
        out[key] = Signals(
            status=SignalStatus.IDLE if idle else SignalStatus.OK,
            ttft_percentile_seconds=ttft if rate > 0 else None,
            queue_waiting_total=waiting,
            running_total=running,
            kv_cache_usage=per.get("kv_cache", {}).get(key, 0.0),
            request_rate=rate,
            prompt_token_rate=per.get("prompt_tokens", {}).get(key, 0.0),
            generation_token_rate=per.get("generation_tokens", {}).get(key, 0.0),
            window_seconds=window_seconds,
            tpot_percentile_seconds=tpot,
            prompt_tokens_percentile=prompt,
            ready_replicas=view.ready_replicas,
            starting_replicas=view.starting_replicas,
            current_replicas=view.current_replicas,
        )
    return out
