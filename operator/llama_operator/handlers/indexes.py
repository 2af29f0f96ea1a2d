"""In-memory indexes kopf keeps from watches, so the reconciler needs no API reads. Each keeps only the
fields the operator reads: never managedFields, annotations or whole bodies (memory at 1,000 services)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from llama_operator.api.spec import GROUP, PLURAL, VERSION
from llama_operator.desired.labels import (
    ACTIVATION_ANNOTATIONS,
    ENDPOINT_SLICE_MANAGER,
    SERVICE_LABEL,
    SERVICE_NAME_LABEL,
    SLICE_MANAGED_BY_LABEL,
)
from llama_operator.desired.objects import ActivatorRoute
from llama_operator.handlers.memo import OperatorMemo
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


def nodepool_facts(body: kopf.Body) -> dict[str, Any]:
    """What placement reads of a Karpenter NodePool: the labels and limits of the nodes it can create."""
    spec = body.spec
    template = spec.get("template") or {}
    return {
        "apiVersion": body.get("apiVersion", "karpenter.sh/v1"),
        "kind": "NodePool",
        "metadata": {"name": body.metadata.name},
        "spec": {
            "weight": spec.get("weight"),
            "limits": dict(spec.get("limits") or {}),
            "template": {
                "metadata": {"labels": dict((template.get("metadata") or {}).get("labels") or {})},
                "spec": {"requirements": list((template.get("spec") or {}).get("requirements") or [])},
            },
        },
        "status": {"resources": dict(body.status.get("resources") or {})},
    }


def nodeclaim_facts(body: kopf.Body) -> dict[str, Any]:
    """A Karpenter NodeClaim: the labels its node will carry, and whether that node has joined yet."""
    conditions = body.status.get("conditions") or []
    return {
        "metadata": {
            "name": body.metadata.name,
            "labels": dict(body.metadata.labels or {}),
            "deletionTimestamp": body.metadata.deletion_timestamp,
        },
        "spec": {"requirements": list(body.spec.get("requirements") or [])},
        "initialized": any(c.get("type") == "Initialized" and c.get("status") == "True" for c in conditions),
    }


# Karpenter's NodeClaims: nodes on their way, which a Pending replica may be waiting for.
@kopf.index("karpenter.sh", "v1", "nodeclaims")
def nodeclaim_index(body: kopf.Body, name: str, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: nodeclaim_facts(body)}


# Karpenter's NodePools, where Karpenter is installed: the GPUs they can create count as available.
@kopf.index("karpenter.sh", "v1", "nodepools")
def nodepool_index(body: kopf.Body, name: str, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: nodepool_facts(body)}


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
                # Only the activator's annotations: demand for a scaled-to-zero service, the wake it timed.
                "annotations": {
                    k: v for k, v in (meta.annotations or {}).items() if k in ACTIVATION_ANNOTATIONS
                },
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
            "metadata": {"name": body.metadata.name, "deletionTimestamp": body.metadata.deletion_timestamp},
            # nodeSelector: which node a node provisioner may be creating for a Pending pod (NodeClaims).
            "spec": {"nodeSelector": dict(body.spec.get("nodeSelector") or {})},
            # podIP: the operator loads LoRA adapters into each ready replica (handlers/adapters.py).
            "status": {
                "phase": status.get("phase"),
                "conditions": list(status.get("conditions") or []),
                "podIP": status.get("podIP"),
            },
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
        # The replica counts the autoscaler and the status read: a Deployment's, or a LeaderWorkerSet's (groups).
        "status": dict(body.status) if body.get("kind") in ("Deployment", "LeaderWorkerSet") else {},
    }


def _owned(body: kopf.Body, namespace: str | None, name: str) -> dict[ObjectKey, dict[str, Any]]:
    return {(str(body.get("kind")), str(namespace), name): owned_summary(body)}


@kopf.index("apps", "v1", "deployments", labels={SERVICE_LABEL: kopf.PRESENT})
def deployment_index(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> dict[OwnerKey, dict[str, Any]]:
    return {(str(namespace), labels[SERVICE_LABEL]): owned_summary(body)}


@kopf.index("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels={SERVICE_LABEL: kopf.PRESENT})
def leader_worker_set_index(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> dict[OwnerKey, dict[str, Any]]:
    """A multi-node LlamaService's workload in place of the Deployment (desired/leader_worker_set.py)."""
    return {(str(namespace), labels[SERVICE_LABEL]): owned_summary(body)}


@kopf.index("apps", "v1", "daemonsets", labels={SERVICE_LABEL: kopf.PRESENT})
def daemon_set_index(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[ObjectKey, dict[str, Any]]:
    """The stage DaemonSet of a LlamaService with the node-local cache (desired/staging.py)."""
    return _owned(body, namespace, name)


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


@kopf.index("inference.networking.k8s.io", "v1", "inferencepools", labels={SERVICE_LABEL: kopf.PRESENT})
def inference_pool_index(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[ObjectKey, dict[str, Any]]:
    return _owned(body, namespace, name)


ACTIVATOR_ENDPOINTS = "ActivatorEndpoints"


def endpoint_facts(body: kopf.Body) -> dict[str, Any]:
    """The ready addresses and the port of one of the activator Service's EndpointSlices."""
    ports = [p for p in body.get("ports") or [] if isinstance(p, dict) and p.get("port")]
    port = next((p for p in ports if p.get("name") == "http"), ports[0] if ports else None)
    addresses = sorted(
        str(address)
        for endpoint in body.get("endpoints") or []
        if isinstance(endpoint, dict) and (endpoint.get("conditions") or {}).get("ready") is not False
        for address in endpoint.get("addresses") or []
    )
    return {
        "addressType": body.get("addressType", "IPv4"),
        "addresses": addresses,
        "port": int(port["port"]) if port is not None else None,
    }


@kopf.index("discovery.k8s.io", "v1", "endpointslices")
def endpoint_slice_index(
    body: kopf.Body, namespace: str | None, name: str, labels: kopf.Labels, memo: OperatorMemo, **_: Any
) -> dict[ObjectKey, dict[str, Any]]:
    """Two kinds of EndpointSlice: those the operator makes to send a scaled-to-zero LlamaService's traffic
    to the activator, and the activator Service's own, in the operator's namespace only (a tenant's Service
    of that name elsewhere must not attract other tenants' traffic)."""
    if SERVICE_LABEL in labels and labels.get(SLICE_MANAGED_BY_LABEL) == ENDPOINT_SLICE_MANAGER:
        return _owned(body, namespace, name)
    settings = memo.settings
    if (
        settings.activator_service
        and namespace == settings.activator_namespace
        and labels.get(SERVICE_NAME_LABEL) == settings.activator_service
    ):
        return {(ACTIVATOR_ENDPOINTS, str(namespace), name): endpoint_facts(body)}
    return {}


def activator_route(index: kopf.Index[ObjectKey, dict[str, Any]]) -> ActivatorRoute | None:
    """Where the activator listens now (its ready pods), or None when no pod of it is ready."""
    slices = [facts for key, store in index.items() if key[0] == ACTIVATOR_ENDPOINTS for facts in store]
    addresses = sorted(
        {a for facts in slices if facts.get("addressType") == "IPv4" for a in facts["addresses"]}
    )
    ports = [facts["port"] for facts in slices if facts.get("port") and facts["addresses"]]
    if not addresses or not ports:
        return None
    return ActivatorRoute(addresses=tuple(addresses), port=int(ports[0]))


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


@dataclass
class Indexes:
    """kopf's indexes, as the startup handler received them (they fill and follow the watches)."""

    llamaservices: kopf.Index[OwnerKey, dict[str, Any]]
    nodes: kopf.Index[str, dict[str, Any]]
    pods: kopf.Index[OwnerKey, dict[str, Any]]
    deployments: kopf.Index[OwnerKey, dict[str, Any]]
    services: kopf.Index[ObjectKey, dict[str, Any]]
    pdbs: kopf.Index[ObjectKey, dict[str, Any]]
    pod_monitors: kopf.Index[ObjectKey, dict[str, Any]]
    endpoint_slices: kopf.Index[ObjectKey, dict[str, Any]]
    inference_pools: kopf.Index[ObjectKey, dict[str, Any]] | None = None
    leader_worker_sets: kopf.Index[OwnerKey, dict[str, Any]] | None = None
    daemon_sets: kopf.Index[ObjectKey, dict[str, Any]] | None = None
    nodepools: kopf.Index[str, dict[str, Any]] | None = None
    nodeclaims: kopf.Index[str, dict[str, Any]] | None = None

    def workload(self, key: OwnerKey, owner_uid: str | None) -> dict[str, Any] | None:
        """The replicas' owner: the Deployment, or the LeaderWorkerSet of a multi-node LlamaService."""
        return owned_deployment(self.deployments, key, owner_uid) or (
            owned_deployment(self.leader_worker_sets, key, owner_uid)
            if self.leader_worker_sets is not None
            else None
        )

    def owned(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind in ("Deployment", "LeaderWorkerSet"):
            by_owner: Mapping[OwnerKey, Any] = (
                self.deployments if kind == "Deployment" else (self.leader_worker_sets or {})
            )
            return next(
                (
                    d
                    for d in by_owner.get((namespace, name), [])
                    if d["metadata"]["name"] == name and d.get("kind") == kind
                ),
                None,
            )
        index: Mapping[ObjectKey, Any] = {
            "Service": self.services,
            "PodDisruptionBudget": self.pdbs,
            "PodMonitor": self.pod_monitors,
            "EndpointSlice": self.endpoint_slices,
            "InferencePool": self.inference_pools or {},
            "DaemonSet": self.daemon_sets or {},
        }[kind]
        return next(iter(index.get((kind, namespace, name), [])), None)
