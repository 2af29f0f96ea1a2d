"""What happened when the operator acted on a DesiredState, and how that shows in status. Pure.

The executor (infra.execute) fills an ExecutionReport; `report_execution` turns it into conditions and
at most one Event per change, so a problem that persists across reconciles is not repeated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from llama_operator.api.conditions import (
    Condition,
    ConditionStatus,
    ConditionType,
    ConditionUpdate,
    conditions_of,
    conditions_wire,
    find_condition,
    set_conditions,
)
from llama_operator.api.status import Phase

NAME_CONFLICT = "NameConflict"
APPLY_REJECTED = "ApplyRejected"


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class Rejection:
    """A permanent refusal by the API server (a 4xx other than 409 and 429): retrying soon cannot help."""

    ref: ObjectRef
    status: int
    message: str


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    warning: bool = True


@dataclass
class ExecutionReport:
    """Objects left alone because someone else has their name, and writes the API server refused."""

    conflicts: list[ObjectRef] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    repaired: list[ObjectRef] = field(default_factory=list)  # objects whose hand-added fields were removed
    writes: int = 0  # API writes made (creates, applies, replaces, deletes)
    writes_by_kind: dict[str, int] = field(default_factory=dict)
    namespace_terminating: bool = False  # the namespace is being deleted: stop, report nothing

    @property
    def clean(self) -> bool:
        return not self.conflicts and not self.rejections

    def wrote(self, kind: str) -> None:
        self.writes += 1
        self.writes_by_kind[kind] = self.writes_by_kind.get(kind, 0) + 1


def is_permanent_refusal(status: int | None) -> bool:
    """4xx errors other than Conflict and TooManyRequests do not go away by retrying the same write."""
    return status is not None and 400 <= status < 500 and status not in {404, 409, 429}


def conflict_message(conflicts: list[ObjectRef]) -> str:
    names = "; ".join(
        f"{ref} exists and is not controlled by this LlamaService, so it is left untouched"
        for ref in conflicts
    )
    return f"{names}. Rename the LlamaService, or delete or rename the existing object"


def rejection_message(rejections: list[Rejection]) -> str:
    return "; ".join(f"the API server refused {r.ref} ({r.status}): {r.message}" for r in rejections)


def _problem_message(conflicts: list[ObjectRef], rejections: list[Rejection]) -> str:
    parts = []
    if conflicts:
        parts.append(conflict_message(conflicts))
    if rejections:
        parts.append(rejection_message(rejections))
    return "; ".join(parts)


def report_execution(
    previous_status: Mapping[str, Any] | None,
    status_patch: Mapping[str, Any],
    report: ExecutionReport,
    *,
    now: datetime,
    generation: int | None,
    inference_pool: ObjectRef | None = None,
) -> dict[str, Any]:
    """Fold the report into the status patch: Degraded names every conflict and refusal, but those of the
    InferencePool (`inference_pool`, where one was applied): an optional integration, reported in its own
    InferencePoolReady condition, which says True once the pool is applied."""
    patch = dict(status_patch)
    updates: list[ConditionUpdate] = []
    if inference_pool is not None:
        pool_conflicts = [c for c in report.conflicts if c == inference_pool]
        pool_rejections = [r for r in report.rejections if r.ref == inference_pool]
        if pool_conflicts or pool_rejections:
            reason = NAME_CONFLICT if pool_conflicts else APPLY_REJECTED
            message = _problem_message(pool_conflicts, pool_rejections)
            updates.append((ConditionType.INFERENCE_POOL_READY, ConditionStatus.FALSE, reason, message))
        else:
            applied = f"{inference_pool} is applied"
            updates.append((ConditionType.INFERENCE_POOL_READY, ConditionStatus.TRUE, "Applied", applied))
    conflicts = [c for c in report.conflicts if c != inference_pool]
    rejections = [r for r in report.rejections if r.ref != inference_pool]
    degraded = bool(conflicts or rejections)
    if degraded:
        reason = NAME_CONFLICT if conflicts else APPLY_REJECTED
        message = _problem_message(conflicts, rejections)
        updates.append((ConditionType.DEGRADED, ConditionStatus.TRUE, reason, message))
    if not updates:
        return patch
    base = conditions_of(patch) or conditions_of(previous_status)
    patch["conditions"] = conditions_wire(set_conditions(base, updates, now=now, generation=generation))
    if degraded:
        patch["phase"] = Phase.DEGRADED.value
    return patch


def _newly(
    previous_status: Mapping[str, Any] | None,
    status_patch: Mapping[str, Any],
    condition: ConditionType,
    status: ConditionStatus,
) -> Condition | None:
    """The patch's `condition` where it has `status` anew or for another reason than before: a problem that
    persists across reconciles and retries is reported once, not at every attempt."""
    after = find_condition(conditions_of(status_patch), condition)
    if after is None or after.status != status:
        return None
    before = find_condition(conditions_of(previous_status), condition)
    if (
        before is not None
        and before.status == status
        and (before.reason, before.message) == (after.reason, after.message)
    ):
        return None
    return after


def degraded_event(
    previous_status: Mapping[str, Any] | None, status_patch: Mapping[str, Any]
) -> Event | None:
    """One Warning Event when the patch makes the LlamaService Degraded anew or for another reason."""
    after = _newly(previous_status, status_patch, ConditionType.DEGRADED, ConditionStatus.TRUE)
    return None if after is None else Event(reason=after.reason, message=after.message)


def inference_pool_event(
    previous_status: Mapping[str, Any] | None, status_patch: Mapping[str, Any]
) -> Event | None:
    """One Warning Event when the patch says, anew or for another reason, that no InferencePool serves."""
    after = _newly(previous_status, status_patch, ConditionType.INFERENCE_POOL_READY, ConditionStatus.FALSE)
    return None if after is None else Event(reason=after.reason, message=after.message)


def retry_delay_seconds(attempt: int, *, base: float = 15.0, cap: float = 600.0) -> float:
    """Capped exponential backoff for problems a retry soon cannot fix (a name taken, a write refused)."""
    return float(min(cap, base * 2 ** max(0, min(attempt, 16))))
