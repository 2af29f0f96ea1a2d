"""Helpers of the planner tests: specs from dicts, Node manifests like the GPU Operator labels them."""

from __future__ import annotations

from typing import Any

from llama_operator.api.plan import Plan
from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.planning import Inventory, PlanningConfig, plan_service

LLAMA_1B = "meta-llama/Llama-3.2-1B-Instruct"
# Llama 3.1 8B's config.json, as spec.model.architecture: for a checkpoint the catalog does not know by name.
LLAMA_8B_ARCHITECTURE = {
    "layers": 32,
    "kvHeads": 8,
    "headDim": 128,
    "parameters": 8_030_261_248,
    "maxContext": 131072,
}


def spec(
    accelerator: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
    model: str = LLAMA_1B,
    **model_fields: Any,
) -> LlamaServiceSpec:
    body: dict[str, Any] = {"model": {"name": model, **model_fields}}
    if accelerator is not None:
        body["accelerator"] = accelerator
    if engine is not None:
        body["engine"] = engine
    return LlamaServiceSpec.model_validate(body)


def plan(
    service: LlamaServiceSpec, config: PlanningConfig | None = None, inventory: Inventory | None = None
) -> Plan:
    return plan_service(service, name="chat", config=config or PlanningConfig(), inventory=inventory)


def node(
    name: str,
    labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    *,
    unschedulable: bool = False,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/arch": "amd64", **(labels or {})}},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", **(allocatable or {})}},
    }


def gpu_node(name: str, product: str, gpus: int, memory_mib: int | None = None) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": product}
    if memory_mib is not None:
        labels["nvidia.com/gpu.memory"] = str(memory_mib)
    return node(name, labels, {"nvidia.com/gpu": str(gpus)})


def mig_mixed_node(
    name: str, product: str, profile: str, count: int, state: str = "success"
) -> dict[str, Any]:
    labels = {
        "nvidia.com/gpu.product": product,
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config.state": state,
        f"nvidia.com/mig-{profile}.count": str(count),
    }
    return node(name, labels, {f"nvidia.com/mig-{profile}": str(count)})


def mig_single_node(
    name: str, product: str, profile: str, count: int, state: str = "success"
) -> dict[str, Any]:
    labels = {
        "nvidia.com/gpu.product": f"{product}-MIG-{profile}",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mig.config.state": state,
    }
    return node(name, labels, {"nvidia.com/gpu": str(count)})
