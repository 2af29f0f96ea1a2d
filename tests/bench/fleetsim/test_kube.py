"""What the simulator reads of the cluster: pods as the operator renders them, plans as it writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llama_bench.fleetsim.kube import pod_info, service_info, simulated_accelerator, simulated_model
from llama_operator.api.settings import Settings
from llama_operator.desired.objects import build_desired_state
from llama_operator.planning.inventory import inventory_from_nodes
from llama_operator.reconcile.outcome import plan_llamaservice


def planned(repo: Path, example: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the LlamaService with status.plan, the pod its Deployment would run), as the operator makes them."""
    nodes = [yaml.safe_load(p.read_text()) for p in sorted((repo / "e2e" / "nodes").glob("*.yaml"))]
    doc = yaml.safe_load((repo / "examples" / example).read_text())
    doc["metadata"].update(namespace="team", uid="0d4b3c52-7c4f-4cc4-9b4e-2f8d3a2f0c11")
    svc, plan = plan_llamaservice(doc, Settings(), inventory_from_nodes(nodes))
    state = build_desired_state(svc, plan, Settings(), pod_monitor=False)
    deployment = next(o for o in state.objects if o["kind"] == "Deployment")
    template = deployment["spec"]["template"]
    pod = {
        "metadata": {
            **template["metadata"],
            "name": f"{doc['metadata']['name']}-7d9c-x2x4q",
            "namespace": "team",
            "uid": "pod-uid-1",
        },
        "spec": template["spec"],
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    body = {**doc, "status": {"plan": plan.model_dump(by_alias=True, mode="json")}}
    return body, pod


def test_a_pod_of_the_operators_deployment(repo: Path) -> None:
    body, pod = planned(repo, "mig-mixed.yaml")
    info = pod_info(pod)
    assert info is not None
    assert (info.namespace, info.service, info.ready, info.terminating) == ("team", "chat-mig", True, False)
    assert info.model_name == body["status"]["plan"]["servedModelName"]  # --served-model-name
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    terminating = pod_info(pod)
    assert terminating is not None and terminating.terminating
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    loading = pod_info(pod)
    assert loading is not None and not loading.ready
    pod["status"]["phase"] = "Succeeded"
    assert pod_info(pod) is None
    assert pod_info({"metadata": {"name": "x", "labels": {}}, "status": {"phase": "Running"}}) is None


def test_the_plan_picks_the_simulated_replica(repo: Path) -> None:
    body, _ = planned(repo, "mig-mixed.yaml")
    key, info = service_info(body)
    assert key == ("team", "chat-mig")
    assert info.accelerator == "a100-80gb-1g.10gb"
    assert info.model == "llama-3.2-1b"
    assert info.max_num_seqs == body["status"]["plan"]["maxNumSeqs"]
    assert info.served_model_name == body["status"]["plan"]["servedModelName"]
    body, _ = planned(repo, "t4-chat.yaml")
    assert service_info(body)[1].accelerator == "t4"


def test_names_the_simulator_has_no_parameters_for() -> None:
    assert simulated_accelerator({"accelerator": "cpu"}) is None
    assert simulated_accelerator({}) is None
    assert simulated_accelerator({"accelerator": "h100-80gb", "mig": "1g.10gb"}) == "h100-80gb-1g.10gb"
    assert simulated_model("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert simulated_model("Qwen/Qwen2.5-0.5B") is None
    assert service_info({"metadata": {"namespace": "a", "name": "b"}})[1].accelerator is None
