"""An engine planned for the hardware it runs on: the factors measured on a service's replicas re-plan its
vLLM engine (reconcile/engine.py) where they make it larger than the catalog's, with hysteresis, at most
once an hour, never to a smaller engine than the catalog's; status.plan.measuredSteps keeps them, the
autoscaler's state divides them out, and an Event says so."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from llama_operator.api.autoscaling import StepCalibration
from llama_operator.api.plan import MeasuredSteps, Plan
from llama_operator.api.settings import Settings
from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.autoscale.calibration import (
    CATALOG_FACTORS,
    Calibration,
    Factors,
    StepBasis,
    StepObservation,
    calibrated_model,
    factors,
    observe,
    plan_factors,
    planning_factors,
)
from llama_operator.catalog.performance import StepModel
from llama_operator.planning import PlanningConfig, plan_service
from llama_operator.reconcile.autoscaling import autoscaler_state
from llama_operator.reconcile.engine import (
    DEFAULT_POLICY,
    ENGINE_REPLANNED,
    ReplanPolicy,
    engine_plan,
    engine_replanned_event,
)
from llama_operator.reconcile.outcome import plan_llamaservice, reconcile

MIN_OBSERVATIONS = DEFAULT_POLICY.min_observations
MIN_INTERVAL_SECONDS = DEFAULT_POLICY.min_interval_seconds

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
SPEC = {
    "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
    "accelerator": {"type": "t4"},
    "autoscaling": {"slo": {"ttftSeconds": 1.0, "tpotSeconds": 0.05}},
}


def plan_with(measured: MeasuredSteps | None) -> Plan:
    return plan_service(
        LlamaServiceSpec.model_validate(SPEC), name="chat", config=PlanningConfig(), measured=measured
    )


CATALOG_PLAN = plan_with(None)


def speed_factors(speed: float) -> Factors:
    return Factors(
        bandwidth_efficiency=min(1.0, CATALOG_FACTORS.bandwidth_efficiency * speed),
        compute_efficiency=CATALOG_FACTORS.compute_efficiency * speed,
        step_overhead_seconds=CATALOG_FACTORS.step_overhead_seconds,
    )


def fitted_on(plan: Plan, truth: Factors, cycles: int = 100) -> StepCalibration:
    """The calibration the autoscaler writes after `cycles` steady observations of replicas whose true
    factors are `truth`, running `plan` (its basis divides out the factors the plan was built with)."""
    planned = StepModel(
        plan.decode_step_seconds, plan.decode_seconds_per_context_token, plan.prefill_seconds_per_token
    )
    built_with = CATALOG_FACTORS
    if plan.measured_steps is not None:
        built_with = Factors(
            plan.measured_steps.bandwidth_efficiency,
            plan.measured_steps.compute_efficiency,
            plan.measured_steps.step_overhead_seconds,
        )
    basis = StepBasis.from_step_model(planned, built_with)
    real = basis.step_model(truth)
    sums = Calibration()
    for i in range(cycles):
        batch, context, chunk = 4 + i % 40, 600.0 + 20 * (i % 50), float((i * 37) % 160)
        sums = observe(
            sums,
            basis,
            StepObservation(real.step_seconds(batch, context, int(chunk)), batch, context, chunk, tokens=1e4),
        )
    fit = factors(sums)
    return StepCalibration(
        observations=sums.observations,
        bandwidth_efficiency=fit.bandwidth_efficiency,
        compute_efficiency=fit.compute_efficiency,
        step_overhead_seconds=fit.step_overhead_seconds,
        catalog_bandwidth_efficiency=CATALOG_FACTORS.bandwidth_efficiency,
        catalog_compute_efficiency=CATALOG_FACTORS.compute_efficiency,
        catalog_step_overhead_seconds=CATALOG_FACTORS.step_overhead_seconds,
        sums=sums.to_wire(),
    )


def status(plan: Plan, calibration: StepCalibration | None) -> dict[str, Any]:
    state = {} if calibration is None else {"stepCalibration": calibration.to_wire()}
    return {"plan": plan.to_wire(), "autoscaling": {"state": state}}


def test_measured_factors_plan_only_the_accelerator_they_were_measured_on() -> None:
    faster = speed_factors(1.3)
    measured = MeasuredSteps(
        bandwidth_efficiency=faster.bandwidth_efficiency,
        compute_efficiency=faster.compute_efficiency,
        step_overhead_seconds=faster.step_overhead_seconds,
        accelerator=CATALOG_PLAN.display_name,
    )
    on_t4 = plan_with(measured)
    assert on_t4.measured_steps == measured
    # Faster steps: a larger chunk and batch within the same objectives, and faster step estimates.
    assert on_t4.max_num_batched_tokens > CATALOG_PLAN.max_num_batched_tokens
    assert on_t4.max_num_seqs >= CATALOG_PLAN.max_num_seqs
    assert on_t4.prefill_seconds_per_token < CATALOG_PLAN.prefill_seconds_per_token
    assert f"{on_t4.max_num_batched_tokens}" in on_t4.vllm_args
    elsewhere = plan_with(measured.model_copy(update={"accelerator": "a10g"}))
    assert elsewhere.measured_steps is None
    assert elsewhere.max_num_batched_tokens == CATALOG_PLAN.max_num_batched_tokens


def test_a_fit_that_pins_nothing_down_plans_no_faster_than_the_catalog() -> None:
    """planning_factors takes each factor one posterior standard deviation on its slow side: with no
    observations that is the prior's own spread below the catalog."""
    empty = fitted_on(CATALOG_PLAN, CATALOG_FACTORS, cycles=0).model_copy(
        update={"sums": Calibration().to_wire(), "observations": 0.0}
    )
    slow_side = planning_factors(empty)
    assert slow_side.bandwidth_efficiency < CATALOG_FACTORS.bandwidth_efficiency
    assert slow_side.compute_efficiency < CATALOG_FACTORS.compute_efficiency
    assert slow_side.step_overhead_seconds > CATALOG_FACTORS.step_overhead_seconds


def test_faster_hardware_re_plans_a_larger_engine() -> None:
    calibration = fitted_on(CATALOG_PLAN, speed_factors(1.3))
    planned = engine_plan(plan_with, status(CATALOG_PLAN, calibration), NOW.timestamp())
    assert planned.measured_steps is not None
    assert planned.measured_steps.accelerator == CATALOG_PLAN.display_name
    assert planned.engine_replanned_at == NOW.timestamp()
    assert planned.max_num_batched_tokens >= 1.1 * CATALOG_PLAN.max_num_batched_tokens
    # On the slow side of the fit: no faster than what was measured.
    assert planned.measured_steps.bandwidth_efficiency <= calibration.bandwidth_efficiency
    assert planned.measured_steps.compute_efficiency <= calibration.compute_efficiency


@pytest.mark.parametrize("speed", [0.7, 1.0])
def test_hardware_no_faster_than_the_catalog_keeps_the_catalogs_engine(speed: float) -> None:
    calibration = fitted_on(CATALOG_PLAN, speed_factors(speed))
    assert engine_plan(plan_with, status(CATALOG_PLAN, calibration), NOW.timestamp()) == CATALOG_PLAN


def test_a_short_fit_changes_nothing() -> None:
    calibration = fitted_on(CATALOG_PLAN, speed_factors(1.3), cycles=40)
    assert calibration.observations < MIN_OBSERVATIONS
    assert engine_plan(plan_with, status(CATALOG_PLAN, calibration), NOW.timestamp()) == CATALOG_PLAN


def test_a_fit_measured_on_another_accelerator_changes_nothing() -> None:
    calibration = fitted_on(CATALOG_PLAN, speed_factors(1.3))
    moved = status(CATALOG_PLAN, calibration)
    moved["plan"]["displayName"] = "a10g"
    assert engine_plan(plan_with, moved, NOW.timestamp()) == CATALOG_PLAN


def test_the_engine_planned_stays_for_an_hour_and_within_the_hysteresis() -> None:
    first = engine_plan(
        plan_with, status(CATALOG_PLAN, fitted_on(CATALOG_PLAN, speed_factors(1.3))), NOW.timestamp()
    )
    assert first.measured_steps is not None and first.engine_replanned_at is not None
    changed = first.engine_replanned_at
    # Within the hour, even a fit that now says the catalog's speed keeps it (no restart churn).
    back = fitted_on(first, speed_factors(1.0))
    assert engine_plan(plan_with, status(first, back), changed + MIN_INTERVAL_SECONDS - 1) == first
    # After it, back to the catalog's engine, as a change large enough to be worth a rollout.
    later = engine_plan(plan_with, status(first, back), changed + MIN_INTERVAL_SECONDS)
    assert later.measured_steps is None
    assert later.engine_replanned_at == changed + MIN_INTERVAL_SECONDS
    assert later.vllm_args == CATALOG_PLAN.vllm_args
    # A fit that still says the same hardware re-plans nothing (its budget moves less than 10 %).
    same = fitted_on(first, speed_factors(1.3))
    assert engine_plan(plan_with, status(first, same), changed + MIN_INTERVAL_SECONDS) == first


def test_back_on_the_catalogs_engine_the_next_change_still_waits_an_hour() -> None:
    """A fit wandering across the threshold must not flap the engine: the time of the last change is kept
    on the catalog's engine too (status.plan.engineReplannedAt)."""
    first = engine_plan(
        plan_with, status(CATALOG_PLAN, fitted_on(CATALOG_PLAN, speed_factors(1.3))), NOW.timestamp()
    )
    back_at = NOW.timestamp() + MIN_INTERVAL_SECONDS
    back = engine_plan(plan_with, status(first, fitted_on(first, speed_factors(1.0))), back_at)
    assert back.measured_steps is None and back.engine_replanned_at == back_at
    faster_again = fitted_on(back, speed_factors(1.3))
    assert engine_plan(plan_with, status(back, faster_again), back_at + 60) == back
    assert engine_plan(plan_with, status(back, faster_again), back_at + MIN_INTERVAL_SECONDS).measured_steps


def test_the_fit_goes_on_across_a_change_of_engine() -> None:
    """The autoscaler's state holds the factors the plan was built with, and the calibration divides them
    out: observations of the same hardware fit the same factors before and after the engine changed."""
    truth = speed_factors(1.3)
    first = engine_plan(plan_with, status(CATALOG_PLAN, fitted_on(CATALOG_PLAN, truth)), NOW.timestamp())
    state = autoscaler_state({"plan": first.to_wire()})
    assert first.measured_steps is not None
    assert plan_factors(state) == Factors(
        first.measured_steps.bandwidth_efficiency,
        first.measured_steps.compute_efficiency,
        first.measured_steps.step_overhead_seconds,
    )
    after = fitted_on(first, truth)
    assert after.bandwidth_efficiency == pytest.approx(truth.bandwidth_efficiency, rel=0.05)
    assert after.compute_efficiency == pytest.approx(truth.compute_efficiency, rel=0.1)
    # The policy's calibrated step model is the true one whichever plan it starts from.
    model = calibrated_model(state.model_copy(update={"step_calibration": after}))
    assert model is not None
    real = StepBasis.from_step_model(
        StepModel(
            first.decode_step_seconds, first.decode_seconds_per_context_token, first.prefill_seconds_per_token
        ),
        plan_factors(state),
    ).step_model(truth)
    assert model.step_seconds(16, 1000, 128) == pytest.approx(real.step_seconds(16, 1000, 128), rel=0.03)


def test_a_new_engine_moves_the_capacity_prior_and_keeps_the_learned_correction() -> None:
    before = autoscaler_state({"plan": CATALOG_PLAN.to_wire()})
    assert before.capacity_prior_tokens_per_second == CATALOG_PLAN.prefill_tokens_per_second
    learned = before.model_copy(
        update={"capacity_tokens_per_second": 0.8 * CATALOG_PLAN.prefill_tokens_per_second}
    )
    first = engine_plan(
        plan_with, status(CATALOG_PLAN, fitted_on(CATALOG_PLAN, speed_factors(1.3))), NOW.timestamp()
    )
    after = autoscaler_state({"plan": first.to_wire()}, remembered=learned)
    assert after.capacity_prior_tokens_per_second == first.prefill_tokens_per_second
    assert after.capacity_tokens_per_second == pytest.approx(0.8 * first.prefill_tokens_per_second)
    assert after.chunk_tokens == first.max_num_batched_tokens - first.max_num_seqs


def test_reconcile_plans_the_engine_from_status_and_keeps_it() -> None:
    """The whole path as the reconciler runs it: status holds the plan and the autoscaler's calibration;
    the Deployment's vLLM arguments follow the re-planned engine, status.plan.measuredSteps records it,
    and the next reconcile (status as written) keeps it."""
    body: dict[str, Any] = {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": "u-1", "generation": 1},
        "spec": SPEC,
        "status": status(CATALOG_PLAN, fitted_on(CATALOG_PLAN, speed_factors(1.3))),
    }
    outcome = reconcile(body, Settings(), inventory=None, pod_monitor=False, now=NOW)
    assert outcome.plan is not None and outcome.desired is not None
    written = outcome.status_patch["plan"]
    assert written["measuredSteps"]["accelerator"] == CATALOG_PLAN.display_name
    deployment = next(o for o in outcome.desired.objects if o["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-num-batched-tokens") + 1] == str(outcome.plan.max_num_batched_tokens)
    assert outcome.plan.max_num_batched_tokens > CATALOG_PLAN.max_num_batched_tokens

    event = engine_replanned_event(body["status"], outcome.status_patch)
    assert event is not None and event.reason == ENGINE_REPLANNED and not event.warning
    assert f"--max-num-batched-tokens {CATALOG_PLAN.max_num_batched_tokens} -> " in event.message

    again = reconcile(
        {**body, "status": {**body["status"], "plan": written}},
        Settings(),
        inventory=None,
        pod_monitor=False,
        now=datetime(2026, 12, 6, 12, 5, tzinfo=UTC),
    )
    assert again.status_patch["plan"] == written
    assert engine_replanned_event({**body["status"], "plan": written}, again.status_patch) is None

    # An hour on, the fit says the catalog's speed: back to its engine, and the merge patch deletes
    # status.plan.measuredSteps rather than leaving it behind for the next reconcile to plan with.
    assert outcome.plan.engine_replanned_at is not None
    on_catalog_speed = {
        "plan": written,
        "autoscaling": {"state": {"stepCalibration": fitted_on(outcome.plan, speed_factors(1.0)).to_wire()}},
    }
    back = reconcile(
        {**body, "status": on_catalog_speed},
        Settings(),
        inventory=None,
        pod_monitor=False,
        now=datetime.fromtimestamp(outcome.plan.engine_replanned_at + MIN_INTERVAL_SECONDS, UTC),
    )
    assert back.status_patch["plan"]["measuredSteps"] is None
    assert back.status_patch["plan"]["maxNumBatchedTokens"] == CATALOG_PLAN.max_num_batched_tokens
    event = engine_replanned_event(on_catalog_speed, back.status_patch)
    assert event is not None and "catalog's step estimates again" in event.message


@pytest.mark.parametrize(
    "hostile",
    [
        "x" * 100,
        ["plan"],
        {"plan": "x"},
        {"plan": {"measuredSteps": "x", "engineReplannedAt": ["x"]}},
        {"plan": {"measuredSteps": {"bandwidthEfficiency": 7}, "engineReplannedAt": "yesterday"}},
        {"plan": {"engineReplannedAt": True}, "autoscaling": {"state": {"stepCalibration": "x"}}},
        {"autoscaling": "x"},
    ],
)
def test_whatever_a_body_holds_in_status_the_plan_is_the_catalogs(hostile: object) -> None:
    """status is the operator's own, but a manifest given to `plan` (or a hand-edited object) may hold
    anything there: never an exception, never measured factors read from it."""
    body = {"metadata": {"name": "chat"}, "spec": SPEC, "status": hostile}
    _, plan = plan_llamaservice(body, Settings(), None, NOW.timestamp())
    assert plan.measured_steps is None and plan.engine_replanned_at is None
    assert plan.vllm_args == CATALOG_PLAN.vllm_args
    assert engine_replanned_event(hostile, {"plan": plan.to_wire()}) is None
    _, dry = plan_llamaservice(body, Settings(), None)
    assert dry.vllm_args == CATALOG_PLAN.vllm_args


def test_the_platform_sets_how_soon_and_can_turn_re_planning_off() -> None:
    """config.engineReplanMinObservations and engineReplanIntervalSeconds; an interval of 0 plans every
    engine with the catalog's estimates, including one planned for measured hardware before."""
    short = fitted_on(CATALOG_PLAN, speed_factors(1.3), cycles=40)
    assert engine_plan(plan_with, status(CATALOG_PLAN, short), NOW.timestamp()) == CATALOG_PLAN
    eager = ReplanPolicy(min_observations=20, min_interval_seconds=600)
    first = engine_plan(plan_with, status(CATALOG_PLAN, short), NOW.timestamp(), eager)
    assert first.measured_steps is not None
    body = {"metadata": {"name": "chat"}, "spec": SPEC, "status": status(first, short)}
    off = Settings(engine_replan_interval_seconds=0)
    for now in (NOW.timestamp(), None):
        _, plan = plan_llamaservice(body, off, None, now)
        assert plan.measured_steps is None and plan.vllm_args == CATALOG_PLAN.vllm_args
    _, kept = plan_llamaservice(body, Settings(), None, NOW.timestamp() + 1)
    assert kept.measured_steps == first.measured_steps
