"""From an autoscaling decision to the status patch, conditions and Events to post. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from llama_operator.api.autoscaling import AutoscalerState, ScalingDecision
from llama_operator.api.conditions import (
    ConditionSet,
    ConditionStatus,
    ConditionType,
    conditions_of,
)
from llama_operator.api.plan import Plan, status_plan
from llama_operator.api.spec import SLOSpec
from llama_operator.api.status import stored_autoscaler_state, stored_autoscaling
from llama_operator.api.times import rfc3339
from llama_operator.autoscale.decision import Decision
from llama_operator.autoscale.objective import objective_met, tpot_objective_met
from llama_operator.autoscale.signals import Signals, SignalStatus
from llama_operator.catalog.vllm import tpot_judged_at
from llama_operator.reconcile.execution import Event


def autoscaler_state(
    status: Mapping[str, Any] | None, remembered: AutoscalerState | None = None
) -> AutoscalerState:
    """The policy's state as persisted in status (or as `remembered` between status writes); a first
    evaluation starts from the plan's estimate of a replica's prefill capacity, which the policy then
    corrects from what it observes."""
    state = remembered or stored_autoscaler_state(status)
    plan = status_plan(status) or Plan(accelerator="")  # none yet: every estimate below unknown (0)
    prior = float(plan.prefill_tokens_per_second)
    if state.capacity_prior_tokens_per_second is None and prior > 0:
        state = state.model_copy(
            update={"capacity_prior_tokens_per_second": prior, "capacity_tokens_per_second": prior}
        )
    elif prior > 0 and state.capacity_prior_tokens_per_second != prior:
        # Another engine (planned for the measured hardware, reconcile/engine.py; another chunk; another
        # accelerator) prefills another amount per replica: the prior follows the plan, and the learned
        # estimate keeps its correction relative to the prior.
        old = state.capacity_prior_tokens_per_second or prior
        learned = state.capacity_tokens_per_second
        state = state.model_copy(
            update={
                "capacity_prior_tokens_per_second": prior,
                "capacity_tokens_per_second": None if learned is None else learned * prior / old,
            }
        )
    # The plan's step model (decode capacity within the TPOT objective) follows the plan: a new plan
    # (another accelerator, another chunk) replaces it, nothing is learned into it.
    budget, seqs = plan.max_num_batched_tokens, plan.max_num_seqs
    steps = {
        "decode_step_seconds": plan.decode_step_seconds or None,
        "decode_seconds_per_context_token": plan.decode_seconds_per_context_token or None,
        "prefill_seconds_per_token": plan.prefill_seconds_per_token or None,
        "seconds_per_step_token": plan.seconds_per_step_token or None,
        # vLLM's step budget counts the batch's decode tokens: beside a full batch, the chunk is the rest.
        "chunk_tokens": max(budget - seqs, 1) if budget else None,
        "max_num_seqs": seqs or None,
        "kv_cache_tokens": plan.kv_cache_tokens or None,
        "plan_factors": None
        if plan.measured_steps is None
        else [
            plan.measured_steps.bandwidth_efficiency,
            plan.measured_steps.compute_efficiency,
            plan.measured_steps.step_overhead_seconds,
        ],
    }
    if any(getattr(state, key) != value for key, value in steps.items()):
        state = state.model_copy(update=steps)
    return state


@dataclass(frozen=True)
class AutoscaleOutcome:
    replicas: int | None  # the Deployment's new spec.replicas, or None to leave it
    status_patch: dict[str, Any]
    events: list[Event]
    activation: LastActivation | None = None  # the last wake from zero the router reported


def autoscale_outcome(
    status: Mapping[str, Any] | None,
    decision: Decision,
    signals: Signals,
    *,
    slo: SLOSpec,
    prometheus_error: str | None,
    generation: int | None,
    now: datetime,
    scale_to_zero: bool = False,
    activation: LastActivation | None = None,
) -> AutoscaleOutcome:
    """The status patch, the replica write and the Events of one decision."""
    conditions = ConditionSet(status, now=now, generation=generation)
    events = _scaling_active(conditions, decision, signals, prometheus_error)
    _scaling_limited(conditions, decision)
    _scaled_to_zero(conditions, decision, signals, scale_to_zero=scale_to_zero)
    ttft = signals.ttft_percentile_seconds
    tpot = signals.tpot_percentile_seconds if slo.tpot_seconds is not None else None
    _slo_met_condition(conditions, decision, slo, ttft=ttft, tpot=tpot)

    current = signals.current_replicas
    previous = stored_autoscaling(status)
    last = previous.last_decision.to_wire() if previous is not None and previous.last_decision else None
    replicas: int | None = None
    if decision.desired_replicas != current:
        replicas = decision.desired_replicas
        last = ScalingDecision(
            time=rfc3339(now), from_replicas=current, to_replicas=replicas, reason=decision.reason
        ).to_wire()
        moved = f"{current} -> {replicas} replicas: {decision.reason}"
        if decision.wake_timed_out:
            events.append(Event("WakeTimedOut", moved, warning=True))
        else:
            events.append(Event("Scaled", moved, warning=False))

    autoscaling = _observed(decision, signals, slo, ttft=ttft, tpot=tpot, now=now)
    if last is not None:
        autoscaling["lastDecision"] = last
    if activation is not None:
        autoscaling["lastActivationSeconds"] = activation.seconds
        autoscaling["lastActivation"] = human_seconds(activation.seconds)
        autoscaling["lastActivationTime"] = activation.time
    return AutoscaleOutcome(
        replicas=replicas,
        status_patch={"autoscaling": autoscaling, "conditions": conditions.to_wire()},
        events=events,
        activation=activation,
    )


def _observed(
    decision: Decision,
    signals: Signals,
    slo: SLOSpec,
    *,
    ttft: float | None,
    tpot: float | None,
    now: datetime,
) -> dict[str, Any]:
    """status.autoscaling as this evaluation saw it: the decision, the observations (none without data),
    the objective as written and the policy's state."""
    per_replica = signals.queue_waiting_total / signals.ready_replicas if signals.ready_replicas else None
    return {
        "desiredReplicas": decision.desired_replicas,
        "observedTtftSeconds": None if decision.no_data else ttft,
        "observedTpotSeconds": None if decision.no_data else tpot,
        "ttft": None if decision.no_data or ttft is None else human_seconds(ttft),
        "tpot": None if decision.no_data or tpot is None else human_seconds(tpot),
        "slo": slo_words(slo.percentile, slo.ttft_seconds, slo.tpot_seconds),
        "observedQueueDepth": None if decision.no_data else signals.queue_waiting_total,
        "observedQueuePerReplica": None if decision.no_data else per_replica,
        "observedRequestRate": None if decision.no_data else signals.request_rate,
        "lastReason": decision.reason,
        "lastEvaluationTime": rfc3339(now),
        # Every field, unset ones as null: a merge patch then removes what the policy cleared (and any
        # Unix-seconds time an older version wrote), so status holds exactly the policy's state.
        "state": decision.state.model_dump(by_alias=True, mode="json"),
    }


def _scaling_active(
    conditions: ConditionSet, decision: Decision, signals: Signals, prometheus_error: str | None
) -> list[Event]:
    """ScalingActive: whether the policy sees metrics; an Event when they go and when they come back."""
    current = signals.current_replicas
    was_active = conditions.find(ConditionType.SCALING_ACTIVE)
    restored = was_active is not None and was_active.status == ConditionStatus.FALSE
    if decision.no_data:
        why = (
            f"Prometheus unavailable: {prometheus_error}"
            if prometheus_error
            else ("no vLLM metrics for this LlamaService (targets down, stale or missing series)")
        )
        conditions.set(
            ConditionType.SCALING_ACTIVE,
            ConditionStatus.FALSE,
            "NoMetrics",
            f"{why}; holding {current} replicas",
        )
        if was_active is None or was_active.status != ConditionStatus.FALSE:
            return [
                Event(
                    "NoMetrics", f"{why}; replicas held at {current}, never scaled down blind", warning=True
                )
            ]
        return []
    if current == 0 and signals.status is SignalStatus.NO_DATA:
        # No pod, no metrics: expected at zero; the activator's report of held requests is the signal.
        conditions.set(ConditionType.SCALING_ACTIVE, ConditionStatus.TRUE, "ScaledToZero", decision.reason)
        return (
            [Event("MetricsRestored", "autoscaling resumed at zero replicas", warning=False)]
            if restored
            else []
        )
    conditions.set(
        ConditionType.SCALING_ACTIVE,
        ConditionStatus.TRUE,
        "ValidMetrics",
        f"signals {signals.status.value}: {decision.reason}",
    )
    if restored:
        return [Event("MetricsRestored", "vLLM metrics are back; autoscaling resumed", warning=False)]
    return []


def _scaling_limited(conditions: ConditionSet, decision: Decision) -> None:
    """ScalingLimited: whether the need exceeds maxReplicas."""
    if decision.scaling_limited:
        conditions.set(
            ConditionType.SCALING_LIMITED,
            ConditionStatus.TRUE,
            "TooFewReplicas",
            decision.limited_message or "maxReplicas reached",
        )
    else:
        conditions.set(
            ConditionType.SCALING_LIMITED,
            ConditionStatus.FALSE,
            "WithinBounds",
            "the need fits within min/max",
        )


def _scaled_to_zero(
    conditions: ConditionSet, decision: Decision, signals: Signals, *, scale_to_zero: bool
) -> None:
    """ScaledToZero, for a service that may scale to zero (and once more when it no longer may)."""
    if not scale_to_zero:
        if conditions.find(ConditionType.SCALED_TO_ZERO) is not None:
            conditions.set(
                ConditionType.SCALED_TO_ZERO, ConditionStatus.FALSE, "Disabled", "minReplicas is 1 or more"
            )
        return
    if decision.desired_replicas == 0:
        if decision.wake_timed_out:
            conditions.set(
                ConditionType.SCALED_TO_ZERO, ConditionStatus.TRUE, "WakeTimedOut", decision.reason
            )
        else:
            conditions.set(ConditionType.SCALED_TO_ZERO, ConditionStatus.TRUE, "Idle", decision.reason)
    elif signals.current_replicas == 0 or (
        signals.ready_replicas == 0 and decision.state.activation_requested_time is not None
    ):
        conditions.set(
            ConditionType.SCALED_TO_ZERO,
            ConditionStatus.FALSE,
            "Activating",
            f"waking from zero: {decision.reason}",
        )
    elif not signals.activator_available:
        conditions.set(
            ConditionType.SCALED_TO_ZERO,
            ConditionStatus.FALSE,
            "ActivatorUnavailable",
            "no activator is ready to hold requests: the service keeps one replica",
        )
    else:
        conditions.set(ConditionType.SCALED_TO_ZERO, ConditionStatus.FALSE, "Serving", decision.reason)


def _slo_met_condition(
    conditions: ConditionSet, decision: Decision, slo: SLOSpec, *, ttft: float | None, tpot: float | None
) -> None:
    """SLOMet: the observed percentiles against the objectives, naming the one missed."""
    if decision.slo_met is None:
        conditions.set(
            ConditionType.SLO_MET,
            ConditionStatus.UNKNOWN,
            "NoObservation",
            "no requests observed in the window",
        )
        return
    observed = _slo_message(ttft, slo.ttft_seconds, tpot, slo.tpot_seconds)
    if decision.slo_met:
        conditions.set(ConditionType.SLO_MET, ConditionStatus.TRUE, "WithinSLO", observed)
        return
    missed = []
    if objective_met(ttft, slo.ttft_seconds) is False:
        missed.append("TTFT")
    if tpot_objective_met(tpot, slo.tpot_seconds) is False:
        missed.append("TPOT")
    conditions.set(
        ConditionType.SLO_MET,
        ConditionStatus.FALSE,
        "SLOBreached",
        f"{' and '.join(missed)} above the SLO: {observed}",
    )


@dataclass(frozen=True)
class LastActivation:
    """The last wake from zero as the activator timed it: first held request to its first token."""

    seconds: float
    time: str  # RFC 3339


def parse_last_activation(annotation: str | None) -> LastActivation | None:
    """The activator's `last-activation` annotation ({"seconds": 48.2, "time": "2026-..Z"}); None when it is
    absent or not that shape (anyone who may edit the LlamaService may write it: it is only reported)."""
    if not annotation:
        return None
    try:
        raw = json.loads(annotation)
        seconds, time = float(raw["seconds"]), str(raw["time"])
        datetime.fromisoformat(time.replace("Z", "+00:00"))
    except (ValueError, TypeError, KeyError):
        return None
    if not 0 <= seconds < 86_400 * 7:
        return None
    return LastActivation(seconds=round(seconds, 3), time=time)


def parse_demand_time(annotation: str | None) -> float | None:
    """Unix seconds of the activator's `activation-requested-at` annotation; None when absent or unreadable."""
    if not annotation:
        return None
    try:
        return datetime.fromisoformat(annotation.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def human_seconds(seconds: float) -> str:
    """A latency for people, three significant digits with its unit: 440ms, 61.4ms, 1.25s, 12s."""
    if seconds < 0.9995:
        return f"{float(f'{seconds * 1000:.3g}'):g}ms"
    if seconds < 999.5:
        return f"{float(f'{seconds:.3g}'):g}s"
    return f"{seconds:.0f}s"


def slo_words(percentile: float, ttft_seconds: float, tpot_seconds: float | None) -> str:
    """The objective as the user wrote it in spec: 'p95 TTFT <= 1s, TPOT <= 50ms' (never the policy's
    internal headroom)."""
    words = f"p{percentile:g} TTFT <= {human_seconds(ttft_seconds)}"
    return words if tpot_seconds is None else f"{words}, TPOT <= {human_seconds(tpot_seconds)}"


def _slo_message(ttft: float | None, ttft_slo: float, tpot: float | None, tpot_slo: float | None) -> str:
    """'TTFT 0.412s <= 0.5s, TPOT 0.061s > 0.05s': each objective's observation against its target."""
    parts = []
    if ttft is not None:
        parts.append(f"TTFT {ttft:.3f}s {'<=' if objective_met(ttft, ttft_slo) else '>'} {ttft_slo:g}s")
    else:
        parts.append(f"TTFT not observed (SLO {ttft_slo:g}s)")
    if tpot_slo is not None:
        judged = tpot_judged_at(tpot_slo)
        at = "" if judged == tpot_slo else f" (judged at {judged:g}s, the histogram's smallest bound)"
        if tpot is not None:
            met = tpot_objective_met(tpot, tpot_slo)
            parts.append(f"TPOT {tpot:.3f}s {'<=' if met else '>'} {tpot_slo:g}s{at}")
        else:
            parts.append(f"TPOT not observed (SLO {tpot_slo:g}s)")
    return ", ".join(parts)


def condition_transitions(current: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> list[str]:
    """'SLOMet False -> True (WithinSLO): TTFT 0.41s <= 0.5s' for each condition whose status moves."""
    before = {c.type: c for c in conditions_of(current)}
    out = []
    for cond in conditions_of(patch):
        old = before.get(cond.type)
        old_status = old.status if old else None
        if old_status != cond.status:
            out.append(
                f"{cond.type} {old_status or 'unset'} -> {cond.status} ({cond.reason}): {cond.message}"
            )
    return out
