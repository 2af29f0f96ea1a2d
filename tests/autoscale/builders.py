"""Signals the policy tests build: a load on ready (and starting) replicas, optionally with a burst window."""

from __future__ import annotations

from llama_operator.autoscale.signals import Signals, SignalStatus

BURST_WINDOW = 5.0


def load_signals(
    *,
    rate: float,
    ready: int = 2,
    starting: int = 0,
    waiting: float = 0.0,
    burst_rate: float | None = None,
    prompt: float = 1000.0,
    long_prompt: float | None = None,
    ttft: float | None = 0.3,
    window: float = 20.0,
    status: SignalStatus = SignalStatus.OK,
) -> Signals:
    """The rate window's load at `rate` req/s of `prompt`-token prompts (`long_prompt` at the percentile)
    on `ready` replicas, `starting` more on their way, `waiting` queued, TTFT `ttft`; the burst window's
    at `burst_rate` (None: not measured)."""
    return Signals(
        status=status,
        ttft_percentile_seconds=ttft,
        queue_waiting_total=waiting,
        running_total=rate,
        kv_cache_usage=0.1,
        request_rate=rate,
        prompt_token_rate=rate * prompt,
        generation_token_rate=rate * 100,
        ready_replicas=ready,
        starting_replicas=starting,
        current_replicas=ready + starting,
        window_seconds=window,
        prompt_tokens_percentile=long_prompt,
        burst_request_rate=burst_rate,
        burst_prompt_token_rate=None if burst_rate is None else burst_rate * prompt,
        burst_window_seconds=None if burst_rate is None else BURST_WINDOW,
    )
