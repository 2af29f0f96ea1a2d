"""The replica count of an autoscaled LlamaService's Deployment, as the reconciler sees it. Pure.

The autoscaler is the one writer of an owned Deployment's spec.replicas; the bounds are
AutoscalingSpec.replica_bounds. What the reconciler does here is notice: a hand scale past the bounds (it
wakes the autoscaler, which brings the count back at once), and `kubectl scale` (or an edit of
spec.replicas) on an autoscaled LlamaService, which is never silent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.reconcile.execution import Event


def replicas_out_of_bounds(spec: LlamaServiceSpec, deployment: Mapping[str, Any] | None) -> bool:
    """The owned Deployment's replicas are outside what the autoscaling in force allows (a hand scale)."""
    autoscaling = spec.active_autoscaling
    if deployment is None or autoscaling is None:
        return False
    return not autoscaling.within_bounds(int((deployment.get("spec") or {}).get("replicas") or 0))


def ignored_replicas_event(spec: LlamaServiceSpec, status: Mapping[str, Any] | None) -> Event | None:
    """An Event when spec.replicas changed since the last reconcile while the autoscaler owns replicas."""
    autoscaling = spec.active_autoscaling
    if autoscaling is None:
        return None
    seen = (status or {}).get("specReplicas")
    if seen is None or seen == spec.replicas:
        return None
    return Event(
        reason="ReplicasIgnored",
        message=f"spec.replicas={spec.replicas} is ignored: autoscaling owns replicas and keeps them between "
        f"minReplicas ({autoscaling.min_replicas}) and maxReplicas ({autoscaling.max_replicas}) for the SLO; "
        "change those bounds, or set autoscaling.enabled: false to fix the count",
    )
