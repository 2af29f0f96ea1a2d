"""The replica count of an autoscaled LlamaService's Deployment, as the reconciler sees it. Pure.

The autoscaler is the one writer of an owned Deployment's spec.replicas; the bounds are
AutoscalingSpec.replica_bounds. What the reconciler does here is notice: a hand scale past the bounds (it
wakes the autoscaler, which brings the count back at once), and `kubectl scale` (or an edit of
spec.replicas) on an autoscaled LlamaService, which is never silent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.api.status import read_status
from llama_operator.reconcile.execution import Event


@dataclass(frozen=True)
class WorkloadReplicas:
    """The replica counts of the workload that runs the replicas (the Deployment, or the LeaderWorkerSet of
    a multi-node LlamaService), read in one place: spec.replicas with the API server's default (1), the
    status counts as 0 until the controller reports them."""

    desired: int
    ready: int = 0
    updated: int = 0
    generation: int | None = None
    observed_generation: int | None = None

    @classmethod
    def of(cls, workload: Mapping[str, Any]) -> WorkloadReplicas:
        spec, status = workload.get("spec") or {}, workload.get("status") or {}
        replicas = spec.get("replicas")
        return cls(
            desired=1 if replicas is None else int(replicas),
            ready=int(status.get("readyReplicas") or 0),
            updated=int(status.get("updatedReplicas") or 0),
            generation=(workload.get("metadata") or {}).get("generation"),
            observed_generation=status.get("observedGeneration"),
        )

    @property
    def rolled_out(self) -> bool:
        """The controller has acted on the latest spec and every replica is updated and ready."""
        return (
            self.observed_generation == self.generation
            and self.updated >= self.desired
            and self.ready >= self.desired
        )


def replicas_out_of_bounds(spec: LlamaServiceSpec, deployment: Mapping[str, Any] | None) -> bool:
    """The owned Deployment's replicas are outside what the autoscaling in force allows (a hand scale)."""
    autoscaling = spec.active_autoscaling
    if deployment is None or autoscaling is None:
        return False
    return not autoscaling.within_bounds(WorkloadReplicas.of(deployment).desired)


def ignored_replicas_event(spec: LlamaServiceSpec, status: Mapping[str, Any] | None) -> Event | None:
    """An Event when spec.replicas changed since the last reconcile while the autoscaler owns replicas."""
    autoscaling = spec.active_autoscaling
    if autoscaling is None:
        return None
    seen = read_status(status).spec_replicas
    if seen is None or seen == spec.replicas:
        return None
    return Event(
        reason="ReplicasIgnored",
        message=f"spec.replicas={spec.replicas} is ignored: autoscaling owns replicas and keeps them between "
        f"minReplicas ({autoscaling.min_replicas}) and maxReplicas ({autoscaling.max_replicas}) for the SLO; "
        "change those bounds, or set autoscaling.enabled: false to fix the count",
    )
