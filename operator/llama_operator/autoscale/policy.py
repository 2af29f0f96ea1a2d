"""The SLO autoscaling policy: `decide(spec, signals, state, now) -> Decision`.

Pure and deterministic: time is an argument, everything remembered between evaluations is in
`AutoscalerState` (persisted in the LlamaService status). The same function runs in the operator
and in the simulator.

Scale-up is sized from the load in one step: an M/M/c estimate of the replicas that keep
P(queue wait > headroom * SLO - mean prefill time) under the objective's error budget (1 - objective)
at the observed request rate and mean prompt length, each replica's prefill capacity calibrated online
around the catalog's figure; with floors from the backlog (drained within a bounded time), the user's
queue-per-replica target and KV-cache usage. The need is absolute, so replicas still starting
count as capacity, and a queue that builds while they load is not counted again (no cascade). A rise
of one replica that the rate window's Poisson noise could explain (the current replicas would do at the
rate less two standard deviations) waits until the need has held for scale_up_confirm_seconds; a rise
beyond the noise, a larger rise, a queue over its target or a broken SLO acts at once.

Scale-down takes the highest need of the stabilization window (HPA-style, each need computed with
the SLO headroom at the load then observed, so the survivors still meet the SLO), stretched when the
load has come in bursts; at most one step per spec.scaleDownIntervalSeconds, at most halving. No data:
hold, never scale down blind. Idle: the need is minReplicas, reached through the same window.

The burst response (Knative's panic mode in spirit): the request rate over the latest scrape (the burst
window), less two Poisson standard deviations, above the rate window's at two evaluations in a row
(state.burst_since) sizes the replicas at once from that load when it needs more than the rate window's
and the replicas there; while it lasts, no replica its load needs is removed (docs/bench/burst.md).

A breach the model cannot explain (TTFT above the SLO for two whole signal windows, nothing starting,
while the model says the replicas suffice) adds one replica per such breach: the SLO is never held
broken below maxReplicas on the model's word.

With a TPOT objective, decode sizes replicas too: a replica decodes at most the batch whose step (its
weights, the batch's KV cache and a prompt chunk read in one step) fits the objective, from the plan's
step model (catalog.performance, the same function that caps max-num-seqs), and never more than
max-num-seqs; the context each sequence holds is the KV cache in use over the running requests. The
replicas needed are the fewest that decode the observed output-token rate at that batch's mean step,
each also prefilling its share of the prompts. Where a step beside a small batch, which vLLM fills with
nearly the whole --max-num-batched-tokens of prompt, is over the objective whatever the batch (hardware
slower than the plan assumed), the tokens such steps give are what breaks the percentile: the replicas
are then also the fewest that keep them under half its tail. The need is the larger of the
TTFT- and the TPOT-driven ones, and a TPOT above its objective counts as a breach like TTFT's.

Scale to zero (minReplicas 0): the last replica goes only after scaleToZeroAfterSeconds of real idleness
(metrics present, no request received, running or waiting, no request held by the activator), and only
while an activator is there to hold the next request; no data never counts as idle. At zero, a request
the activator reports holding after the last replica went wakes the service to one replica (never more:
two activators reporting the same demand make one scale-up); the load then sizes it as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime

from llama_operator.api.autoscaling import AutoscalerState, Recommendation
from llama_operator.api.spec import AutoscalingSpec
from llama_operator.api.times import rfc3339
from llama_operator.autoscale.budget import sizing_share, update_budget
from llama_operator.autoscale.calibration import calibrate
from llama_operator.autoscale.decision import DEFAULT_TUNING, Decision, PolicyTuning
from llama_operator.autoscale.need import Burst, Need, idle_need, load_need, observe_burst, update_capacity
from llama_operator.autoscale.objective import judge_slo, persistent_breach_since
from llama_operator.autoscale.signals import Signals, SignalStatus
from llama_operator.autoscale.stabilize import (
    climb_ahead,
    count_rises,
    highest_since,
    own_count,
    recent_scale_ups,
    remembered_history,
    scale_down,
    stabilization_window,
    taken_ahead,
    unconfirmed,
)
from llama_operator.autoscale.zero import abandon_wake, at_zero, idle_start, to_zero, wake_timed_out


def decide(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    now: float,
    tuning: PolicyTuning = DEFAULT_TUNING,
) -> Decision:
    """Desired replicas for one LlamaService, from this cycle's signals and the remembered state.

    A count the autoscaler did not decide (a hand scale, `kubectl scale`) past the bounds, or within them
    while metrics are there: the policy decides as if the Deployment still had the count it last decided,
    so the hand value is never taken as demand, and the result replaces it at once, whatever the windows
    and intervals say (they pace the autoscaler's own scale-downs, watched under the smaller fleet; the
    hand count was never watched). Within the bounds and without metrics the hand count stands: it is
    never scaled down blind, and whoever scaled may know why."""
    current = signals.current_replicas
    decided = state.decided_replicas
    if not spec.within_bounds(current):
        own = own_count(spec, state, current)
        decision = _decide(spec, _as_if_scaled_to(signals, own), state, now, tuning)
        decision = replace(
            decision,
            reason=f"{current} replicas is outside [{spec.min_replicas}, {spec.max_replicas}] (a hand scale): "
            f"back to the autoscaler's own decision, {decision.desired_replicas}: {decision.reason}",
        )
    elif (
        decided is not None
        and decided > 0
        and current > 0
        and decided != current
        and spec.within_bounds(decided)
        and signals.status is not SignalStatus.NO_DATA
    ):
        decision = _decide(spec, _as_if_scaled_to(signals, decided), state, now, tuning)
        decision = replace(
            decision,
            reason=f"{current} replicas is not the autoscaler's decision, {decided} (a hand scale): back to "
            f"its own decision, {decision.desired_replicas}: {decision.reason}",
        )
    else:
        decision = _decide(spec, signals, state, now, tuning)
    return replace(
        decision, state=decision.state.model_copy(update={"decided_replicas": decision.desired_replicas})
    )


def _as_if_scaled_to(signals: Signals, replicas: int) -> Signals:
    """The signals with the Deployment at `replicas`: the ready ones still count, the rest start."""
    ready = min(signals.ready_replicas, replicas)
    return replace(
        signals, current_replicas=replicas, ready_replicas=ready, starting_replicas=max(0, replicas - ready)
    )


def _decide(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    now: float,
    tuning: PolicyTuning,
) -> Decision:
    """The cases that leave the sizing out (at zero, a wake nobody waits for, no data, idle long enough
    to go to zero), else `_serve`."""
    current = signals.current_replicas
    if spec.scale_to_zero and current == 0:
        return at_zero(spec, signals, state, now)
    if wake_timed_out(spec, signals, state, now):
        return abandon_wake(spec, signals, state, now)
    if signals.status is SignalStatus.NO_DATA:
        low, high = spec.replica_bounds
        return _hold_without_data(signals, state, now, low, high)
    idle_since = idle_start(spec, signals, state, now)
    idle_long_enough = idle_since is not None and now - idle_since >= spec.scale_to_zero_after_seconds
    if idle_long_enough and idle_since is not None and signals.activator_available:
        return to_zero(spec, signals, state, now, idle_since)
    return _serve(spec, signals, state, now, tuning, idle_since=idle_since)


def _serve(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    now: float,
    tuning: PolicyTuning,
    *,
    idle_since: float | None,
) -> Decision:
    """A serving service: the need, then up, down or hold, and the state to remember."""
    current = signals.current_replicas
    low, high = spec.replica_bounds
    slo_met = judge_slo(spec, signals)
    capacity, corrected_time = update_capacity(spec, signals, state, now, tuning)
    budget = update_budget(spec, signals, state.error_budget, now, tuning)
    # The error budget sets how much of the SLO the wait is sized under (the rest is headroom).
    tuning = replace(tuning, slo_headroom=sizing_share(budget, tuning))
    breach_since = persistent_breach_since(slo_met, signals, state, now)
    need, burst = _need_now(
        spec, signals, state, now, tuning, capacity=capacity, breach_since=breach_since, idle_since=idle_since
    )
    recommended = min(max(need.replicas, low), high)
    history = remembered_history(
        spec, state, recommended, current=current, now=now, tuning=tuning, queued=need.queued
    )
    desired, reason, history = _move(
        spec, signals, state, now, tuning, need=need, burst=burst, recommended=recommended, history=history,
        slo_met=slo_met, capacity=capacity,
    )  # fmt: skip
    remembered = {
        "recommendations": history,
        "slo_breach_since": breach_since,
        "burst_since": burst.since,
        "recent_scale_ups": recent_scale_ups(spec, state, now) + ([now] if desired > current else []),
        "capacity_tokens_per_second": capacity,
        "capacity_corrected_time": corrected_time,
        "idle_since": idle_since,
        "error_budget": budget,
    }
    limited = need.replicas > high
    return Decision(
        desired_replicas=desired,
        reason=reason,
        state=_served_state(state, signals, now, current=current, desired=desired, remembered=remembered),
        needed_replicas=need.replicas,
        scaling_limited=limited,
        limited_message=f"SLO cannot be met at maxReplicas={high}: needs ~{need.replicas}"
        if limited
        else None,
        slo_met=slo_met,
    )


def _move(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    now: float,
    tuning: PolicyTuning,
    *,
    need: Need,
    burst: Burst,
    recommended: int,
    history: list[Recommendation],
    slo_met: bool | None,
    capacity: float | None,
) -> tuple[int, str, list[Recommendation]]:
    """Up, down or hold towards the recommended replicas: the replicas, why, and the history remembered."""
    current = signals.current_replicas
    if recommended > current:
        return _scale_up(
            spec, signals, state, now, tuning, need=need, recommended=recommended, history=history,
            slo_met=slo_met, capacity=capacity,
        )  # fmt: skip
    if recommended < current and burst.floor >= current and burst.need is not None:
        return current, f"holding {current}: {need.why}, but {burst.need.why}", history
    if recommended < current:
        window = stabilization_window(history, now, spec, tuning)
        stabilized = highest_since(history, now - window)
        desired, reason = scale_down(
            spec, tuning, current=current, need=need, stabilized=max(stabilized, burst.floor), window=window,
            slo_met=slo_met, last_down=state.last_scale_down_time, now=now, low=spec.replica_bounds[0],
        )  # fmt: skip
        return desired, reason, history
    return current, f"steady at {current}: {need.why}", history


def _need_now(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    now: float,
    tuning: PolicyTuning,
    *,
    capacity: float | None,
    breach_since: float | None,
    idle_since: float | None,
) -> tuple[Need, Burst]:
    """The replicas the load needs (the burst window's when a burst acts), and what the burst window says."""
    if signals.status is SignalStatus.IDLE:
        return idle_need(spec, idle_since, now), Burst(None, None)
    need = load_need(spec, signals, state, capacity, tuning, breach_since=breach_since, now=now)
    burst = observe_burst(spec, signals, state, capacity, tuning, now=now)
    if burst.acts(need, signals.current_replicas, now, tuning) and burst.need is not None:
        need = burst.need
    return need, burst


def _scale_up(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    now: float,
    tuning: PolicyTuning,
    *,
    need: Need,
    recommended: int,
    history: list[Recommendation],
    slo_met: bool | None,
    capacity: float | None,
) -> tuple[int, str, list[Recommendation]]:
    """More replicas are recommended: held while the rise is within the noise and unconfirmed, else taken
    (a step ahead when the load is climbing). The replicas, why, and the history as remembered."""
    current = signals.current_replicas
    if not need.burst and unconfirmed(
        recommended, history, now, signals=signals, slo_met=slo_met, capacity=capacity, spec=spec,
        tuning=tuning, last_down=state.last_scale_down_time,
    ):  # fmt: skip
        if history[-1].time == now:
            # A rise this evaluation set, and held as noise: not evidence of a burst (`stabilization_window`).
            history[-1] = history[-1].model_copy(update={"confirming": True})
        return (
            current,
            (
                f"holding {current}: {need.why}; a rise of {recommended - current} is taken once it has held "
                f"{tuning.scale_up_confirm_seconds:.0f}s"
            ),
            history,
        )
    rises = count_rises(recent_scale_ups(spec, state, now), signals.window_seconds)
    high = spec.replica_bounds[1]
    ahead = climb_ahead(spec, state, now, tuning, rises=rises, recommended=recommended, high=high)
    if not ahead:
        return recommended, f"scale up {current} -> {recommended}: {need.why}", history
    desired = recommended + ahead
    return (
        desired,
        (
            f"scale up {current} -> {desired}: {need.why}; {ahead} ahead of it: the load is climbing "
            f"({rises} rises before this one within the last {spec.scale_down_stabilization_seconds}s, "
            "the need's floor risen)"
        ),
        taken_ahead(history, now, desired, ahead),
    )


def _served_state(
    state: AutoscalerState,
    signals: Signals,
    now: float,
    *,
    current: int,
    desired: int,
    remembered: Mapping[str, object],
) -> AutoscalerState:
    """The state after a serving evaluation: what it observed (`remembered`), the step calibration, the
    clocks of starting replicas and of each kind of scale, and a wake that is over once a replica serves."""
    return state.model_copy(
        update={
            **remembered,
            "no_data_since": None,
            "last_starting_time": now if signals.starting_replicas > 0 else state.last_starting_time,
            "step_calibration": calibrate(state, signals),
            "activation_requested_time": None
            if signals.ready_replicas > 0
            else state.activation_requested_time,
            "last_scale_time": now if desired != current else state.last_scale_time,
            "last_scale_up_time": now if desired > current else state.last_scale_up_time,
            "last_scale_down_time": now if desired < current else state.last_scale_down_time,
        }
    )


def _hold_without_data(signals: Signals, state: AutoscalerState, now: float, low: int, high: int) -> Decision:
    """No metrics: hold the replicas (within the bounds), never scaling down blind."""
    current = signals.current_replicas
    since = state.no_data_since if state.no_data_since is not None else now
    desired = min(max(current, low), high)  # never scale down blind; still honour min/max
    return Decision(
        desired_replicas=desired,
        # When they went, not for how long: the status keeps the reason until a decision changes, so a
        # clock in it would stop at the first evaluation ("no metrics for 0s" through a whole outage).
        reason=f"no metrics since {rfc3339(datetime.fromtimestamp(since, UTC))}: holding {desired} replicas",
        # A breach is only persistent while it is seen: the outage restarts its clock. So is idleness.
        # A replica woken from zero (no pod had metrics) is recorded as starting, so the queue it finds
        # on joining (the requests the activator held) is its to drain, as after any scale-up.
        state=state.model_copy(
            update={
                "no_data_since": since,
                "slo_breach_since": None,
                "idle_since": None,
                "last_starting_time": (
                    now
                    if signals.starting_replicas > 0 and state.activation_requested_time is not None
                    else state.last_starting_time
                ),
            }
        ),
        needed_replicas=None,
        no_data=True,
    )
