"""The EndpointSlice that sends a scaled-to-zero LlamaService's Service to the activator."""

from __future__ import annotations

from typing import Any

from llama_operator.api.resource import LlamaService, parse_metadata, parse_spec
from llama_operator.api.settings import Settings
from llama_operator.desired.objects import (
    ActivatorRoute,
    build_activator_endpoint_slice,
    build_desired_state,
    routes_to_activator,
)
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.planner import plan_service

ROUTE = ActivatorRoute(addresses=("10.0.0.7", "10.0.0.8"), port=8000)


def service(**autoscaling: Any) -> LlamaService:
    spec: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
        "accelerator": {"type": "t4"},
    }
    if autoscaling:
        spec["autoscaling"] = autoscaling
    return LlamaService(
        metadata=parse_metadata({"name": "chat", "namespace": "team-a", "uid": "uid-1"}),
        spec=parse_spec(spec),
    )


def test_the_slice_names_the_service_the_activator_pods_and_the_http_port() -> None:
    svc = service(minReplicas=0)
    slice_ = build_activator_endpoint_slice(svc, ROUTE)
    labels = slice_["metadata"]["labels"]
    assert slice_["metadata"]["name"] == "chat-activator"
    assert labels["kubernetes.io/service-name"] == "chat"
    # Not the endpointslice controller's: it would delete a slice it thinks it manages.
    assert labels["endpointslice.kubernetes.io/managed-by"] == "llama-operator.dev"
    assert slice_["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert slice_["metadata"]["ownerReferences"][0]["controller"] is True
    assert [e["addresses"] for e in slice_["endpoints"]] == [["10.0.0.7"], ["10.0.0.8"]]
    assert all(e["conditions"]["ready"] for e in slice_["endpoints"])
    # The port's name is the Service's: that is how kube-proxy pairs them.
    assert slice_["ports"] == [{"name": "http", "port": 8000, "protocol": "TCP"}]


def test_only_a_service_that_may_scale_to_zero_and_has_no_ready_pod_routes_to_the_activator() -> None:
    assert routes_to_activator(service(minReplicas=0), ROUTE, ready_replicas=0)
    assert not routes_to_activator(service(minReplicas=0), ROUTE, ready_replicas=1)
    assert not routes_to_activator(service(minReplicas=1), ROUTE, ready_replicas=0)
    assert not routes_to_activator(service(minReplicas=0, enabled=False), ROUTE, ready_replicas=0)
    assert not routes_to_activator(service(), ROUTE, ready_replicas=0)
    assert not routes_to_activator(service(minReplicas=0), None, ready_replicas=0)
    assert not routes_to_activator(service(minReplicas=0), ActivatorRoute((), 8000), ready_replicas=0)


def test_the_desired_state_adds_the_slice_at_zero_and_deletes_it_once_a_pod_serves() -> None:
    svc = service(minReplicas=0)
    plan = plan_service(svc.spec, name="chat", config=PlanningConfig(), inventory=None)
    at_zero = build_desired_state(svc, plan, Settings(), pod_monitor=False, activator=ROUTE, ready_replicas=0)
    assert [o["kind"] for o in at_zero.objects][:2] == ["Service", "EndpointSlice"]
    assert ("discovery.k8s.io/v1", "EndpointSlice", "chat-activator") not in at_zero.absent
    serving = build_desired_state(svc, plan, Settings(), pod_monitor=False, activator=ROUTE, ready_replicas=1)
    assert "EndpointSlice" not in [o["kind"] for o in serving.objects]
    assert ("discovery.k8s.io/v1", "EndpointSlice", "chat-activator") in serving.absent
