"""What a new replica needs, put on the nodes before it is needed (docs/cold-start.md). Pure: no API calls.

One DaemonSet per LlamaService, on the nodes its plan places replicas on (the plan's node selector,
tolerations and required node affinity: the accelerator's node pool):
- its pods run the plan's vLLM image, so every node of the pool holds the image before a replica is
  scheduled there (the image pull, ~100 s of a cold start, leaves the replica's path);
- with spec.model.cache.nodeLocal, an init container downloads the weights into the node-local cache the
  replicas mount (the same hostPath, HF_HOME alike), so a replica reads them from local disk.
Then a container that only sleeps keeps the pod (and so the image) in place at a few millicores.

Why the operator and not the chart: only the operator knows which images and node pools are in use (the
plan's image, the accelerator's node selector) and when they change; the DaemonSet follows the
LlamaService, owned by it, and goes with it. The stage pods carry their own selector label, never the
service's: the Service, the PodDisruptionBudget and the autoscaler never count them as replicas. The
DaemonSet itself carries the service's label, as every object the operator owns does: the operator's watch
and index of DaemonSets select on it (handlers/indexes.py).
"""

from __future__ import annotations

from typing import Any

from llama_operator.api.plan import Plan
from llama_operator.api.resource import LlamaService
from llama_operator.api.settings import Settings
from llama_operator.catalog.vllm import MODEL_CACHE_PATH
from llama_operator.desired.labels import MANAGED_BY, selector_labels
from llama_operator.desired.pod import (
    VLLM_UID,
    Manifest,
    node_cache_owner_container,
    node_cache_path,
    node_local_cache,
    node_placement,
    owner_reference,
)

STAGE_LABEL = "llama-operator.dev/stage"
STAGE_SUFFIX = "-stage"
# The download: huggingface_hub ships in every vLLM image; allow_patterns keeps out what vLLM never reads
# (the original/ consolidated .pth copies Meta's repositories carry beside the safetensors).
DOWNLOAD_SCRIPT = (
    "import os, huggingface_hub; huggingface_hub.snapshot_download("
    "os.environ['MODEL'], revision=os.environ.get('REVISION') or None, "
    "allow_patterns=['*.json', '*.safetensors', '*.model', '*.txt', '*.tiktoken'])"
)


def stage_name(svc: LlamaService) -> str:
    return f"{svc.metadata.name}{STAGE_SUFFIX}"


def stage_labels(svc: LlamaService) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": svc.metadata.name,
        "app.kubernetes.io/component": "node-stage",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        STAGE_LABEL: svc.metadata.name,
    }


def _restricted(user: int) -> dict[str, Any]:
    return {
        "runAsUser": user,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _download_container(svc: LlamaService, plan: Plan) -> dict[str, Any]:
    model = svc.spec.model
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": "/tmp"},
        {"name": "HF_HOME", "value": f"{MODEL_CACHE_PATH}/hf"},
        {"name": "HF_HUB_ENABLE_HF_TRANSFER", "value": "0"},
        {"name": "MODEL", "value": model.name},
    ]
    if model.revision:
        # Only when set: the API server drops an empty value, which would read as drift at every reconcile.
        env.append({"name": "REVISION", "value": model.revision})
    if model.token_secret_ref is not None:
        ref = model.token_secret_ref
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    return {
        "name": "stage-weights",
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", DOWNLOAD_SCRIPT],
        "env": env,
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
        "volumeMounts": [
            {"name": "model-cache", "mountPath": MODEL_CACHE_PATH},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": _restricted(VLLM_UID),
    }


def build_stage_daemonset(svc: LlamaService, plan: Plan, settings: Settings) -> Manifest:
    """The DaemonSet that pre-pulls the plan's image on the accelerator's node pool and, with
    spec.model.cache.nodeLocal, stages the weights in the node-local cache."""
    labels = stage_labels(svc)
    node_local = node_local_cache(svc)
    init: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    if node_local:
        init = [node_cache_owner_container(plan.image), _download_container(svc, plan)]
        volumes.append(
            {"name": "model-cache", "hostPath": {"path": node_cache_path(svc), "type": "DirectoryOrCreate"}}
        )
    hold = {
        "name": "hold-image",
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        # A trivial command of the image itself: the pod keeps the image on the node, and costs nothing.
        "command": ["sleep", "infinity"],
        "resources": {"requests": {"cpu": "1m", "memory": "16Mi"}, "limits": {"memory": "16Mi"}},
        "securityContext": _restricted(VLLM_UID),
    }
    pod_spec: dict[str, Any] = {
        **({"initContainers": init} if init else {}),
        "containers": [hold],
        "volumes": volumes,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 1,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    pod_spec.update(node_placement(plan, settings))
    if plan.node_affinity:
        terms = [t.to_wire() for t in plan.node_affinity]
        pod_spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in settings.image_pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": stage_name(svc),
            "namespace": svc.metadata.namespace,
            # The service's label on the DaemonSet only (the operator's watch selects on it), never on its pods.
            "labels": {**labels, **selector_labels(svc.metadata.name)},
            "ownerReferences": [owner_reference(svc)],
        },
        "spec": {
            "selector": {"matchLabels": {STAGE_LABEL: svc.metadata.name}},
            # A new image or model: replace node by node, never all of a pool's pulls at once.
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
