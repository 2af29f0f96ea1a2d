"""Stabilization: the recommendations remembered as change points, the scale-down window (stretched when
the load comes in bursts), the confirmation a rise within the noise waits for, a climb taken a step ahead,
and the scale-down steps.
"""

from __future__ import annotations

import math
from dataclasses import replace

from llama_operator.api.autoscaling import AutoscalerState, Recommendation
from llama_operator.api.spec import AutoscalingSpec
from llama_operator.autoscale.decision import PolicyTuning
from llama_operator.autoscale.need import Need, replicas_by_queueing, waiting_per_replica
from llama_operator.autoscale.signals import Signals


def own_count(spec: AutoscalingSpec, state: AutoscalerState, current: int) -> int:
    """The count the autoscaler last decided; before it recorded one (an older version's status), the
    latest recommendation in force, else the hand count brought within the bounds."""
    low, high = spec.replica_bounds
    if state.decided_replicas is not None and spec.within_bounds(state.decided_replicas):
        return state.decided_replicas
    if state.recommendations:
        return min(max(state.recommendations[-1].replicas, low), high)
    return min(max(current, low), high)


def recent_scale_ups(spec: AutoscalingSpec, state: AutoscalerState, now: float) -> list[float]:
    """The scale-ups within the stabilization window before this evaluation."""
    return [time for time in state.recent_scale_ups if now - time <= spec.scale_down_stabilization_seconds]


def count_rises(scale_ups: list[float], rate_window: float) -> int:
    """Rises among these scale-ups: one within a rate window of the one before is the same rise, taken
    step by step as the window filled (mmpp-short-bursts#1: 4 -> 5 -> 6 at 700 and 705 s, one burst)."""
    return sum(
        1 for index, time in enumerate(scale_ups) if index == 0 or time - scale_ups[index - 1] > rate_window
    )


def climb_ahead(
    spec: AutoscalingSpec,
    state: AutoscalerState,
    now: float,
    tuning: PolicyTuning,
    *,
    rises: int,
    recommended: int,
    high: int,
) -> int:
    """Replicas to take beyond the need on this rise: `climb_ahead` when the load is climbing (see
    PolicyTuning), within maxReplicas. The floor test keeps out a load that only swings: its lowest need
    does not rise from one half of the window to the next, however often a swing up was taken."""
    if tuning.climb_rises is None or rises < tuning.climb_rises:
        return 0
    window = float(spec.scale_down_stabilization_seconds)
    earlier = _lowest_need_in(state.recommendations, now - window, now - window / 2)
    later = _lowest_need_in(state.recommendations, now - window / 2, now)
    if earlier is None or later is None or later <= earlier:
        return 0
    return max(0, min(recommended + tuning.climb_ahead, high) - recommended)


def taken_ahead(history: list[Recommendation], now: float, desired: int, ahead: int) -> list[Recommendation]:
    """The history with this evaluation's recommendation at what was taken, so that the replicas ahead are
    held through the stabilization window like the rest (marked, so that they never read as the load's)."""
    if history[-1].time == now:  # this evaluation's need, its marks kept
        return [*history[:-1], history[-1].model_copy(update={"replicas": desired, "ahead": ahead})]
    return [*history, Recommendation(time=now, replicas=desired, ahead=ahead)]


def _need_of(recommendation: Recommendation) -> int:
    """What the load needed at a recommendation, without the replicas taken ahead of a climb."""
    return recommendation.replicas - (recommendation.ahead or 0)


def _lowest_need_in(history: list[Recommendation], since: float, until: float) -> int | None:
    """The lowest need in force at any time within [since, until); None when the history does not reach
    back to `since` (nothing to compare with yet)."""
    before = [entry for entry in history if entry.time <= since]
    if not before:
        return None
    return min(_need_of(entry) for entry in [before[-1], *(e for e in history if since < e.time < until)])


def remembered_history(
    spec: AutoscalingSpec,
    state: AutoscalerState,
    recommended: int,
    *,
    current: int,
    now: float,
    tuning: PolicyTuning,
    queued: bool = False,
) -> list[Recommendation]:
    """The recommendations with this one remembered. No history (autoscaling just enabled, or state lost):
    the stabilization window starts now, with the count the autoscaler last decided (else the replicas
    running) taken as needed until then, so the first evaluation never scales down at once, and a hand
    scale is not taken as demand."""
    running = own_count(spec, state, current)
    seed = [Recommendation(time=now, replicas=running)] if recommended < running else []
    return _remember(state.recommendations or seed, now, recommended, spec, tuning, queued=queued)


def scale_down(
    spec: AutoscalingSpec,
    tuning: PolicyTuning,
    *,
    current: int,
    need: Need,
    stabilized: int,
    window: float,
    slo_met: bool | None,
    last_down: float | None,
    now: float,
    low: int,
) -> tuple[int, str]:
    """Fewer replicas are recommended: how many to keep, and why. Down in steps (at most a fraction at a
    time), never below the window's highest need, never while the SLO is broken, at most once an interval."""
    floor = current - max(1, math.floor(current * tuning.max_scale_down_fraction))
    if slo_met is False:
        # Whatever the model says, fewer replicas cannot mend a TTFT already above the SLO.
        return current, f"holding {current}: {need.why}, but TTFT is above the SLO"
    if stabilized >= current:
        return current, (
            f"holding {current}: {need.why}, but {stabilized} were needed in the last "
            f"{_window_words(window, spec)}"
        )
    if last_down is not None and now - last_down < spec.scale_down_interval_seconds:
        return current, (
            f"holding {current}: {need.why}; last scale-down {now - last_down:.0f}s ago, "
            f"scaleDownIntervalSeconds is {spec.scale_down_interval_seconds}s"
        )
    desired = max(stabilized, floor, low)
    return desired, (
        f"scale down {current} -> {desired}: {need.why}; highest need in the last {_window_words(window, spec)}"
    )


def _remember(
    history: list[Recommendation],
    now: float,
    replicas: int,
    spec: AutoscalingSpec,
    tuning: PolicyTuning,
    *,
    queued: bool = False,
) -> list[Recommendation]:
    """Recommendations as change points (a new entry only when the value changes), kept for the longest
    window the policy may use, plus the one in force at its start. Keeps the CR status small."""
    horizon = now - spec.scale_down_stabilization_seconds * max(
        tuning.burst_window_factor, tuning.burst_memory_factor
    )
    kept = [r for r in history if r.time >= horizon]
    older = [r for r in history if r.time < horizon]
    if older:
        kept.insert(0, older[-1])
    if not kept or kept[-1].replicas != replicas:
        kept.append(Recommendation(time=now, replicas=replicas, queued=queued or None))
    return kept


def unconfirmed(
    recommended: int,
    history: list[Recommendation],
    now: float,
    *,
    signals: Signals,
    slo_met: bool | None,
    capacity: float | None,
    spec: AutoscalingSpec,
    tuning: PolicyTuning,
    last_down: float | None = None,
) -> bool:
    """A small rise of the need that the rate window's own noise could explain, not yet held for
    `scale_up_confirm_seconds` (see PolicyTuning); never while the SLO is broken or the queue is over its
    target. Noise: the current replicas would do at the request rate less `confirm_noise_sigmas` standard
    deviations of a Poisson count over the window (a flash crowd is far outside it, and acts at once)."""
    current = signals.current_replicas
    if recommended - current > tuning.confirm_rise or slo_met is False:
        return False
    if waiting_per_replica(signals) > spec.slo.queue_depth_per_replica:
        return False
    rate, window = signals.request_rate, signals.window_seconds
    # Within scaleDownIntervalSeconds of a scale-down, the smaller fleet is on watch: the scale-down found
    # the whole stabilization window needing fewer, so a rise of one replica back is most likely the
    # window's own noise, and the Poisson test below counts arrivals only, not the prompt sizes that swing
    # the token rate as much (pareto-prompts: 2 -> 3 at once, 90 s after 3 -> 2, twice). It is taken once
    # it has held; a broken SLO or a queue over target still acts at once (above).
    just_down = last_down is not None and 0 <= now - last_down < spec.scale_down_interval_seconds
    if not just_down and capacity is not None and rate > 0 and window > 0 and signals.prompt_token_rate > 0:
        lower = rate - tuning.confirm_noise_sigmas * math.sqrt(rate / window)
        # At or below zero the noise explains the whole rate: no beyond-the-noise test, only the hold.
        if lower > 0:
            low_load = replace(
                signals, request_rate=lower, prompt_token_rate=signals.prompt_token_rate * lower / rate
            )
            if replicas_by_queueing(spec, low_load, capacity, tuning) > current:
                return False  # beyond what noise explains
    since = now
    for entry in reversed(history):
        if entry.replicas <= current:
            break
        since = entry.time
    return now - since < tuning.scale_up_confirm_seconds


def highest_since(history: list[Recommendation], since: float) -> int:
    """Highest recommendation in force at any time since `since` (change points: the one before counts)."""
    in_force = [r.replicas for r in history if r.time >= since]
    before = [r for r in history if r.time < since]
    if before:
        in_force.append(before[-1].replicas)
    return max(in_force)


def _window_words(window: float, spec: AutoscalingSpec) -> str:
    """The stabilization window, named by the knob that sets it: '60s (scaleDownStabilizationSeconds)',
    or '180s (3 x scaleDownStabilizationSeconds: the load came in bursts)'."""
    base = spec.scale_down_stabilization_seconds
    if base > 0 and window != base:
        return f"{window:.0f}s ({window / base:g} x scaleDownStabilizationSeconds: the load came in bursts)"
    return f"{window:.0f}s (scaleDownStabilizationSeconds)"


def stabilization_window(
    history: list[Recommendation], now: float, spec: AutoscalingSpec, tuning: PolicyTuning
) -> float:
    """The spec's window, stretched when the load has come in bursts: when the need rose sharply (by
    `burst_rise` replicas at once, `burst_count` times) within the burst memory, replicas are held
    through the longer window, since the next burst is likely and a replica takes a cold start to
    come back. A rise the queue-depth target set does not count: a backlog read at one scrape sizes the
    replicas by the requests waiting (KEDA's way), not by the rate they arrive at, so a short spike reads
    as a rise of several replicas, and holding that count for three windows held replicas no load had
    asked for (compressed-day-gaps: 2 -> 6 on a 10 s spike, 6 held for 15 minutes). Nor does a rise held
    as noise (`unconfirmed`): one evaluation's need a replica above the replicas there, beside a dip a
    minute before, read as a rise of two (conversation: 3 held for 15 minutes on a need of 2)."""
    base = float(spec.scale_down_stabilization_seconds)
    memory = base * tuning.burst_memory_factor
    rises = sum(
        1
        for index, current in enumerate(history)
        if index > 0
        and now - current.time <= memory
        and not current.queued
        and not current.confirming
        and _need_of(current) >= _lowest_before(history, index, tuning.burst_rise_seconds) + tuning.burst_rise
    )
    return base * tuning.burst_window_factor if rises >= tuning.burst_count else base


def _lowest_before(history: list[Recommendation], index: int, seconds: float) -> int:
    """The lowest recommendation in force within `seconds` before change point `index` (the one just
    before it at least): a need that climbs a replica per evaluation rises as sharply as one that jumps."""
    since = history[index].time - seconds
    lowest = _need_of(history[index - 1])
    for earlier in range(index - 2, -1, -1):
        if history[earlier + 1].time < since:  # it was replaced before the span began
            break
        lowest = min(lowest, _need_of(history[earlier]))
    return lowest
