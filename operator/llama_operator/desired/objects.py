"""LlamaService + Plan -> the Kubernetes objects that serve it, in apply order. Pure: no API calls.

Each `build_*` returns a plain dict ready for server-side apply. Every object carries an owner
reference to the LlamaService, so the garbage collector removes them with it (no finalizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llama_operator.api.plan import Plan
from llama_operator.api.resource import LlamaService
from llama_operator.api.settings import POD_MONITOR_SCRAPE_SECONDS, Settings
from llama_operator.desired.labels import (
    ENDPOINT_SLICE_MANAGER,
    SERVICE_NAME_LABEL,
    SLICE_MANAGED_BY_LABEL,
    activator_slice_name,
    selector_labels,
)
from llama_operator.desired.leader_worker_set import LWS_API_VERSION, LWS_KIND, build_leader_worker_set
from llama_operator.desired.pod import (
    HTTP_PORT,
    POD_MONITOR_API,
    Manifest,
    build_pod_template,
    node_local_cache,
    object_metadata,
)
from llama_operator.desired.staging import build_stage_daemonset, stage_name


@dataclass(frozen=True)
class ActivatorRoute:
    """Where the activator listens: its ready pods' addresses (one address family) and port."""

    addresses: tuple[str, ...]
    port: int
    address_type: str = "IPv4"


@dataclass(frozen=True)
class DesiredState:
    """What should exist for one LlamaService, and which owned kinds must not."""

    objects: list[Manifest]
    absent: list[tuple[str, str, str]]  # (apiVersion, kind, name) that must be deleted if present


def build_deployment(
    svc: LlamaService, plan: Plan, settings: Settings, *, replicas: int | None, pod_monitor: bool
) -> Manifest:
    """The vLLM Deployment. `replicas=None` leaves the field to the autoscaler's field manager."""
    spec: dict[str, Any] = {
        "selector": {"matchLabels": selector_labels(svc.metadata.name)},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
        "revisionHistoryLimit": 5,
        "progressDeadlineSeconds": settings.startup_timeout_seconds + 300,
        "template": build_pod_template(svc, plan, settings, pod_monitor=pod_monitor),
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": object_metadata(svc), "spec": spec}


def build_service(svc: LlamaService) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(svc),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(svc.metadata.name),
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def build_pod_disruption_budget(svc: LlamaService) -> Manifest:
    # maxUnavailable rather than minAvailable: it never blocks a drain outright when replicas shrink.
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_metadata(svc),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(svc.metadata.name)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def build_pod_monitor(svc: LlamaService, settings: Settings) -> Manifest:
    """Scrape config for the Prometheus Operator, adding the labels the autoscaler's queries select on."""
    return {
        "apiVersion": POD_MONITOR_API,
        "kind": "PodMonitor",
        "metadata": _with_labels(object_metadata(svc), settings.pod_monitor_labels),
        "spec": {
            "selector": {"matchLabels": selector_labels(svc.metadata.name)},
            "podMetricsEndpoints": [
                {
                    "port": "http",
                    "path": "/metrics",
                    "interval": f"{POD_MONITOR_SCRAPE_SECONDS:g}s",
                    "relabelings": [
                        {"targetLabel": settings.service_label, "replacement": svc.metadata.name},
                        {
                            "sourceLabels": ["__meta_kubernetes_namespace"],
                            "targetLabel": settings.namespace_label,
                        },
                        {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "pod"},
                    ],
                }
            ],
        },
    }


def _with_labels(metadata: Manifest, labels: dict[str, str]) -> Manifest:
    return {**metadata, "labels": {**labels, **metadata["labels"]}} if labels else metadata


def max_replicas(svc: LlamaService) -> int:
    """The most replicas this LlamaService may run: decides whether a PodDisruptionBudget helps."""
    if svc.spec.autoscaling_enabled and svc.spec.autoscaling is not None:
        return svc.spec.autoscaling.max_replicas
    return svc.spec.replicas


def build_activator_endpoint_slice(svc: LlamaService, route: ActivatorRoute) -> Manifest:
    """An extra EndpointSlice of the LlamaService's Service, naming the activator's pods: kube-proxy (and
    every Service-aware proxy) merges all slices labelled with the Service's name, so while no vLLM pod is
    ready the Service's traffic reaches the activator, with no change to the Service itself (its
    ClusterIP, selector and DNS stay). The endpointslice controller leaves slices another manager owns."""
    name = svc.metadata.name
    metadata = object_metadata(svc, activator_slice_name(name))
    metadata["labels"] = {
        **metadata["labels"],
        SERVICE_NAME_LABEL: name,
        SLICE_MANAGED_BY_LABEL: ENDPOINT_SLICE_MANAGER,
        "app.kubernetes.io/component": "activator-route",
    }
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": metadata,
        "addressType": route.address_type,
        "endpoints": [
            {"addresses": [address], "conditions": {"ready": True, "serving": True, "terminating": False}}
            for address in route.addresses
        ],
        "ports": [{"name": "http", "port": route.port, "protocol": "TCP"}],
    }


def routes_to_activator(svc: LlamaService, route: ActivatorRoute | None, *, ready_replicas: int) -> bool:
    """A LlamaService that may scale to zero sends its traffic to the activator while no vLLM pod is ready
    (at zero, and while the first replica starts); once one is ready, straight to the pods again."""
    autoscaling = svc.spec.autoscaling
    return (
        svc.spec.autoscaling_enabled
        and autoscaling is not None
        and autoscaling.scale_to_zero
        and route is not None
        and bool(route.addresses)
        and ready_replicas == 0
    )


def build_desired_state(
    svc: LlamaService,
    plan: Plan,
    settings: Settings,
    *,
    pod_monitor: bool,
    activator: ActivatorRoute | None = None,
    ready_replicas: int = 0,
) -> DesiredState:
    """Everything that should exist, in apply order (the Service before the pods it fronts)."""
    name = svc.metadata.name
    replicas = None if svc.spec.autoscaling_enabled else svc.spec.replicas
    objects: list[Manifest] = [build_service(svc)]
    absent: list[tuple[str, str, str]] = []
    if activator is not None and routes_to_activator(svc, activator, ready_replicas=ready_replicas):
        objects.append(build_activator_endpoint_slice(svc, activator))
    else:
        absent.append(("discovery.k8s.io/v1", "EndpointSlice", activator_slice_name(name)))
    if max_replicas(svc) > 1:
        objects.append(build_pod_disruption_budget(svc))
    else:
        absent.append(("policy/v1", "PodDisruptionBudget", name))
    if pod_monitor:
        objects.append(build_pod_monitor(svc, settings))

    if node_local_cache(svc):
        # Before the replicas: the stage pulls the image and downloads the weights on the nodes first.
        objects.append(build_stage_daemonset(svc, plan, settings))
    else:
        # nodeLocal turned off: the stage goes.
        absent.append(("apps/v1", "DaemonSet", stage_name(svc)))

    if plan.nodes > 1:
        # A replica over several nodes: a LeaderWorkerSet group per replica, in place of the Deployment.
        objects.append(
            build_leader_worker_set(svc, plan, settings, replicas=replicas, pod_monitor=pod_monitor)
        )
        absent.append(("apps/v1", "Deployment", name))
    else:
        objects.append(build_deployment(svc, plan, settings, replicas=replicas, pod_monitor=pod_monitor))
        # Back to one node: the groups go (a cluster without the LeaderWorkerSet kind has none to remove).
        absent.append((LWS_API_VERSION, LWS_KIND, name))
    return DesiredState(objects=objects, absent=absent)
