"""A step model that calibrates itself: the catalog's efficiency factors fitted to a service's own steps.

The step model (catalog.performance) predicts a step from data-sheet figures and three estimates: the
share of the bandwidth a decode step reaches (eta), the share of the FLOPS a prompt chunk reaches (mu),
and a fixed time per step (t0). Written in the unknowns x = (t0, 1/eta, 1/mu), a step is linear:

    step = t0 + (1/eta) * (W + batch * context * kv_bytes) / BW + (1/mu) * chunk * 2 P / FLOPS

Each evaluation cycle gives one observation of a service's replicas from its own vLLM series: the mean
inter-token interval (rate(vllm:inter_token_latency_seconds_sum) / rate(..._count), one step per token),
the sequences running per replica (vllm:num_requests_running) with their mean context (prompt plus half
the output, from the token counters), and the prompt tokens a step computes beside them (the prompt
token rate per replica times the step). The estimator is weighted least squares with the catalog's
figures as a prior (pseudo-observations, so a few cycles of little information do not move it far) and
exponential forgetting (the hardware under a service can change: a new node, another GPU). Its whole
state is a few sums, persisted in the LlamaService's status, so a restart loses nothing.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from llama_operator.api.autoscaling import AutoscalerState, StepCalibration
from llama_operator.autoscale.signals import Signals, SignalStatus
from llama_operator.catalog.performance import (
    CATALOG_FACTORS,
    Factors,
    Hardware,
    StepModel,
    calibrated_step_model,
)

__all__ = ["CATALOG_FACTORS", "Factors", "Hardware", "calibrated_step_model"]

# How far the prior lets each unknown (t0, 1/eta, 1/mu) move before data outweigh it: relative standard
# deviations. The efficiencies: the design brief's ranges (eta 0.5-0.8, mu ~0.4) are narrower, but hardware
# off the data sheet by 30 % in either direction must still be reachable. The fixed time per step is the
# host's and vLLM's (scheduling, sampling, launches), not the GPU's: the brief's 3-5 ms, held that close so
# that it does not soak up a slower or faster bandwidth, with which it is nearly collinear at a steady
# batch (docs/bench/calibration.md).
PRIOR_RELATIVE_SPREADS = (0.25, 0.5, 0.5)
# A mean inter-token interval over a minute is an average of thousands of steps, but the context and
# the chunk it is set against are estimated: ~5 % relative noise per observation.
OBSERVATION_RELATIVE_NOISE = 0.05
# Each new observation discounts the old ones by this factor: ~100 cycles of memory.
FORGETTING = 0.99
# Below this many tokens per replica in the window, an observation says too little (a lone request's
# steps are dominated by sampling and scheduling noise).
MIN_TOKENS_PER_OBSERVATION = 50
UNKNOWNS = 3


@dataclass(frozen=True, slots=True)
class StepObservation:
    """One cycle's steps on one service's replicas, per replica."""

    mean_step_seconds: float  # the mean inter-token interval
    batch: float  # sequences decoding per step
    mean_context: float  # tokens of context each decoding sequence reads
    chunk: float  # prompt tokens computed per step
    tokens: float = float(MIN_TOKENS_PER_OBSERVATION)  # output tokens the mean is taken over


@dataclass(frozen=True, slots=True)
class Calibration:
    """The estimator's state: the weighted normal equations of the observations so far (upper triangle of
    A = sum w f f^T, then b = sum w f y) and how many observations they hold (discounted)."""

    normal: tuple[float, ...] = field(default=(0.0,) * 6)
    target: tuple[float, ...] = field(default=(0.0,) * UNKNOWNS)
    observations: float = 0.0

    def to_wire(self) -> list[float]:
        """Flat, for the LlamaService's status."""
        return [*self.normal, *self.target, self.observations]

    @classmethod
    def from_wire(cls, values: Sequence[float]) -> Calibration:
        if len(values) != 6 + UNKNOWNS + 1:
            return cls()
        return cls(normal=tuple(values[:6]), target=tuple(values[6:9]), observations=float(values[9]))


@dataclass(frozen=True, slots=True)
class StepBasis:
    """A replica's step at full efficiency and no overhead: what the factors divide (seconds)."""

    weights: float  # W / BW: reading the weights once
    per_context_token: float  # kv_bytes / BW
    per_prefill_token: float  # 2 P / FLOPS
    # Tensor parallel's all-reduces per token of a step: link time, which no efficiency factor scales.
    per_step_token: float = 0.0

    @classmethod
    def from_hardware(cls, hardware: Hardware) -> StepBasis:
        return cls(
            weights=hardware.weight_bytes / hardware.bandwidth_bytes_per_s,
            per_context_token=hardware.kv_bytes_per_token / hardware.bandwidth_bytes_per_s,
            per_prefill_token=2 * hardware.parameters / (hardware.fp16_tflops * 1e12),
        )

    @classmethod
    def from_step_model(cls, steps: StepModel, prior: Factors = CATALOG_FACTORS) -> StepBasis:
        """The basis behind a plan's step model (status.plan's step figures), built with `prior`'s factors."""
        return cls(
            weights=max(0.0, steps.weight_read_seconds - prior.step_overhead_seconds)
            * prior.bandwidth_efficiency,
            per_context_token=steps.seconds_per_context_token * prior.bandwidth_efficiency,
            per_prefill_token=steps.seconds_per_prefill_token * prior.compute_efficiency,
            per_step_token=steps.seconds_per_step_token,
        )

    def step_model(self, fitted: Factors) -> StepModel:
        """The step model with `fitted` factors."""
        return StepModel(
            weight_read_seconds=fitted.step_overhead_seconds + self.weights / fitted.bandwidth_efficiency,
            seconds_per_context_token=self.per_context_token / fitted.bandwidth_efficiency,
            seconds_per_prefill_token=self.per_prefill_token / fitted.compute_efficiency,
            seconds_per_step_token=self.per_step_token,
        )


def features(basis: StepBasis, observation: StepObservation) -> tuple[float, float, float]:
    """The observation's row in the unknowns (t0, 1/eta, 1/mu)."""
    read = basis.weights + observation.batch * observation.mean_context * basis.per_context_token
    return (1.0, read, observation.chunk * basis.per_prefill_token)


def observe(state: Calibration, basis: StepBasis, observation: StepObservation) -> Calibration:
    """The state with one more observation (older ones discounted); unchanged when it says too little."""
    if (
        observation.tokens < MIN_TOKENS_PER_OBSERVATION
        or observation.mean_step_seconds <= 0
        or observation.batch < 1
    ):
        return state
    row = features(basis, observation)
    weight = 1.0 / (OBSERVATION_RELATIVE_NOISE * observation.mean_step_seconds) ** 2
    # What the factors explain: the step less tensor parallel's all-reduces (link time, known).
    explained = observation.mean_step_seconds - basis.per_step_token * (observation.batch + observation.chunk)
    normal = [FORGETTING * a for a in state.normal]
    target = [FORGETTING * b for b in state.target]
    k = 0
    for i in range(UNKNOWNS):
        for j in range(i, UNKNOWNS):
            normal[k] += weight * row[i] * row[j]
            k += 1
        target[i] += weight * row[i] * explained
    return Calibration(
        normal=tuple(normal), target=tuple(target), observations=FORGETTING * state.observations + 1
    )


def _prior(prior: Factors) -> tuple[float, float, float]:
    return (prior.step_overhead_seconds, 1.0 / prior.bandwidth_efficiency, 1.0 / prior.compute_efficiency)


def factors(state: Calibration, prior: Factors = CATALOG_FACTORS) -> Factors:
    """The calibrated factors: the prior where the observations say nothing, the data where they do."""
    matrix, rhs = _posterior(state, prior)
    x = _solve(matrix, rhs)
    # Physical bounds: an efficiency above 1 or an overhead below 0 is noise, not hardware.
    return Factors(
        step_overhead_seconds=max(0.0, x[0]),
        bandwidth_efficiency=min(1.0, 1.0 / max(x[1], 1.0)),
        compute_efficiency=min(1.0, 1.0 / max(x[2], 1.0)),
    )


def _posterior(state: Calibration, prior: Factors) -> tuple[list[list[float]], list[float]]:
    """The normal equations with the prior's pseudo-observations: (A + P) x = b + P x0."""
    x0 = _prior(prior)
    precision = [1.0 / (spread * x) ** 2 for spread, x in zip(PRIOR_RELATIVE_SPREADS, x0, strict=True)]
    matrix = [[0.0] * UNKNOWNS for _ in range(UNKNOWNS)]
    k = 0
    for i in range(UNKNOWNS):
        for j in range(i, UNKNOWNS):
            matrix[i][j] = matrix[j][i] = state.normal[k]
            k += 1
    rhs = [state.target[i] + precision[i] * x0[i] for i in range(UNKNOWNS)]
    for i in range(UNKNOWNS):
        matrix[i][i] += precision[i]
    return matrix, rhs


def relative_spreads(state: Calibration, prior: Factors = CATALOG_FACTORS) -> tuple[float, float, float]:
    """How far the fit pins each unknown (t0, 1/eta, 1/mu) down: its posterior standard deviation over
    its value. The prior's own spread (PRIOR_RELATIVE_SPREADS) where the observations say nothing of it;
    small where they do."""
    matrix, rhs = _posterior(state, prior)
    x = _solve(matrix, rhs)
    spreads = []
    for i in range(UNKNOWNS):
        unit = [1.0 if j == i else 0.0 for j in range(UNKNOWNS)]
        variance = _solve([row[:] for row in matrix], unit)[i]
        spreads.append(math.sqrt(max(variance, 0.0)) / abs(x[i]) if x[i] else math.inf)
    return spreads[0], spreads[1], spreads[2]


def planning_factors(calibration: StepCalibration) -> Factors:
    """The factors to plan an engine with (reconcile/engine.py): each calibrated figure on its slow side by
    one posterior standard deviation (`relative_spreads`). A step budget planned too large for the
    hardware breaks the TPOT objective in every step that carries a chunk, one planned too small only
    costs replicas; so what the data barely pin down (mu on a decode-heavy service) plans no faster than
    its prior, and what they pin down plans close to the fit."""
    sums = Calibration.from_wire(calibration.sums)
    t0, eta, mu = relative_spreads(sums)
    return Factors(
        bandwidth_efficiency=calibration.bandwidth_efficiency / (1.0 + eta),
        compute_efficiency=calibration.compute_efficiency / (1.0 + mu),
        step_overhead_seconds=calibration.step_overhead_seconds * (1.0 + t0),
    )


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the matrix is symmetric positive definite: the prior's
    precision is on its diagonal)."""
    n = len(rhs)
    a = [[*row, rhs[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            ratio = a[r][col] / a[col][col]
            for c in range(col, n + 1):
                a[r][c] -= ratio * a[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (a[r][n] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
    return x


def observation_from_rates(
    *,
    mean_inter_token_seconds: float | None,
    running_total: float,
    ready_replicas: int,
    request_rate: float,
    prompt_token_rate: float,
    generation_token_rate: float,
    window_seconds: float,
    kv_cache_usage: float = 0.0,
    kv_cache_tokens: int | None = None,
) -> StepObservation | None:
    """One cycle's observation from a service's summed vLLM series; None when the window has too little.

    The context a decoding sequence reads is the KV cache in use over the sequences running, when the
    plan's KV size is known (the policy's `_decode_context`): prompt plus half the output per request
    misweighs the batch, where long answers stay longest."""
    if (
        mean_inter_token_seconds is None
        or mean_inter_token_seconds <= 0
        or ready_replicas <= 0
        or request_rate <= 0
    ):
        return None
    batch = running_total / ready_replicas
    if kv_cache_tokens is not None and kv_cache_usage > 0 and batch > 0:
        context = kv_cache_usage * kv_cache_tokens / batch
    else:
        context = (prompt_token_rate + generation_token_rate / 2) / request_rate
    return StepObservation(
        mean_step_seconds=mean_inter_token_seconds,
        batch=batch,
        mean_context=context,
        chunk=prompt_token_rate / ready_replicas * mean_inter_token_seconds,
        tokens=generation_token_rate * window_seconds / ready_replicas,
    )


def plan_step_model(state: AutoscalerState) -> StepModel | None:
    """The plan's step model, as the reconciler seeded it into the state; None when unknown."""
    if state.decode_step_seconds is None or state.decode_seconds_per_context_token is None:
        return None
    return StepModel(
        weight_read_seconds=state.decode_step_seconds,
        seconds_per_context_token=state.decode_seconds_per_context_token,
        seconds_per_prefill_token=state.prefill_seconds_per_token or 0.0,
        seconds_per_step_token=state.seconds_per_step_token or 0.0,
    )


def plan_factors(state: AutoscalerState) -> Factors:
    """The factors the plan's step figures were built with: measured ones once the engine was planned for
    the measured hardware (reconcile/engine.py), else the catalog's. The basis divides them out, so the
    fit's sums stay valid across such a change of plan."""
    if state.plan_factors is None:
        return CATALOG_FACTORS
    eta, mu, t0 = state.plan_factors
    return Factors(bandwidth_efficiency=eta, compute_efficiency=mu, step_overhead_seconds=t0)


def calibrated_model(state: AutoscalerState) -> StepModel | None:
    """The step model the policy sizes with: the plan's, with the calibrated factors once there are any."""
    planned = plan_step_model(state)
    calibration = state.step_calibration
    if planned is None or calibration is None or planned.seconds_per_prefill_token <= 0:
        return planned
    fitted = Factors(
        bandwidth_efficiency=calibration.bandwidth_efficiency,
        compute_efficiency=calibration.compute_efficiency,
        step_overhead_seconds=calibration.step_overhead_seconds,
    )
    return StepBasis.from_step_model(planned, plan_factors(state)).step_model(fitted)


def calibrate(state: AutoscalerState, signals: Signals) -> StepCalibration | None:
    """The state's calibration with this cycle's observation: from steady windows only (no replica
    starting: a joining replica's empty batch would skew the per-replica figures; no queue)."""
    planned = plan_step_model(state)
    if planned is None or planned.seconds_per_prefill_token <= 0:
        return state.step_calibration
    previous = state.step_calibration
    sums = Calibration.from_wire(previous.sums) if previous is not None else Calibration()
    # Only windows without a queue: a queued replica runs prompt-only steps that emit no inter-token
    # interval, so the prompt tokens per step the rates give would overstate what the observed steps carried.
    if (
        signals.status is SignalStatus.OK
        and signals.starting_replicas == 0
        and signals.queue_waiting_total == 0
    ):
        seen = observation_from_rates(
            mean_inter_token_seconds=signals.mean_inter_token_seconds,
            running_total=signals.running_total,
            ready_replicas=signals.ready_replicas,
            request_rate=signals.request_rate,
            prompt_token_rate=signals.prompt_token_rate,
            generation_token_rate=signals.generation_token_rate,
            window_seconds=signals.window_seconds,
            kv_cache_usage=signals.kv_cache_usage,
            kv_cache_tokens=state.kv_cache_tokens,
        )
        if seen is not None:
            sums = observe(sums, StepBasis.from_step_model(planned, plan_factors(state)), seen)
    if sums.observations <= 0:
        return previous
    fitted = factors(sums)
    return StepCalibration(
        observations=round(sums.observations, 3),
        bandwidth_efficiency=round(fitted.bandwidth_efficiency, 4),
        compute_efficiency=round(fitted.compute_efficiency, 4),
        step_overhead_seconds=round(fitted.step_overhead_seconds, 6),
        catalog_bandwidth_efficiency=CATALOG_FACTORS.bandwidth_efficiency,
        catalog_compute_efficiency=CATALOG_FACTORS.compute_efficiency,
        catalog_step_overhead_seconds=CATALOG_FACTORS.step_overhead_seconds,
        sums=sums.to_wire(),
    )


def calibrated_capacity_prior(state: AutoscalerState, chunk: int) -> float | None:
    """The catalog's prefill capacity prior, rescaled by how much faster or slower the calibrated steps
    prefill a `chunk`-token chunk than the plan's."""
    prior = state.capacity_prior_tokens_per_second
    planned, calibrated = plan_step_model(state), calibrated_model(state)
    if prior is None or planned is None or calibrated is None or state.step_calibration is None:
        return prior
    return prior * calibrated.prefill_tokens_per_second(chunk) / planned.prefill_tokens_per_second(chunk)
