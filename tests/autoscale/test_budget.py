"""The error-budget controller (autoscale/budget.py): the sizing tightens while the service misses its
objective faster than the budget allows, relaxes toward the cheapest sizing while it keeps it easily, holds
in between, and lives in status."""

from __future__ import annotations

from dataclasses import replace

from llama_operator.api.autoscaling import AutoscalerState
from llama_operator.api.spec import AutoscalingSpec, SLOSpec
from llama_operator.autoscale.budget import update_budget
from llama_operator.autoscale.decision import DEFAULT_TUNING
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.signals import Signals, SignalStatus
from tests.autoscale.builders import load_signals

LOW, HIGH = DEFAULT_TUNING.budget_share_range or (0.0, 1.0)


def spec(objective: float) -> AutoscalingSpec:
    return AutoscalingSpec(
        min_replicas=1, max_replicas=20, slo=SLOSpec(ttft_seconds=1.0, objective=objective)
    )


def kept(share_within: float, rate: float = 10.0, ready: int = 3) -> Signals:
    """A served load whose requests kept the objective's bucket at `share_within`."""
    return replace(
        load_signals(rate=rate, ready=ready, ttft=0.6), within_slo_request_rate=rate * share_within
    )


def run(
    objective: float, share_within: float, minutes: float, state: AutoscalerState | None = None
) -> AutoscalerState:
    """Evaluations every 5 s for `minutes` of the same observation; the replicas never change."""
    state = state or AutoscalerState(capacity_tokens_per_second=10_000.0)
    for step in range(round(minutes * 12)):
        decision = decide(spec(objective), kept(share_within), state, now=1000.0 + 5 * step)
        state = decision.state
    return state


def test_a_budget_burning_too_fast_tightens_the_sizing_to_its_floor() -> None:
    # 90 % of requests within a 0.99 objective: ten times the allowed pace, over both windows.
    state = run(0.99, 0.90, minutes=2)
    assert state.error_budget is not None
    assert state.error_budget.slo_share < DEFAULT_TUNING.slo_headroom
    state = run(0.99, 0.90, minutes=10, state=state)
    assert state.error_budget is not None and state.error_budget.slo_share == LOW


def test_a_tighter_sizing_takes_more_replicas_for_the_same_load() -> None:
    burning = run(0.99, 0.90, minutes=10)
    load = kept(0.90, rate=20.0)
    fresh = AutoscalerState(capacity_tokens_per_second=10_000.0)
    tightened = decide(spec(0.99), load, burning, now=5000.0).needed_replicas or 0
    untouched = decide(spec(0.99), load, fresh, now=5000.0).needed_replicas or 0
    assert tightened > untouched


def test_a_healthy_budget_relaxes_slowly_toward_the_cheapest_sizing() -> None:
    state = run(0.99, 1.0, minutes=10)
    assert state.error_budget is not None
    assert DEFAULT_TUNING.slo_headroom < state.error_budget.slo_share < HIGH  # slowly: 0.005 a minute
    state = run(0.99, 1.0, minutes=60, state=state)
    assert state.error_budget is not None and state.error_budget.slo_share == HIGH


def test_between_the_two_the_sizing_holds_and_the_objective_decides_which_is_which() -> None:
    # 97 % within: at 0.95 the budget burns at 0.6 of its pace (neither too fast nor easily kept), at 0.99
    # at three times it.
    loose = run(0.95, 0.97, minutes=10)
    strict = run(0.99, 0.97, minutes=10)
    assert loose.error_budget is not None and loose.error_budget.slo_share == DEFAULT_TUNING.slo_headroom
    assert strict.error_budget is not None and strict.error_budget.slo_share < DEFAULT_TUNING.slo_headroom


def test_nothing_counted_moves_nothing() -> None:
    state = run(0.99, 0.90, minutes=2)
    idle = load_signals(rate=0.0, ready=3, ttft=None, status=SignalStatus.IDLE)
    unmeasured = load_signals(rate=10.0, ready=3, ttft=0.6)  # no within-SLO rate: an older Prometheus answer
    for signals in (idle, unmeasured):
        assert (
            update_budget(spec(0.99), signals, state.error_budget, 9999.0, DEFAULT_TUNING)
            == state.error_budget
        )
    assert update_budget(spec(0.99), idle, None, 9999.0, DEFAULT_TUNING) is None
    off = replace(DEFAULT_TUNING, budget_share_range=None)
    assert update_budget(spec(0.99), kept(0.5), None, 9999.0, off) is None


def test_the_budget_survives_a_restart_through_status() -> None:
    """The operator's memory is the status: a decision from the state read back equals the one from the
    state in memory."""
    state = run(0.99, 0.92, minutes=3)
    restored = AutoscalerState.model_validate(state.to_wire())
    assert restored.error_budget == state.error_budget
    after = decide(spec(0.99), kept(0.92), state, now=1000.0 + 5 * 36)
    after_restart = decide(spec(0.99), kept(0.92), restored, now=1000.0 + 5 * 36)
    assert after.state.error_budget == after_restart.state.error_budget
    assert after.desired_replicas == after_restart.desired_replicas
