"""The vLLM pod every workload runs (a Deployment's, a LeaderWorkerSet group's leader and workers): its
container, probes, volumes, resources and placement, and the metadata every owned object carries. Pure.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from llama_operator.api.plan import Plan
from llama_operator.api.resource import LlamaService
from llama_operator.api.settings import Settings
from llama_operator.api.spec import API_VERSION, KIND
from llama_operator.catalog.vllm import MODEL_CACHE_PATH, VLLM_PORT
from llama_operator.desired.labels import (
    ADAPTERS_READINESS_GATE,
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


def object_metadata(svc: LlamaService, name: str | None = None) -> dict[str, Any]:
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


def _vllm_container(svc: LlamaService, plan: Plan, settings: Settings) -> Manifest:
    """The vLLM server's container: the plan's image and arguments, its probes, mounts and a restricted
    security context."""
    return {
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


def build_pod_template(svc: LlamaService, plan: Plan, settings: Settings, *, pod_monitor: bool) -> Manifest:
    name = svc.metadata.name
    annotations = dict(settings.pod_annotations)
    if not pod_monitor:
        annotations.update(scrape_annotations())
    container = _vllm_container(svc, plan, settings)
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
