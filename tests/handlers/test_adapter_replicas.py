"""Which pods the adapter loop calls: Ready, with an address, not going."""

from __future__ import annotations

from typing import Any

from llama_operator.handlers.adapters import ready_replicas


def _pod(
    name: str, *, ready: bool = True, ip: str | None = "10.0.0.1", going: bool = False
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "deletionTimestamp": "2026-01-01T00:00:00Z" if going else None},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_only_ready_pods_with_an_address_that_are_not_going() -> None:
    pods = [
        _pod("a", ip="10.0.0.1"),
        _pod("b", ready=False, ip="10.0.0.2"),
        _pod("c", ip=None),
        _pod("d", going=True, ip="10.0.0.4"),
        _pod("e", ip="10.0.0.5"),
    ]
    assert ready_replicas(pods) == {"a": "10.0.0.1:8000", "e": "10.0.0.5:8000"}
