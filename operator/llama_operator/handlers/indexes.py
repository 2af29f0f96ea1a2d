"""In-memory indexes kopf keeps from watches, so the reconciler needs no API reads. Each keeps only the
fields the operator reads: never managedFields, annotations or whole bodies (memory at 1,000 services)."""

from __future__ import annotations

from typing import Any

import kopf

from llama_operator.api.spec import GROUP, PLURAL, VERSION
from llama_operator.desired.labels import SERVICE_LABEL
from llama_operator.reconcile.drift import spec_managers
from llama_operator.reconcile.ownership import Ownership, ownership

OwnerKey = tuple[str, str]
ObjectKey = tuple[str, str, str]  # (kind, namespace, name)


def node_facts(body: kopf.Body) -> dict[str, Any]:
    """What placement reads of a Node; a change elsewhere (heartbeats, conditions) does not re-plan."""
    return {
        "metadata": {"name": body.metadata.name, "labels": dict(body.metadata.labels or {})},
        "spec": {
            "taints": list(body.spec.get("taints") or []),
            "unschedulable": bool(body.spec.get("unschedulable")),
        },
        "status": {
            "allocatable": dict(body.status.get("allocatable") or {}),
            "capacity": dict(body.status.get("capacity") or {}),
        },
    }


@kopf.index("nodes")
def node_index(body: kopf.Body, name: str, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: node_facts(body)}


@kopf.index(GROUP, VERSION, PLURAL)
def llamaservice_index(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[OwnerKey, dict[str, Any]]:
    meta = body.metadata
    return {
        (str(namespace), name): {
            # apiVersion and kind too: Events about the LlamaService are posted from these copies.
            "apiVersion": body.get("apiVersion", f"{GROUP}/{VERSION}"),
            "kind": body.get("kind", "LlamaService"),
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": meta.uid,
                "generation": meta.get("generation"),
                "resourceVersion": meta.get("resourceVersion"),
                "deletionTimestamp": meta.deletion_timestamp,
            },
            "spec": dict(body.spec),
            "status": dict(body.status),
        }
    }


@kopf.index("pods", labels={SERVICE_LABEL: kopf.PRESENT})
def pod_index(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> dict[OwnerKey, dict[str, Any]]:
    status = body.status
    return {
        (str(namespace), labels[SERVICE_LABEL]): {
            "metadata": {"name": body.metadata.name},
            "status": {"phase": status.get("phase"), "conditions": list(status.get("conditions") or [])},
        }
    }


def owned_summary(body: kopf.Body) -> dict[str, Any]:
    """An object with the operator's label: enough to judge ownership and drift without a read."""
    meta = body.metadata
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "uid": meta.uid,
            "generation": meta.get("generation"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": dict(meta.labels or {}),
            "ownerReferences": list(meta.get("ownerReferences") or []),
            "specManagers": spec_managers(meta.get("managedFields")),
        },
        "spec": dict(body.spec),
        "status": dict(body.status) if body.get("kind") == "Deployment" else {},
    }


def _owned(body: kopf.Body, namespace: str | None, name: str) -> dict[ObjectKey, dict[str, Any]]:
    return {(str(body.get("kind")), str(namespace), name): owned_summary(body)}


@kopf.index("apps", "v1", "deployments", labels={SERVICE_LABEL: kopf.PRESENT})
def deployment_index(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> dict[OwnerKey, dict[str, Any]]:
    return {(str(namespace), labels[SERVICE_LABEL]): owned_summary(body)}


@kopf.index("", "v1", "services", labels={SERVICE_LABEL: kopf.PRESENT})
def service_index(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[ObjectKey, dict[str, Any]]:
    return _owned(body, namespace, name)


@kopf.index("policy", "v1", "poddisruptionbudgets", labels={SERVICE_LABEL: kopf.PRESENT})
def pdb_index(body: kopf.Body, namespace: str | None, name: str, **_: Any) -> dict[ObjectKey, dict[str, Any]]:
    return _owned(body, namespace, name)


@kopf.index("monitoring.coreos.com", "v1", "podmonitors", labels={SERVICE_LABEL: kopf.PRESENT})
def pod_monitor_index(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[ObjectKey, dict[str, Any]]:
    return _owned(body, namespace, name)


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
