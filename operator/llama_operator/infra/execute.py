"""Perform a DesiredState: apply every object in order, delete what must not exist."""

from __future__ import annotations

from typing import Any

from llama_operator.desired.objects import DesiredState
from llama_operator.infra.kube import Kube


def execute(kube: Kube, desired: DesiredState, *, namespace: str, field_manager: str) -> list[dict[str, Any]]:
    """Apply in order; returns the objects as the server holds them after the apply."""
    applied = [kube.apply(obj, field_manager=field_manager) for obj in desired.objects]
    for api_version, kind, name in desired.absent:
        if kube.has_kind(api_version, kind):
            kube.delete(api_version, kind, namespace=namespace, name=name)
    return applied


def set_deployment_replicas(
    kube: Kube, *, namespace: str, name: str, replicas: int, field_manager: str
) -> None:
    """Apply only spec.replicas under the autoscaler's own field manager (the one writer of that field)."""
    kube.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas},
        },
        field_manager=field_manager,
    )
