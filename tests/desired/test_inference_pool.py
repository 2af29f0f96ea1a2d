"""The InferencePool of a LlamaService (e2e/test_router_inference_pool.py applies it to the real v1 CRD)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from llama_operator.api.resource import LlamaService, parse_metadata, parse_spec
from llama_operator.api.settings import Settings
from llama_operator.desired.inference_pool import build_inference_pool
from llama_operator.desired.objects import build_desired_state
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.planner import plan_service
from llama_operator.reconcile.outcome import reconcile


def service() -> LlamaService:
    spec: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
        "accelerator": {"type": "t4"},
    }
    return LlamaService(
        metadata=parse_metadata({"name": "chat", "namespace": "team-a", "uid": "uid-1"}),
        spec=parse_spec(spec),
    )


def test_the_pool_selects_the_services_pods_on_the_vllm_port_and_is_owned() -> None:
    svc = service()
    pool = build_inference_pool(svc, Settings())
    plan = plan_service(svc.spec, name="chat", config=PlanningConfig())
    desired = build_desired_state(svc, plan, Settings(), pod_monitor=False)
    (deployment,) = [o for o in desired.objects if o["kind"] == "Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1" and pool["kind"] == "InferencePool"
    assert pool["metadata"]["name"] == "chat" and pool["metadata"]["namespace"] == "team-a"
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (port,) = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert pool["spec"]["targetPorts"] == [{"number": port["containerPort"]}]
    (owner,) = pool["metadata"]["ownerReferences"]
    assert owner["uid"] == "uid-1" and owner["controller"] is True
    assert "endpointPickerRef" not in pool["spec"], "no picker named by the platform: none referenced"


def test_the_platforms_endpoint_picker_is_referenced() -> None:
    settings = Settings(
        inference_pool_endpoint_picker="vllm-epp",
        inference_pool_endpoint_picker_port=9003,
        inference_pool_failure_mode="FailOpen",
    )
    ref = build_inference_pool(service(), settings)["spec"]["endpointPickerRef"]
    assert ref == {
        "group": "",
        "kind": "Service",
        "name": "vllm-epp",
        "port": {"number": 9003},
        "failureMode": "FailOpen",
    }


@pytest.mark.parametrize("served", [True, False])
def test_reconcile_adds_the_pool_only_when_the_crd_is_served(served: bool) -> None:
    body = {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": "uid-1", "generation": 1},
        "spec": {"model": {"name": "meta-llama/Llama-3.2-1B-Instruct"}, "accelerator": {"type": "t4"}},
    }

    outcome = reconcile(
        body, Settings(), inventory=None, pod_monitor=False, now=datetime.now(UTC), inference_pool=served
    )
    assert outcome.desired is not None
    kinds = [o["kind"] for o in outcome.desired.objects]
    assert ("InferencePool" in kinds) is served
