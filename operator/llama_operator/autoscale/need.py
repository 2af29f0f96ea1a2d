"""The need: the replicas the load needs (autoscale/policy.py's docstring tells the model), from prefill
queueing (M/M/c over the calibrated capacity), the backlog, the queue target, the KV cache and a persistent
breach; from decode under a TPOT objective; and from the burst window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from llama_operator.api.autoscaling import AutoscalerState
from llama_operator.api.spec import DEFAULT_SLO_OBJECTIVE, AutoscalingSpec
from llama_operator.autoscale.calibration import (
    calibrated_capacity_prior,
    calibrated_model,
    plan_step_model,
)
from llama_operator.autoscale.decision import PolicyTuning
from llama_operator.autoscale.objective import judge_ttft
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
class Need:
    replicas: int
    why: str
    burst: bool = False  # sized from the burst window: taken at once, no confirmation
    queued: bool = False  # sized by the queue-depth target (Recommendation.queued)


@dataclass(frozen=True, slots=True)
class Burst:
    """What the burst window says this evaluation: its need (None when its load is within the noise of
    the rate window's) and since when every evaluation has seen one (status: burstSince)."""

    need: Need | None
    since: float | None

    def acts(self, need: Need, current: int, now: float, tuning: PolicyTuning) -> bool:
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


def idle_need(spec: AutoscalingSpec, idle_since: float | None, now: float) -> Need:
    """No request in the window: minReplicas (zero is reached only through the idle rule, with an
    activator)."""
    low = spec.replica_bounds[0]
    if idle_since is None:
        return Need(low, "idle: no requests in the window")
    idle_for = now - idle_since
    if idle_for >= spec.scale_to_zero_after_seconds:  # and no activator: `_decide` went to zero otherwise
        return Need(low, "idle, but no activator is ready to hold requests: not scaling to zero")
    return Need(
        low, f"idle for {idle_for:.0f}s of scaleToZeroAfterSeconds {spec.scale_to_zero_after_seconds}s"
    )


def load_need(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    capacity: float | None,
    tuning: PolicyTuning,
    *,
    breach_since: float | None,
    now: float,
) -> Need:
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


def observe_burst(
    spec: AutoscalingSpec,
    signals: Signals,
    state: AutoscalerState,
    capacity: float | None,
    tuning: PolicyTuning,
    *,
    now: float,
) -> Burst:
    """The burst window's load, at its lower noise bound (its rate less `burst_noise_sigmas` Poisson
    standard deviations of its count), against the rate window's: a burst when it is above it, sized by
    the same queueing model at the mean prompt (the prompt tail is the rate window's to judge: a few
    seconds of prompts are too few for a percentile)."""
    rate, window, sigmas = signals.burst_request_rate, signals.burst_window_seconds, tuning.burst_noise_sigmas
    if sigmas is None or capacity is None or not rate or not window or signals.request_rate <= 0:
        return Burst(None, None)
    lower = rate - sigmas * math.sqrt(rate / window)
    if lower <= signals.request_rate:
        return Burst(None, None)
    prompt = signals.prompt_token_rate / signals.request_rate
    load = replace(
        signals, request_rate=lower, prompt_token_rate=lower * prompt, prompt_tokens_percentile=None
    )
    replicas = replicas_by_queueing(spec, load, capacity, tuning)
    why = (
        f"a burst: {rate:.2f} req/s in the last {window:.0f}s (at least {lower:.2f} beyond its noise, "
        f"against {signals.request_rate:.2f} over {signals.window_seconds:.0f}s) needs {replicas}"
    )
    since = state.burst_since if state.burst_since is not None else now
    return Burst(Need(replicas, why, burst=True), since)


def waiting_per_replica(signals: Signals) -> float:
    """Requests waiting per ready replica (per one, while none is ready), against the user's target."""
    return signals.queue_waiting_total / max(signals.ready_replicas, 1)


def _headroom_words(spec: AutoscalingSpec, tuning: PolicyTuning) -> str:
    """What the replicas are sized for, against the SLO the user wrote: 'sizing for 0.50s (50% headroom
    under your 1s p95 TTFT SLO)'. The headroom is the policy's, not the user's objective."""
    slo = spec.slo
    return (
        f"sizing for {slo.ttft_seconds * tuning.slo_headroom:.2f}s ({1 - tuning.slo_headroom:.0%} headroom "
        f"under your {slo.ttft_seconds:g}s p{slo.percentile:g} TTFT SLO)"
    )


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
) -> Need | None:
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
            return Need(min(2 * ready, math.ceil(ready * tpot / judged)), _tpot_why(spec, tpot))
        return None
    need = _decode_need(spec, signals, state, steps, tuning)
    if breached and tpot is not None and need.replicas <= signals.ready_replicas:
        return Need(ready + 1, _tpot_why(spec, tpot))
    return need


def _decode_need(
    spec: AutoscalingSpec, signals: Signals, state: AutoscalerState, steps: StepModel, tuning: PolicyTuning
) -> Need:
    """The replicas whose decoding, at the batch each step keeps within the TPOT objective, serves the
    output-token rate; more where steps carrying a prompt chunk break the objective on their own."""
    slo = spec.slo
    context = _decode_context(signals, state)
    budget = (state.chunk_tokens or 0) + (state.max_num_seqs or 0)  # --max-num-batched-tokens
    # Sized for what the percentile read from vLLM's histogram shows met (catalog/vllm.py: between two
    # bounds it interpolates, so steps within the objective but over the bound below read as over it).
    objective = measurable_tpot(slo.tpot_seconds or 0.0)
    chunk_step, chunk_steps_over = _chunk_step(
        steps, state, context, budget=budget, objective=objective, tuning=tuning
    )

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

    if per_replica(spec.max_replicas) <= 0:
        return Need(spec.max_replicas + 1, f"no batch decodes {context:.0f}-token sequences within TPOT")
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
    if chunk_steps_over:
        by_share = _by_chunk_share(
            spec, signals, steps, tuning, context=context, budget=budget, chunk_step=chunk_step
        )
        if by_share.replicas > by_throughput:
            return by_share
    return Need(by_throughput, why)


def _chunk_step(
    steps: StepModel,
    state: AutoscalerState,
    context: float,
    *,
    budget: int,
    objective: float,
    tuning: PolicyTuning,
) -> tuple[float, bool]:
    """A step with a prompt chunk beside one sequence (the most prompt a step carries), and whether it is
    taken as over the objective: within `chunk_step_margin` of it only where the calibration finds the steps
    slower than the plan's (the fit's own error, mu's above all, is about that much); at the plan's speed
    the planner sized that step, and a margin would read a step it keeps within the objective as one over
    it."""
    chunk_step = steps.step_seconds(1, context, budget - 1) if budget > 1 else 0.0
    planned = plan_step_model(state)
    planned_step = planned.step_seconds(1, context, budget - 1) if planned is not None and budget > 1 else 0.0
    slower = chunk_step > planned_step * CALIBRATED_SLOWER
    return chunk_step, chunk_step > objective * (tuning.chunk_step_margin if slower else 1.0)


def _by_chunk_share(
    spec: AutoscalingSpec,
    signals: Signals,
    steps: StepModel,
    tuning: PolicyTuning,
    *,
    context: float,
    budget: int,
    chunk_step: float,
) -> Need:
    """The replicas that keep the tokens of steps carrying a prompt chunk (each over the objective) under
    `chunk_step_tail_share` of the objective's tail."""
    slo = spec.slo

    def chunk_share(replicas: int) -> float:
        batch = max(1, math.ceil(signals.running_total / replicas))
        return steps.chunk_step_token_share(batch, context, budget, signals.prompt_token_rate / replicas)

    tail = (1.0 - slo.percentile / 100.0) * tuning.chunk_step_tail_share
    replicas = next(
        (n for n in range(1, spec.max_replicas + 1) if chunk_share(n) <= tail), spec.max_replicas + 1
    )
    return Need(
        replicas,
        f"a step carrying a prompt chunk takes ~{chunk_step * 1000:.0f}ms "
        f"against TPOT {slo.tpot_seconds:g}s: {signals.prompt_token_rate:.0f} prompt tok/s need {replicas} "
        f"replicas to keep the tokens of such steps under {tail:.1%}",
    )


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


def update_capacity(
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
    model_needs = replicas_by_queueing(spec, signals, capacity, tuning)
    if judge_ttft(spec, signals) is False and model_needs <= signals.ready_replicas:
        return max(served, capacity * tuning.capacity_correction), now
    comfortable = ttft <= spec.slo.ttft_seconds * tuning.slo_headroom * 0.8
    if comfortable and signals.queue_waiting_total == 0 and model_needs > signals.ready_replicas:
        return capacity / tuning.capacity_correction, now
    return capacity, corrected


def replicas_by_queueing(
    spec: AutoscalingSpec, signals: Signals, capacity: float, tuning: PolicyTuning
) -> int:
    """M/M/c: replicas keeping P(wait > headroom * SLO - mean prefill) under the objective's error budget
    (1 - spec.slo.objective), and the utilization ceiling."""
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
    tail = (1.0 - slo.objective_ratio(DEFAULT_SLO_OBJECTIVE)) * tuning.budget_tail_share
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
) -> Need:
    """`breach_seconds`: how long the SLO has been broken with nothing starting. `absorbing`: replicas
    are starting or joined within the signal window, so the queue is theirs to drain."""
    slo = spec.slo
    ready = max(signals.ready_replicas, 1)
    needs: list[Need] = []

    if capacity is not None and signals.request_rate > 0 and signals.prompt_token_rate > 0:
        replicas = replicas_by_queueing(spec, signals, capacity, tuning)
        needs.append(
            Need(
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
            needs.append(Need(drain, f"{signals.queue_waiting_total:.0f} waiting must drain"))
    queue_per_replica = waiting_per_replica(signals)
    # A queue that builds while replicas load (or that they found on joining) is theirs to absorb:
    # re-counting it is how scale-ups cascade (2 -> 4 -> 8 -> 16) before the new replicas tell.
    if not absorbing and queue_per_replica > slo.queue_depth_per_replica:
        # Sized by the user's own target: a queue seen at one scrape is usually a burst still arriving.
        by_queue = math.ceil(signals.queue_waiting_total / slo.queue_depth_per_replica)
        needs.append(
            Need(
                by_queue,
                f"{queue_per_replica:.1f} waiting per ready replica > target {slo.queue_depth_per_replica:g}",
                queued=True,
            )
        )

    if signals.kv_cache_usage > tuning.kv_usage_target:
        by_kv = math.ceil(signals.kv_cache_usage * ready / tuning.kv_usage_target)
        needs.append(Need(by_kv, f"KV cache {signals.kv_cache_usage:.0%} used"))

    breach = _ttft_breach_need(spec, signals, capacity, breach_seconds=breach_seconds)
    if breach is not None:
        needs.append(breach)

    if not needs:
        return Need(spec.replica_bounds[0], "load within what the minimum serves")
    return max(needs, key=lambda n: n.replicas)


def _ttft_breach_need(
    spec: AutoscalingSpec, signals: Signals, capacity: float | None, *, breach_seconds: float
) -> Need | None:
    """More replicas than there are for a TTFT above the SLO the model does not explain; None otherwise."""
    slo = spec.slo
    ttft = signals.ttft_percentile_seconds
    if ttft is None or ttft <= slo.ttft_seconds:
        return None
    ready = max(signals.ready_replicas, 1)
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
    if stepped <= signals.current_replicas:
        return None
    return Need(stepped, f"TTFT p{slo.percentile:g} {ttft:.2f}s > SLO {slo.ttft_seconds:g}s")
