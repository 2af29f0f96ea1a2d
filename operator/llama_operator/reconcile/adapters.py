"""LoRA adapters on running replicas: what to load and unload so that every ready replica holds exactly
spec.adapters, decided from what each replica's vLLM lists on GET /v1/models (plan); infra/vllm_adapters.py
calls vLLM's runtime API (/v1/load_lora_adapter, /v1/unload_lora_adapter) to do it (execute).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from llama_operator.api.spec import LoRAAdapter
from llama_operator.api.status import AdapterStatus

# name -> source of the adapters a replica's vLLM lists (its LoRA cards: `id` and `root`).
Loaded = Mapping[str, str]


@dataclass(frozen=True)
class AdapterAction:
    """One call on one replica: load `name` from `source`, or unload `name`."""

    replica: str
    kind: Literal["load", "unload"]
    name: str
    source: str = ""


def loaded_adapters(models: Mapping[str, Any], base_models: Iterable[str] = ()) -> dict[str, str]:
    """The LoRA adapters in a vLLM /v1/models answer: every card that is not a base model. vLLM lists an
    adapter with its name as `id`, its path as `root` and the base model as `parent` (a base model's
    parent is null)."""
    bases = set(base_models)
    out: dict[str, str] = {}
    for card in models.get("data") or []:
        if not isinstance(card, Mapping):
            continue
        model_id = card.get("id")
        if not isinstance(model_id, str) or model_id in bases or card.get("parent") is None:
            continue
        root = card.get("root")
        out[model_id] = root if isinstance(root, str) else ""
    return out


def adapter_actions(wanted: Sequence[LoRAAdapter], replicas: Mapping[str, Loaded]) -> list[AdapterAction]:
    """For each replica (by name, with what it has loaded): unload what the spec no longer lists or lists
    from another source, then load what it lacks. Unloads first: a replica's slots free before they fill.
    Replicas and adapters in a stable order, so that two passes over the same state do the same."""
    by_name = {a.name: a.source for a in wanted}
    actions: list[AdapterAction] = []
    for replica in sorted(replicas):
        has = replicas[replica]
        stale = sorted(name for name, source in has.items() if by_name.get(name) != source)
        actions += [AdapterAction(replica=replica, kind="unload", name=name) for name in stale]
        missing = [a for a in wanted if a.name not in has or a.name in stale]
        actions += [
            AdapterAction(replica=replica, kind="load", name=a.name, source=a.source) for a in missing
        ]
    return actions


def adapter_placement(
    wanted: Sequence[LoRAAdapter], replicas: Mapping[str, Loaded], failures: Mapping[str, str] | None = None
) -> list[AdapterStatus]:
    """status.adapters: for each adapter of the spec, the replicas that hold it (from the same source), and
    the last failure to load it, if any."""
    failures = failures or {}
    return [
        AdapterStatus(
            name=adapter.name,
            replicas=sorted(r for r, has in replicas.items() if has.get(adapter.name) == adapter.source),
            message=failures.get(adapter.name),
        )
        for adapter in wanted
    ]


def after(replicas: Mapping[str, Loaded], done: Iterable[AdapterAction]) -> dict[str, dict[str, str]]:
    """What the replicas hold once `done` (the actions that succeeded) took effect."""
    state = {replica: dict(has) for replica, has in replicas.items()}
    for action in done:
        held = state.setdefault(action.replica, {})
        if action.kind == "unload":
            held.pop(action.name, None)
        else:
            held[action.name] = action.source
    return state
