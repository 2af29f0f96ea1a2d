"""What the autoscalers can observe of the simulated fleet: one snapshot per second of vLLM's gauges
and cumulative counters (summed over the replicas), read back as Prometheus would serve them.

Prometheus only sees the snapshots on its scrape grid; a window query uses the newest scrape at or
before `now` and the newest at or before `now - window`, so every signal lags as it would in
production. Replica counts come from the Kubernetes API, which is current, and so is what an activator
reports (scale to zero: the latest request it holds, and that it is there to hold one)."""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, replace

from llama_operator.autoscale.signals import (
    VLLM_PROMPT_TOKEN_BUCKETS,
    VLLM_TTFT_BUCKETS,
    Signals,
    SignalStatus,
    cumulative_buckets,
    histogram_quantile,
    slo_bucket,
)
from llama_operator.catalog.vllm import VLLM_ITL_BUCKETS


class TtftHistogram:
    """vllm:time_to_first_token_seconds, summed over the fleet: per-bucket counts, +Inf last."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts = [0] * (len(VLLM_TTFT_BUCKETS) + 1)

    def observe(self, seconds: float) -> None:
        # Prometheus buckets are `le`: a value equal to a bound falls in that bound's bucket.
        self.counts[bisect_left(VLLM_TTFT_BUCKETS, seconds)] += 1


class ItlHistogram:
    """vllm:inter_token_latency_seconds, summed over the fleet: one observation per token after a
    sequence's first (vLLM observes every inter-token interval), per-bucket counts, +Inf last."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(VLLM_ITL_BUCKETS) + 1)
        self.sum = 0.0  # the histogram's _sum: seconds of every interval observed

    def observe(self, seconds: float, count: int = 1) -> None:
        self.counts[bisect_left(VLLM_ITL_BUCKETS, seconds)] += count
        self.sum += seconds * count


PROMPT_TOKEN_BUCKETS = VLLM_PROMPT_TOKEN_BUCKETS


class PromptHistogram:
    """vllm:request_prompt_tokens, summed over the fleet: observed once per finished request."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts = [0] * (len(PROMPT_TOKEN_BUCKETS) + 1)

    def observe(self, tokens: int) -> None:
        self.counts[bisect_left(PROMPT_TOKEN_BUCKETS, tokens)] += 1


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """The fleet at one instant: gauges summed (KV averaged) over ready replicas, counters cumulative."""

    time: float
    waiting: int
    running: int
    kv_usage: float
    prompt_tokens_total: int
    generation_tokens_total: int
    first_tokens_total: int
    ttft_bucket_counts: tuple[int, ...]
    arrivals_total: int  # what a router or queue-proxy sees (KPA), not exported by vLLM
    ready: int
    starting: int
    draining: int
    itl_bucket_counts: tuple[int, ...] = ()
    prompt_bucket_counts: tuple[int, ...] = ()
    itl_sum_seconds: float = 0.0


class MetricsView:
    """Reads the snapshot history as Prometheus (on a scrape grid) or as Knative's queue-proxies (1 s)."""

    def __init__(self, scrape_interval: int) -> None:
        if scrape_interval < 1:
            raise ValueError("scrape interval must be a whole number of seconds, at least 1")
        self.scrape_interval = scrape_interval
        self.snapshots: list[FleetSnapshot] = []
        self.current_replicas = 0
        self.ready_replicas = 0
        self.starting_replicas = 0
        # Scale to zero: the activator's latest report of a held request, and whether one is running.
        self.demand_time: float | None = None
        self.activator_available = False

    def record(self, snapshot: FleetSnapshot) -> None:
        self.snapshots.append(snapshot)

    def _scrape_at(self, time: float) -> FleetSnapshot | None:
        """The newest snapshot on the scrape grid at or before `time` (snapshots are 1 s apart, from 0)."""
        last = min(len(self.snapshots) - 1, math.floor(time + 1e-9))
        if last < 0:
            return None
        return self.snapshots[(last // self.scrape_interval) * self.scrape_interval]

    def latest_scrape(self, now: float) -> FleetSnapshot | None:
        return self._scrape_at(now)

    def signals(
        self,
        now: float,
        window: float,
        percentile: float,
        burst_window: float | None = None,
        *,
        slo_ttft_seconds: float | None = None,
    ) -> Signals:
        """The `Signals` the operator's PromQL would return at `now` over `window`, with the rates over
        `burst_window` when given, the rate of requests within `slo_ttft_seconds`' bucket when given (and
        what the activator reported, when there is one)."""
        signals = self._prometheus_signals(now, window, percentile)
        if slo_ttft_seconds is not None and signals.status is SignalStatus.OK:
            signals = self._with_requests_within(signals, now, slo_ttft_seconds)
        if burst_window is not None and signals.status is not SignalStatus.NO_DATA:
            signals = self._with_burst_rates(signals, now, burst_window)
        if not self.activator_available and self.demand_time is None:
            return signals
        return replace(signals, demand_time=self.demand_time, activator_available=self.activator_available)

    def _with_burst_rates(self, signals: Signals, now: float, window: float) -> Signals:
        """The rates over the burst window, as the operator's second, short-window queries give them."""
        latest = self._scrape_at(now)
        earlier = self._scrape_at(now - window)
        if latest is None or earlier is None or earlier.time >= latest.time:
            return signals
        span = latest.time - earlier.time
        return replace(
            signals,
            burst_request_rate=(latest.first_tokens_total - earlier.first_tokens_total) / span,
            burst_prompt_token_rate=(latest.prompt_tokens_total - earlier.prompt_tokens_total) / span,
            burst_window_seconds=span,
        )

    def _with_requests_within(self, signals: Signals, now: float, slo_ttft_seconds: float) -> Signals:
        """The rate of requests whose TTFT fell within the objective's bucket, over the signal's window."""
        latest = self._scrape_at(now)
        earlier = self._scrape_at(now - signals.window_seconds)
        if latest is None or earlier is None or earlier.time >= latest.time:
            return signals
        within = bisect_left(VLLM_TTFT_BUCKETS, slo_bucket(slo_ttft_seconds)) + 1  # buckets at or below it
        count = sum(latest.ttft_bucket_counts[:within]) - sum(earlier.ttft_bucket_counts[:within])
        return replace(signals, within_slo_request_rate=count / (latest.time - earlier.time))

    def _no_data(self, window: float) -> Signals:
        return Signals.no_data(
            ready_replicas=self.ready_replicas,
            starting_replicas=self.starting_replicas,
            current_replicas=self.current_replicas,
            window_seconds=window,
        )

    def _prometheus_signals(self, now: float, window: float, percentile: float) -> Signals:
        latest = self._scrape_at(now)
        earlier = self._scrape_at(now - window)
        if latest is None or latest.ready == 0:
            return self._no_data(window)
        if earlier is None or earlier.time >= latest.time:
            earlier = self.snapshots[0]
        span = latest.time - earlier.time
        if span <= 0:
            return self._no_data(window)
        first_tokens = latest.first_tokens_total - earlier.first_tokens_total
        deltas = [a - b for a, b in zip(latest.ttft_bucket_counts, earlier.ttft_bucket_counts, strict=True)]
        ttft = histogram_quantile(percentile / 100.0, cumulative_buckets(VLLM_TTFT_BUCKETS, deltas))
        prompt = latest.prompt_tokens_total - earlier.prompt_tokens_total
        tpot = None
        mean_itl = None
        if latest.itl_bucket_counts and earlier.itl_bucket_counts:
            itl = [a - b for a, b in zip(latest.itl_bucket_counts, earlier.itl_bucket_counts, strict=True)]
            tpot = histogram_quantile(percentile / 100.0, cumulative_buckets(VLLM_ITL_BUCKETS, itl))
            if sum(itl) > 0:
                mean_itl = (latest.itl_sum_seconds - earlier.itl_sum_seconds) / sum(itl)
        prompt_q = None
        if latest.prompt_bucket_counts and earlier.prompt_bucket_counts:
            finished = [
                a - b for a, b in zip(latest.prompt_bucket_counts, earlier.prompt_bucket_counts, strict=True)
            ]
            prompt_q = histogram_quantile(
                percentile / 100.0, cumulative_buckets(PROMPT_TOKEN_BUCKETS, finished)
            )
        idle = first_tokens == 0 and prompt == 0 and latest.waiting == 0 and latest.running == 0
        return Signals(
            status=SignalStatus.IDLE if idle else SignalStatus.OK,
            ttft_percentile_seconds=ttft,
            queue_waiting_total=float(latest.waiting),
            running_total=float(latest.running),
            kv_cache_usage=latest.kv_usage,
            request_rate=first_tokens / span,
            prompt_token_rate=prompt / span,
            generation_token_rate=(latest.generation_tokens_total - earlier.generation_tokens_total) / span,
            ready_replicas=self.ready_replicas,
            starting_replicas=self.starting_replicas,
            current_replicas=self.current_replicas,
            window_seconds=span,
            tpot_percentile_seconds=tpot,
            prompt_tokens_percentile=prompt_q,
            mean_inter_token_seconds=mean_itl,
        )

    def mean_in_flight(self, now: float, window: float) -> float:
        """Average concurrency (waiting + running) over the 1 s samples of the last `window` seconds."""
        end = min(len(self.snapshots), math.floor(now + 1e-9) + 1)
        start = max(0, end - max(1, round(window)))
        if end <= start:
            return 0.0
        samples = self.snapshots[start:end]
        return sum(s.waiting + s.running for s in samples) / len(samples)
