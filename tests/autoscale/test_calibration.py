"""The step model's self-calibration: from a service's own steps, the catalog's efficiency factors converge
to the hardware it really runs on (30 % faster and 30 % slower than the data sheet)."""

from __future__ import annotations

import random

import pytest

from llama_operator.api.autoscaling import AutoscalerState
from llama_operator.api.spec import AutoscalingSpec, SLOSpec
from llama_operator.autoscale.calibration import (
    CATALOG_FACTORS,
    Calibration,
    Factors,
    StepBasis,
    StepObservation,
    calibrated_step_model,
    factors,
    observation_from_rates,
    observe,
)
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.signals import Signals, SignalStatus
from tests.llama_1b import LLAMA_1B_ON_T4

BASIS = StepBasis.from_hardware(LLAMA_1B_ON_T4)


def true_factors(speed: float) -> Factors:
    """Hardware `speed` times as fast as the data sheet in bandwidth and compute (the per-step overhead is
    the host's, not the GPU's)."""
    return Factors(
        bandwidth_efficiency=CATALOG_FACTORS.bandwidth_efficiency * speed,
        compute_efficiency=CATALOG_FACTORS.compute_efficiency * speed,
        step_overhead_seconds=CATALOG_FACTORS.step_overhead_seconds,
    )


def observed(truth: Factors, cycles: int, *, noise: float = 0.03, seed: int = 7) -> Calibration:
    """`cycles` one-minute observations of a replica at varying load, with the steps' true times."""
    rng = random.Random(seed)
    real = calibrated_step_model(LLAMA_1B_ON_T4, truth)
    state = Calibration()
    for _ in range(cycles):
        batch = rng.randint(1, 48)
        context = rng.uniform(300, 2500)
        chunk = rng.choice((0, 0, 64, 256, 512))
        step = real.step_seconds(batch, context, chunk) * (1 + rng.gauss(0, noise))
        state = observe(
            state,
            BASIS,
            StepObservation(
                mean_step_seconds=step, batch=batch, mean_context=context, chunk=chunk, tokens=1e4
            ),
        )
    return state


def test_without_observations_the_catalogs_factors_hold() -> None:
    assert factors(Calibration()) == pytest.approx(CATALOG_FACTORS)


@pytest.mark.parametrize("speed", [1.3, 0.7])
def test_the_factors_converge_to_hardware_30_percent_off_the_data_sheet(speed: float) -> None:
    truth = true_factors(speed)
    fitted = factors(observed(truth, cycles=60))
    assert fitted.bandwidth_efficiency == pytest.approx(truth.bandwidth_efficiency, rel=0.1)
    assert fitted.compute_efficiency == pytest.approx(truth.compute_efficiency, rel=0.1)
    # The fixed time per step is nearly collinear with the weights' read (one model, one GPU): only the
    # spread of batch x context separates them, so it is the loosest of the three; their sum is not.
    assert fitted.step_overhead_seconds == pytest.approx(truth.step_overhead_seconds, rel=0.25)
    # The step model the policy then sizes with predicts the real steps.
    real = calibrated_step_model(LLAMA_1B_ON_T4, truth)
    calibrated = calibrated_step_model(LLAMA_1B_ON_T4, fitted)
    for batch, context, chunk in ((1, 500, 0), (32, 2048, 0), (16, 1024, 512)):
        assert calibrated.step_seconds(batch, context, chunk) == pytest.approx(
            real.step_seconds(batch, context, chunk), rel=0.05
        )


def test_a_cycle_with_too_few_tokens_moves_nothing() -> None:
    state = observe(
        Calibration(),
        BASIS,
        StepObservation(mean_step_seconds=0.5, batch=1, mean_context=100, chunk=0, tokens=3),
    )
    assert state == Calibration()


def test_the_state_survives_a_restart_through_its_wire_form() -> None:
    state = observed(true_factors(0.7), cycles=5)
    assert Calibration.from_wire(state.to_wire()) == state
    assert factors(Calibration.from_wire(state.to_wire())) == factors(state)
    assert Calibration.from_wire([1.0, 2.0]) == Calibration()  # a damaged status starts over


def test_an_observation_from_a_services_rates() -> None:
    seen = observation_from_rates(
        mean_inter_token_seconds=0.02,
        running_total=40,
        ready_replicas=2,
        request_rate=2.0,
        prompt_token_rate=2000.0,
        generation_token_rate=400.0,
        window_seconds=60,
    )
    assert seen == StepObservation(
        mean_step_seconds=0.02, batch=20, mean_context=1000 + 100, chunk=1000 * 0.02, tokens=12000
    )
    assert observation_from_rates(
        mean_inter_token_seconds=None, running_total=0, ready_replicas=1, request_rate=0,
        prompt_token_rate=0, generation_token_rate=0, window_seconds=60,
    ) is None  # fmt: skip


def test_the_basis_behind_a_plans_step_model_gives_the_same_steps() -> None:
    catalog = calibrated_step_model(LLAMA_1B_ON_T4, CATALOG_FACTORS)
    basis = StepBasis.from_step_model(catalog)
    assert basis.weights == pytest.approx(BASIS.weights)
    assert basis.per_prefill_token == pytest.approx(BASIS.per_prefill_token)
    slower = true_factors(0.7)
    assert basis.step_model(slower).step_seconds(8, 1000, 256) == pytest.approx(
        calibrated_step_model(LLAMA_1B_ON_T4, slower).step_seconds(8, 1000, 256)
    )


def test_the_policy_calibrates_from_its_signals_persists_it_and_sizes_with_it() -> None:
    """decide() on a service whose replicas step 1/0.7 as slowly as the plan says: the state (status)
    carries the calibration, a state read back from its wire form goes on from it, and the decode need
    it sizes from grows to what the slower hardware needs."""
    planned = calibrated_step_model(LLAMA_1B_ON_T4, CATALOG_FACTORS)
    real = calibrated_step_model(LLAMA_1B_ON_T4, true_factors(0.7))
    spec = AutoscalingSpec(min_replicas=1, max_replicas=50, slo=SLOSpec(ttft_seconds=1.0, tpot_seconds=0.1))
    state = AutoscalerState(
        capacity_tokens_per_second=20_000.0,
        capacity_prior_tokens_per_second=20_000.0,
        decode_step_seconds=planned.weight_read_seconds,
        decode_seconds_per_context_token=planned.seconds_per_context_token,
        prefill_seconds_per_token=planned.seconds_per_prefill_token,
        chunk_tokens=256,
    )
    uncalibrated = state
    rng = random.Random(3)
    for cycle in range(60):
        batch, prompt, output, rate = rng.randint(4, 40), rng.choice((200, 800, 1500)), 200, 2.0
        context = prompt + output / 2
        step = real.step_seconds(batch, context, round(rate * prompt * 0.05))
        chunk_tokens = rate * prompt * step  # prompt tokens one step computes at this rate
        step = real.step_seconds(batch, context, round(chunk_tokens))
        seen = Signals(
            status=SignalStatus.OK, ttft_percentile_seconds=0.3, queue_waiting_total=0.0,
            running_total=batch, kv_cache_usage=0.2, request_rate=rate, prompt_token_rate=rate * prompt,
            generation_token_rate=rate * output, ready_replicas=1, starting_replicas=0, current_replicas=1,
            window_seconds=60.0, tpot_percentile_seconds=step, mean_inter_token_seconds=step,
        )  # fmt: skip
        decision = decide(spec, seen, state, now=60.0 * cycle)
        # What the operator writes to status and reads back after a restart.
        state = AutoscalerState.model_validate(decision.state.to_wire())
    calibration = state.step_calibration
    assert calibration is not None and calibration.observations > 30
    assert calibration.catalog_bandwidth_efficiency == CATALOG_FACTORS.bandwidth_efficiency
    assert calibration.bandwidth_efficiency == pytest.approx(
        0.7 * CATALOG_FACTORS.bandwidth_efficiency, rel=0.1
    )
    assert calibration.compute_efficiency == pytest.approx(0.7 * CATALOG_FACTORS.compute_efficiency, rel=0.1)
    # Heavy decode load: the calibrated (slower) steps need more replicas than the data sheet's.
    heavy = Signals(
        status=SignalStatus.OK, ttft_percentile_seconds=0.3, queue_waiting_total=0.0, running_total=400,
        kv_cache_usage=0.5, request_rate=20.0, prompt_token_rate=20.0 * 800, generation_token_rate=20.0 * 400,
        ready_replicas=4, starting_replicas=0, current_replicas=4, window_seconds=60.0,
        tpot_percentile_seconds=0.05, mean_inter_token_seconds=0.05,
    )  # fmt: skip
    by_catalog = decide(spec, heavy, uncalibrated, now=1e5).needed_replicas
    by_calibration = decide(spec, heavy, state, now=1e5).needed_replicas
    assert by_calibration is not None and by_catalog is not None
    assert by_calibration > by_catalog
