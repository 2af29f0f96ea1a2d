"""Which pods the adapter loop calls: their vLLM answers (ContainersReady: the pod's own Ready waits for the
adapters), with an address, not going; and the readiness gate it opens."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from llama_operator.desired.labels import ADAPTERS_READINESS_GATE
from llama_operator.handlers.adapters import gate_condition, serving_replicas


def _pod(
    name: str, *, ready: bool = True, ip: str | None = "10.0.0.1", going: bool = False
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "deletionTimestamp": "2026-01-01T00:00:00Z" if going else None},
        "status": {
            "podIP": ip,
            "conditions": [{"type": "ContainersReady", "status": "True" if ready else "False"}],
        },
    }


def test_only_ready_pods_with_an_address_that_are_not_going() -> None:
    pods = [
        _pod("a", ip="10.0.0.1"),
        _pod("b", ready=False, ip="10.0.0.2"),
        _pod("c", ip=None),
        _pod("d", going=True, ip="10.0.0.4"),
        _pod("e", ip="10.0.0.5"),
    ]
    assert serving_replicas(pods) == {"a": "10.0.0.1:8000", "e": "10.0.0.5:8000"}


def test_the_gate_condition_names_the_gate_and_how_many_loaded() -> None:
    condition = gate_condition(1, 2, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert condition["type"] == ADAPTERS_READINESS_GATE and condition["status"] == "True"
    assert condition["lastTransitionTime"] == "2026-01-02T03:04:05Z"
    assert "1 of 2" in condition["message"]
