"""The cold-start objects on the local cluster's API server: spec.model.cache.nodeLocal's CEL rule, and
the replica Deployment with the node-local cache and the stage DaemonSet as the pure builders write them,
accepted by a server-side dry run (the API server's own schema and defaulting judge them); then the
operator itself applying the stage DaemonSet while nodeLocal is on, and removing it when it is turned off."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llama_operator.api.resource import LlamaService, ObjectMeta, parse_spec
from llama_operator.api.settings import Settings
from llama_operator.desired.labels import SERVICE_LABEL
from llama_operator.desired.objects import build_deployment
from llama_operator.desired.staging import build_stage_daemonset
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.planner import plan_service
from support import Cluster, OperatorProcess, eventually, llamaservice_manifest

pytestmark = pytest.mark.e2e


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


def _controller(obj: dict[str, Any]) -> tuple[str, str] | None:
    refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")]
    return (refs[0]["kind"], refs[0]["uid"]) if refs else None


def test_the_operator_applies_the_stage_daemonset_while_node_local_is_on(
    cluster: Cluster, operator: OperatorProcess, namespace: str
) -> None:
    model = {"name": "meta-llama/Llama-3.2-1B-Instruct", "cache": {"nodeLocal": True}}
    assert cluster.apply(llamaservice_manifest("staged", model=model), namespace).returncode == 0
    owner = eventually("the LlamaService", lambda: cluster.llamaservice("staged", namespace))
    uid = owner["metadata"]["uid"]
    stage = eventually("the stage DaemonSet", lambda: cluster.get("daemonset", "staged-stage", namespace), 60)
    assert _controller(stage) == ("LlamaService", uid)
    assert stage["metadata"]["labels"][SERVICE_LABEL] == "staged"
    # Its pods are never the service's replicas: not selected by the Service, the PDB or the autoscaler.
    assert SERVICE_LABEL not in stage["spec"]["template"]["metadata"]["labels"]
    assert eventually("the Deployment", lambda: cluster.get("deployment", "staged", namespace), 60)

    # Deleted by hand: its watch wakes the operator, which makes it again (a new object, still its own).
    cluster.kubectl("delete", "daemonset", "staged-stage", "-n", namespace)

    def recreated() -> dict[str, Any] | None:
        again = cluster.get("daemonset", "staged-stage", namespace)
        return again if again and again["metadata"]["uid"] != stage["metadata"]["uid"] else None

    assert _controller(eventually("the stage DaemonSet again", recreated, 60)) == ("LlamaService", uid)

    # nodeLocal off: the stage goes; the replicas stay.
    cluster.kubectl(
        "patch", "llamaservice", "staged", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"model": {"cache": {"nodeLocal": False}}}}),
    )  # fmt: skip
    eventually(
        "the stage DaemonSet deleted",
        lambda: cluster.get("daemonset", "staged-stage", namespace) is None,
        60,
    )
    assert cluster.get("deployment", "staged", namespace) is not None
    assert not operator.tracebacks()


def _tenant_daemonset(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.example.com/app:1"}]},
            },
        },
    }


def test_a_daemonset_of_the_stage_name_that_is_not_its_own_is_never_adopted_nor_deleted(
    cluster: Cluster, operator: OperatorProcess, namespace: str
) -> None:
    for name in ("mine-stage", "plain-stage"):
        assert cluster.apply(_tenant_daemonset(name), namespace).returncode == 0
    before = {n: cluster.get("daemonset", n, namespace) for n in ("mine-stage", "plain-stage")}
    node_local = {"name": "meta-llama/Llama-3.2-1B-Instruct", "cache": {"nodeLocal": True}}
    # With nodeLocal, the stage's name is taken: reported, never adopted.
    assert cluster.apply(llamaservice_manifest("mine", model=node_local), namespace).returncode == 0
    # Without it, the stage is unwanted: the tenant's DaemonSet of that name is not the operator's to delete.
    assert cluster.apply(llamaservice_manifest("plain"), namespace).returncode == 0

    def conflict() -> dict[str, Any] | None:
        cond = cluster.condition("mine", namespace, "Degraded")
        return cond if cond and cond.get("reason") == "NameConflict" else None

    cond = eventually("Degraded NameConflict", conflict, 60)
    assert f"DaemonSet {namespace}/mine-stage" in cond["message"]

    def plain_reconciled() -> bool:
        svc = cluster.llamaservice("plain", namespace) or {}
        status = svc.get("status") or {}
        return status.get("observedGeneration") == svc["metadata"]["generation"] and bool(
            cluster.get("deployment", "plain", namespace)
        )

    eventually("the service without nodeLocal reconciled", plain_reconciled, 60)
    for name, was in before.items():
        after = cluster.get("daemonset", name, namespace)
        # Untouched: no owner reference added, its spec as the tenant wrote it (status is its controller's).
        assert after is not None and was is not None, name
        assert _controller(after) is None, name
        assert after["metadata"]["uid"] == was["metadata"]["uid"], name
        assert after["metadata"]["generation"] == was["metadata"]["generation"], name
        assert after["metadata"]["labels"] == {"app": name}, name
