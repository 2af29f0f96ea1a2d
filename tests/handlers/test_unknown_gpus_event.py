"""A LlamaService that wanted auto gets a Warning Event when its plan newly leaves GPU nodes out (their
product matches no accelerator), once, not at every reconcile."""

from __future__ import annotations

from llama_operator.api.plan import Plan
from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.handlers.reconciler import unknown_gpus_event
from llama_operator.planning.choose import unknown_gpus_note
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.inventory import inventory_from_nodes
from llama_operator.planning.planner import plan_service
from tests.planning.builders import gpu_node


def plan(unknown_gpus: str | None = None) -> Plan:
    return Plan(accelerator="t4", notes=["auto: t4 is the cheapest"], unknown_gpus=unknown_gpus)


def test_a_new_note_is_one_warning_and_a_repeat_is_none() -> None:
    note = unknown_gpus_note(inventory_from_nodes([gpu_node("x", "NVIDIA-X1000", 8)]))
    event = unknown_gpus_event(plan(), plan(note))
    assert event is not None and event.reason == "UnknownGPUs" and event.warning
    assert "NVIDIA-X1000 (1 node)" in event.message and "config.accelerators" in event.message
    assert unknown_gpus_event(plan(note), plan(note)) is None
    assert unknown_gpus_event(plan(note), plan()) is None
    assert unknown_gpus_event(None, plan()) is None


def test_auto_plans_the_note_as_a_field_of_its_own() -> None:
    nodes = [gpu_node("x", "NVIDIA-X1000", 8), gpu_node("t", "Tesla-T4", 1)]
    spec = LlamaServiceSpec.model_validate({"model": {"name": "meta-llama/Llama-3.2-1B-Instruct"}})
    planned = plan_service(spec, name="chat", config=PlanningConfig(), inventory=inventory_from_nodes(nodes))
    assert planned.unknown_gpus == unknown_gpus_note(inventory_from_nodes(nodes))
