"""An engine planned for the hardware it runs on: when to plan a service's vLLM engine with the efficiency
factors measured on its own replicas rather than the catalog's.

The planner sizes --max-num-batched-tokens and --max-num-seqs from the step model (catalog.performance),
whose efficiency factors are data-sheet estimates, deliberately on the slow side. The autoscaler fits
them to the service's own steps (autoscale/calibration.py, status.autoscaling.state.stepCalibration).
Where the replicas turn out faster than the catalog says, a plan with the measured factors gives each
step a larger prompt chunk (and, under a TPOT objective, a larger batch) within the same objectives:
each replica prefills and decodes more, and the fleet needs fewer. A new engine restarts every replica
(a rolling update, one cold start each), so it is adopted only when:

- the fit holds enough observations (config.engineReplanMinObservations, 50) on the accelerator the
  plan runs on;
- the step budget changes by at least MIN_BUDGET_CHANGE from the engine running now (hysteresis: a
  fit that wanders by a few percent never restarts anything);
- config.engineReplanIntervalSeconds (an hour; 0 turns re-planning off) have passed since the last
  change;
- never to a smaller engine than the catalog's. On hardware slower than the catalog says, a smaller
  chunk would meet the TPOT objective in every step, but it cuts the longest prompt a replica prefills
  within the TTFT objective, which no number of replicas buys back (docs/bench/calibration.md: 63-80 %
  of the TTFT windows where the catalog's engine held all). There the engine keeps the catalog's plan
  and the autoscaler spreads the prompts over more replicas.

The factors it plans with are the fit's slow side (autoscale/calibration.py's planning_factors: one
posterior standard deviation slower), since a budget too large breaks TPOT in every chunk-carrying step
while one too small only costs replicas. The factors adopted are kept in status.plan.measuredSteps and
the time of the change in status.plan.engineReplannedAt: the next reconcile plans with them again, and a
restart of the operator loses nothing. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import ValidationError

from llama_operator.api.autoscaling import StepCalibration, unix_time
from llama_operator.api.plan import MeasuredSteps, Plan
from llama_operator.api.settings import Settings
from llama_operator.autoscale.calibration import planning_factors
from llama_operator.reconcile.execution import Event

# The step budget must move by this share before a new engine is worth a rolling restart.
MIN_BUDGET_CHANGE = 0.1


@dataclass(frozen=True)
class ReplanPolicy:
    """The platform's settings for it (config.engineReplanIntervalSeconds, engineReplanMinObservations)."""

    # Observations (evaluation cycles, discounted) the fit must hold before it plans an engine: by default
    # ~half the fit's memory (autoscale/calibration.py: FORGETTING 0.99, ~100 cycles).
    min_observations: float
    # At most one engine change per this long; 0: never (the catalog's estimates plan every engine).
    min_interval_seconds: float

    @classmethod
    def from_settings(cls, settings: Settings) -> ReplanPolicy:
        return cls(
            min_observations=settings.engine_replan_min_observations,
            min_interval_seconds=settings.engine_replan_interval_seconds,
        )


DEFAULT_POLICY = ReplanPolicy.from_settings(Settings())
ENGINE_REPLANNED = "EngineReplanned"
_Model = TypeVar("_Model", MeasuredSteps, StepCalibration)


def value_at(value: object, *path: str) -> object:
    """`value[path[0]][path[1]]...`, or None where a level is missing or not an object (status is ours,
    but the body it comes in may hold anything)."""
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _typed_at(model: type[_Model], status: object, *path: str) -> _Model | None:
    """The object at `path` in status as `model`, or None where it is missing or not one."""
    raw = value_at(status, *path)
    if not isinstance(raw, Mapping):
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None


def pinned_steps(status: object) -> MeasuredSteps | None:
    """The measured factors the engine was last planned with (status.plan.measuredSteps), if any."""
    return _typed_at(MeasuredSteps, status, "plan", "measuredSteps")


def _calibration(status: object) -> StepCalibration | None:
    return _typed_at(StepCalibration, status, "autoscaling", "state", "stepCalibration")


def engine_plan(
    plan_with: Callable[[MeasuredSteps | None], Plan],
    status: object,
    now: float | None,
    policy: ReplanPolicy = DEFAULT_POLICY,
) -> Plan:
    """The plan to run: `plan_with(factors)` plans the service with measured factors (None: the catalog's).
    The engine planned last stays unless the service's calibration changes it enough (module docstring);
    the plan carries when it last changed (`engineReplannedAt`). With re-planning off, every engine is the
    catalog's. `now` None (a dry run): the engine status holds, never a new one."""
    last = last_replanned(status)
    if policy.min_interval_seconds <= 0:
        return stamped(plan_with(None), last)
    current = stamped(plan_with(pinned_steps(status)), last)
    calibration = _calibration(status)
    if now is None or calibration is None or calibration.observations < policy.min_observations:
        return current
    if last is not None and now - last < policy.min_interval_seconds:
        return current
    # The fit describes the replicas that ran the plan in status: only that accelerator's engine follows it.
    measured_on = value_at(status, "plan", "displayName")
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


def last_replanned(status: object) -> float | None:
    """When the engine last changed for measured hardware (status.plan.engineReplannedAt), if ever."""
    raw = value_at(status, "plan", "engineReplannedAt")
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        return None
    try:
        when = unix_time(raw)
    except ValueError:
        return None
    return float(when) if isinstance(when, int | float) else None


def stamped(plan: Plan, replanned_at: float | None) -> Plan:
    return plan if replanned_at is None else plan.model_copy(update={"engine_replanned_at": replanned_at})


def engine_replanned_event(before: object, status: object) -> Event | None:
    """A Normal Event when the engine changes for measured hardware (or back to the catalog's estimates)."""
    old, new = pinned_steps(before), pinned_steps(status)
    if old == new or not isinstance(value_at(before, "plan"), Mapping):
        return None
    if value_at(before, "plan", "displayName") != value_at(status, "plan", "displayName"):
        return None
    flags = (
        f"--max-num-batched-tokens {value_at(before, 'plan', 'maxNumBatchedTokens')} -> "
        f"{value_at(status, 'plan', 'maxNumBatchedTokens')}, "
        f"--max-num-seqs {value_at(before, 'plan', 'maxNumSeqs')} -> {value_at(status, 'plan', 'maxNumSeqs')}"
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
