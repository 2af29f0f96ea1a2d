"""In-memory indexes kopf keeps from watches, so handlers need no API reads."""

from __future__ import annotations

from typing import Any

import kopf

from llama_operator.api.spec import GROUP, PLURAL, VERSION
from llama_operator.desired.labels import SERVICE_LABEL
from llama_operator.reconcile.ownership import Ownership, ownership

OwnerKey = tuple[str, str]


@kopf.index("nodes")
def node_index(body: kopf.Body, name: str, **_: Any) -> dict[str, dict[str, Any]]:
    """Node facts the planner needs: labels, allocatable, taints."""
    return {
        name: {
            "metadata": {"name": name, "labels": dict(body.metadata.labels or {})},
            "spec": {"taints": list(body.spec.get("taints") or [])},
            "status": {
                "allocatable": dict(body.status.get("allocatable") or {}),
                "capacity": dict(body.status.get("capacity") or {}),
            },
        }
    }


@kopf.index(GROUP, VERSION, PLURAL)
def llamaservice_index(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[OwnerKey, dict[str, Any]]:
    # apiVersion and kind too: Events about the LlamaService are posted from these copies.
    return {
        (str(namespace), name): {
            "apiVersion": body.get("apiVersion", f"{GROUP}/{VERSION}"),
            "kind": body.get("kind", "LlamaService"),
            "metadata": dict(body.metadata),
            "spec": dict(body.spec),
            "status": dict(body.status),
        }
    }


@kopf.index("pods", labels={SERVICE_LABEL: kopf.PRESENT})
def pod_index(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> dict[OwnerKey, dict[str, Any]]:
    return {
        (str(namespace), labels[SERVICE_LABEL]): {
            "metadata": {"name": body.metadata.name},
            "status": dict(body.status),
        }
    }


@kopf.index("apps", "v1", "deployments", labels={SERVICE_LABEL: kopf.PRESENT})
def deployment_index(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> dict[OwnerKey, dict[str, Any]]:
    # Without managedFields and annotations: they are most of a Deployment's bytes and nothing reads them.
    meta = body.metadata
    return {
        (str(namespace), labels[SERVICE_LABEL]): {
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": meta.uid,
                "generation": meta.get("generation"),
                "labels": dict(meta.labels or {}),
                "ownerReferences": list(meta.get("ownerReferences") or []),
            },
            "spec": dict(body.spec),
            "status": dict(body.status),
        }
    }


def one(index: kopf.Index[OwnerKey, dict[str, Any]], key: OwnerKey) -> dict[str, Any] | None:
    store = index.get(key)
    return next(iter(store), None) if store is not None else None


def owned_deployment(
    deployment_index: kopf.Index[OwnerKey, dict[str, Any]], key: OwnerKey, owner_uid: str | None
) -> dict[str, Any] | None:
    """The Deployment this LlamaService controls; a tenant's Deployment carrying our label is not it."""
    for deployment in deployment_index.get(key, []):
        if owner_uid and ownership(deployment, owner_uid) is Ownership.OURS:
            return deployment
    return None
