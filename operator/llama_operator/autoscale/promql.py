"""The PromQL the autoscaler runs, and turning its results into Signals. Pure: the HTTP is in infra.

One query per signal for every LlamaService at once (grouped by the namespace and LlamaService labels),
so the number of queries does not grow with the number of services. The histograms' percentiles (TTFT,
TPOT, prompt length) are computed by Prometheus, one query per histogram and SLO percentile in use: one
series per service, where the bucket rates were about 20 (60,000 series a cycle at 1,000 services, most of
the served cycle's CPU and memory). Past `MAX_PERCENTILE_QUERIES` distinct percentiles the bucket rates
come back instead, and the percentiles are computed here, so the query count stays bounded.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from llama_operator.autoscale.signals import Signals, SignalStatus, histogram_quantile
from llama_operator.catalog.vllm import (
    KV_CACHE_METRICS,
    VLLM_GENERATION_TOKENS,
    VLLM_ITL,
    VLLM_PROMPT_TOKENS,
    VLLM_REQUEST_PROMPT_TOKENS,
    VLLM_RUNNING,
    VLLM_TTFT,
    VLLM_WAITING,
)

ITL_METRIC = VLLM_ITL  # the TPOT histogram (catalog/vllm.py)
_HISTOGRAMS = {
    "ttft": f"{VLLM_TTFT}_bucket",
    "tpot": f"{VLLM_ITL}_bucket",
    "prompt": f"{VLLM_REQUEST_PROMPT_TOKENS}_bucket",
}
_BUCKET_QUERIES = tuple(f"{name}_buckets" for name in _HISTOGRAMS)
MAX_PERCENTILE_QUERIES = 3  # distinct SLO percentiles asked of Prometheus; more: bucket rates

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
    # The TTFT histogram's bound that counts a request within the objective (signals.slo_bucket); None: the
    # share of requests within it is not asked for (the error-budget controller then rests).
    ttft_bound: float | None = None


def probe_query() -> str:
    """Which KV-cache metric name this vLLM exports."""
    names = "|".join(KV_CACHE_METRICS)
    return f'group by (__name__) ({{__name__=~"{names}"}})'


def resolve_kv_metric(probe: Sequence[Sample]) -> str:
    present = {labels.get("__name__") for labels, _ in probe}
    return next((name for name in KV_CACHE_METRICS if name in present), KV_CACHE_METRICS[0])


def quantile_query_name(histogram: str, percentile: float) -> str:
    """The name of the query for one histogram's percentile, e.g. `ttft@95.0`."""
    return f"{histogram}@{float(percentile)!r}"


def signal_queries(
    labels: SignalLabels,
    *,
    kv_metric: str,
    window_seconds: float,
    percentiles: Collection[float] = (),
    burst_window_seconds: float | None = None,
    ttft_bounds: Collection[float] = (),
) -> dict[str, str]:
    """The cycle's queries, by name. `percentiles`: the SLO percentiles of the services (0..100); with
    none, or more than MAX_PERCENTILE_QUERIES distinct ones, the histograms' bucket rates are queried.
    `burst_window_seconds`: the scrape interval of vLLM's metrics; the burst window's rates are then
    queried too, over the latest scrape interval (irate: the last two samples, within three intervals).
    `ttft_bounds`: the TTFT histogram's bounds that count requests within the services' objectives; one
    query gives each service's rate of such requests at every bound in use (a handful of series each)."""
    by = f"{labels.namespace}, {labels.service}"
    w = f"{max(1, round(window_seconds))}s"
    distinct = sorted({float(p) for p in percentiles})
    histograms: dict[str, str] = {}
    for name, metric in _HISTOGRAMS.items():
        rates = f"sum by ({by}, le) (rate({metric}[{w}]))"
        if distinct and len(distinct) <= MAX_PERCENTILE_QUERIES:
            for p in distinct:
                histograms[quantile_query_name(name, p)] = f"histogram_quantile({p / 100:g}, {rates})"
        else:
            histograms[f"{name}_buckets"] = rates
    burst: dict[str, str] = {}
    if burst_window_seconds:
        b = f"{max(1, round(3 * burst_window_seconds))}s"
        burst = {
            "burst_request_rate": f"sum by ({by}) (irate({VLLM_TTFT}_count[{b}]))",
            "burst_prompt_tokens": f"sum by ({by}) (irate({VLLM_PROMPT_TOKENS}[{b}]))",
        }
    within: dict[str, str] = {}
    if ttft_bounds:
        # vLLM's exposition prints a bound as Python's repr of the float (1.0, 0.5, 2.5): matched exactly.
        les = "|".join(re.escape(le_label(b)) for b in sorted(set(ttft_bounds)))
        within = {"ttft_within": f'sum by ({by}, le) (rate({VLLM_TTFT}_bucket{{le=~"{les}"}}[{w}]))'}
    return {
        **histograms,
        **burst,
        **within,
        "request_rate": f"sum by ({by}) (rate({VLLM_TTFT}_count[{w}]))",
        "waiting": f"sum by ({by}) ({VLLM_WAITING})",
        "running": f"sum by ({by}) ({VLLM_RUNNING})",
        "kv_cache": f"avg by ({by}) ({kv_metric})",
        "prompt_tokens": f"sum by ({by}) (rate({VLLM_PROMPT_TOKENS}[{w}]))",
        "generation_tokens": f"sum by ({by}) (rate({VLLM_GENERATION_TOKENS}[{w}]))",
        # The mean engine step, for the step model's calibration (no token in the window: NaN, dropped).
        "mean_inter_token": f"sum by ({by}) (rate({VLLM_ITL}_sum[{w}])) / sum by ({by}) "
        f"(rate({VLLM_ITL}_count[{w}]))",
        # Scrape health of the service's targets: up is 1 per target scraped in the last interval.
        "targets_up": f'sum by ({by}) (up{{{labels.service}!=""}})',
    }


def le_label(bound: float) -> str:
    """A histogram bound as vLLM's exposition (prometheus_client) prints it in `le`: 1.0, 0.5, 2560.0."""
    return repr(float(bound))


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


@dataclass(frozen=True)
class _CycleResults:
    """One cycle's query results by query name and service, with the percentiles of the histograms and
    the rates of requests within each TTFT bound."""

    per: Mapping[str, Mapping[ServiceKey, float]]
    buckets: Mapping[str, Mapping[ServiceKey, list[tuple[float, float]]]]
    within_by_bound: Mapping[ServiceKey, list[tuple[float, float]]]

    def value(self, name: str, key: ServiceKey) -> float | None:
        return self.per.get(name, {}).get(key)

    def percentile(self, histogram: str, key: ServiceKey, percentile: float) -> float | None:
        # Prometheus' answer (no observation in the window: NaN, dropped) or, from the bucket rates, ours.
        name = quantile_query_name(histogram, percentile)
        if name in self.per:
            return self.per[name].get(key)
        rates = self.buckets[histogram].get(key)
        return histogram_quantile(percentile / 100.0, rates) if rates is not None else None


def assemble_signals(
    results: Mapping[str, Sequence[Sample]],
    services: Mapping[ServiceKey, ServiceView],
    labels: SignalLabels,
    *,
    window_seconds: float,
    burst_window_seconds: float | None = None,
) -> dict[ServiceKey, Signals]:
    """Signals per service from one cycle's query results. A query that failed is absent from `results`;
    so is the burst window's, unless `burst_window_seconds` asked for it (the burst response then rests)."""
    cycle = _CycleResults(
        per={
            name: _by_service(results.get(name, ()), labels)
            for name in results
            if name not in _BUCKET_QUERIES and name != "ttft_within"
        },
        buckets={
            name: _buckets_by_service(results.get(f"{name}_buckets", ()), labels) for name in _HISTOGRAMS
        },
        within_by_bound=_buckets_by_service(results.get("ttft_within", ()), labels),
    )
    return {
        key: _service_signals(
            cycle, key, view, window_seconds=window_seconds, burst_window_seconds=burst_window_seconds
        )
        for key, view in services.items()
    }


def _service_signals(
    cycle: _CycleResults,
    key: ServiceKey,
    view: ServiceView,
    *,
    window_seconds: float,
    burst_window_seconds: float | None,
) -> Signals:
    """One service's signals from the cycle's results."""
    burst_rate = cycle.value("burst_request_rate", key)
    burst_prompt = cycle.value("burst_prompt_tokens", key)
    burst = bool(burst_window_seconds) and burst_rate is not None and burst_prompt is not None
    up, waiting, rate = (
        cycle.value("targets_up", key),
        cycle.value("waiting", key),
        cycle.value("request_rate", key),
    )
    # Missing series or no healthy target is "no data", never "no load" (KEDA's empty-result-as-0 bug).
    if up is None or up < 1 or waiting is None or rate is None:
        return Signals.no_data(
            ready_replicas=view.ready_replicas,
            starting_replicas=view.starting_replicas,
            current_replicas=view.current_replicas,
            window_seconds=window_seconds,
        )
    running = cycle.per.get("running", {}).get(key, 0.0)
    ttft = cycle.percentile("ttft", key, view.percentile)
    idle = rate <= 0 and waiting <= 0 and running <= 0
    return Signals(
        status=SignalStatus.IDLE if idle else SignalStatus.OK,
        ttft_percentile_seconds=ttft if rate > 0 else None,
        queue_waiting_total=waiting,
        running_total=running,
        kv_cache_usage=cycle.per.get("kv_cache", {}).get(key, 0.0),
        request_rate=rate,
        prompt_token_rate=cycle.per.get("prompt_tokens", {}).get(key, 0.0),
        generation_token_rate=cycle.per.get("generation_tokens", {}).get(key, 0.0),
        window_seconds=window_seconds,
        tpot_percentile_seconds=cycle.percentile("tpot", key, view.percentile),
        prompt_tokens_percentile=cycle.percentile("prompt", key, view.percentile),
        ready_replicas=view.ready_replicas,
        starting_replicas=view.starting_replicas,
        current_replicas=view.current_replicas,
        burst_request_rate=burst_rate if burst else None,
        burst_prompt_token_rate=burst_prompt if burst else None,
        burst_window_seconds=burst_window_seconds if burst else None,
        mean_inter_token_seconds=cycle.value("mean_inter_token", key),
        within_slo_request_rate=_at_bound(cycle.within_by_bound.get(key), view.ttft_bound),
    )


def _at_bound(rates: Sequence[tuple[float, float]] | None, bound: float | None) -> float | None:
    """The service's rate at its own bound, of the `ttft_within` rates by bound (None: not there)."""
    if rates is None or bound is None:
        return None
    return next((rate for le, rate in rates if le == bound), None)
