"""Scale to zero: idleness (metrics present, nothing received or held), the last replica's removal, the
wake on a request the router holds, and a wake nobody answered in time.
"""

from __future__ import annotations

from llama_operator.api.autoscaling import AutoscalerState, Recommendation
from llama_operator.api.spec import AutoscalingSpec
from llama_operator.autoscale.decision import Decision
from llama_operator.autoscale.signals import Signals, SignalStatus


def _recent_demand(signals: Signals, now: float) -> bool:
    """The activator reported holding a request within the signal window: the service is not idle."""
    return signals.demand_time is not None and now - signals.demand_time < signals.window_seconds


def idle_start(spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, now: float) -> float | None:
    """Since when the service has been idle at every evaluation (None: it is not idle now). Only counted
    with scale to zero on: idle means metrics present and no request, never "no data"."""
    if not spec.scale_to_zero or signals.status is not SignalStatus.IDLE or _recent_demand(signals, now):
        return None
    return state.idle_since if state.idle_since is not None else now


def to_zero(
    spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, now: float, idle_since: float
) -> Decision:
    """Remove every replica of a service idle for scaleToZeroAfterSeconds."""
    current = signals.current_replicas
    return Decision(
        desired_replicas=0,
        reason=(
            f"scale down {current} -> 0: idle for {now - idle_since:.0f}s (scaleToZeroAfterSeconds "
            f"{spec.scale_to_zero_after_seconds}s); the activator holds the next request"
        ),
        state=_gone_to_zero(state, now),
        needed_replicas=0,
        scaled_to_zero=True,
    )


def _gone_to_zero(state: AutoscalerState, now: float) -> AutoscalerState:
    """The state once the last replica goes: no window, no clocks; a request held after `now` wakes it."""
    return state.model_copy(
        update={
            "recommendations": [],
            "no_data_since": None,
            "slo_breach_since": None,
            "idle_since": None,
            "scaled_to_zero_time": now,
            "activation_requested_time": None,
            "last_scale_time": now,
            "last_scale_down_time": now,
        }
    )


def wake_timed_out(spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, now: float) -> bool:
    """A wake from zero that no replica answered within activationTimeoutSeconds (the held requests have
    had their 503), with no request held any more: the waking pod (Pending, say) would only take a GPU
    once one frees up, for nobody."""
    woken_at = state.activation_requested_time
    return (
        spec.scale_to_zero
        and woken_at is not None
        and signals.current_replicas > 0
        and signals.ready_replicas == 0
        and now - woken_at >= spec.activation_timeout_seconds
        and not _recent_demand(signals, now)
    )


def abandon_wake(spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, now: float) -> Decision:
    """Back to zero after a wake that timed out; the next held request wakes the service again."""
    woken_at = state.activation_requested_time or now
    return Decision(
        desired_replicas=0,
        reason=(
            f"scale down {signals.current_replicas} -> 0: woken {now - woken_at:.0f}s ago, no replica ready "
            f"within activationTimeoutSeconds ({spec.activation_timeout_seconds}s) and no request is held "
            "any more; the next request wakes it again"
        ),
        state=_gone_to_zero(state, now),
        needed_replicas=0,
        scaled_to_zero=True,
        wake_timed_out=True,
    )


def at_zero(spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, now: float) -> Decision:
    """No replica: wake on a request the activator held since the last one went (a report older than that
    was served or given up on before), or when no activator can hold requests; otherwise stay at zero.
    Waking means one replica: the load, once seen, sizes the rest."""
    demand = signals.demand_time
    woken = demand is not None and (state.scaled_to_zero_time is None or demand > state.scaled_to_zero_time)
    if woken and demand is not None:
        reason = f"scale up 0 -> 1: the activator holds a request (reported {max(now - demand, 0):.0f}s ago)"
    elif not signals.activator_available:
        reason = "scale up 0 -> 1: no activator is ready to hold requests, so zero replicas would refuse them"
    else:
        return Decision(
            desired_replicas=0,
            reason="scaled to zero: idle, no request held by the activator",
            state=state.model_copy(update={"no_data_since": None, "idle_since": None}),
            needed_replicas=0,
            scaled_to_zero=True,
        )
    desired = min(1, spec.max_replicas)
    return Decision(
        desired_replicas=desired,
        reason=reason,
        state=state.model_copy(
            update={
                "recommendations": [Recommendation(time=now, replicas=desired)],
                "no_data_since": None,
                "idle_since": None,
                "activation_requested_time": demand if woken else None,
                "last_scale_time": now,
                "last_scale_up_time": now,
            }
        ),
        needed_replicas=desired,
    )
