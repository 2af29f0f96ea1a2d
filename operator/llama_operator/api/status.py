"""The LlamaService status, written only by the operator."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError

from llama_operator.api.autoscaling import AutoscalerState, AutoscalingStatus
from llama_operator.api.base import WireModel
from llama_operator.api.conditions import Condition
from llama_operator.api.plan import Plan, status_plan


class Phase(StrEnum):
    PENDING = "Pending"
    PROGRESSING = "Progressing"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"
    SCALED_TO_ZERO = "ScaledToZero"


class AdapterStatus(WireModel):
    """Where one of spec.adapters is loaded, as the replicas' /v1/models lists it."""

    name: Annotated[str, Field(description="The adapter's name (spec.adapters[].name).")]
    replicas: Annotated[
        list[str], Field(description="Ready replicas (pod names) whose vLLM has the adapter loaded.")
    ] = Field(default_factory=list)
    message: Annotated[
        str | None,
        Field(description="Why the last load into a replica failed (vLLM's answer), when one did."),
    ] = None


class LlamaServiceStatus(WireModel):
    """Observed state of a LlamaService."""

    phase: Annotated[
        Phase | None,
        Field(description="Summary: Pending, Progressing, Ready, ScaledToZero, Degraded or Failed."),
    ] = None
    observed_generation: Annotated[int | None, Field(description="Last spec generation acted on.")] = None
    conditions: Annotated[list[Condition], Field(description="Current observations.")] = Field(
        default_factory=list
    )
    replicas: Annotated[int | None, Field(description="Replicas desired (the Deployment's spec).")] = None
    ready_replicas: Annotated[int | None, Field(description="Replicas ready to serve.")] = None
    updated_replicas: Annotated[int | None, Field(description="Replicas on the current spec.")] = None
    selector: Annotated[
        str | None, Field(description="Label selector of the pods (for the scale subresource).")
    ] = None
    accelerator: Annotated[str | None, Field(description="Resolved accelerator, for humans.")] = None
    url: Annotated[
        str | None,
        Field(
            description="The service's OpenAI base URL inside the cluster (its Service: "
            "http://<name>.<namespace>.svc:8000/v1)."
        ),
    ] = None
    router_url: Annotated[
        str | None,
        Field(
            description="The router's OpenAI base URL while a router pod is ready (the chart's activator): one "
            "endpoint for every LlamaService of the caller's namespace, routed by `model`, holding requests "
            "at zero."
        ),
    ] = None
    spec_replicas: Annotated[
        int | None,
        Field(
            description="spec.replicas as last reconciled. With autoscaling on it is ignored (the autoscaler "
            "owns replicas); a change, e.g. by `kubectl scale`, is reported with a ReplicasIgnored Event."
        ),
    ] = None
    plan: Annotated[Plan | None, Field(description="What the planner decided.")] = None
    autoscaling: Annotated[AutoscalingStatus | None, Field(description="Autoscaler observations.")] = None
    adapters: Annotated[
        list[AdapterStatus] | None,
        Field(
            description="Which ready replica holds which LoRA adapter (spec.adapters), as the operator last "
            "loaded and listed them."
        ),
    ] = None


def _known(model: type[BaseModel], raw: Mapping[str, Any]) -> dict[str, Any]:
    """`raw` less the fields `model` does not know: a newer operator wrote them before a rollback."""
    known = {field.alias or name for name, field in model.model_fields.items()}
    return {key: value for key, value in raw.items() if key in known}


def read_autoscaler_state(raw: object) -> AutoscalerState:
    """status.autoscaling.state as stored, typed: the policy's memory (recommendations, learned capacity)
    holds across a rollback that left fields this version does not know."""
    return AutoscalerState.model_validate(_known(AutoscalerState, raw if isinstance(raw, Mapping) else {}))


def read_autoscaling(raw: object) -> AutoscalingStatus | None:
    """status.autoscaling as stored, typed; None when there is none or it cannot be read."""
    if not isinstance(raw, Mapping) or not raw:
        return None
    known = _known(AutoscalingStatus, raw)
    known["state"] = read_autoscaler_state(known.get("state"))
    try:
        return AutoscalingStatus.model_validate(known)
    except ValidationError:
        return None


def read_status(status: Mapping[str, Any] | None) -> LlamaServiceStatus:
    """A LlamaService's status as stored, typed, for reading: each part this version can read. A part it
    cannot (one a newer operator wrote before a rollback) is left out rather than refusing the rest."""
    raw = status or {}
    parts: dict[str, Any] = {
        "plan": status_plan(raw),
        "autoscaling": read_autoscaling(raw.get("autoscaling")),
    }
    for name, field in LlamaServiceStatus.model_fields.items():
        key = field.alias or name
        if name in parts or raw.get(key) is None:
            continue
        try:
            parts[name] = getattr(LlamaServiceStatus.model_validate({key: raw[key]}), name)
        except ValidationError:
            continue
    return LlamaServiceStatus.model_validate(parts)


def stored_autoscaler_state(status: Mapping[str, Any] | None) -> AutoscalerState:
    """The policy's state as status holds it (status.autoscaling.state); empty when there is none."""
    autoscaling = (status or {}).get("autoscaling")
    return read_autoscaler_state(autoscaling.get("state") if isinstance(autoscaling, Mapping) else None)


def stored_autoscaling(status: Mapping[str, Any] | None) -> AutoscalingStatus | None:
    """status.autoscaling, typed (None when there is none or it cannot be read)."""
    return read_autoscaling((status or {}).get("autoscaling"))
