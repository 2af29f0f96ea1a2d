"""decide(): sized from load, counts starting replicas, holds on no data, stabilizes scale-down."""

from __future__ import annotations

import itertools
from dataclasses import replace

from llama_operator.api.autoscaling import AutoscalerState, AutoscalingStatus, Recommendation
from llama_operator.api.spec import AutoscalingSpec, SLOSpec
from llama_operator.autoscale.decision import DEFAULT_TUNING
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.signals import Signals, SignalStatus
from tests.autoscale.builders import load_signals

SPEC = AutoscalingSpec(
    min_replicas=1,
    max_replicas=8,
    slo=SLOSpec(ttft_seconds=1.0, percentile=95, queue_depth_per_replica=4),
    scale_down_stabilization_seconds=300,
)
CAPACITY = 10_000.0  # prompt tokens/s per replica


def signals(
    *,
    rate: float = 2.0,
    prompt: float = 1000.0,
    ready: int = 1,
    starting: int = 0,
    waiting: float = 0.0,
    ttft: float | None = 0.3,
    status: SignalStatus = SignalStatus.OK,
    long_prompt: float | None = None,
) -> Signals:
    return load_signals(
        rate=rate, prompt=prompt, ready=ready, starting=starting, waiting=waiting, ttft=ttft, status=status,
        long_prompt=long_prompt, window=30.0,
    )  # fmt: skip


def fresh_state() -> AutoscalerState:
    return AutoscalerState(capacity_tokens_per_second=CAPACITY)


def test_scale_up_is_sized_from_the_load_in_one_step() -> None:
    decision = decide(SPEC, signals(rate=40.0, ttft=2.5, waiting=3), fresh_state(), now=1000.0)
    # 40 req/s x 1000 tokens = 40k tok/s: at least 40k / (10k x 0.8) = 5 replicas, decided at once.
    assert decision.desired_replicas >= 5
    assert decision.desired_replicas == min(decision.needed_replicas or 0, SPEC.max_replicas)
    assert decision.reason.startswith("scale up 1 -> ")
    assert "req/s" in decision.reason
    assert decision.slo_met is False


def test_replicas_still_starting_count_as_capacity() -> None:
    first = decide(SPEC, signals(rate=30.0, ttft=3.0, waiting=10), fresh_state(), now=1000.0)
    target = first.desired_replicas
    assert target > 1
    state = first.state
    # The same burst seen while the new replicas load: the queue grows, nothing new is asked for.
    for step, waiting in enumerate((20.0, 30.0, 40.0)):
        later = signals(rate=30.0, ttft=5.0, waiting=waiting, ready=1, starting=target - 1)
        later = replace(later, queue_waiting_total=min(waiting, 4.0 * target))
        decision = decide(SPEC, later, state, now=1005.0 + 5 * step)
        assert decision.desired_replicas == target
        state = decision.state


def test_no_data_holds_and_never_scales_down() -> None:
    state = fresh_state()
    blind = Signals.no_data(ready_replicas=5, starting_replicas=0, current_replicas=5, window_seconds=20.0)
    first = decide(SPEC, blind, state, now=100.0)
    assert first.desired_replicas == 5
    assert first.no_data
    assert first.state.no_data_since == 100.0
    second = decide(SPEC, blind, first.state, now=400.0)
    assert second.desired_replicas == 5
    assert second.state.no_data_since == 100.0
    # The reason names when the metrics went, not for how long: status is written when a decision changes,
    # not when a clock does, and during a Prometheus outage it said "no metrics for 0s" throughout.
    assert "since 1970-01-01T00:01:40" in first.reason and second.reason == first.reason
    assert second.state.recommendations == []
    recovered = decide(SPEC, signals(ready=5), second.state, now=405.0)
    assert recovered.state.no_data_since is None


def test_scale_down_waits_for_the_stabilization_window_and_is_bounded() -> None:
    up = decide(SPEC, signals(rate=50.0, ttft=2.0), fresh_state(), now=0.0)
    high = up.desired_replicas
    assert high >= 6
    state = up.state
    desired = high
    timeline: list[tuple[float, int]] = []
    for now in range(15, 1500, 15):
        decision = decide(SPEC, signals(rate=1.0, ready=desired), state, now=float(now))
        state, desired = decision.state, decision.desired_replicas
        timeline.append((float(now), desired))
    assert all(replicas == high for t, replicas in timeline if t < 300)
    downs = [
        (t, r) for (t, r), (_, before) in zip(timeline, [(0.0, high), *timeline], strict=False) if r < before
    ]
    assert downs, "scaled down eventually"
    first_down_time, first_down_to = downs[0]
    assert first_down_time >= 300
    assert first_down_to >= high // 2  # at most halving in one step
    assert all(
        later - earlier >= SPEC.scale_down_interval_seconds
        for (earlier, _), (later, _) in itertools.pairwise(downs)
    )
    assert timeline[-1][1] == SPEC.min_replicas


def test_scale_down_keeps_what_the_load_needs() -> None:
    state = fresh_state()
    decision = decide(SPEC, signals(rate=20.0, ready=8), state, now=0.0)
    for now in range(15, 1200, 15):
        decision = decide(
            SPEC, signals(rate=20.0, ready=decision.desired_replicas), decision.state, float(now)
        )
    needed = decision.needed_replicas
    assert needed is not None
    assert decision.desired_replicas == needed >= 3  # 20k tok/s cannot be served by fewer


def test_min_max_and_the_limited_condition() -> None:
    decision = decide(SPEC, signals(rate=500.0, ttft=10.0), fresh_state(), now=0.0)
    assert decision.desired_replicas == SPEC.max_replicas
    assert decision.scaling_limited
    assert decision.limited_message is not None
    assert decision.limited_message.startswith("SLO cannot be met at maxReplicas=8: needs ~")
    low = decide(SPEC, signals(rate=0.1, ready=1), fresh_state(), now=0.0)
    assert low.desired_replicas == 1
    assert not low.scaling_limited


def test_idle_scales_down_toward_min_after_the_window() -> None:
    idle = signals(rate=0.0, ttft=None, ready=4, status=SignalStatus.IDLE)
    state = fresh_state().model_copy(update={"last_scale_up_time": 0.0, "last_scale_time": 0.0})
    early = decide(SPEC, idle, state, now=10.0)
    assert early.desired_replicas == 4  # no history: the window starts now, with the 4 running as needed
    assert early.slo_met is None
    later = decide(SPEC, idle, early.state, now=25.0 + SPEC.scale_down_stabilization_seconds)
    assert later.desired_replicas == 2  # halving once the window has passed
    busy_then_idle = decide(SPEC, signals(rate=30.0, ready=4), fresh_state(), now=0.0).state
    held = decide(SPEC, idle, busy_then_idle, now=100.0)
    assert held.desired_replicas == 4


def test_state_round_trips_through_the_status_json() -> None:
    state = fresh_state()
    plain_state = fresh_state()
    loads = [(2.0, 0.3), (40.0, 2.0), (40.0, 1.2), (10.0, 0.4), (1.0, 0.2), (1.0, 0.2)]
    ready = 1
    for step in range(60):
        rate, ttft = loads[min(step // 10, len(loads) - 1)]
        observed = signals(rate=rate, ttft=ttft, ready=ready)
        restored = AutoscalingStatus.model_validate(
            AutoscalingStatus(state=state).model_dump(by_alias=True, mode="json")
        ).state
        assert restored == state
        decision = decide(SPEC, observed, restored, now=15.0 * step)
        plain = decide(SPEC, observed, plain_state, now=15.0 * step)
        assert decision.desired_replicas == plain.desired_replicas
        state, plain_state, ready = decision.state, plain.state, decision.desired_replicas
    wire = AutoscalingStatus(state=state).to_wire()
    assert "capacityTokensPerSecond" in wire["state"]  # type: ignore[operator]


def test_deterministic() -> None:
    a = decide(SPEC, signals(rate=33.0, ttft=1.5), fresh_state(), now=5.0)
    b = decide(SPEC, signals(rate=33.0, ttft=1.5), fresh_state(), now=5.0)
    assert a == b


def test_without_a_capacity_estimate_a_breach_still_scales_up() -> None:
    decision = decide(SPEC, signals(rate=5.0, ttft=3.0, ready=2), AutoscalerState(), now=0.0)
    assert decision.desired_replicas > 2


def test_queue_target_breach_scales_up() -> None:
    decision = decide(SPEC, signals(rate=0.5, ttft=0.3, ready=2, waiting=20), fresh_state(), now=0.0)
    assert decision.desired_replicas >= 5  # 20 waiting / target 4


def test_a_queue_built_while_replicas_load_is_not_counted_again() -> None:
    state = fresh_state()
    first = decide(SPEC, signals(rate=1.0, ready=2, waiting=20), state, now=0.0)
    assert first.desired_replicas == 5  # 20 waiting / target 4
    loading = signals(rate=1.0, ready=2, starting=3, waiting=60)
    second = decide(SPEC, loading, first.state, now=5.0)
    assert second.desired_replicas == 5


def test_recurring_bursts_stretch_the_stabilization_window() -> None:
    state = fresh_state()
    ready = 1
    quiet, burst = signals(rate=1.0), signals(rate=40.0, ttft=3.0)
    downs: list[float] = []
    for now in range(0, 2400, 15):
        observed = burst if now % 400 < 30 else quiet  # a burst every 400 s
        decision = decide(
            SPEC, replace(observed, ready_replicas=ready, current_replicas=ready), state, float(now)
        )
        if decision.desired_replicas < ready:
            downs.append(float(now))
        state, ready = decision.state, decision.desired_replicas
    # Once bursts have recurred, replicas are held through the gaps rather than cycled.
    assert downs
    assert all(t < 1200 for t in downs)
    assert len(state.recommendations) < 20  # change points only: the status stays small


def _breach_run(ttfts: list[float], ready: int = 3) -> list[int]:
    """Desired replicas at each 5 s evaluation of a light load with the given TTFT percentiles, from a
    state that needed `ready` replicas just before (so no scale-down is due)."""
    state = fresh_state().model_copy(update={"recommendations": [Recommendation(time=999.0, replicas=ready)]})
    desired: list[int] = []
    for step, ttft in enumerate(ttfts):
        decision = decide(SPEC, signals(rate=2.0, ready=ready, ttft=ttft), state, now=1000.0 + 5 * step)
        desired.append(decision.desired_replicas)
        state = decision.state
    return desired


def test_a_breach_the_model_cannot_explain_adds_a_replica_once_it_persists() -> None:
    # 2 req/s of 1000 tokens is a fifth of one replica by the model, yet TTFT p95 stays at 1.5 s.
    desired = _breach_run([1.5] * 14)
    window = 30.0  # the signals' window: the breach must outlast two of them
    first_up = next(i for i, replicas in enumerate(desired) if replicas > 3)
    assert desired[:first_up] == [3] * first_up
    assert first_up * 5 >= 2 * window
    assert desired[first_up] == 4  # one replica per persistent breach, not a jump


def test_a_transient_breach_does_not_add_replicas() -> None:
    assert _breach_run([1.5] * 10 + [0.4] + [1.5] * 10) == [3] * 21


def test_a_starting_replica_resets_the_breach_clock() -> None:
    state = fresh_state()
    for step in range(8):
        starting = 1 if step == 6 else 0
        sig = signals(rate=2.0, ready=3 - starting, starting=starting, ttft=1.5)
        decision = decide(SPEC, sig, state, now=1000.0 + 5 * step)
        state = decision.state
    assert state.slo_breach_since == 1035.0


def test_no_scale_down_while_the_slo_is_broken() -> None:
    # A fresh state has no stabilization history, and the model finds one replica enough: still, TTFT
    # above the SLO holds the three.
    decision = decide(SPEC, signals(rate=2.0, ready=3, ttft=1.5), fresh_state(), now=1000.0)
    assert decision.desired_replicas == 3
    assert "above the SLO" in decision.reason


def test_a_queue_found_by_replicas_that_just_joined_is_theirs_to_drain() -> None:
    first = decide(SPEC, signals(rate=1.0, ready=2, waiting=20), fresh_state(), now=0.0)
    assert first.desired_replicas == 5
    loading = decide(SPEC, signals(rate=1.0, ready=2, starting=3, waiting=40), first.state, now=40.0)
    assert loading.state.last_starting_time == 40.0
    # At 45 s all five serve; the backlog they inherited (8 per replica > target 4) is still in the
    # window's queue: no second step.
    joined = decide(SPEC, signals(rate=1.0, ready=5, waiting=40), loading.state, now=45.0)
    assert joined.desired_replicas == 5
    # A window later the queue is no longer explained by the join: it counts again.
    later = decide(SPEC, signals(rate=1.0, ready=5, waiting=40), joined.state, now=75.0)
    assert later.desired_replicas == 8


def test_the_crd_describes_the_burst_hold_the_policy_applies() -> None:
    description = AutoscalingSpec.model_fields["scale_down_stabilization_seconds"].description or ""
    tuning = DEFAULT_TUNING
    assert tuning.burst_count == 1  # "after a burst": one is enough
    assert f"rising by {tuning.burst_rise} or more within {tuning.burst_rise_seconds:g}s" in description
    assert f"within the last {tuning.burst_memory_factor:g} windows" in description
    assert f"holds {tuning.burst_window_factor:g} windows instead" in description


def test_an_outage_restarts_the_breach_clock() -> None:
    state = fresh_state().model_copy(update={"slo_breach_since": 900.0})
    blind = decide(SPEC, signals(status=SignalStatus.NO_DATA, ttft=None, ready=3), state, now=1000.0)
    assert blind.state.slo_breach_since is None
    back = decide(SPEC, signals(rate=2.0, ready=3, ttft=1.5), blind.state, now=1005.0)
    assert back.state.slo_breach_since == 1005.0
    assert back.desired_replicas == 3


def test_no_history_means_the_stabilization_window_starts_now() -> None:
    """Autoscaling enabled on a running service (6 replicas, load for 3): not 6 -> 3 at the first look."""
    light = signals(rate=5.0, ready=6)
    first = decide(SPEC, light, fresh_state(), now=1000.0)
    assert first.desired_replicas == 6, first.reason
    assert first.state.recommendations  # the window's start is persisted with the state
    held = decide(SPEC, light, first.state, now=1000.0 + SPEC.scale_down_stabilization_seconds - 15)
    assert held.desired_replicas == 6
    after = decide(SPEC, light, held.state, now=1000.0 + SPEC.scale_down_stabilization_seconds + 15)
    assert after.desired_replicas < 6


def test_replicas_outside_the_bounds_are_brought_back_at_once() -> None:
    """A hand scale to 50 with maxReplicas 8, just after a scale-down: no interval or window applies."""
    state = fresh_state().model_copy(update={"last_scale_down_time": 990.0, "last_scale_time": 990.0})
    over = decide(SPEC, signals(rate=5.0, ready=50), state, now=1000.0)
    assert over.desired_replicas == SPEC.max_replicas
    assert "outside [1, 8]" in over.reason
    bounded = AutoscalingSpec(min_replicas=3, max_replicas=8)
    under = decide(bounded, signals(rate=0.1, ready=1), fresh_state(), now=1000.0)
    assert under.desired_replicas == 3


def test_a_hand_scale_goes_back_to_the_autoscalers_own_decision_not_the_bound() -> None:
    """`kubectl scale` of an idle service (min 2, max 4, the autoscaler at 2) to 50: back to 2 at once, and
    the 50 is never taken as demand (no "4 were needed in the last 300 s" afterwards)."""
    spec = AutoscalingSpec(min_replicas=2, max_replicas=4, slo=SLOSpec(ttft_seconds=1.0))
    quiet = signals(rate=0.1, ready=2)
    settled = decide(spec, quiet, fresh_state(), now=1000.0)
    assert settled.desired_replicas == 2 and settled.state.decided_replicas == 2
    scaled = decide(spec, signals(rate=0.1, ready=2, starting=48), settled.state, now=1015.0)
    assert scaled.desired_replicas == 2, scaled.reason
    assert "hand scale" in scaled.reason and "outside [2, 4]" in scaled.reason
    assert all(r.replicas <= 2 for r in scaled.state.recommendations)
    after = decide(spec, quiet, scaled.state, now=1030.0)
    assert after.desired_replicas == 2 and "were needed" not in after.reason


def test_a_hand_scale_inside_the_bounds_goes_back_to_the_decision_at_once() -> None:
    """`kubectl scale` to 3 within [1, 8] of a service the autoscaler keeps at 1 (need 1): back to 1 at once,
    not stepped to 2 and held there for scaleDownIntervalSeconds (the local cluster held it 301 s): the hand
    count is nobody's decision, so neither the halving nor the interval that watch the autoscaler's own
    scale-downs apply to it. A hand scale down (to 1 of the autoscaler's 3) goes back up at once too."""
    quiet = signals(rate=0.5, ready=1)
    settled = decide(SPEC, quiet, fresh_state(), now=1000.0)
    assert settled.desired_replicas == 1 and settled.state.decided_replicas == 1
    scaled = decide(SPEC, signals(rate=0.5, ready=1, starting=2), settled.state, now=1015.0)
    assert scaled.desired_replicas == 1, scaled.reason
    assert "hand scale" in scaled.reason and "3 replicas" in scaled.reason
    assert all(r.replicas <= 1 for r in scaled.state.recommendations)
    assert scaled.state.last_scale_down_time is None  # not the autoscaler's scale-down: no interval after it
    after = decide(SPEC, quiet, scaled.state, now=1030.0)
    assert after.desired_replicas == 1 and "were needed" not in after.reason
    busy = signals(rate=40.0, ready=3, ttft=0.6)
    three = decide(SPEC, busy, fresh_state(), now=1000.0)
    assert three.desired_replicas >= 3
    down = decide(SPEC, replace(busy, ready_replicas=1, current_replicas=1), three.state, now=1015.0)
    assert down.desired_replicas == three.desired_replicas, down.reason


def test_a_hand_scale_inside_the_bounds_is_held_while_blind() -> None:
    """Without metrics the hand count stands (never scaled down blind: whoever scaled may know why)."""
    settled = decide(SPEC, signals(rate=0.5, ready=1), fresh_state(), now=1000.0)
    blind = decide(SPEC, signals(ready=3, status=SignalStatus.NO_DATA), settled.state, now=1015.0)
    assert blind.desired_replicas == 3 and blind.no_data


def test_a_hand_scale_on_a_state_from_before_decided_replicas_uses_the_window() -> None:
    """Status written by an older version (no decidedReplicas): the latest recommendation stands in."""
    spec = AutoscalingSpec(min_replicas=2, max_replicas=4, slo=SLOSpec(ttft_seconds=1.0))
    state = fresh_state().model_copy(update={"recommendations": [Recommendation(time=990.0, replicas=2)]})
    scaled = decide(spec, signals(rate=0.1, ready=50), state, now=1000.0)
    assert scaled.desired_replicas == 2, scaled.reason


def test_long_prompts_are_sized_for_their_own_prefill() -> None:
    # 2 req/s of 1000 tokens on average; the same load with its p95 prompt at 8000 tokens (0.8 s of
    # prefill at 10k tok/s) leaves that request 0.1 s to wait (90 % of the SLO less its prefill) instead
    # of the mean's 0.4 s: more replicas.
    # (TTFT 0.6 s: not so comfortable that the capacity estimate is raised first.)
    mean_only = decide(SPEC, signals(rate=2.0, ttft=0.6), fresh_state(), now=0.0)
    with_tail = decide(SPEC, signals(rate=2.0, ttft=0.6, long_prompt=8000.0), fresh_state(), now=0.0)
    short_tail = decide(SPEC, signals(rate=2.0, ttft=0.6, long_prompt=2000.0), fresh_state(), now=0.0)
    assert (mean_only.needed_replicas or 0) < (with_tail.needed_replicas or 0)
    assert short_tail.needed_replicas == mean_only.needed_replicas  # a light tail changes nothing
    ignored = decide(
        SPEC,
        signals(rate=2.0, ttft=0.6, long_prompt=8000.0),
        fresh_state(),
        0.0,
        replace(DEFAULT_TUNING, prompt_tail_headroom=None),
    )
    assert ignored.needed_replicas == mean_only.needed_replicas


def test_a_need_climbing_a_replica_per_evaluation_is_a_burst_too() -> None:
    """A rise by 2 within 60 s stretches the scale-down window as a jump by 2 does."""
    history = [
        Recommendation(time=0.0, replicas=2),
        Recommendation(time=1000.0, replicas=3),
        Recommendation(time=1015.0, replicas=4),
        Recommendation(time=1060.0, replicas=1),
    ]
    state = fresh_state().model_copy(update={"recommendations": history})
    light = signals(rate=1.0, ready=4)
    # 300 s after the climb's top the spec's window has passed, but the stretched one (900 s) holds 4.
    held = decide(SPEC, light, state, now=1015.0 + 400)
    assert held.desired_replicas == 4, held.reason
    assert "3 x scaleDownStabilizationSeconds" in held.reason
    # A climb spread over more than 60 s is the load growing, not a burst: the spec's window applies.
    slow = [
        Recommendation(time=0.0, replicas=2),
        Recommendation(time=1000.0, replicas=3),
        Recommendation(time=1100.0, replicas=4),
        Recommendation(time=1150.0, replicas=1),
    ]
    state = fresh_state().model_copy(update={"recommendations": slow})
    released = decide(SPEC, light, state, now=1100.0 + 400)
    assert released.desired_replicas < 4, released.reason


def _rising(rate: float, ready: int, state: AutoscalerState, now: float) -> tuple[int, AutoscalerState]:
    # TTFT 0.45 s: not so comfortable that the capacity estimate is raised meanwhile.
    decision = decide(SPEC, signals(rate=rate, ready=ready, ttft=0.45), state, now)
    return decision.desired_replicas, decision.state


def test_a_rise_of_one_replica_within_the_noise_is_taken_once_it_has_held() -> None:
    """A need one replica above the current count that the 30 s window's Poisson noise could explain
    waits for scale_up_confirm_seconds; it is taken once it has held that long, and forgotten when it
    falls back."""
    confirm = DEFAULT_TUNING.scale_up_confirm_seconds
    steady, up = 2.0, 2.5  # needs 1, then 2 replicas; 1 would do at 2.5 less two standard deviations
    assert decide(SPEC, signals(rate=steady, ttft=0.45), fresh_state(), now=0.0).needed_replicas == 1
    first = decide(SPEC, signals(rate=up, ttft=0.45), fresh_state(), now=0.0)
    assert first.needed_replicas == 2 and first.desired_replicas == 1
    assert "held" in first.reason and "holding 1" in first.reason

    desired, state = 1, fresh_state()
    seen: list[tuple[float, int]] = []
    for now in range(0, int(confirm) + 10, 5):
        desired, state = _rising(up, 1, state, float(now))
        seen.append((float(now), desired))
    assert all(d == 1 for t, d in seen if t < confirm)
    assert all(d == 2 for t, d in seen if t >= confirm)

    # A rise that falls back before it has held is forgotten: the clock starts again with the next one.
    state = fresh_state()
    _, state = _rising(up, 1, state, 0.0)
    _, state = _rising(steady, 1, state, 20.0)
    desired, state = _rising(up, 1, state, 25.0)
    assert desired == 1
    desired, _ = _rising(up, 1, state, 25.0 + confirm)
    assert desired == 2


def test_a_rise_at_a_rate_the_noise_explains_entirely_is_held_for_the_confirm_time_only() -> None:
    """At 0.1 req/s a 30 s window's two standard deviations exceed the rate itself: the rise is
    within the noise, so it waits scale_up_confirm_seconds like any other, then is taken (not held
    for as long as the queue stays short)."""
    confirm = DEFAULT_TUNING.scale_up_confirm_seconds
    slow = signals(rate=0.1, prompt=4000.0, ttft=0.45)  # 0.4 s prefills: sized for 2 replicas
    first = decide(SPEC, slow, fresh_state(), now=0.0)
    assert first.needed_replicas == 2 and first.desired_replicas == 1, first.reason
    state = first.state
    seen: list[tuple[float, int]] = []
    for now in range(5, int(confirm) + 15, 5):
        decision = decide(SPEC, slow, state, float(now))
        state = decision.state
        seen.append((float(now), decision.desired_replicas))
    assert all(d == 1 for t, d in seen if t < confirm), seen
    assert all(d == 2 for t, d in seen if t >= confirm), seen


def test_a_rise_beyond_the_noise_a_large_rise_a_queue_or_a_broken_slo_act_at_once() -> None:
    # One replica more, at a rate the current one could not serve even two standard deviations lower.
    beyond = decide(SPEC, signals(rate=3.5, ttft=0.45), fresh_state(), now=0.0)
    assert beyond.needed_replicas == 2 and beyond.desired_replicas == 2
    # Two replicas more than running: a step, not noise.
    assert decide(SPEC, signals(rate=25.0), fresh_state(), now=0.0).desired_replicas >= 3
    # One more within the noise, with the queue over its target (4 per replica) or the TTFT above the SLO.
    assert decide(SPEC, signals(rate=2.5, ttft=0.45, waiting=5.0), fresh_state(), 0.0).desired_replicas == 2
    assert decide(SPEC, signals(rate=2.5, ttft=1.5), fresh_state(), now=0.0).desired_replicas == 2


def test_replicas_are_sized_for_the_objective_error_budget() -> None:
    """spec.slo.objective: the steady state is sized so that the objective's error budget (1 - objective)
    waits past the budget; a looser objective gets fewer replicas for the same load, never more. Unset,
    the platform's default (0.99) applies."""
    loose_spec = SPEC.model_copy(update={"slo": SPEC.slo.model_copy(update={"objective": 0.95})})
    strict_spec = SPEC.model_copy(update={"slo": SPEC.slo.model_copy(update={"objective": 0.99})})
    # (TTFT 0.6 s: not so comfortable that the capacity estimate is raised first.)
    for rate in (3.0, 9.0, 14.0, 20.0):
        tight = decide(strict_spec, signals(rate=rate, ttft=0.6), fresh_state(), 0.0).needed_replicas or 0
        loose = decide(loose_spec, signals(rate=rate, ttft=0.6), fresh_state(), 0.0).needed_replicas or 0
        unset = decide(SPEC, signals(rate=rate, ttft=0.6), fresh_state(), 0.0).needed_replicas or 0
        assert tight >= loose and unset == tight
    assert decide(strict_spec, signals(rate=3.0, ttft=0.6), fresh_state(), 0.0).needed_replicas == 2
    assert decide(loose_spec, signals(rate=3.0, ttft=0.6), fresh_state(), 0.0).needed_replicas == 1


def _spike_then_quiet(spike: Signals) -> tuple[list[int], AutoscalerState]:
    """Replicas decided at each 15 s evaluation of a quiet load (1 req/s, 2 replicas), after one
    evaluation that saw `spike`; the replicas follow each decision at once."""
    state = fresh_state().model_copy(update={"recommendations": [Recommendation(time=0.0, replicas=2)]})
    ready, desired = 2, []
    for now in range(600, 2400, 15):
        observed = spike if now == 600 else signals(rate=1.0)
        decision = decide(SPEC, replace(observed, ready_replicas=ready, current_replicas=ready), state, now)
        state, ready = decision.state, decision.desired_replicas
        desired.append(ready)
    return desired, state


def test_a_rise_the_queue_target_set_is_held_one_window_not_taken_as_a_burst() -> None:
    # A 10 s spike leaves 24 waiting on 2 replicas at one scrape while the rate barely rose: the queue
    # target sizes 24 / 4 = 6 replicas (KEDA's way). That count is held for the stabilization window,
    # but a backlog is not a burst of load: the window is not stretched to three.
    desired, _ = _spike_then_quiet(signals(rate=3.0, waiting=24))
    assert desired[0] == 6
    first_down = next(i for i, replicas in enumerate(desired) if replicas < 6)
    assert 300 <= first_down * 15 < 400


def test_a_rise_the_load_set_still_stretches_the_window() -> None:
    # The same rise to 6 sized by the load's rate (48 req/s of 1000 tokens): a burst, held three windows.
    desired, _ = _spike_then_quiet(signals(rate=48.0, ttft=3.0))
    assert desired[0] == 6
    first_down = next(i for i, replicas in enumerate(desired) if replicas < desired[0])
    assert first_down * 15 >= 900


def test_the_queue_mark_survives_the_status_round_trip() -> None:
    decision = decide(SPEC, signals(rate=3.0, ready=2, waiting=24), fresh_state(), now=600.0)
    assert decision.state.recommendations[-1].queued is True
    wire = decision.state.to_wire()
    assert AutoscalerState.model_validate(wire).recommendations[-1].queued is True
    # Entries the load set stay as small on the wire as before.
    assert set(Recommendation(time=600.0, replicas=2).to_wire()) == {"time", "replicas"}


def test_a_rise_held_as_noise_is_not_taken_as_a_burst() -> None:
    # The need dipped to 1 at 960 s, and at 1000 s one evaluation reads 14 req/s: 3 replicas, a rise of
    # two on the dip within 60 s, but one above the 2 there and within the window's noise, so it is held.
    history = [Recommendation(time=0.0, replicas=2), Recommendation(time=960.0, replicas=1)]
    state = fresh_state().model_copy(update={"recommendations": history})
    held = decide(SPEC, signals(rate=14.0, ready=2), state, now=1000.0)
    assert held.desired_replicas == 2, held.reason
    assert held.state.recommendations[-1].replicas == 3
    assert held.state.recommendations[-1].confirming is True
    # The load falls back: the replica is removed after one window, not held for three as after a burst.
    state, ready, first_down = held.state, 2, None
    for now in range(1005, 2400, 15):
        quiet = replace(signals(rate=1.0), ready_replicas=ready, current_replicas=ready)
        decision = decide(SPEC, quiet, state, float(now))
        if decision.desired_replicas < ready and first_down is None:
            first_down = now
        state, ready = decision.state, decision.desired_replicas
    assert first_down is not None and first_down < 1000 + 2 * SPEC.scale_down_stabilization_seconds


def test_a_replica_added_back_soon_after_a_scale_down_waits_for_confirmation() -> None:
    # 18 req/s on 2 replicas: one more, beyond the Poisson noise of the arrivals: taken at once...
    load = signals(rate=18.0, ready=2)
    history = {"recommendations": [Recommendation(time=0.0, replicas=2)]}
    assert decide(SPEC, load, fresh_state().model_copy(update=history), now=1000.0).desired_replicas == 3
    # ... but 100 s after a scale-down (scaleDownIntervalSeconds: 300) it is held until it has lasted 30 s,
    just_down = fresh_state().model_copy(update={**history, "last_scale_down_time": 900.0})
    first = decide(SPEC, load, just_down, now=1000.0)
    assert first.desired_replicas == 2
    assert "taken once it has held 30s" in first.reason
    assert decide(SPEC, load, first.state, now=1015.0).desired_replicas == 2
    assert decide(SPEC, load, first.state, now=1030.0).desired_replicas == 3
    # and a broken SLO still acts at once.
    broken = decide(SPEC, signals(rate=18.0, ready=2, ttft=1.5), just_down, now=1000.0)
    assert broken.desired_replicas >= 3
