"""A replica over several nodes: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, kubernetes-sigs/lws) whose
every group is one replica. Pure: no API calls.

vLLM's multi-node serving (docs/deployment/frameworks/lws.md): the group's pods form a Ray cluster; the
leader (LWS worker index 0) starts the Ray head, waits for the group's other pods to join, then runs
`vllm serve` with tensor parallel = GPUs per node and pipeline parallel = nodes; each worker joins the head
at LWS_LEADER_ADDRESS (the LWS controller sets it and LWS_GROUP_SIZE in every pod). The script that does
both ships in vLLM's image (examples/online_serving/multi-node-serving.sh).

Only leaders carry the LlamaService's selector label, so the Service, the PodDisruptionBudget, the
PodMonitor, the router and the operator's indexes see one pod per replica, the one that answers HTTP.
"""

from __future__ import annotations

import shlex
from typing import Any

from llama_operator.api.plan import Plan
from llama_operator.api.resource import LlamaService
from llama_operator.api.settings import Settings
from llama_operator.desired.labels import SERVICE_LABEL, object_labels
from llama_operator.desired.pod import (
    CONTAINER_NAME,
    Manifest,
    build_pod_template,
    owner_reference,
    shutdown_timeout_seconds,
)

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
# vLLM's image ships the script its LWS guide runs (leader: Ray head, waits for the group; worker: joins).
MULTI_NODE_SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"
# A worker pod's label in place of the selector label: the operator can still find a group's workers.
WORKER_OF_LABEL = "llama-operator.dev/worker-of"
RAY_PORT = 6379


def leader_command(plan: Plan, settings: Settings) -> list[str]:
    """The leader's shell: the Ray head sized to the group, then vLLM in its place (exec: it gets SIGTERM)."""
    vllm = shlex.join(
        [
            "python3",
            "-m",
            "vllm.entrypoints.openai.api_server",
            *plan.vllm_args,
            "--shutdown-timeout",
            str(shutdown_timeout_seconds(settings.termination_grace_seconds)),
        ]
    )
    return [
        "/bin/bash",
        "-c",
        f'bash {MULTI_NODE_SCRIPT} leader --ray_port={RAY_PORT} --ray_cluster_size="$LWS_GROUP_SIZE" && exec {vllm}',
    ]


def worker_command() -> list[str]:
    return [
        "/bin/bash",
        "-c",
        f'exec bash {MULTI_NODE_SCRIPT} worker --ray_port={RAY_PORT} --ray_address="$LWS_LEADER_ADDRESS"',
    ]


def _leader_template(svc: LlamaService, plan: Plan, settings: Settings, *, pod_monitor: bool) -> Manifest:
    template = build_pod_template(svc, plan, settings, pod_monitor=pod_monitor)
    container = template["spec"]["containers"][0]
    container["command"] = leader_command(plan, settings)
    container.pop("args", None)
    container["ports"] = [*container["ports"], {"name": "ray", "containerPort": RAY_PORT, "protocol": "TCP"}]
    return template


def _worker_template(svc: LlamaService, plan: Plan, settings: Settings) -> Manifest:
    """The leader's pod without HTTP: same image, GPUs, cache, env and placement; Ray worker instead."""
    template = build_pod_template(svc, plan, settings, pod_monitor=True)
    name = svc.metadata.name
    labels = {k: v for k, v in template["metadata"]["labels"].items() if k != SERVICE_LABEL}
    labels["app.kubernetes.io/component"] = "inference-worker"
    labels[WORKER_OF_LABEL] = name
    template["metadata"] = {"labels": labels}
    spec = template["spec"]
    spec.pop("readinessGates", None)  # adapters load into the leader's vLLM
    spec.pop("topologySpreadConstraints", None)
    container: dict[str, Any] = next(c for c in spec["containers"] if c["name"] == CONTAINER_NAME)
    container["command"] = worker_command()
    for key in ("args", "startupProbe", "readinessProbe", "livenessProbe", "lifecycle"):
        container.pop(key, None)
    container["ports"] = [{"name": "ray", "containerPort": RAY_PORT, "protocol": "TCP"}]
    return template


def build_leader_worker_set(
    svc: LlamaService, plan: Plan, settings: Settings, *, replicas: int | None, pod_monitor: bool
) -> Manifest:
    """The LeaderWorkerSet of a multi-node LlamaService: spec.replicas counts groups (replicas), each of
    plan.nodes pods. `replicas=None` leaves the field to the autoscaler's field manager, as for a Deployment."""
    if plan.nodes < 2:
        raise ValueError("a LeaderWorkerSet serves a plan over several nodes (plan.nodes >= 2)")
    spec: dict[str, Any] = {
        # Workers start with the leader, not after it is Ready: the leader is Ready only once they joined.
        "startupPolicy": "LeaderCreated",
        # One group replaced at a time, no surge: a spare group is a whole set of nodes (16 H100s for a 405B),
        # which a cluster rarely has idle; LWS's own defaults, written out so the object says it.
        "rolloutStrategy": {
            "type": "RollingUpdate",
            "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
        },
        "leaderWorkerTemplate": {
            "size": plan.nodes,
            # A Ray cluster does not survive the loss of one of its nodes: the whole group restarts.
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": _leader_template(svc, plan, settings, pod_monitor=pod_monitor),
            "workerTemplate": _worker_template(svc, plan, settings),
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    metadata = {
        "name": svc.metadata.name,
        "namespace": svc.metadata.namespace,
        "labels": object_labels(svc.metadata.name),
        "ownerReferences": [owner_reference(svc)],
    }
    return {"apiVersion": LWS_API_VERSION, "kind": LWS_KIND, "metadata": metadata, "spec": spec}
