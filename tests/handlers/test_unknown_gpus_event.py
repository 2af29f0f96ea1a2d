"""A LlamaService that wanted auto gets a Warning Event when its plan newly leaves GPU nodes out (their
product matches no accelerator), once, not at every reconcile."""

from __future__ import annotations

from llama_operator.handlers.reconciler import unknown_gpus_event
from llama_operator.planning.choose import unknown_gpus_note
from llama_operator.planning.inventory import inventory_from_nodes
from tests.planning.builders import gpu_node


def status(*notes: str) -> dict[str, object]:
    return {"plan": {"notes": list(notes)}}


def test_a_new_note_is_one_warning_and_a_repeat_is_none() -> None:
    note = unknown_gpus_note(inventory_from_nodes([gpu_node("x", "NVIDIA-X1000", 8)]))
    event = unknown_gpus_event(status("auto: t4 is the cheapest"), status("auto: t4 is the cheapest", note))
    assert event is not None and event.reason == "UnknownGPUs" and event.warning
    assert "NVIDIA-X1000 (1 node)" in event.message and "config.accelerators" in event.message
    assert unknown_gpus_event(status(note), status(note)) is None
    assert unknown_gpus_event(status(note), status("auto: t4 is the cheapest")) is None
