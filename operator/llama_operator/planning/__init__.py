"""Engine planning: (model, accelerator, engine wishes, node inventory) -> Plan, or a PlanningError."""

from llama_operator.planning.config import DEFAULT_CPU_IMAGE, DEFAULT_GPU_IMAGE, PlanningConfig
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.inventory import Inventory, Offer, SkippedNode, inventory_from_nodes
from llama_operator.planning.planner import plan_service

__all__ = [
    "DEFAULT_CPU_IMAGE",
    "DEFAULT_GPU_IMAGE",
    "Inventory",
    "Offer",
    "PlanningConfig",
    "PlanningError",
    "SkippedNode",
    "inventory_from_nodes",
    "plan_service",
]
