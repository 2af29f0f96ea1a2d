"""decide()'s burst response: the load of the burst window (a scrape or two) sizes the replicas at once once two
evaluations in a row have seen it beyond the noise of the rate window's, and holds what it needs while it lasts;
its one memory, burstSince, lives in status."""

from __future__ import annotations

from dataclasses import replace

from llama_operator.api.autoscaling import AutoscalerState, Recommendation
from llama_operator.api.spec import AutoscalingSpec, SLOSpec
from llama_operator.autoscale.decision import DEFAULT_TUNING, Decision
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.signals import Signals
from tests.autoscale.builders import BURST_WINDOW, load_signals

SPEC = AutoscalingSpec(
    min_replicas=1,
    max_replicas=10,
    slo=SLOSpec(ttft_seconds=1.0, percentile=95, queue_depth_per_replica=4),
    scale_down_stabilization_seconds=300,
)
CAPACITY = 10_000.0  # prompt tokens/s per replica


def signals(*, rate: float, burst_rate: float | None, ready: int = 2, prompt: float = 1000.0) -> Signals:
    """The rate window's load at `rate` req/s, the burst window's at `burst_rate` (None: not measured)."""
    return load_signals(rate=rate, burst_rate=burst_rate, ready=ready, prompt=prompt)


def state() -> AutoscalerState:
    return AutoscalerState(capacity_tokens_per_second=CAPACITY, capacity_prior_tokens_per_second=CAPACITY)


def persisted(decision: Decision) -> AutoscalerState:
    """The state as the operator reads it back from status."""
    return AutoscalerState.model_validate(decision.state.to_wire())


def test_a_burst_seen_twice_in_a_row_scales_up_at_once_to_what_it_needs() -> None:
    # The rate window still says 3 req/s (2 replicas are plenty); the last scrape says 20 req/s.
    first = decide(SPEC, signals(rate=3.0, burst_rate=20.0), state(), now=1000.0)
    assert first.desired_replicas == 2  # one burst window beyond its noise comes by chance now and then
    assert first.state.burst_since == 1000.0
    second = decide(SPEC, signals(rate=4.0, burst_rate=20.0), persisted(first), now=1005.0)
    # Sized at the burst's lower noise bound, 20 - 2 x sqrt(20 / 5) = 16 req/s: as the rate window would
    # size a steady 16 req/s, without waiting for it to fill, nor for the 30 s a small rise waits.
    steady = decide(SPEC, signals(rate=16.0, burst_rate=None), state(), now=1005.0)
    assert second.desired_replicas == steady.needed_replicas
    assert second.desired_replicas > 2
    assert second.reason.startswith("scale up 2 -> ")
    assert "a burst: 20.00 req/s in the last 5s (at least 16.00 beyond its noise" in second.reason
    assert second.state.burst_since == 1000.0


def test_a_burst_window_within_the_noise_of_the_rate_window_is_no_burst() -> None:
    # 5 req/s over 5 s is 25 requests: 4 req/s is well inside its noise.
    decision = decide(SPEC, signals(rate=4.0, burst_rate=5.0), state(), now=1000.0)
    assert decision.state.burst_since is None
    assert "burst" not in decision.reason


def test_a_burst_that_stops_is_forgotten() -> None:
    first = decide(SPEC, signals(rate=3.0, burst_rate=20.0), state(), now=1000.0)
    calm = decide(SPEC, signals(rate=3.0, burst_rate=3.0), persisted(first), now=1005.0)
    assert calm.state.burst_since is None
    again = decide(SPEC, signals(rate=3.0, burst_rate=20.0), persisted(calm), now=1010.0)
    assert again.desired_replicas == 2  # a new burst is confirmed anew


def test_while_a_burst_lasts_the_replicas_it_needs_are_not_removed() -> None:
    # Six replicas, the rate window's load needs one, the history allows the scale-down: without the burst
    # window the policy scales down; with a burst window that needs more than six, it holds them all.
    old = AutoscalerState(
        capacity_tokens_per_second=CAPACITY,
        capacity_prior_tokens_per_second=CAPACITY,
        recommendations=[Recommendation(time=0.0, replicas=1)],
    )
    calm = decide(SPEC, signals(rate=1.0, burst_rate=None, ready=6), old, now=1000.0)
    assert calm.desired_replicas < 6
    burst = decide(SPEC, signals(rate=1.0, burst_rate=80.0, ready=6), old, now=1000.0)
    assert burst.desired_replicas == 6
    assert burst.reason.startswith("holding 6: ")
    assert "a burst: 80.00 req/s" in burst.reason


def test_a_burst_needing_fewer_than_there_are_lets_the_scale_down_go_no_lower() -> None:
    old = AutoscalerState(
        capacity_tokens_per_second=CAPACITY,
        capacity_prior_tokens_per_second=CAPACITY,
        recommendations=[Recommendation(time=0.0, replicas=1)],
    )
    calm = decide(SPEC, signals(rate=0.5, burst_rate=None, ready=10), old, now=1000.0)
    assert calm.desired_replicas == 5  # at most halving
    # 60 req/s over 5 s, at least 60 - 2 x sqrt(12) = 53 req/s: seven replicas, of the ten.
    burst = decide(SPEC, signals(rate=0.5, burst_rate=60.0, ready=10), old, now=1000.0)
    steady = decide(
        SPEC, signals(rate=60.0 - 2 * (60.0 / BURST_WINDOW) ** 0.5, burst_rate=None, ready=10), state(), 0.0
    )
    assert steady.needed_replicas == 7
    assert burst.desired_replicas == 7
    assert burst.reason.startswith("scale down 10 -> 7: ")


def test_after_a_restart_the_burst_is_read_back_from_status() -> None:
    first = decide(SPEC, signals(rate=3.0, burst_rate=20.0), state(), now=1000.0)
    wire = first.state.to_wire()
    assert "burstSince" in wire
    restarted = AutoscalerState.model_validate(wire)
    second = decide(SPEC, signals(rate=3.0, burst_rate=20.0), restarted, now=1005.0)
    assert second.desired_replicas > 2


def test_without_a_burst_window_or_with_the_response_off_nothing_changes() -> None:
    plain = decide(SPEC, signals(rate=3.0, burst_rate=None), state(), now=1000.0)
    off = replace(DEFAULT_TUNING, burst_noise_sigmas=None)
    first = decide(SPEC, signals(rate=3.0, burst_rate=20.0), state(), now=1000.0, tuning=off)
    second = decide(SPEC, signals(rate=3.0, burst_rate=20.0), persisted(first), now=1005.0, tuning=off)
    assert second.desired_replicas == plain.desired_replicas == 2
    assert first.state.burst_since is None
