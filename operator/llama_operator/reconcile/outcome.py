"""Compute, then act: from a LlamaService and what the operator knows, decide what to apply and what to
report. Pure; the handlers perform the result."""

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
    set_conditions,
)
from llama_operator.api.plan import MeasuredSteps, Plan
from llama_operator.api.resource import (
    InvalidSpecError,
    LlamaService,
    parse_metadata,
    service_spec,
    stored_status,
)
from llama_operator.api.settings import Settings
from llama_operator.api.status import Phase
from llama_operator.catalog.accelerators import catalog_from_settings
from llama_operator.desired.inference_pool import (
    InferencePoolSchema,
    build_inference_pool,
    inference_pool_unavailable,
)
from llama_operator.desired.labels import selector_string
from llama_operator.desired.objects import ActivatorRoute, DesiredState, build_desired_state
from llama_operator.desired.pod import HTTP_PORT
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.inventory import Inventory
from llama_operator.planning.planner import plan_service
from llama_operator.planning.provisioning import replica_capacity
from llama_operator.reconcile.engine import ReplanPolicy, engine_plan, value_at

PICKER_REQUIRED = "EndpointPickerRequired"  # InferencePoolReady's reason: the served CRD needs a picker


@dataclass(frozen=True)
class ReconcileOutcome:
    """What to do for one LlamaService: objects to apply (or none) and the status to write."""

    desired: DesiredState | None
    plan: Plan | None
    status_patch: dict[str, Any]
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


def planning_config(settings: Settings) -> PlanningConfig:
    kwargs: dict[str, Any] = {
        "mig_strategy": settings.mig_strategy,
        "price_overrides": dict(settings.price_overrides),
        "allowed_image_prefixes": tuple(settings.allowed_image_prefixes),
        "allowed_code_loading_flags": tuple(settings.allowed_code_loading_flags),
        "allow_trust_remote_code": settings.allow_trust_remote_code,
        "catalog": catalog_from_settings(settings.accelerators),
        "platform": settings.platform,
    }
    if settings.gpu_image:
        kwargs["gpu_image"] = settings.gpu_image
    if settings.cpu_image:
        kwargs["cpu_image"] = settings.cpu_image
    return PlanningConfig(**kwargs)


def plan_llamaservice(
    body: Mapping[str, Any], settings: Settings, inventory: Inventory | None, now: float | None = None
) -> tuple[LlamaService, Plan]:
    """Parse and plan; raises InvalidSpecError or PlanningError with a message for the user. The engine is
    planned with the factors measured on the service's replicas where status says so (reconcile/engine.py);
    `now` (unix seconds) lets a new measurement change it, None keeps what status holds."""
    meta = body.get("metadata") or {}
    spec = service_spec(body)
    svc = LlamaService(metadata=parse_metadata(meta), spec=spec)
    config = planning_config(settings)
    status = stored_status(body)

    def plan_with(measured: MeasuredSteps | None) -> Plan:
        return plan_service(
            spec, name=svc.metadata.name, config=config, inventory=inventory, measured=measured
        )

    return svc, engine_plan(plan_with, status, now, ReplanPolicy.from_settings(settings))


def reconcile(
    body: Mapping[str, Any],
    settings: Settings,
    *,
    inventory: Inventory | None,
    pod_monitor: bool,
    now: datetime,
    activator: ActivatorRoute | None = None,
    ready_replicas: int = 0,
    inference_pool: InferencePoolSchema | None = None,
) -> ReconcileOutcome:
    """Decide the objects and the status for a LlamaService as the API server holds it. `activator`: where
    a scaled-to-zero LlamaService's traffic goes while none of its `ready_replicas` serves."""
    meta = body.get("metadata") or {}
    generation = meta.get("generation")
    conditions = conditions_of(stored_status(body))
    try:
        svc, plan = plan_llamaservice(body, settings, inventory, now.timestamp())
    except (InvalidSpecError, PlanningError) as err:
        return _failed(err, conditions, now=now, generation=generation)

    desired = build_desired_state(
        svc, plan, settings, pod_monitor=pod_monitor, activator=activator, ready_replicas=ready_replicas
    )
    updates: list[ConditionUpdate] = [
        (ConditionType.DEGRADED, ConditionStatus.FALSE, "Planned", f"planned {plan.display_name}"),
        *_capacity_condition(svc, plan, inventory, conditions),
    ]
    # The Gateway API Inference Extension's CRD is served: gateways route to this pool. An optional
    # integration: what keeps it from being made is its own condition (report_execution sets it once the
    # pool is applied), never the service's Degraded.
    if inference_pool is None:
        conditions = [c for c in conditions if c.type != ConditionType.INFERENCE_POOL_READY]
    else:
        pool = build_inference_pool(svc, settings, inference_pool)
        if pool is not None:
            desired.objects.append(pool)
        unavailable = inference_pool_unavailable(settings, inference_pool)
        if unavailable is not None:
            updates.append(
                (ConditionType.INFERENCE_POOL_READY, ConditionStatus.FALSE, PICKER_REQUIRED, unavailable)
            )
    conditions = set_conditions(conditions, updates, now=now, generation=generation)
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": conditions_wire(conditions),
        "selector": selector_string(svc.metadata.name),
        **service_urls(svc, settings, activator),
        "accelerator": plan.display_name,
        "plan": replacing(value_at(body, "status", "plan"), plan.to_wire()),
    }
    return ReconcileOutcome(desired=desired, plan=plan, status_patch=status)


def _failed(
    err: InvalidSpecError | PlanningError,
    conditions: list[Condition],
    *,
    now: datetime,
    generation: int | None,
) -> ReconcileOutcome:
    """A spec that cannot be planned: Failed, Degraded and not Ready with the reason; nothing is changed."""
    message = str(err)
    reason = "InvalidSpec" if isinstance(err, InvalidSpecError) else "PlanningFailed"
    conditions = set_conditions(
        conditions,
        [
            (ConditionType.DEGRADED, ConditionStatus.TRUE, reason, message),
            (ConditionType.READY, ConditionStatus.FALSE, reason, message),
            (
                ConditionType.PROGRESSING,
                ConditionStatus.FALSE,
                reason,
                "fix the spec; nothing is changed until then",
            ),
        ],
        now=now,
        generation=generation,
    )
    failed = {
        "phase": Phase.FAILED.value,
        "observedGeneration": generation,
        "conditions": conditions_wire(conditions),
    }
    return ReconcileOutcome(desired=None, plan=None, status_patch=failed, error=message)


def _capacity_condition(
    svc: LlamaService, plan: Plan, inventory: Inventory | None, conditions: list[Condition]
) -> list[ConditionUpdate]:
    """CapacityLimited, where Karpenter NodePools create the plan's GPU under limits that hold fewer replicas
    than the service may scale to; cleared (False) once they hold them, absent where no limit applies."""
    spec = svc.spec
    wanted = spec.autoscaling.max_replicas if spec.autoscaling is not None else spec.replicas
    capacity = None
    if inventory is not None and plan.mig is None and plan.nodes == 1:
        node_gpus = [o.allocatable for o in inventory.gpu_offers(plan.accelerator) if o.provisioner is None]
        capacity = replica_capacity(inventory.provisionable, node_gpus, plan.accelerator, plan.count)
    if capacity is not None and capacity.replicas < wanted:
        message = capacity.message(plan.accelerator, plan.count, wanted)
        return [(ConditionType.CAPACITY_LIMITED, ConditionStatus.TRUE, "NodePoolLimit", message)]
    if capacity is not None or any(c.type == ConditionType.CAPACITY_LIMITED for c in conditions):
        return [
            (
                ConditionType.CAPACITY_LIMITED,
                ConditionStatus.FALSE,
                "WithinCapacity",
                "the GPUs fit every replica",
            )
        ]
    return []


def service_urls(
    svc: LlamaService, settings: Settings, router: ActivatorRoute | None
) -> dict[str, str | None]:
    """status.url, the service's OpenAI base URL (its Service), and status.routerUrl, the router's while a
    router pod is ready (None clears one a router gone left). The router's Service listens on its pods'
    port (the chart gives both activator.port)."""
    meta = svc.metadata
    router_url = (
        f"http://{settings.activator_service}.{settings.activator_namespace}.svc:{router.port}/v1"
        if settings.activator_service and router is not None
        else None
    )
    return {"url": f"http://{meta.name}.{meta.namespace}.svc:{HTTP_PORT}/v1", "routerUrl": router_url}


def replacing(old: Any, new: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch that turns `old` into `new`: a field `old` has and `new` leaves out (an engine back
    on the catalog's estimates, a MIG slice given up) is deleted with a null, not left behind."""
    if not isinstance(old, Mapping):
        return new
    patch: dict[str, Any] = dict(new)
    for key, value in old.items():
        if key not in new:
            patch[key] = None
        elif isinstance(new[key], dict) and isinstance(value, Mapping):
            patch[key] = replacing(value, new[key])
    return patch
