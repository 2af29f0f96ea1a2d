"""The cold-start objects on the local cluster's API server: spec.model.cache.nodeLocal's CEL rule, and
the replica Deployment with the node-local cache and the stage DaemonSet as the pure builders write them,
accepted by a server-side dry run (the API server's own schema and defaulting judge them)."""

from __future__ import annotations

import json
from typing import Any

from llama_operator.api.resource import LlamaService, ObjectMeta, parse_spec
from llama_operator.api.settings import Settings
from llama_operator.desired.objects import build_deployment
from llama_operator.desired.staging import build_stage_daemonset
from llama_operator.planning.planner import PlanningConfig, plan_service
from support import Cluster, llamaservice_manifest


def _dry_run(cluster: Cluster, manifest: dict[str, Any], namespace: str) -> str:
    done = cluster.kubectl(
        "apply", "--dry-run=server", "--server-side", "-n", namespace, "-f", "-",
        input_text=json.dumps(manifest), check=False,
    )  # fmt: skip
    return "" if done.returncode == 0 else done.stderr


def test_node_local_with_a_claim_is_refused_by_the_api_server(cluster: Cluster, namespace: str) -> None:
    both = llamaservice_manifest(
        "both",
        model={
            "name": "meta-llama/Llama-3.2-1B-Instruct",
            "cache": {"nodeLocal": True, "persistentVolumeClaim": "w"},
        },
    )
    assert "nodeLocal and persistentVolumeClaim exclude each other" in _dry_run(cluster, both, namespace)
    alone = llamaservice_manifest(
        "alone", model={"name": "meta-llama/Llama-3.2-1B-Instruct", "cache": {"nodeLocal": True}}
    )
    assert _dry_run(cluster, alone, namespace) == ""


def test_node_local_deployment_and_stage_daemonset_are_valid_objects(
    cluster: Cluster, namespace: str
) -> None:
    spec = llamaservice_manifest(
        "chat", model={"name": "meta-llama/Llama-3.2-1B-Instruct", "cache": {"nodeLocal": True}}
    )["spec"]
    svc = LlamaService(
        metadata=ObjectMeta(name="chat", namespace=namespace, uid="0f1e2d3c"), spec=parse_spec(spec)
    )
    plan = plan_service(svc.spec, name=svc.metadata.name, config=PlanningConfig())
    deployment = build_deployment(svc, plan, Settings(), replicas=1, pod_monitor=False)
    daemonset = build_stage_daemonset(svc, plan, Settings())
    for obj in (deployment, daemonset):
        assert _dry_run(cluster, obj, namespace) == "", obj["kind"]
