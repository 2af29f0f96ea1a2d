"""The LlamaService status, written only by the operator."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from llama_operator.api.autoscaling import AutoscalingStatus
from llama_operator.api.base import WireModel
from llama_operator.api.conditions import Condition
from llama_operator.api.plan import Plan


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
