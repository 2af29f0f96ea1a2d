"""`podMonitor: auto` and `inferencePool: auto` follow their CRD's watch events: usable only once served and established."""

from __future__ import annotations

from typing import Any

import pytest

from llama_operator.handlers.controller import crd_serves_v1


def crd(*, served: bool = True, established: str = "True", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "podmonitors.monitoring.coreos.com"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"versions": [{"name": "v1", "served": served, "storage": True}]},
        "status": {"conditions": [{"type": "Established", "status": established}]},
    }


@pytest.mark.parametrize("event_type", [None, "ADDED", "MODIFIED"])
def test_an_established_crd_serving_v1_is_usable(event_type: str | None) -> None:
    assert crd_serves_v1(event_type, crd())


@pytest.mark.parametrize(
    ("event_type", "body"),
    [
        ("DELETED", crd()),
        ("MODIFIED", crd(deleting=True)),
        ("ADDED", crd(established="False")),
        ("ADDED", crd(served=False)),
        ("ADDED", {"metadata": {"name": "podmonitors.monitoring.coreos.com"}}),
    ],
)
def test_a_crd_gone_going_not_established_or_not_serving_v1_is_not(
    event_type: str, body: dict[str, Any]
) -> None:
    assert not crd_serves_v1(event_type, body)
