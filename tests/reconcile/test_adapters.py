"""The plan half of adapter loading: from what each replica's vLLM lists, what to load and unload."""

from __future__ import annotations

from llama_operator.api.spec import LoRAAdapter
from llama_operator.reconcile.adapters import (
    AdapterAction,
    adapter_actions,
    adapter_placement,
    after,
    loaded_adapters,
)

SQL = LoRAAdapter(name="sql", source="/models/adapters/sql")
DOCS = LoRAAdapter(name="docs", source="org/docs-lora")

# vLLM 0.32's /v1/models with one adapter loaded (entrypoints/openai/models/serving.py): the base model's
# card has parent null; an adapter's has its name as id, its path as root, the base model as parent.
MODELS = {
    "object": "list",
    "data": [
        {"id": "chat", "object": "model", "root": "/models/base", "parent": None, "max_model_len": 2048},
        {"id": "sql", "object": "model", "root": "/models/adapters/sql", "parent": "chat"},
    ],
}


def test_loaded_adapters_are_the_cards_with_a_parent() -> None:
    assert loaded_adapters(MODELS, ["chat"]) == {"sql": "/models/adapters/sql"}
    assert loaded_adapters({"data": [MODELS["data"][0]]}) == {}
    assert loaded_adapters({}) == {}


def test_a_replica_without_adapters_gets_them_all_in_spec_order() -> None:
    assert adapter_actions([SQL, DOCS], {"pod-a": {}}) == [
        AdapterAction("pod-a", "load", "sql", "/models/adapters/sql"),
        AdapterAction("pod-a", "load", "docs", "org/docs-lora"),
    ]


def test_a_replica_that_holds_the_spec_needs_nothing() -> None:
    held = {"sql": SQL.source, "docs": DOCS.source}
    assert adapter_actions([SQL, DOCS], {"pod-a": held, "pod-b": dict(held)}) == []


def test_removed_adapters_are_unloaded_before_added_ones_load() -> None:
    actions = adapter_actions([DOCS], {"pod-a": {"sql": SQL.source}})
    assert actions == [
        AdapterAction("pod-a", "unload", "sql"),
        AdapterAction("pod-a", "load", "docs", "org/docs-lora"),
    ]


def test_an_adapter_whose_source_changed_is_reloaded() -> None:
    moved = LoRAAdapter(name="sql", source="/models/adapters/sql-v2")
    assert adapter_actions([moved], {"pod-a": {"sql": SQL.source}}) == [
        AdapterAction("pod-a", "unload", "sql"),
        AdapterAction("pod-a", "load", "sql", "/models/adapters/sql-v2"),
    ]


def test_each_replica_is_brought_to_the_spec_on_its_own() -> None:
    actions = adapter_actions([SQL], {"pod-b": {}, "pod-a": {"sql": SQL.source, "old": "/models/old"}})
    assert actions == [
        AdapterAction("pod-a", "unload", "old"),
        AdapterAction("pod-b", "load", "sql", SQL.source),
    ]


def test_no_adapters_wanted_unloads_everything() -> None:
    assert adapter_actions([], {"pod-a": {"sql": SQL.source}}) == [AdapterAction("pod-a", "unload", "sql")]


def test_placement_follows_what_succeeded() -> None:
    before = {"pod-a": {}, "pod-b": {"sql": SQL.source}}
    done = [AdapterAction("pod-a", "load", "sql", SQL.source)]
    placement = adapter_placement(
        [SQL, DOCS], after(before, done), {"docs": "load on pod-a: 400: bad adapter"}
    )
    assert [(p.name, p.replicas, p.message) for p in placement] == [
        ("sql", ["pod-a", "pod-b"], None),
        ("docs", [], "load on pod-a: 400: bad adapter"),
    ]
    # Another source under the same name is not the adapter the spec asks for.
    assert adapter_placement([SQL], {"pod-a": {"sql": "/models/other"}})[0].replicas == []


def test_after_an_unload_the_replica_no_longer_holds_it() -> None:
    state = after({"pod-a": {"sql": SQL.source}}, [AdapterAction("pod-a", "unload", "sql")])
    assert state == {"pod-a": {}}
