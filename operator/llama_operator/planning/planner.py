"""LlamaService spec -> Plan: the accelerator, its placement, and the vLLM flags sized for it.

Pure: the node inventory comes in as an argument, configuration as a frozen dataclass. The decisions, in the
order a plan takes them: the request the spec makes (model), the accelerator (choose), where it runs
(placement), the engine sized on it (engine, with the SLO's tuning), and the Plan written out (render).
"""

from __future__ import annotations

from dataclasses import replace

from llama_operator.api.plan import MeasuredSteps, Plan
from llama_operator.api.spec import AcceleratorType, LlamaServiceSpec
from llama_operator.planning.adapters import check_adapters
from llama_operator.planning.choose import choose_and_size, unknown_gpus_note
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.extra_args import check_trust_remote_code
from llama_operator.planning.images import check_engine_image
from llama_operator.planning.inventory import Inventory
from llama_operator.planning.model import resolve_request
from llama_operator.planning.render import render_plan


def _check_policy_inputs(spec: LlamaServiceSpec, served_name: str, config: PlanningConfig) -> None:
    """The spec's fields that the platform's policy or the adapters' rules refuse, before any sizing."""
    check_engine_image(spec.engine.image, config.allowed_image_prefixes)
    check_trust_remote_code(spec.model.trust_remote_code, allowed=config.allow_trust_remote_code)
    cache = spec.model.cache
    check_adapters(
        spec.adapters,
        served_name=served_name,
        has_cache_claim=cache is not None and cache.persistent_volume_claim is not None,
        has_api_key=spec.engine.api_key_secret_ref is not None,
    )


def ignored_field_notes(spec: LlamaServiceSpec) -> list[str]:
    """Fields the spec sets that the service will not follow, said rather than dropped silently."""
    autoscaling = spec.autoscaling
    # Compared with the default, not with the fields set: the API server writes the default (1) into every
    # LlamaService, and one replica beside autoscaling asks for nothing it would not do.
    default = LlamaServiceSpec.model_fields["replicas"].default
    if autoscaling is not None and autoscaling.enabled and spec.replicas != default:
        return [
            f"spec.replicas {spec.replicas} is ignored: autoscaling is enabled and runs between minReplicas "
            f"{autoscaling.min_replicas} and maxReplicas {autoscaling.max_replicas}; remove replicas, or set "
            "autoscaling.enabled false for a fixed count"
        ]
    return []


def plan_service(
    spec: LlamaServiceSpec,
    *,
    name: str,
    config: PlanningConfig,
    inventory: Inventory | None = None,
    measured: MeasuredSteps | None = None,
) -> Plan:
    """Plan one LlamaService: accelerator, placement, engine sizing and vLLM arguments. `measured`: the
    efficiency factors measured on the service's own replicas, used for the accelerator they were
    measured on (reconcile/engine.py decides when).

    Raises PlanningError with a message the user can act on when the spec cannot work.
    """
    served_name = spec.model.served_name or name
    _check_policy_inputs(spec, served_name, config)
    request = replace(resolve_request(spec, config), measured=measured)
    sized, placement, notes = choose_and_size(spec, request, config, inventory)
    notes += ignored_field_notes(spec)
    auto = spec.accelerator.type == AcceleratorType.AUTO
    unknown_gpus = (
        unknown_gpus_note(inventory) if auto and inventory is not None and inventory.unknown_gpus else None
    )
    return render_plan(
        spec,
        request,
        sized,
        served_name=served_name,
        placement=placement,
        notes=notes,
        config=config,
        unknown_gpus=unknown_gpus,
    )
