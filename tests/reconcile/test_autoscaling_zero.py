"""What scale to zero shows in status: the ScaledToZero condition through a whole idle -> zero -> wake
cycle, ScalingActive at zero (no metrics is expected there), and the wake the activator timed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from llama_operator.api.autoscaling import AutoscalerState
from llama_operator.api.spec import AutoscalingSpec, SLOSpec
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.signals import Signals
from llama_operator.reconcile.autoscaling import (
    AutoscaleOutcome,
    autoscale_outcome,
    parse_demand_time,
    parse_last_activation,
)
from llama_operator.reconcile.drift import drifted
from tests.autoscale.test_policy_zero import idle

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
SPEC = AutoscalingSpec(min_replicas=0, scale_to_zero_after_seconds=60)


def outcome(
    status: dict[str, Any] | None, seen: Signals, state: AutoscalerState, now: float
) -> AutoscaleOutcome:
    decision = decide(SPEC, seen, state, now)
    return autoscale_outcome(
        status,
        decision,
        seen,
        slo=SLOSpec(ttft_seconds=0.5),
        prometheus_error=None,
        generation=1,
        now=NOW,
        scale_to_zero=True,
    )


def condition(out: AutoscaleOutcome, type_: str) -> dict[str, Any]:
    return next(c for c in out.status_patch["conditions"] if c["type"] == type_)


def test_the_condition_follows_idle_zero_and_the_wake() -> None:
    serving = outcome(None, idle(1), AutoscalerState(), 0.0)
    assert (condition(serving, "ScaledToZero")["status"], condition(serving, "ScaledToZero")["reason"]) == (
        "False",
        "Serving",
    )
    state = AutoscalerState.model_validate(serving.status_patch["autoscaling"]["state"])
    to_zero = outcome(serving.status_patch, idle(1), state, 60.0)
    assert to_zero.replicas == 0
    assert condition(to_zero, "ScaledToZero")["reason"] == "Idle"
    assert [e.reason for e in to_zero.events] == ["Scaled"]

    at_zero = Signals.no_data(ready_replicas=0, starting_replicas=0, current_replicas=0, window_seconds=20.0)
    at_zero = replace(at_zero, activator_available=True)
    state = AutoscalerState.model_validate(to_zero.status_patch["autoscaling"]["state"])
    held = outcome(to_zero.status_patch, at_zero, state, 70.0)
    assert held.replicas is None
    active = condition(held, "ScalingActive")
    assert (active["status"], active["reason"]) == ("True", "ScaledToZero"), "no pod, no metrics: expected"
    assert not [e for e in held.events if e.warning], "no NoMetrics warning at zero"

    woken = outcome(held.status_patch, replace(at_zero, demand_time=75.0), state, 76.0)
    assert woken.replicas == 1
    assert condition(woken, "ScaledToZero")["reason"] == "Activating"


def test_without_an_activator_the_condition_says_why_the_replica_stays() -> None:
    out = outcome(None, idle(1, activator_available=False), AutoscalerState(idle_since=0.0), 600.0)
    assert out.replicas is None
    cond = condition(out, "ScaledToZero")
    assert (cond["status"], cond["reason"]) == ("False", "ActivatorUnavailable")


def test_the_wake_the_activator_timed_is_shown_in_status() -> None:
    activation = parse_last_activation('{"seconds": 48.25, "time": "2026-12-03T09:00:01.000000Z"}')
    assert activation is not None
    decision = decide(SPEC, idle(1), AutoscalerState(), 0.0)
    out = autoscale_outcome(
        None,
        decision,
        idle(1),
        slo=SLOSpec(ttft_seconds=0.5),
        prometheus_error=None,
        generation=1,
        now=NOW,
        scale_to_zero=True,
        activation=activation,
    )
    auto = out.status_patch["autoscaling"]
    assert auto["lastActivationSeconds"] == 48.25
    assert auto["lastActivation"] == "48.2s"
    assert auto["lastActivationTime"] == "2026-12-03T09:00:01.000000Z"


def test_annotations_anyone_may_write_are_read_defensively() -> None:
    assert (
        parse_demand_time("2026-12-03T09:00:00.5Z") == datetime(2026, 12, 3, 9, 0, 0, 500000, UTC).timestamp()
    )
    for bad in (None, "", "yesterday", "2026-13-40T00:00:00Z"):
        assert parse_demand_time(bad) is None
    for bad_json in (None, "", "{", "[]", '{"seconds": "x", "time": "2026-12-03T09:00:00Z"}',
                     '{"seconds": -1, "time": "2026-12-03T09:00:00Z"}', '{"seconds": 3, "time": "noon"}',
                     '{"seconds": 3}'):  # fmt: skip
        assert parse_last_activation(bad_json) is None


def test_a_hand_edit_of_the_slice_endpoints_is_drift() -> None:
    desired = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "chat-activator", "labels": {"a": "b"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "port": 8000}],
    }
    same = {**desired, "metadata": {"name": "chat-activator", "labels": {"a": "b"}, "uid": "x"}}
    assert not drifted(desired, same)
    moved = {**same, "endpoints": [{"addresses": ["10.9.9.9"], "conditions": {"ready": True}}]}
    assert drifted(desired, moved)
