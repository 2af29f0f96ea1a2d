"""`kubectl scale` (or an edit of spec.replicas) on an autoscaled LlamaService: never silent. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_operator.reconcile.execution import Event


def ignored_replicas_event(spec: Mapping[str, Any], status: Mapping[str, Any] | None) -> Event | None:
    """An Event when spec.replicas changed since the last reconcile while the autoscaler owns replicas."""
    autoscaling = spec.get("autoscaling") or {}
    if not autoscaling or not autoscaling.get("enabled", True):
        return None
    seen = (status or {}).get("specReplicas")
    wanted = spec.get("replicas")
    if seen is None or wanted is None or seen == wanted:
        return None
    lo, hi = autoscaling.get("minReplicas", 1), autoscaling.get("maxReplicas", 8)
    return Event(
        reason="ReplicasIgnored",
        message=f"spec.replicas={wanted} is ignored: autoscaling owns replicas and keeps them between "
        f"minReplicas ({lo}) and maxReplicas ({hi}) for the SLO; change those bounds, or set "
        "autoscaling.enabled: false to fix the count",
    )
