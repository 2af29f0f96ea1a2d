"""The SLO autoscaling policy: `decide(spec, signals, state, now) -> Decision`.

Pure and deterministic: time is an argument, everything remembered between evaluations is in
`AutoscalerState` (persisted in the LlamaService status). The same function runs in the operator
and in the simulator.

Scale-up is sized from the load in one step: an M/M/c estimate of the replicas that keep
P(queue wait > headroom * SLO - mean prefill time) under a share of 1 - percentile (window_tail_share)
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

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from llama_operator.api.autoscaling import AutoscalerState, Recommendation
from llama_operator.api.spec import AutoscalingSpec
from llama_operator.autoscale.calibration import (
    calibrate,
    calibrated_capacity_prior,
    calibrated_model,
    plan_step_model,
)
from llama_operator.autoscale.queueing import replicas_for_wait
from llama_operator.autoscale.signals import Signals, SignalStatus
from llama_operator.catalog.performance import StepModel
from llama_operator.catalog.vllm import measurable_tpot, tpot_judged_at

# The calibrated steps are taken as slower than the plan's beyond this ratio (the fit's noise at the
# plan's own speed is a few percent).
CALIBRATED_SLOWER = 1.1
# The prompt chunk the calibrated capacity prior is compared at when the plan gives none (vLLM's default
# step budget for a served model).
PRIOR_CHUNK_TOKENS = 2048


@dataclass(frozen=True, slots=True)
class PolicyTuning:
    """Knobs of the policy that are not part of the user's contract."""

    slo_headroom: float = 0.5  # size for TTFT <= headroom * SLO at the percentile, leaving room for bursts
    max_utilization: float = 0.8  # never plan a replica's prefill above this share of its capacity
    backlog_drain_seconds: float = 20.0  # a queue found waiting should be gone within this
    kv_usage_target: float = 0.85  # KV cache usage per replica above which replicas are added
    capacity_correction: float = 0.9  # factor applied to the capacity estimate when the model is found wrong
    # Learned capacity stays within this band of the prior. Its floor is low enough for the effective
    # prefill rate of replicas whose steps also read long decode contexts (long prompts and outputs).
    capacity_band: tuple[float, float] = (0.4, 1.5)
    max_scale_down_fraction: float = 0.5  # at most this share of replicas removed in one step
    burst_window_factor: float = 3.0  # stabilization stretch when the load comes in bursts
    burst_memory_factor: float = 6.0  # bursts within this many windows make the load bursty
    burst_rise: int = 2  # a rise of the need by this many replicas at once counts as a burst
    burst_count: int = 1  # this many bursts within the burst memory make the load bursty
    burst_rise_seconds: float = 60.0  # ... a rise by burst_rise within this many seconds (0: at once)
    # A rise of at most `confirm_rise` replicas that the current replicas would serve at the request rate
    # less `confirm_noise_sigmas` Poisson standard deviations is taken only once the need has stood that
    # high for `scale_up_confirm_seconds`: a 20 s rate window of Poisson arrivals and varied prompts swings
    # by a replica's worth on its own. A rise beyond the noise (a flash crowd), a larger rise, a queue over
    # target and a broken SLO act at once.
    confirm_rise: int = 1
    scale_up_confirm_seconds: float = 30.0
    confirm_noise_sigmas: float = 2.0
    # The request at the percentile prompt length must wait at most this share of the SLO less its own
    # prefill (vllm:request_prompt_tokens); None: size from the mean prompt only. Below 1: a long prompt's
    # prefill shares its steps with the running decodes (chunked prefill), so it takes longer than its
    # tokens over the prefill capacity.
    prompt_tail_headroom: float | None = 0.9
    # Replicas are sized so that this share of the SLO's tail (1 % of requests for a p95 SLO) waits past
    # the budget. Each one-minute window's percentile is a sample of a few hundred requests: sized at
    # exactly the SLO's tail, about half the windows of a steady load end above it.
    window_tail_share: float = 0.2
    # The burst response (Knative's panic mode in spirit): the load of the burst window (a scrape or two,
    # Signals.burst_*), less this many Poisson standard deviations of its count, sizes the replicas at
    # once when it needs more than the rate window's load and the replicas there are, and holds the
    # replicas it needs while it lasts. None: off.
    burst_noise_sigmas: float | None = 2.0
    # ... once every evaluation for this long has seen a burst: a single burst window beyond 2 sigmas
    # comes by chance a few times an hour at a steady load; two in a row do not.
    burst_confirm_seconds: float = 5.0
    # TPOT: a step carrying a prompt chunk (--max-num-batched-tokens less the batch) that the step model
    # puts above this share of the objective is taken as over it (the calibrated model is off by about
    # that much). Where it is, the decode tokens such steps give are held under `chunk_step_tail_share`
    # of the objective's tail (1 - percentile): each minute holds thousands of tokens, so a share closer
    # to the tail than TTFT's per-request `window_tail_share` keeps the window's percentile.
    chunk_step_margin: float = 0.9
    chunk_step_tail_share: float = 0.5
    # A climb: a rise after `climb_rises` rises within the stabilization window (scale-ups within one rate
    # window of each other are one rise, seen step by step as the window fills), with the need's floor in
    # the window's later half above its floor in the earlier half (the load rose, not only its noise), is
    # taken `climb_ahead` replicas beyond the need. A load that has risen three times in a window is likely
    # to rise again before a replica starts; a step ahead saves that step's change and its cold start
    # (mixed: 4 -> 12 in eight scale-ups). None: off.
    climb_rises: int | None = 2
    climb_ahead: int = 1


DEFAULT_TUNING = PolicyTuning()


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy decided, and why."""

    desired_replicas: int
    reason: str
    state: AutoscalerState
    needed_replicas: int | None = None  # replicas the load needs (None on no data), before min/max
    scaling_limited: bool = False  # the SLO needs more than maxReplicas
    limited_message: str | None = None
    # Observed TTFT (and TPOT) percentile within the SLO; None when there is no observation.
    slo_met: bool | None = None
    no_data: bool = False
    scaled_to_zero: bool = False  # the decision leaves the service with no replica (idle)
    wake_timed_out: bool = False  # back to zero: a wake no replica answered in time, nobody waiting now


@dataclass(frozen=True, slots=True)
class _Need:
    replicas: int
    why: str
    burst: bool = False  # sized from the burst window: taken at once, no confirmation
    queued: bool = False  # sized by the queue-depth target (Recommendation.queued)


def decide(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    now: float,
    tuning: PolicyTuning = DEFAULT_TUNING,
) -> Decision:
    """Desired replicas for one LlamaService, from this cycle's signals and the remembered state.

    A count past the bounds was decided by nobody (a hand scale, `kubectl scale`): the policy decides as
    if the Deployment still had the count it last decided, so the hand value is never taken as demand,
    and the result replaces it at once, whatever the windows and intervals say."""
    current = signals.current_replicas
    if spec.within_bounds(current):
        decision = _decide(spec, signals, state, now, tuning)
    else:
        own = _own_count(spec, state, current)
        decision = _decide(spec, _as_if_scaled_to(signals, own), state, now, tuning)
        decision = replace(
            decision,
            reason=f"{current} replicas is outside [{spec.min_replicas}, {spec.max_replicas}] (a hand scale): "
            f"back to the autoscaler's own decision, {decision.desired_replicas}: {decision.reason}",
        )
    return replace(
        decision, state=decision.state.model_copy(update={"decided_replicas": decision.desired_replicas})
    )


def _own_count(spec: AutoscalingSpec, state: AutoscalerState, current: int) -> int:
    """The count the autoscaler last decided; before it recorded one (an older version's status), the
    latest recommendation in force, else the hand count brought within the bounds."""
    low, high = spec.replica_bounds
    if state.decided_replicas is not None and spec.within_bounds(state.decided_replicas):
        return state.decided_replicas
    if state.recommendations:
        return min(max(state.recommendations[-1].replicas, low), high)
    return min(max(current, low), high)


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
        return _at_zero(spec, signals, state, now)
    if _wake_timed_out(spec, signals, state, now):
        return _abandon_wake(spec, signals, state, now)
    if signals.status is SignalStatus.NO_DATA:
        low, high = spec.replica_bounds
        return _hold_without_data(signals, state, now, low, high)
    idle_since = _idle_since(spec, signals, state, now)
    idle_long_enough = idle_since is not None and now - idle_since >= spec.scale_to_zero_after_seconds
    if idle_long_enough and idle_since is not None and signals.activator_available:
        return _to_zero(spec, signals, state, now, idle_since)
    return _serve(spec, signals, state, now, tuning, idle_since=idle_since)


@dataclass(frozen=True, slots=True)
class _Burst:
    """What the burst window says this evaluation: its need (None when its load is within the noise of
    the rate window's) and since when every evaluation has seen one (status: burstSince)."""

    need: _Need | None
    since: float | None

    def acts(self, need: _Need, current: int, now: float, tuning: PolicyTuning) -> bool:
        """Seen for `burst_confirm_seconds` (one lucky burst window is not a burst) and needing more than
        the rate window and the replicas there are: it sizes the replicas at once."""
        return (
            self.need is not None
            and self.since is not None
            and now - self.since >= tuning.burst_confirm_seconds
            and self.need.replicas > max(need.replicas, current)
        )

    @property
    def floor(self) -> int:
        """While a burst is seen, the replicas its load needs are not removed."""
        return 0 if self.need is None else self.need.replicas


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
    slo_met = _slo_met(spec, signals)
    capacity, corrected_time = _update_capacity(spec, signals, state, now, tuning)
    breach_since = _persistent_breach_since(slo_met, signals, state, now)
    burst = _Burst(None, None)
    if signals.status is SignalStatus.IDLE:
        need = _idle_need(spec, idle_since, now)
    else:
        need = _load_need(spec, signals, state, capacity, tuning, breach_since=breach_since, now=now)
        burst = _observe_burst(spec, signals, state, capacity, tuning, now=now)
        if burst.acts(need, current, now, tuning) and burst.need is not None:
            need = burst.need

    recommended = min(max(need.replicas, low), high)
    history = _history(spec, state, recommended, current=current, now=now, tuning=tuning, queued=need.queued)
    window = _stabilization_window(history, now, spec, tuning)
    stabilized = _highest_since(history, now - window)
    limited = need.replicas > high
    limited_message = f"SLO cannot be met at maxReplicas={high}: needs ~{need.replicas}" if limited else None

    desired, reason = current, f"steady at {current}: {need.why}"
    if (
        recommended > current
        and not need.burst
        and _unconfirmed(
            recommended,
            history,
            now,
            signals=signals,
            slo_met=slo_met,
            capacity=capacity,
            spec=spec,
            tuning=tuning,
            last_down=state.last_scale_down_time,
        )
    ):
        reason = (
            f"holding {current}: {need.why}; a rise of {recommended - current} is taken once it has held "
            f"{tuning.scale_up_confirm_seconds:.0f}s"
        )
        if history[-1].time == now:
            # A rise this evaluation set, and held as noise: not evidence of a burst (`_stabilization_window`).
            history[-1] = history[-1].model_copy(update={"confirming": True})
    elif recommended > current:
        desired, reason = recommended, f"scale up {current} -> {recommended}: {need.why}"
        rises = _rises(_recent_scale_ups(spec, state, now), signals.window_seconds)
        ahead = _climb_ahead(spec, state, now, tuning, rises=rises, recommended=recommended, high=high)
        if ahead:
            desired = recommended + ahead
            reason = (
                f"scale up {current} -> {desired}: {need.why}; {ahead} ahead of it: the load is climbing "
                f"({rises} rises before this one within the last {spec.scale_down_stabilization_seconds}s, "
                "the need's floor risen)"
            )
            history = _taken_ahead(history, now, desired, ahead)
    elif recommended < current and burst.floor >= current and burst.need is not None:
        reason = f"holding {current}: {need.why}, but {burst.need.why}"
    elif recommended < current:
        desired, reason = _scale_down(
            spec, tuning, current=current, need=need, stabilized=max(stabilized, burst.floor), window=window,
            slo_met=slo_met, last_down=state.last_scale_down_time, now=now, low=low,
        )  # fmt: skip

    remembered = {
        "recommendations": history,
        "slo_breach_since": breach_since,
        "burst_since": burst.since,
        "recent_scale_ups": _recent_scale_ups(spec, state, now) + ([now] if desired > current else []),
        "capacity_tokens_per_second": capacity,
        "capacity_corrected_time": corrected_time,
        "idle_since": idle_since,
    }
    return Decision(
        desired_replicas=desired,
        reason=reason,
        state=_served_state(state, signals, now, current=current, desired=desired, remembered=remembered),
        needed_replicas=need.replicas,
        scaling_limited=limited,
        limited_message=limited_message,
        slo_met=slo_met,
    )


def _recent_scale_ups(spec: AutoscalingSpec, state: AutoscalerState, now: float) -> list[float]:
    """The scale-ups within the stabilization window before this evaluation."""
    return [time for time in state.recent_scale_ups if now - time <= spec.scale_down_stabilization_seconds]


def _rises(scale_ups: list[float], rate_window: float) -> int:
    """Rises among these scale-ups: one within a rate window of the one before is the same rise, taken
    step by step as the window filled (mmpp-short-bursts#1: 4 -> 5 -> 6 at 700 and 705 s, one burst)."""
    return sum(
        1 for index, time in enumerate(scale_ups) if index == 0 or time - scale_ups[index - 1] > rate_window
    )


def _climb_ahead(
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


def _taken_ahead(history: list[Recommendation], now: float, desired: int, ahead: int) -> list[Recommendation]:
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


def _idle_need(spec: AutoscalingSpec, idle_since: float | None, now: float) -> _Need:
    """No request in the window: minReplicas (zero is reached only through the idle rule, with an
    activator)."""
    low = spec.replica_bounds[0]
    if idle_since is None:
        return _Need(low, "idle: no requests in the window")
    idle_for = now - idle_since
    if idle_for >= spec.scale_to_zero_after_seconds:  # and no activator: `_decide` went to zero otherwise
        return _Need(low, "idle, but no activator is ready to hold requests: not scaling to zero")
    return _Need(
        low, f"idle for {idle_for:.0f}s of scaleToZeroAfterSeconds {spec.scale_to_zero_after_seconds}s"
    )


def _load_need(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    capacity: float | None,
    tuning: PolicyTuning,
    *,
    breach_since: float | None,
    now: float,
) -> _Need:
    """Replicas the rate window's load needs: the larger of the TTFT-driven and the TPOT-driven need."""
    breach_seconds = 0.0 if breach_since is None else now - breach_since
    absorbing = signals.starting_replicas > 0 or (
        state.last_starting_time is not None and now - state.last_starting_time < signals.window_seconds
    )
    need = _needed_replicas(
        spec, signals, capacity, breach_seconds=breach_seconds, absorbing=absorbing, tuning=tuning
    )
    decode = _replicas_by_decode(spec, signals, state, tuning, breach_seconds=breach_seconds)
    return decode if decode is not None and decode.replicas > need.replicas else need


def _history(
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
    running = _own_count(spec, state, current)
    seed = [Recommendation(time=now, replicas=running)] if recommended < running else []
    return _remember(state.recommendations or seed, now, recommended, spec, tuning, queued=queued)


def _observe_burst(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    capacity: float | None,
    tuning: PolicyTuning,
    *,
    now: float,
) -> _Burst:
    """The burst window's load, at its lower noise bound (its rate less `burst_noise_sigmas` Poisson
    standard deviations of its count), against the rate window's: a burst when it is above it, sized by
    the same queueing model at the mean prompt (the prompt tail is the rate window's to judge: a few
    seconds of prompts are too few for a percentile)."""
    rate, window, sigmas = signals.burst_request_rate, signals.burst_window_seconds, tuning.burst_noise_sigmas
    if sigmas is None or capacity is None or not rate or not window or signals.request_rate <= 0:
        return _Burst(None, None)
    lower = rate - sigmas * math.sqrt(rate / window)
    if lower <= signals.request_rate:
        return _Burst(None, None)
    prompt = signals.prompt_token_rate / signals.request_rate
    load = replace(
        signals, request_rate=lower, prompt_token_rate=lower * prompt, prompt_tokens_percentile=None
    )
    replicas = _replicas_by_queueing(spec, load, capacity, tuning)
    why = (
        f"a burst: {rate:.2f} req/s in the last {window:.0f}s (at least {lower:.2f} beyond its noise, "
        f"against {signals.request_rate:.2f} over {signals.window_seconds:.0f}s) needs {replicas}"
    )
    since = state.burst_since if state.burst_since is not None else now
    return _Burst(_Need(replicas, why, burst=True), since)


def _scale_down(
    spec: AutoscalingSpec,
    tuning: PolicyTuning,
    *,
    current: int,
    need: _Need,
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


def _hold_without_data(signals: Signals, state: AutoscalerState, now: float, low: int, high: int) -> Decision:
    """No metrics: hold the replicas (within the bounds), never scaling down blind."""
    current = signals.current_replicas
    since = state.no_data_since if state.no_data_since is not None else now
    desired = min(max(current, low), high)  # never scale down blind; still honour min/max
    return Decision(
        desired_replicas=desired,
        reason=f"no metrics for {now - since:.0f}s: holding {desired} replicas",
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


def _recent_demand(signals: Signals, now: float) -> bool:
    """The activator reported holding a request within the signal window: the service is not idle."""
    return signals.demand_time is not None and now - signals.demand_time < signals.window_seconds


def _idle_since(spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, now: float) -> float | None:
    """Since when the service has been idle at every evaluation (None: it is not idle now). Only counted
    with scale to zero on: idle means metrics present and no request, never "no data"."""
    if not spec.scale_to_zero or signals.status is not SignalStatus.IDLE or _recent_demand(signals, now):
        return None
    return state.idle_since if state.idle_since is not None else now


def _to_zero(
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


def _wake_timed_out(spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, now: float) -> bool:
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


def _abandon_wake(spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, now: float) -> Decision:
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


def _at_zero(spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, now: float) -> Decision:
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


def _unconfirmed(
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
    if _queue_per_replica(signals) > spec.slo.queue_depth_per_replica:
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
            if _replicas_by_queueing(spec, low_load, capacity, tuning) > current:
                return False  # beyond what noise explains
    since = now
    for entry in reversed(history):
        if entry.replicas <= current:
            break
        since = entry.time
    return now - since < tuning.scale_up_confirm_seconds


def _queue_per_replica(signals: Signals) -> float:
    """Requests waiting per ready replica (per one, while none is ready), against the user's target."""
    return signals.queue_waiting_total / max(signals.ready_replicas, 1)


def _highest_since(history: list[Recommendation], since: float) -> int:
    """Highest recommendation in force at any time since `since` (change points: the one before counts)."""
    in_force = [r.replicas for r in history if r.time >= since]
    before = [r for r in history if r.time < since]
    if before:
        in_force.append(before[-1].replicas)
    return max(in_force)


def _headroom_words(spec: AutoscalingSpec, tuning: PolicyTuning) -> str:
    """What the replicas are sized for, against the SLO the user wrote: 'sizing for 0.50s (50% headroom
    under your 1s p95 TTFT SLO)'. The headroom is the policy's, not the user's objective."""
    slo = spec.slo
    return (
        f"sizing for {slo.ttft_seconds * tuning.slo_headroom:.2f}s ({1 - tuning.slo_headroom:.0%} headroom "
        f"under your {slo.ttft_seconds:g}s p{slo.percentile:g} TTFT SLO)"
    )


def _window_words(window: float, spec: AutoscalingSpec) -> str:
    """The stabilization window, named by the knob that sets it: '60s (scaleDownStabilizationSeconds)',
    or '180s (3 x scaleDownStabilizationSeconds: the load came in bursts)'."""
    base = spec.scale_down_stabilization_seconds
    if base > 0 and window != base:
        return f"{window:.0f}s ({window / base:g} x scaleDownStabilizationSeconds: the load came in bursts)"
    return f"{window:.0f}s (scaleDownStabilizationSeconds)"


def _stabilization_window(
    history: list[Recommendation], now: float, spec: AutoscalingSpec, tuning: PolicyTuning
) -> float:
    """The spec's window, stretched when the load has come in bursts: when the need rose sharply (by
    `burst_rise` replicas at once, `burst_count` times) within the burst memory, replicas are held
    through the longer window, since the next burst is likely and a replica takes a cold start to
    come back. A rise the queue-depth target set does not count: a backlog read at one scrape sizes the
    replicas by the requests waiting (KEDA's way), not by the rate they arrive at, so a short spike reads
    as a rise of several replicas, and holding that count for three windows held replicas no load had
    asked for (compressed-day-gaps: 2 -> 6 on a 10 s spike, 6 held for 15 minutes). Nor does a rise held
    as noise (`_unconfirmed`): one evaluation's need a replica above the replicas there, beside a dip a
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


def _persistent_breach_since(
    slo_met: bool | None, signals: Signals, state: AutoscalerState, now: float
) -> float | None:
    """Since when the TTFT percentile has been above the SLO at every evaluation with no replica
    starting; None when it is not now (a start resets it: the new replica gets its chance first)."""
    if slo_met is not False or signals.starting_replicas > 0:
        return None
    return state.slo_breach_since if state.slo_breach_since is not None else now


def objective_met(observed: float | None, objective: float | None) -> bool | None:
    """An observed percentile within its objective (at or below it); None when either is missing. The one
    place that judges a latency against its SLO: the policy and the status conditions both ask it."""
    if observed is None or objective is None:
        return None
    return observed <= objective


def tpot_objective_met(observed: float | None, objective: float | None) -> bool | None:
    """`objective_met` for TPOT, the objective judged as it can be read from vLLM's histogram
    (catalog/vllm.py tpot_judged_at)."""
    return objective_met(observed, None if objective is None else tpot_judged_at(objective))


def _tpot_met(spec: AutoscalingSpec, signals: Signals) -> bool | None:
    return tpot_objective_met(signals.tpot_percentile_seconds, spec.slo.tpot_seconds)


def _ttft_met(spec: AutoscalingSpec, signals: Signals) -> bool | None:
    return objective_met(signals.ttft_percentile_seconds, spec.slo.ttft_seconds)


def _slo_met(spec: AutoscalingSpec, signals: Signals) -> bool | None:
    """Both objectives held (False when either is missed; None when neither was observed)."""
    ttft_met = _ttft_met(spec, signals)
    tpot_met = _tpot_met(spec, signals)
    if ttft_met is False or tpot_met is False:
        return False
    if ttft_met is None and tpot_met is None:
        return None
    return True


def _step_model(state: AutoscalerState) -> StepModel | None:
    """The plan's step model, as the reconciler seeded it into the state, with the factors calibrated from
    the replicas' own steps once there are any (autoscale/calibration.py); None when unknown."""
    return calibrated_model(state)


def _replicas_by_decode(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    tuning: PolicyTuning,
    *,
    breach_seconds: float,
) -> _Need | None:
    """Replicas that decode the observed output-token rate with every token within the TPOT objective.

    A decoding sequence holds the context `_decode_context` finds. One replica decodes at most the batch
    whose every step, one carrying a prompt chunk too, meets the objective, and never more than the plan's
    max-num-seqs; its tokens per second are that batch over its mean step, less the time its share of the
    prompts takes to prefill (catalog.performance), at most `max_utilization` of it planned. A TPOT that
    has stayed above the objective for two whole windows with nothing starting, while the model says the
    replicas suffice, adds one replica (as TTFT does)."""
    slo = spec.slo
    steps = _step_model(state)
    if slo.tpot_seconds is None or signals.request_rate <= 0 or signals.generation_token_rate <= 0:
        return None
    tpot = signals.tpot_percentile_seconds
    judged = tpot_judged_at(slo.tpot_seconds)
    breached = tpot is not None and tpot > judged and breach_seconds >= 2 * signals.window_seconds
    ready = max(signals.ready_replicas, 1)
    if steps is None:
        if breached and tpot is not None:
            return _Need(min(2 * ready, math.ceil(ready * tpot / judged)), _tpot_why(spec, tpot))
        return None
    context = _decode_context(signals, state)
    budget = (state.chunk_tokens or 0) + (state.max_num_seqs or 0)  # --max-num-batched-tokens
    # Sized for what the percentile read from vLLM's histogram shows met (catalog/vllm.py: between two
    # bounds it interpolates, so steps within the objective but over the bound below read as over it).
    objective = measurable_tpot(slo.tpot_seconds or 0.0)
    # A step with a prompt chunk beside one sequence: the most prompt a step carries. Taken as over the
    # objective within `chunk_step_margin` of it only where the calibration finds the steps slower than the
    # plan's (the fit's own error, mu's above all, is about that much); at the plan's speed the planner
    # sized that step, and a margin would read a step it keeps within the objective as one over it.
    chunk_step = steps.step_seconds(1, context, budget - 1) if budget > 1 else 0.0
    planned = plan_step_model(state)
    planned_step = planned.step_seconds(1, context, budget - 1) if planned is not None and budget > 1 else 0.0
    slower = chunk_step > planned_step * CALIBRATED_SLOWER
    chunk_steps_over = chunk_step > objective * (tuning.chunk_step_margin if slower else 1.0)

    def per_replica(replicas: int) -> float:
        # Each replica prefills its share of the prompts too, which takes from its decoding time. Where a
        # step with a prompt chunk is over the objective anyway, only the steps without one are held to it.
        return steps.decode_tokens_per_second(
            objective,
            0 if chunk_steps_over else state.chunk_tokens or 0,
            context,
            state.max_num_seqs,
            signals.prompt_token_rate / replicas,
        )

    def chunk_share(replicas: int) -> float:
        batch = max(1, math.ceil(signals.running_total / replicas))
        return steps.chunk_step_token_share(batch, context, budget, signals.prompt_token_rate / replicas)

    if per_replica(spec.max_replicas) <= 0:
        return _Need(spec.max_replicas + 1, f"no batch decodes {context:.0f}-token sequences within TPOT")
    by_throughput = next(
        (
            n
            for n in range(1, spec.max_replicas + 1)
            if signals.generation_token_rate <= n * per_replica(n) * tuning.max_utilization
        ),
        spec.max_replicas + 1,
    )
    why = (
        f"{signals.generation_token_rate:.0f} output tok/s at ~{per_replica(by_throughput):.0f} tok/s per replica "
        f"within TPOT {slo.tpot_seconds:g}s need {by_throughput}"
    )
    replicas = by_throughput
    if chunk_steps_over:
        tail = (1.0 - slo.percentile / 100.0) * tuning.chunk_step_tail_share
        by_share = next(
            (n for n in range(1, spec.max_replicas + 1) if chunk_share(n) <= tail), spec.max_replicas + 1
        )
        if by_share > replicas:
            replicas = by_share
            why = (
                f"a step carrying a prompt chunk takes ~{chunk_step * 1000:.0f}ms "
                f"against TPOT {slo.tpot_seconds:g}s: {signals.prompt_token_rate:.0f} prompt tok/s need {replicas} "
                f"replicas to keep the tokens of such steps under {tail:.1%}"
            )
    need = _Need(replicas, why)
    if breached and tpot is not None and replicas <= signals.ready_replicas:
        return _Need(ready + 1, _tpot_why(spec, tpot))
    return need


def _decode_context(signals: Signals, state: AutoscalerState) -> float:
    """Tokens of context a decoding sequence holds: the KV cache in use over the requests running (what
    each step reads), when the plan's KV size is known; else its prompt plus half its output, from the
    token rates. The rates mislead when arrivals pause while long answers are still being generated:
    few new requests over many output tokens reads as one enormous answer."""
    running_per_replica = signals.running_total / max(signals.ready_replicas, 1)
    if state.kv_cache_tokens is not None and running_per_replica > 0 and signals.kv_cache_usage > 0:
        return signals.kv_cache_usage * state.kv_cache_tokens / running_per_replica
    return (signals.prompt_token_rate + signals.generation_token_rate / 2) / signals.request_rate


def _tpot_why(spec: AutoscalingSpec, tpot: float) -> str:
    return f"TPOT p{spec.slo.percentile:g} {tpot * 1000:.0f}ms > SLO {spec.slo.tpot_seconds or 0:g}s"


def _update_capacity(
    spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, now: float, tuning: PolicyTuning
) -> tuple[float | None, float | None]:
    capacity, corrected = _calibrate_capacity(spec, signals, state, now, tuning)
    prior = calibrated_capacity_prior(state, state.chunk_tokens or PRIOR_CHUNK_TOKENS)
    if capacity is not None and prior is not None:
        low, high = tuning.capacity_band
        capacity = min(max(capacity, prior * low), prior * high)
    return capacity, corrected


def _calibrate_capacity(
    spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, now: float, tuning: PolicyTuning
) -> tuple[float | None, float | None]:
    """Calibrate the per-replica prefill capacity (prompt tokens/s) against what the replicas did.

    Only from steady windows (no replica joined, left or was starting: tokens per replica would be
    skewed), at most once per window: when the SLO broke while the model said the ready replicas
    were enough, the estimate was optimistic and is lowered; when the TTFT stayed well inside the SLO
    while the model said more replicas were needed, or a replica served more than the estimate, it
    was pessimistic and is raised. Each correction is one bounded factor."""
    capacity = state.capacity_tokens_per_second
    corrected = state.capacity_corrected_time
    if signals.status is not SignalStatus.OK or signals.ready_replicas <= 0 or signals.starting_replicas > 0:
        return capacity, corrected
    if state.last_scale_time is not None and now - state.last_scale_time < signals.window_seconds:
        return capacity, corrected
    served = signals.prompt_token_rate / signals.ready_replicas
    if served <= 0 or signals.request_rate <= 0:
        return capacity, corrected
    if capacity is None:
        # Without a prior only a saturated replica tells its capacity.
        saturated = signals.queue_waiting_total / signals.ready_replicas >= 1.0
        return (served if saturated else None), corrected
    if corrected is not None and now - corrected < signals.window_seconds:
        return capacity, corrected
    if served > capacity:
        # A replica served more than the estimate: raise it, by a bounded step (one odd window must not
        # inflate it for good).
        return min(served, capacity / tuning.capacity_correction), now
    ttft = signals.ttft_percentile_seconds
    if ttft is None:
        return capacity, corrected
    model_needs = _replicas_by_queueing(spec, signals, capacity, tuning)
    if _ttft_met(spec, signals) is False and model_needs <= signals.ready_replicas:
        return max(served, capacity * tuning.capacity_correction), now
    comfortable = ttft <= spec.slo.ttft_seconds * tuning.slo_headroom * 0.8
    if comfortable and signals.queue_waiting_total == 0 and model_needs > signals.ready_replicas:
        return capacity / tuning.capacity_correction, now
    return capacity, corrected


def _replicas_by_queueing(
    spec: AutoscalingSpec, signals: Signals, capacity: float, tuning: PolicyTuning
) -> int:
    """M/M/c: replicas keeping P(wait > headroom * SLO - mean prefill) under 1 - percentile, and the
    utilization ceiling."""
    slo = spec.slo
    service = signals.prompt_token_rate / signals.request_rate / capacity
    wait_budget = max(slo.ttft_seconds * tuning.slo_headroom - service, 0.0)
    long_prompt = signals.prompt_tokens_percentile
    if long_prompt is not None and tuning.prompt_tail_headroom is not None:
        # A long prompt's own prefill is part of its TTFT: the request at the percentile prompt length
        # must not wait longer than what its prefill leaves of the SLO.
        wait_budget = min(
            wait_budget, max(slo.ttft_seconds * tuning.prompt_tail_headroom - long_prompt / capacity, 0.0)
        )
    tail = (1.0 - slo.percentile / 100.0) * tuning.window_tail_share
    limit = max(spec.max_replicas * 4, 16)
    by_queueing = replicas_for_wait(signals.request_rate, service, wait_budget, tail, limit)
    by_utilization = math.ceil(signals.prompt_token_rate / (capacity * tuning.max_utilization))
    return max(limit + 1 if by_queueing is None else by_queueing, by_utilization)


def _needed_replicas(
    spec: AutoscalingSpec,
    signals: Signals,
    capacity: float | None,
    *,
    breach_seconds: float,
    absorbing: bool,
    tuning: PolicyTuning,
) -> _Need:
    """`breach_seconds`: how long the SLO has been broken with nothing starting. `absorbing`: replicas
    are starting or joined within the signal window, so the queue is theirs to drain."""
    slo = spec.slo
    ready = max(signals.ready_replicas, 1)
    current = signals.current_replicas
    needs: list[_Need] = []

    if capacity is not None and signals.request_rate > 0 and signals.prompt_token_rate > 0:
        replicas = _replicas_by_queueing(spec, signals, capacity, tuning)
        needs.append(
            _Need(
                replicas,
                f"{signals.request_rate:.2f} req/s of {signals.prompt_token_rate / signals.request_rate:.0f} "
                f"prompt tokens at ~{capacity:.0f} tok/s per replica need {replicas}, "
                f"{_headroom_words(spec, tuning)}",
            )
        )
        if not absorbing and signals.queue_waiting_total > 0:
            # A backlog needs extra prefill capacity to drain; while replicas start it is expected, not new.
            backlog_tokens = signals.queue_waiting_total * signals.prompt_token_rate / signals.request_rate
            drain = math.ceil(
                (signals.prompt_token_rate + backlog_tokens / tuning.backlog_drain_seconds)
                / (capacity * tuning.max_utilization)
            )
            needs.append(_Need(drain, f"{signals.queue_waiting_total:.0f} waiting must drain"))
    queue_per_replica = _queue_per_replica(signals)
    # A queue that builds while replicas load (or that they found on joining) is theirs to absorb:
    # re-counting it is how scale-ups cascade (2 -> 4 -> 8 -> 16) before the new replicas tell.
    if not absorbing and queue_per_replica > slo.queue_depth_per_replica:
        # Sized by the user's own target: a queue seen at one scrape is usually a burst still arriving.
        by_queue = math.ceil(signals.queue_waiting_total / slo.queue_depth_per_replica)
        needs.append(
            _Need(
                by_queue,
                f"{queue_per_replica:.1f} waiting per ready replica > target {slo.queue_depth_per_replica:g}",
                queued=True,
            )
        )

    if signals.kv_cache_usage > tuning.kv_usage_target:
        by_kv = math.ceil(signals.kv_cache_usage * ready / tuning.kv_usage_target)
        needs.append(_Need(by_kv, f"KV cache {signals.kv_cache_usage:.0%} used"))

    ttft = signals.ttft_percentile_seconds
    if ttft is not None and ttft > slo.ttft_seconds:
        stepped = 0
        if capacity is None:
            # No capacity estimate yet: step proportionally to the breach, at most doubling.
            stepped = min(2 * ready, math.ceil(ready * ttft / slo.ttft_seconds))
        elif breach_seconds >= 2 * signals.window_seconds:
            # The model says these replicas suffice, yet the SLO has stayed broken for two whole windows
            # with nothing starting (longer than a burst's backlog takes to show and clear): the model
            # misses what limits them (decode, batch limits). Add one rather than hold a broken SLO
            # below maxReplicas; the calibration catches up meanwhile.
            stepped = ready + 1
        if stepped > current:
            needs.append(_Need(stepped, f"TTFT p{slo.percentile:g} {ttft:.2f}s > SLO {slo.ttft_seconds:g}s"))

    if not needs:
        return _Need(spec.replica_bounds[0], "load within what the minimum serves")
    return max(needs, key=lambda n: n.replicas)
