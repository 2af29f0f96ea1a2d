"""Kubernetes-style status conditions: the one place they are read from a status (or a status patch) and written
back, and the pure function that updates a list of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field

from llama_operator.api.base import WireModel
from llama_operator.api.times import rfc3339


class ConditionType(StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    SCALING_ACTIVE = "ScalingActive"
    SCALING_LIMITED = "ScalingLimited"
    SLO_MET = "SLOMet"
    SCHEDULABLE = "Schedulable"
    SCALED_TO_ZERO = "ScaledToZero"
    # The nodes and the Karpenter NodePools' GPU limits hold fewer replicas than maxReplicas (or replicas).
    CAPACITY_LIMITED = "CapacityLimited"
    # The Gateway API Inference Extension's pool: optional, so never part of Ready or Degraded.
    INFERENCE_POOL_READY = "InferencePoolReady"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(WireModel):
    """One observation about the LlamaService, as Kubernetes conditions are shaped."""

    type: Annotated[str, Field(description="Condition type, e.g. Ready, Progressing, Degraded.")]
    status: Annotated[ConditionStatus, Field(description="True, False or Unknown.")]
    reason: Annotated[str, Field(description="CamelCase machine-readable reason.")] = ""
    message: Annotated[str, Field(description="Human-readable details.")] = ""
    last_transition_time: Annotated[
        str | None, Field(description="When the status last changed (RFC 3339).")
    ] = None
    observed_generation: Annotated[
        int | None, Field(description="The spec generation this condition was computed from.")
    ] = None


def set_condition(
    conditions: list[Condition],
    *,
    type: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """Return the list with one condition set; its transition time moves only when its status changes."""
    updated: list[Condition] = []
    found = False
    for c in conditions:
        if c.type != type:
            updated.append(c)
            continue
        found = True
        moved = c.status != status
        updated.append(
            Condition(
                type=type,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=rfc3339(now)
                if moved or c.last_transition_time is None
                else c.last_transition_time,
                observed_generation=generation,
            )
        )
    if not found:
        updated.append(
            Condition(
                type=type,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=rfc3339(now),
                observed_generation=generation,
            )
        )
    return updated


ConditionUpdate = tuple[str, ConditionStatus, str, str]  # (type, status, reason, message)


def set_conditions(
    conditions: list[Condition], updates: Sequence[ConditionUpdate], *, now: datetime, generation: int | None
) -> list[Condition]:
    """set_condition for several conditions observed at once."""
    for type_, status, reason, message in updates:
        conditions = set_condition(
            conditions,
            type=type_,
            status=status,
            reason=reason,
            message=message,
            now=now,
            generation=generation,
        )
    return conditions


def find_condition(conditions: list[Condition], type: str) -> Condition | None:
    return next((c for c in conditions if c.type == type), None)


def conditions_of(status: Mapping[str, Any] | None) -> list[Condition]:
    """The conditions of a LlamaService's status, or of a status patch, typed (none when it has none)."""
    return [Condition.model_validate(c) for c in (status or {}).get("conditions") or []]


def conditions_wire(conditions: Sequence[Condition]) -> list[dict[str, object]]:
    """The conditions as a status (patch) holds them."""
    return [c.to_wire() for c in conditions]


class ConditionSet:
    """The conditions being written by one evaluation: each set keeps its transition time unless its status
    changes, and all carry the generation they were computed from."""

    def __init__(self, status: Mapping[str, Any] | None, *, now: datetime, generation: int | None) -> None:
        self.items = conditions_of(status)
        self.now, self.generation = now, generation

    def find(self, type_: str) -> Condition | None:
        return find_condition(self.items, type_)

    def set(self, type_: str, status: ConditionStatus, reason: str, message: str) -> None:
        self.items = set_condition(
            self.items,
            type=type_,
            status=status,
            reason=reason,
            message=message,
            now=self.now,
            generation=self.generation,
        )

    def to_wire(self) -> list[dict[str, object]]:
        return conditions_wire(self.items)
