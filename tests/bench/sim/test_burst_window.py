"""The simulator's burst window: the rates over the latest scrape interval, beside the rate window's."""

from __future__ import annotations

from llama_bench.sim.metrics import FleetSnapshot, MetricsView


def snapshot(second: int, first_tokens: int, prompt_tokens: int) -> FleetSnapshot:
    return FleetSnapshot(
        time=float(second),
        waiting=0,
        running=1,
        kv_usage=0.1,
        prompt_tokens_total=prompt_tokens,
        generation_tokens_total=0,
        first_tokens_total=first_tokens,
        ttft_bucket_counts=(0,) * 23,
        arrivals_total=first_tokens,
        ready=1,
        starting=0,
        draining=0,
    )


def test_the_burst_window_reads_the_latest_scrape_interval() -> None:
    view = MetricsView(scrape_interval=5)
    view.ready_replicas = view.current_replicas = 1
    # 1 request a second for 15 s, then 10 a second: the last scrape interval (15-20 s) holds the rise.
    first_tokens = 0
    for second in range(21):
        view.record(snapshot(second, first_tokens, first_tokens * 100))
        first_tokens += 1 if second < 15 else 10
    signals = view.signals(20.0, 20.0, 95.0, burst_window=5.0)
    assert signals.request_rate == (15 + 5 * 10) / 20
    assert signals.burst_request_rate == 10.0
    assert signals.burst_prompt_token_rate == 1000.0
    assert signals.burst_window_seconds == 5.0
    assert view.signals(20.0, 20.0, 95.0).burst_request_rate is None  # not asked for
