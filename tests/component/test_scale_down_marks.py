"""Before the autoscaler lowers the replicas, against a real API server: each replica's pod-deletion-cost is
the other pods on its node, and the one whose node can then go is protected from provisioners while it
drains."""

from __future__ import annotations

import uuid

from kubernetes import client

from llama_operator.desired.labels import SERVICE_LABEL
from llama_operator.handlers.autoscaler import _mark_scale_down
from llama_operator.reconcile.scale_down import DELETION_COST_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION

from .conftest import ApiServer
from .test_reconcile import operator_memo


def _pod(name: str, node: str, labels: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "vllm"}]},
    }


def test_the_replica_on_the_emptiest_node_is_the_one_removed(apiserver: ApiServer) -> None:
    core = client.CoreV1Api(apiserver.api_client)
    suffix = uuid.uuid4().hex[:6]
    namespace, elsewhere = f"chat-{suffix}", f"batch-{suffix}"
    busy, alone = f"busy-{suffix}", f"alone-{suffix}"
    for ns in (namespace, elsewhere):
        core.create_namespace({"metadata": {"name": ns}})
        # No controller manager here makes the namespace's default ServiceAccount the pods need.
        core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    for node in (busy, alone):
        core.create_node({"metadata": {"name": node}})
    core.create_namespaced_pod(namespace, _pod("chat-a", busy, {SERVICE_LABEL: "chat"}))
    core.create_namespaced_pod(namespace, _pod("chat-b", alone, {SERVICE_LABEL: "chat"}))
    core.create_namespaced_pod(elsewhere, _pod("job-1", busy, {"app": "batch"}))

    _mark_scale_down(operator_memo(apiserver.api_client), (namespace, "chat"), remove=1)

    marks = {
        p.metadata.name: p.metadata.annotations or {}
        for p in core.list_namespaced_pod(namespace, label_selector=f"{SERVICE_LABEL}=chat").items
    }
    assert marks["chat-a"][DELETION_COST_ANNOTATION] == "1"
    assert marks["chat-b"][DELETION_COST_ANNOTATION] == "0"
    assert marks["chat-b"][DO_NOT_DISRUPT_ANNOTATION] == "true"
    assert DO_NOT_DISRUPT_ANNOTATION not in marks["chat-a"]
