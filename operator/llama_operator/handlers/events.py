"""The operator's Events (what `kubectl describe` shows), posted under one component name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from llama_operator.infra.kube import Kube
from llama_operator.reconcile.execution import Event

COMPONENT = "llama-operator"


def post_events(kube: Kube, involved: Mapping[str, Any], events: Iterable[Event]) -> None:
    """Each event about `involved`, best effort (Kube.post_event never fails a reconcile)."""
    for event in events:
        kube.post_event(
            involved, reason=event.reason, message=event.message, warning=event.warning, component=COMPONENT
        )
