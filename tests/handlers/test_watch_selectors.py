"""The server-side label selectors the operator asks kopf for (handlers/startup.py) never hide an object a
handler needs: a kind watched with the selector has only handlers that filter on that same label, and every
kind whose handlers all filter on it gets the selector (memory and CPU with 1,000 services, issue 13)."""

from __future__ import annotations

import logging
from typing import Any, cast

import kopf
from kopf._cogs.structs import references

import llama_operator.handlers  # noqa: F401  # registers the handlers
from llama_operator.desired.labels import SERVICE_LABEL
from llama_operator.handlers.startup import LABELLED_KINDS, WATCH_CHUNK_SIZE, configure


def resource(group: str, version: str, plural: str) -> references.Resource:
    return references.Resource(group=group, version=version, plural=plural, namespaced=True)


def handlers() -> list[Any]:
    registry = kopf.get_default_registry()
    return [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]


def filters_on_our_label(handler: Any) -> bool:
    return SERVICE_LABEL in (handler.labels or {})


def test_every_handler_of_a_selected_kind_filters_on_our_label() -> None:
    for kind in LABELLED_KINDS:
        watching = [h for h in handlers() if h.selector.check(resource(*kind))]
        assert watching, f"{kind}: no handler watches it, the selector is stale"
        assert all(filters_on_our_label(h) for h in watching), kind


def test_every_kind_only_watched_for_our_objects_is_selected() -> None:
    # EndpointSlices are the exception: the activator Service's own carry no label of ours.
    kinds = {
        (h.selector.group or "", h.selector.version or "v1", h.selector.any_name or h.selector.plural)
        for h in handlers()
    }
    for kind in kinds:
        watching = [h for h in handlers() if h.selector.check(resource(*kind))]
        if all(filters_on_our_label(h) for h in watching):
            assert kind in LABELLED_KINDS, kind


class NoKube:
    """No API server is needed to read the settings (podMonitor and inferencePool never ask it anything)."""


def test_the_startup_settings_select_and_chunk(monkeypatch: Any) -> None:
    settings = kopf.OperatorSettings()
    memo = kopf.Memo()
    monkeypatch.setattr("llama_operator.handlers.startup.load_kube_config", lambda: None)
    monkeypatch.setattr("llama_operator.handlers.startup.Kube", NoKube)
    monkeypatch.setenv("LLAMA_OPERATOR_POD_MONITOR", "never")
    monkeypatch.setenv("LLAMA_OPERATOR_INFERENCE_POOL", "never")
    # kopf's decorator types it as an activity handler, which kopf calls with more keywords.
    cast("Any", configure)(settings=settings, memo=memo, logger=logging.getLogger("test"))
    assert settings.watching.label_selectors.collect(resource("", "v1", "pods")) == [SERVICE_LABEL]
    assert (
        settings.watching.label_selectors.collect(resource("discovery.k8s.io", "v1", "endpointslices")) == []
    )
    assert settings.watching.chunk_size == WATCH_CHUNK_SIZE
