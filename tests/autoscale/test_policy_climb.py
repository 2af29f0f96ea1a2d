"""decide() on a climbing load: the third rise within the stabilization window, with the need's floor
risen from one half of the window to the next, is taken one replica beyond the need (a step of the climb
and its change saved); a load that only swings, a second rise, and maxReplicas are left as they were. The
replicas ahead are held like any need, never read as the load's, and what it remembers lives in status."""

from __future__ import annotations

from dataclasses import replace

from llama_operator.api.autoscaling import AutoscalerState, Recommendation
from llama_operator.api.spec import AutoscalingSpec, SLOSpec
from llama_operator.autoscale.decision import DEFAULT_TUNING, Decision
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.signals import Signals
from tests.autoscale.builders import load_signals

WINDOW = 300
SPEC = AutoscalingSpec(
    min_replicas=1,
    max_replicas=20,
    slo=SLOSpec(ttft_seconds=1.0, percentile=95, queue_depth_per_replica=4),
    scale_down_stabilization_seconds=WINDOW,
)
CAPACITY = 10_000.0  # prompt tokens/s per replica
NOW = 10_000.0


def signals(*, rate: float, replicas: int) -> Signals:
    """A steady load of `rate` req/s of 1,000-token prompts on `replicas` ready replicas."""
    return load_signals(rate=rate, ready=replicas)


def state(needs: list[tuple[float, int]], scale_ups: list[float]) -> AutoscalerState:
    """A policy memory with these needs (seconds before NOW, replicas) and scale-ups (seconds before NOW)."""
    return AutoscalerState(
        capacity_tokens_per_second=CAPACITY,
        capacity_prior_tokens_per_second=CAPACITY,
        recommendations=[Recommendation(time=NOW - ago, replicas=replicas) for ago, replicas in needs],
        recent_scale_ups=[NOW - ago for ago in scale_ups],
        last_scale_up_time=NOW - min(scale_ups) if scale_ups else None,
    )


def need_at(rate: float, replicas: int) -> int:
    """What the policy's model needs at `rate`, with no history to bend it."""
    fresh = AutoscalerState(capacity_tokens_per_second=CAPACITY, capacity_prior_tokens_per_second=CAPACITY)
    needed = decide(SPEC, signals(rate=rate, replicas=replicas), fresh, NOW).needed_replicas
    assert needed is not None
    return needed


# A rate that needs two replicas more than the four there (a rise beyond the noise: taken at once).
RATE = next(r / 2 for r in range(2, 400) if need_at(r / 2, 4) == 6)
# The need climbed 2 -> 3 -> 4 in the last window, each rise a scale-up: its floor rose from 2 (the
# earlier half) to 3 (the later half).
CLIMBING = state([(400.0, 2), (240.0, 3), (100.0, 4)], scale_ups=[240.0, 100.0])


def persisted(decision: Decision) -> AutoscalerState:
    """The state as the operator reads it back from status."""
    return AutoscalerState.model_validate(decision.state.to_wire())


def test_the_third_rise_of_a_climb_is_taken_one_replica_ahead() -> None:
    decision = decide(SPEC, signals(rate=RATE, replicas=4), CLIMBING, NOW)
    assert decision.needed_replicas == 6
    assert decision.desired_replicas == 7
    assert decision.reason.startswith("scale up 4 -> 7: ")
    assert decision.reason.endswith(
        "; 1 ahead of it: the load is climbing (2 rises before this one within the last 300s, the need's floor "
        "risen)"
    )
    latest = decision.state.recommendations[-1]
    assert (latest.time, latest.replicas, latest.ahead) == (NOW, 7, 1)
    assert decision.state.recent_scale_ups == [NOW - 240.0, NOW - 100.0, NOW]


def test_a_second_rise_is_taken_as_the_need_says() -> None:
    second = state([(400.0, 2), (240.0, 3), (100.0, 4)], scale_ups=[100.0])
    decision = decide(SPEC, signals(rate=RATE, replicas=4), second, NOW)
    assert decision.desired_replicas == 6
    assert "ahead" not in decision.reason
    assert decision.state.recommendations[-1].ahead is None


def test_scale_ups_within_one_rate_window_of_each_other_are_one_rise() -> None:
    # 2 -> 3 -> 4 ten seconds apart: one rise, seen step by step as the 20 s rate window filled.
    one_rise = state([(400.0, 2), (110.0, 3), (100.0, 4)], scale_ups=[110.0, 100.0])
    decision = decide(SPEC, signals(rate=RATE, replicas=4), one_rise, NOW)
    assert decision.desired_replicas == 6
    assert "ahead" not in decision.reason


def test_scale_ups_older_than_the_window_do_not_make_a_climb() -> None:
    old = state([(400.0, 2), (240.0, 3), (100.0, 4)], scale_ups=[WINDOW + 60.0, 100.0])
    decision = decide(SPEC, signals(rate=RATE, replicas=4), old, NOW)
    assert decision.desired_replicas == 6
    assert decision.state.recent_scale_ups == [NOW - 100.0, NOW]  # the older one is forgotten


def test_a_load_that_only_swings_is_not_a_climb() -> None:
    # Scaled up twice in the window, but the need came back to 2 in its later half: its floor did not rise.
    swinging = state([(400.0, 2), (240.0, 4), (200.0, 2), (100.0, 4)], scale_ups=[240.0, 100.0])
    decision = decide(SPEC, signals(rate=RATE, replicas=4), swinging, NOW)
    assert decision.desired_replicas == 6
    assert "ahead" not in decision.reason


def test_a_history_shorter_than_the_window_is_no_climb_yet() -> None:
    young = state([(200.0, 3), (100.0, 4)], scale_ups=[200.0, 100.0])
    assert decide(SPEC, signals(rate=RATE, replicas=4), young, NOW).desired_replicas == 6


def test_nothing_is_taken_ahead_beyond_max_replicas() -> None:
    capped = SPEC.model_copy(update={"max_replicas": 6})
    decision = decide(capped, signals(rate=RATE, replicas=4), CLIMBING, NOW)
    assert decision.desired_replicas == 6
    assert "ahead" not in decision.reason


def test_with_climbs_off_the_need_is_taken_as_it_is() -> None:
    off = replace(DEFAULT_TUNING, climb_rises=None)
    assert decide(SPEC, signals(rate=RATE, replicas=4), CLIMBING, NOW, off).desired_replicas == 6


def test_the_replica_ahead_is_held_through_the_window_after_a_restart() -> None:
    climbed = decide(SPEC, signals(rate=RATE, replicas=4), CLIMBING, NOW)
    restarted = persisted(climbed)
    assert restarted.recommendations[-1].ahead == 1
    assert restarted.recent_scale_ups == climbed.state.recent_scale_ups
    # A minute later the need is still 6: the seventh replica, taken ahead, is not removed.
    later = decide(SPEC, signals(rate=RATE, replicas=7), restarted, NOW + 60.0)
    assert later.needed_replicas == 6
    assert later.desired_replicas == 7
    assert "but 7 were needed in the last" in later.reason


def test_replicas_taken_ahead_are_not_read_as_a_burst_of_the_load() -> None:
    # The need rose by one (4 -> 5) and a replica was taken ahead (6): not a rise of two within a minute,
    # which would stretch the stabilization window to three, as a burst does.
    history = [
        Recommendation(time=NOW - 400.0, replicas=4),
        Recommendation(time=NOW - 30.0, replicas=6, ahead=1),
    ]
    ahead = AutoscalerState(
        capacity_tokens_per_second=CAPACITY,
        capacity_prior_tokens_per_second=CAPACITY,
        recommendations=history,
        last_scale_up_time=NOW - 30.0,
    )
    quiet = decide(SPEC, signals(rate=0.5, replicas=6), ahead, NOW)
    assert "(scaleDownStabilizationSeconds)" in quiet.reason
    assert "load came in bursts" not in quiet.reason
    # The same history without the mark reads as a burst.
    unmarked = ahead.model_copy(
        update={"recommendations": [history[0], Recommendation(time=NOW - 30.0, replicas=6)]}
    )
    assert "load came in bursts" in decide(SPEC, signals(rate=0.5, replicas=6), unmarked, NOW).reason
