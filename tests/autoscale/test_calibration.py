"""The step model's self-calibration: from a service's own steps, the catalog's efficiency factors converge
to the hardware it really runs on (30 % faster and 30 % slower than the data sheet)."""

from __future__ import annotations

import random

import pytest

from llama_operator.autoscale.calibration import (
    CATALOG_FACTORS,
    Calibration,
    Factors,
    Hardware,
    StepBasis,
    StepObservation,
    calibrated_step_model,
    factors,
    observation_from_rates,
    observe,
)
from llama_operator.catalog.accelerators import BUILTIN_CATALOG

T4 = BUILTIN_CATALOG.get("t4")
LLAMA_1B_ON_T4 = Hardware(
    bandwidth_bytes_per_s=T4.bandwidth_bytes_per_s,
    fp16_tflops=T4.fp16_dense_tflops,
    weight_bytes=2.47e9,
    kv_bytes_per_token=32768,
    parameters=1.24e9,
)

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
