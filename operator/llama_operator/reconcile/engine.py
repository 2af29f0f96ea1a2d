"""An engine planned for the hardware it runs on: when to plan a service's vLLM engine with the efficiency
factors measured on its own replicas rather than the catalog's.

The planner sizes --max-num-batched-tokens and --max-num-seqs from the step model (catalog.performance),
whose efficiency factors are data-sheet estimates, deliberately on the slow side. The autoscaler fits
them to the service's own steps (autoscale/calibration.py, status.autoscaling.state.stepCalibration).
Where the replicas turn out faster than the catalog says, a plan with the measured factors gives each
step a larger prompt chunk (and, under a TPOT objective, a larger batch) within the same objectives:
each replica prefills and decodes more, and the fleet needs fewer. A new engine restarts every replica
(a rolling update, one cold start each), so it is adopted only when:

- the fit holds enough observations (MIN_OBSERVATIONS) on the accelerator the plan runs on;
- the step budget changes by at least MIN_BUDGET_CHANGE from the engine running now (hysteresis: a
  fit that wanders by a few percent never restarts anything);
- MIN_INTERVAL_SECONDS have passed since the last change;
- never to a smaller engine than the catalog's. On hardware slower than the catalog says, a smaller
  chunk would meet the TPOT objective in every step, but it cuts the longest prompt a replica prefills
  within the TTFT objective, which no number of replicas buys back (docs/bench/calibration.md: 63-80 %
  of the TTFT windows where the catalog's engine held all). There the engine keeps the catalog's plan
  and the autoscaler spreads the prompts over more replicas.

The factors adopted are kept in status.plan.measuredSteps and the time of the change in
status.plan.engineReplannedAt: the next reconcile plans with them again, and a restart of the operator
loses nothing. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from llama_operator.api.autoscaling import StepCalibration, unix_time
from llama_operator.api.plan import MeasuredSteps, Plan
from llama_operator.autoscale.calibration import planning_factors
from llama_operator.reconcile.execution import Event

# Observations (evaluation cycles, discounted) the fit must hold before it plans an engine: ~half the
# fit's memory (autoscale/calibration.py: FORGETTING 0.99, ~100 cycles).
MIN_OBSERVATIONS = 50.0
# The step budget must move by this share before a new engine is worth a rolling restart.
MIN_BUDGET_CHANGE = 0.1
# At most one engine change per this long.
MIN_INTERVAL_SECONDS = 3600.0
ENGINE_REPLANNED = "EngineReplanned"


def pinned_steps(status: Mapping[str, Any] | None) -> MeasuredSteps | None:
    """The measured factors the engine was last planned with (status.plan.measuredSteps), if any."""
    raw = ((status or {}).get("plan") or {}).get("measuredSteps")
    if not isinstance(raw, Mapping):
        return None
    try:
        return MeasuredSteps.model_validate(raw)
    except ValidationError:
        return None


def _calibration(status: Mapping[str, Any] | None) -> StepCalibration | None:
    raw = (((status or {}).get("autoscaling") or {}).get("state") or {}).get("stepCalibration")
    if not isinstance(raw, Mapping):
        return None
    try:
        return StepCalibration.model_validate(raw)
    except ValidationError:
        return None


def engine_plan(
    plan_with: Callable[[MeasuredSteps | None], Plan], status: Mapping[str, Any] | None, now: float
) -> Plan:
    """The plan to run: `plan_with(factors)` plans the service with measured factors (None: the catalog's).
    The engine planned last stays unless the service's calibration changes it enough (module docstring);
    the plan carries when it last changed (`engineReplannedAt`)."""
    last = last_replanned(status)
    current = stamped(plan_with(pinned_steps(status)), last)
    calibration = _calibration(status)
    if calibration is None or calibration.observations < MIN_OBSERVATIONS:
        return current
    if last is not None and now - last < MIN_INTERVAL_SECONDS:
        return current
    # The fit describes the replicas that ran the plan in status: only that accelerator's engine follows it.
    measured_on = ((status or {}).get("plan") or {}).get("displayName")
    if measured_on != current.display_name or not current.max_num_batched_tokens:
        return current
    factors = planning_factors(calibration)
    candidate = plan_with(
        MeasuredSteps(
            bandwidth_efficiency=round(factors.bandwidth_efficiency, 4),
            compute_efficiency=round(factors.compute_efficiency, 4),
            step_overhead_seconds=round(factors.step_overhead_seconds, 6),
            accelerator=current.display_name,
        )
    )
    catalog = plan_with(None)
    # Not faster than the catalog says: its engine (back to it, where that is a real change).
    slower = candidate.max_num_batched_tokens <= catalog.max_num_batched_tokens
    target = catalog if slower else candidate
    if target.display_name != current.display_name:
        return current  # the measurement moved the placement: not this mechanism's to decide
    change = abs(target.max_num_batched_tokens / current.max_num_batched_tokens - 1)
    return stamped(target, now) if change >= MIN_BUDGET_CHANGE else current


def last_replanned(status: Mapping[str, Any] | None) -> float | None:
    """When the engine last changed for measured hardware (status.plan.engineReplannedAt), if ever."""
    raw = ((status or {}).get("plan") or {}).get("engineReplannedAt")
    if raw is None:
        return None
    try:
        return float(unix_time(raw))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def stamped(plan: Plan, replanned_at: float | None) -> Plan:
    return plan if replanned_at is None else plan.model_copy(update={"engine_replanned_at": replanned_at})


def engine_replanned_event(before: Mapping[str, Any] | None, status: Mapping[str, Any]) -> Event | None:
    """A Normal Event when the engine changes for measured hardware (or back to the catalog's estimates)."""
    old_plan, new_plan = (before or {}).get("plan") or {}, status.get("plan") or {}
    old, new = pinned_steps(before), pinned_steps(status)
    if old == new or not old_plan or old_plan.get("displayName") != new_plan.get("displayName"):
        return None
    flags = (
        f"--max-num-batched-tokens {old_plan.get('maxNumBatchedTokens')} -> {new_plan.get('maxNumBatchedTokens')}, "
        f"--max-num-seqs {old_plan.get('maxNumSeqs')} -> {new_plan.get('maxNumSeqs')}"
    )
    if new is None:
        return Event(
            ENGINE_REPLANNED,
            f"engine planned with the catalog's step estimates again: {flags}",
            warning=False,
        )
    return Event(
        ENGINE_REPLANNED,
        f"engine planned for the hardware measured on its replicas (bandwidth efficiency "
        f"{new.bandwidth_efficiency:.2f}, compute efficiency {new.compute_efficiency:.2f}, step overhead "
        f"{new.step_overhead_seconds * 1000:.1f} ms): {flags}; the replicas roll to it",
        warning=False,
    )
