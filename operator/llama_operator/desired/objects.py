"""LlamaService + Plan -> the Kubernetes objects that serve it, in apply order. Pure: no API calls.

Each `build_*` returns a plain dict ready for server-side apply. Every object carries an owner
reference to the LlamaService, so the garbage collector removes them with it (no finalizer).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from llama_operator.api.plan import Plan
from llama_operator.api.resource import LlamaService
from llama_operator.api.settings import POD_MONITOR_SCRAPE_SECONDS, Settings
from llama_operator.api.spec import API_VERSION, KIND
from llama_operator.catalog.vllm import MODEL_CACHE_PATH, VLLM_PORT
from llama_operator.desired.labels import (
    ADAPTERS_READINESS_GATE,
    ENDPOINT_SLICE_MANAGER,
    SERVICE_NAME_LABEL,
    SLICE_MANAGED_BY_LABEL,
    activator_slice_name,
    object_labels,
    selector_labels,
)

Manifest = dict[str, Any]

HTTP_PORT = VLLM_PORT  # the container port named "http"
SHM_PATH = "/dev/shm"
TMP_PATH = "/tmp"
NODE_CACHE_ROOT = "/var/lib/llama-operator/models"
COMPILE_CACHE_PATH = f"{MODEL_CACHE_PATH}/vllm"
VLLM_UID = 1000  # the user (and group) vLLM runs as
CONTAINER_NAME = "vllm"
POD_MONITOR_API = "monitoring.coreos.com/v1"
# vLLM reads VLLM_PORT etc. from its environment; Kubernetes' service links would inject e.g.
# VLLM_PORT=tcp://... for a Service named "vllm" and crash it.
ENABLE_SERVICE_LINKS = False
# On deletion the pod leaves the Service's endpoints at once; the preStop sleep lets every proxy see that
# before vLLM is signalled. Then SIGTERM makes vLLM drain: it finishes the requests it holds, for at most
# --shutdown-timeout seconds (0, vLLM's default, aborts them all), within the grace period, minus a margin
# for the engine's own exit.
PRESTOP_SLEEP_SECONDS = 10
SHUTDOWN_MARGIN_SECONDS = 5


def shutdown_timeout_seconds(termination_grace_seconds: int) -> int:
    """How long vLLM may drain in-flight requests after SIGTERM: the grace period less the preStop sleep
    and a margin (never negative: a grace period that short leaves no drain)."""
    return max(0, termination_grace_seconds - PRESTOP_SLEEP_SECONDS - SHUTDOWN_MARGIN_SECONDS)


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


def owner_reference(svc: LlamaService) -> dict[str, Any]:
    if not svc.metadata.uid:
        raise ValueError("the LlamaService has no uid; owner references need the object as stored")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": svc.metadata.name,
        "uid": svc.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(svc: LlamaService, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or svc.metadata.name,
        "namespace": svc.metadata.namespace,
        "labels": object_labels(svc.metadata.name),
        "ownerReferences": [owner_reference(svc)],
    }


def _shm_size(plan: Plan) -> str:
    # NCCL needs shared memory between tensor-parallel workers; one process needs little.
    return "8Gi" if plan.count > 1 else "2Gi"


def _probes(settings: Settings) -> dict[str, Any]:
    period = 10
    health = {"httpGet": {"path": "/health", "port": "http"}, "timeoutSeconds": 5}
    return {
        # Model download + load + warm-up may take many minutes; the startup probe covers it so the
        # liveness probe can stay strict once the server runs.
        "startupProbe": {
            **health,
            "periodSeconds": period,
            "failureThreshold": max(6, math.ceil(settings.startup_timeout_seconds / period)),
        },
        "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 3, "successThreshold": 1},
        "livenessProbe": {**health, "periodSeconds": 15, "failureThreshold": 4},
    }


def _env(svc: LlamaService, plan: Plan) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": f"{TMP_PATH}/home"},
        {"name": "HF_HOME", "value": f"{MODEL_CACHE_PATH}/hf"},
        # vLLM's torch.compile cache (torch_compile_cache/, keyed by config, torch and model code) on the
        # model cache volume: a pod started where the volume persists (a claim, or the node-local cache)
        # loads the compiled graphs instead of compiling again (docs/cold-start.md).
        {"name": "VLLM_CACHE_ROOT", "value": COMPILE_CACHE_PATH},
        {"name": "XDG_CACHE_HOME", "value": f"{TMP_PATH}/cache"},
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        {"name": "DO_NOT_TRACK", "value": "1"},
    ]
    # Secrets reach vLLM only as environment variables from secretKeyRef: never in args or status.
    for variable, ref in (
        ("HF_TOKEN", svc.spec.model.token_secret_ref),
        ("VLLM_API_KEY", svc.spec.engine.api_key_secret_ref),
    ):
        if ref is not None:
            env.append({"name": variable, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    env.extend({"name": k, "value": v} for k, v in sorted(plan.vllm_env.items()))
    return env


def node_cache_path(svc: LlamaService) -> str:
    """The node-local cache of the service's namespace (spec.model.cache.nodeLocal): one per namespace, so
    tenants never read each other's weights; services of a namespace share downloads of one model."""
    return f"{NODE_CACHE_ROOT}/{svc.metadata.namespace}"


def node_local_cache(svc: LlamaService) -> bool:
    cache = svc.spec.model.cache
    return cache is not None and cache.node_local


def _volumes(svc: LlamaService, plan: Plan) -> list[dict[str, Any]]:
    cache = svc.spec.model.cache
    if node_local_cache(svc):
        model_volume: dict[str, Any] = {
            "hostPath": {"path": node_cache_path(svc), "type": "DirectoryOrCreate"}
        }
    elif cache is not None and cache.persistent_volume_claim:
        model_volume = {"persistentVolumeClaim": {"claimName": cache.persistent_volume_claim}}
    else:
        empty: dict[str, Any] = {}
        if cache is not None and cache.size_limit:
            empty["sizeLimit"] = cache.size_limit
        model_volume = {"emptyDir": empty}
    return [
        {"name": "model-cache", **model_volume},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _shm_size(plan)}},
        {"name": "tmp", "emptyDir": {}},
    ]


def _resources(plan: Plan) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": plan.cpu_request, "memory": plan.memory_request}
    limits: dict[str, str] = {"memory": plan.memory_request}
    # Extended resources (GPUs, MIG slices) must be set as limits; requests then default to them.
    for resource, quantity in sorted(plan.resources.items()):
        requests[resource] = quantity
        limits[resource] = quantity
    return {"requests": requests, "limits": limits}


def _affinity(plan: Plan) -> dict[str, Any] | None:
    if not plan.node_affinity:
        return None
    terms = [t.to_wire() for t in plan.node_affinity]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def _with_platform_affinity(planned: dict[str, Any] | None, platform: dict[str, Any]) -> dict[str, Any]:
    """The platform's affinity (config.podAffinity) with the plan's required node terms: node selector terms
    are ORed and a term's expressions ANDed, so each platform term gets the plan's expressions; both hold."""
    merged = copy.deepcopy(platform)
    if not planned:
        return merged
    node = merged.setdefault("nodeAffinity", {})
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    plan_terms = planned["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    platform_terms = required.get("nodeSelectorTerms") or []
    if not platform_terms:
        terms = plan_terms
    else:
        terms = [
            {
                **platform_term,
                "matchExpressions": [
                    *plan_term.get("matchExpressions", []),
                    *platform_term.get("matchExpressions", []),
                ],
            }
            for plan_term in plan_terms
            for platform_term in platform_terms
        ]
    node["requiredDuringSchedulingIgnoredDuringExecution"] = {**required, "nodeSelectorTerms": terms}
    return merged


def node_cache_owner_container(image: str) -> dict[str, Any]:
    """kubelet creates a hostPath directory as root, and fsGroup does not apply to hostPath: this init
    container (root, with CHOWN only) hands the node-local cache to the vLLM user before vLLM writes to it."""
    return {
        "name": "node-cache-owner",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["chown", f"{VLLM_UID}:{VLLM_UID}", MODEL_CACHE_PATH],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "16Mi"}},
        "volumeMounts": [{"name": "model-cache", "mountPath": MODEL_CACHE_PATH}],
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def scrape_annotations() -> dict[str, str]:
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(HTTP_PORT),
        "prometheus.io/path": "/metrics",
    }


def node_placement(plan: Plan, settings: Settings) -> dict[str, Any]:
    """The pod spec's nodeSelector and tolerations for the plan's nodes: the platform's scheduling defaults
    first, the plan's placement added (its product label wins)."""
    placement: dict[str, Any] = {}
    node_selector = {**settings.pod_node_selector, **plan.node_selector}
    if node_selector:
        placement["nodeSelector"] = node_selector
    tolerations = [t.to_wire() for t in plan.tolerations]
    tolerations += [t for t in settings.pod_tolerations if t not in tolerations]
    if tolerations:
        placement["tolerations"] = tolerations
    return placement


def build_pod_template(svc: LlamaService, plan: Plan, settings: Settings, *, pod_monitor: bool) -> Manifest:
    name = svc.metadata.name
    annotations = dict(settings.pod_annotations)
    if not pod_monitor:
        annotations.update(scrape_annotations())
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        # The module entry point works in every vLLM image, GPU and CPU, whatever its ENTRYPOINT.
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "args": [
            *plan.vllm_args,
            "--shutdown-timeout",
            str(shutdown_timeout_seconds(settings.termination_grace_seconds)),
        ],
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "env": _env(svc, plan),
        "resources": _resources(plan),
        **_probes(settings),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_SECONDS}}},
        "volumeMounts": [
            {"name": "model-cache", "mountPath": MODEL_CACHE_PATH},
            {"name": "dshm", "mountPath": SHM_PATH},
            {"name": "tmp", "mountPath": TMP_PATH},
        ],
        # Restricted, except the root filesystem: torch and triton write caches beside their code.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    pod_spec: dict[str, Any] = {
        **({"readinessGates": [{"conditionType": ADAPTERS_READINESS_GATE}]} if plan.max_loras > 0 else {}),
        **({"initContainers": [node_cache_owner_container(plan.image)]} if node_local_cache(svc) else {}),
        "containers": [container],
        "volumes": _volumes(svc, plan),
        "terminationGracePeriodSeconds": settings.termination_grace_seconds,
        "enableServiceLinks": ENABLE_SERVICE_LINKS,
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": VLLM_UID,
            "runAsGroup": VLLM_UID,
            "fsGroup": VLLM_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": selector_labels(name)},
            }
        ],
    }
    pod_spec.update(node_placement(plan, settings))
    affinity = _with_platform_affinity(_affinity(plan), settings.pod_affinity)
    if affinity:
        pod_spec["affinity"] = affinity
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in settings.image_pull_secrets]
    if settings.priority_class_name:
        pod_spec["priorityClassName"] = settings.priority_class_name
    if settings.runtime_class_name:
        pod_spec["runtimeClassName"] = settings.runtime_class_name
    # The platform's labels first: the operator's own (its selectors) always win.
    metadata: dict[str, Any] = {"labels": {**settings.pod_labels, **object_labels(name)}}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": pod_spec}


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
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(svc), "spec": spec}


def build_service(svc: LlamaService) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(svc),
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
        "metadata": _metadata(svc),
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
        "metadata": _with_labels(_metadata(svc), settings.pod_monitor_labels),
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
    metadata = _metadata(svc, activator_slice_name(name))
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
    # (Imported here: the LeaderWorkerSet and stage builders reuse this module's pod template and helpers.)
    from llama_operator.desired.leader_worker_set import (  # noqa: PLC0415
        LWS_API_VERSION,
        LWS_KIND,
        build_leader_worker_set,
    )
    from llama_operator.desired.staging import build_stage_daemonset, stage_name  # noqa: PLC0415

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
