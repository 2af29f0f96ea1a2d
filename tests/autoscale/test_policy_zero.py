"""Scale to zero in the pure policy: only after real idleness, never on no data, woken once by a held request."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from llama_operator.api.autoscaling import AutoscalerState
from llama_operator.api.spec import AutoscalingSpec, SLOSpec
from llama_operator.autoscale.decision import Decision
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.signals import Signals, SignalStatus
from llama_operator.reconcile.autoscaling import autoscale_outcome

SPEC = AutoscalingSpec(
    min_replicas=0,
    max_replicas=4,
    slo=SLOSpec(ttft_seconds=1.0),
    scale_to_zero_after_seconds=120,
)


def idle(ready: int = 1, **changes: object) -> Signals:
    base = Signals(
        status=SignalStatus.IDLE,
        ttft_percentile_seconds=None,
        queue_waiting_total=0.0,
        running_total=0.0,
        kv_cache_usage=0.0,
        request_rate=0.0,
        prompt_token_rate=0.0,
        generation_token_rate=0.0,
        ready_replicas=ready,
        starting_replicas=0,
        current_replicas=ready,
        window_seconds=30.0,
        activator_available=True,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def busy(ready: int = 1) -> Signals:
    return replace(
        idle(ready),
        status=SignalStatus.OK,
        ttft_percentile_seconds=0.2,
        running_total=1.0,
        request_rate=0.5,
        prompt_token_rate=500.0,
        generation_token_rate=50.0,
    )


def run(
    spec: AutoscalingSpec, steps: Sequence[tuple[float, Signals]], state: AutoscalerState
) -> list[Decision]:
    decisions = []
    for now, seen in steps:
        decision = decide(spec, seen, state, now)
        state = decision.state
        decisions.append(decision)
    return decisions


def test_min_replicas_zero_is_accepted_and_named_in_the_spec() -> None:
    assert SPEC.scale_to_zero
    assert not AutoscalingSpec(min_replicas=1).scale_to_zero
    with pytest.raises(ValidationError):
        AutoscalingSpec(min_replicas=-1)


def test_idle_for_the_configured_time_goes_to_zero_not_before() -> None:
    steps = [(t, idle()) for t in range(0, 125, 5)]
    decisions = run(SPEC, steps, AutoscalerState())
    before = [d.desired_replicas for d in decisions[:-1]]
    assert set(before) == {1}, "the last replica stays until scaleToZeroAfterSeconds of idleness"
    assert decisions[-1].desired_replicas == 0  # t=120: idle for 120 s
    assert decisions[-1].scaled_to_zero
    assert "scaleToZeroAfterSeconds" in decisions[-1].reason
    assert decisions[-1].state.scaled_to_zero_time == 120


def test_several_idle_replicas_all_go_at_once_after_the_idle_time() -> None:
    decisions = run(SPEC, [(t, idle(ready=3)) for t in range(0, 125, 5)], AutoscalerState())
    assert decisions[-1].desired_replicas == 0
    assert all(d.desired_replicas >= 1 for d in decisions[:-1])


def test_no_data_never_counts_as_idle() -> None:
    no_data = Signals.no_data(ready_replicas=1, starting_replicas=0, current_replicas=1, window_seconds=20.0)
    no_data = replace(no_data, activator_available=True)
    decisions = run(SPEC, [(t, no_data) for t in range(0, 1000, 5)], AutoscalerState())
    assert {d.desired_replicas for d in decisions} == {1}
    # An outage inside an idle stretch restarts the idle clock.
    steps = (
        [(t, idle()) for t in range(0, 100, 5)] + [(100, no_data)] + [(t, idle()) for t in range(105, 300, 5)]
    )
    decisions = run(SPEC, steps, AutoscalerState())
    first_zero = next(t for (t, _), d in zip(steps, decisions, strict=True) if d.desired_replicas == 0)
    assert first_zero >= 105 + 120


def test_a_request_resets_the_idle_clock() -> None:
    steps = (
        [(t, idle()) for t in range(0, 100, 5)] + [(100, busy())] + [(t, idle()) for t in range(105, 300, 5)]
    )
    decisions = run(SPEC, steps, AutoscalerState())
    first_zero = next(t for (t, _), d in zip(steps, decisions, strict=True) if d.desired_replicas == 0)
    assert first_zero >= 105 + 120


def test_a_request_held_by_the_activator_recently_is_not_idle() -> None:
    steps = [(t, idle(demand_time=t - 1.0)) for t in range(0, 300, 5)]
    assert {d.desired_replicas for d in run(SPEC, steps, AutoscalerState())} == {1}


def test_without_an_activator_it_never_goes_to_zero() -> None:
    decisions = run(SPEC, [(t, idle(activator_available=False)) for t in range(0, 600, 5)], AutoscalerState())
    assert {d.desired_replicas for d in decisions} == {1}
    assert "no activator" in decisions[-1].reason


def test_min_replicas_one_never_goes_to_zero() -> None:
    spec = SPEC.model_copy(update={"min_replicas": 1})
    decisions = run(spec, [(t, idle()) for t in range(0, 2000, 5)], AutoscalerState())
    assert {d.desired_replicas for d in decisions} == {1}
    assert all(d.state.idle_since is None for d in decisions)


def test_at_zero_it_stays_there_without_demand_and_reports_no_missing_metrics() -> None:
    at_zero = replace(
        Signals.no_data(ready_replicas=0, starting_replicas=0, current_replicas=0, window_seconds=20.0),
        activator_available=True,
    )
    state = AutoscalerState(scaled_to_zero_time=100.0)
    decisions = run(SPEC, [(t, at_zero) for t in range(105, 600, 5)], state)
    assert {d.desired_replicas for d in decisions} == {0}
    assert all(d.scaled_to_zero and not d.no_data for d in decisions)


def test_a_held_request_wakes_one_replica_once() -> None:
    state = AutoscalerState(scaled_to_zero_time=100.0)
    at_zero = replace(
        Signals.no_data(ready_replicas=0, starting_replicas=0, current_replicas=0, window_seconds=20.0),
        activator_available=True,
    )
    # A report from before the last replica went was answered then: it wakes nothing.
    assert decide(SPEC, replace(at_zero, demand_time=90.0), state, 200.0).desired_replicas == 0
    woken = decide(SPEC, replace(at_zero, demand_time=199.0), state, 200.0)
    assert woken.desired_replicas == 1
    assert woken.state.activation_requested_time == 199.0
    assert "activator holds a request" in woken.reason
    # Two activators report the same demand again while the replica starts: still one replica.
    starting = replace(
        Signals.no_data(ready_replicas=0, starting_replicas=1, current_replicas=1, window_seconds=20.0),
        activator_available=True,
        demand_time=203.0,
    )
    again = decide(SPEC, starting, woken.state, 205.0)
    assert again.desired_replicas == 1
    # Once the replica serves, the activation is over.
    served = decide(SPEC, replace(busy(), demand_time=203.0), again.state, 250.0)
    assert served.state.activation_requested_time is None


def test_at_zero_without_an_activator_comes_back_to_one() -> None:
    at_zero = Signals.no_data(ready_replicas=0, starting_replicas=0, current_replicas=0, window_seconds=20.0)
    decision = decide(SPEC, at_zero, AutoscalerState(scaled_to_zero_time=1.0), 10.0)
    assert decision.desired_replicas == 1
    assert "no activator" in decision.reason


def test_load_after_waking_is_sized_as_usual() -> None:
    state = AutoscalerState(scaled_to_zero_time=0.0, capacity_tokens_per_second=2000.0)
    heavy = replace(busy(), request_rate=4.0, prompt_token_rate=8000.0, running_total=4.0)
    decision = decide(SPEC, heavy, state, 100.0)
    assert decision.desired_replicas > 1


def test_a_woken_replica_finds_the_held_backlog_its_to_drain_but_a_first_start_does_not() -> None:
    starting = replace(
        Signals.no_data(ready_replicas=0, starting_replicas=1, current_replicas=1, window_seconds=20.0),
        activator_available=True,
    )
    woken = decide(SPEC, starting, AutoscalerState(activation_requested_time=10.0), 20.0)
    assert woken.state.last_starting_time == 20.0
    # A service's first replica (no wake): a queue seen once it serves is new load, sized at once.
    first = decide(SPEC, starting, AutoscalerState(), 20.0)
    assert first.state.last_starting_time is None


def _pending_wake(woken_at: float, demand_at: float) -> tuple[Signals, AutoscalerState]:
    """Woken from zero at `woken_at`; its one pod never became ready (Pending: no GPU free)."""
    pending = replace(
        Signals.no_data(ready_replicas=0, starting_replicas=1, current_replicas=1, window_seconds=20.0),
        activator_available=True,
        demand_time=demand_at,
    )
    return pending, AutoscalerState(scaled_to_zero_time=0.0, activation_requested_time=woken_at)


def test_a_wake_nobody_waits_for_any_more_returns_to_zero() -> None:
    """The held requests had their 503 at activationTimeoutSeconds and no request is held now: back to
    zero, said as such, rather than a Pending pod that takes a GPU for nobody once one frees up."""
    timeout = SPEC.activation_timeout_seconds
    pending, state = _pending_wake(woken_at=100.0, demand_at=100.0)
    waiting = decide(SPEC, pending, state, 100.0 + timeout - 1)
    assert waiting.desired_replicas == 1, "the held requests may still be served"
    given_up = decide(SPEC, pending, state, 100.0 + timeout + 1)
    assert given_up.desired_replicas == 0
    assert given_up.wake_timed_out and given_up.scaled_to_zero and not given_up.no_data
    assert "activationTimeoutSeconds" in given_up.reason
    assert given_up.state.activation_requested_time is None
    assert given_up.state.scaled_to_zero_time == 100.0 + timeout + 1
    # The next request wakes it again (a report after the service went back to zero).
    at_zero = replace(
        Signals.no_data(ready_replicas=0, starting_replicas=0, current_replicas=0, window_seconds=20.0),
        activator_available=True,
        demand_time=100.0 + timeout + 5,
    )
    assert decide(SPEC, at_zero, given_up.state, 100.0 + timeout + 6).desired_replicas == 1


def test_a_failed_wake_returns_to_zero_one_signal_window_after_its_last_held_request() -> None:
    """The last held request was reported just before it had its 503 (activationTimeoutSeconds after the
    wake): back to zero once that report is a signal window old (20 s here), not a fixed minute."""
    timeout = SPEC.activation_timeout_seconds
    pending, state = _pending_wake(woken_at=100.0, demand_at=100.0 + timeout - 1)
    assert pending.window_seconds == 20.0
    assert decide(SPEC, pending, state, 100.0 + timeout + 15).desired_replicas == 1
    assert decide(SPEC, pending, state, 100.0 + timeout + 20).desired_replicas == 0


def test_a_wake_with_requests_still_held_keeps_waking() -> None:
    """Requests keep arriving (each held, reported every few seconds): the wake stands past the timeout."""
    timeout = SPEC.activation_timeout_seconds
    now = 100.0 + timeout + 60
    pending, state = _pending_wake(woken_at=100.0, demand_at=now - 2)
    decision = decide(SPEC, pending, state, now)
    assert decision.desired_replicas == 1 and not decision.wake_timed_out


def test_a_timed_out_wake_is_a_condition_and_a_warning_event() -> None:
    pending, state = _pending_wake(woken_at=100.0, demand_at=100.0)
    decision = decide(SPEC, pending, state, 100.0 + SPEC.activation_timeout_seconds + 1)
    outcome = autoscale_outcome(
        None,
        decision,
        pending,
        slo=SLOSpec(ttft_seconds=1.0),
        prometheus_error=None,
        generation=1,
        now=datetime(2026, 1, 1, tzinfo=UTC),
        scale_to_zero=True,
    )
    assert outcome.replicas == 0
    zero = [c for c in outcome.status_patch["conditions"] if c["type"] == "ScaledToZero"]
    assert zero and zero[0]["status"] == "True" and zero[0]["reason"] == "WakeTimedOut"
    assert [(e.reason, e.warning) for e in outcome.events] == [("WakeTimedOut", True)]
