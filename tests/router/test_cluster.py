"""What the router takes from the watched objects: only IP endpoints that name a Pod, the operator's pods,
the services' served models and who may call them; and what the operator copies from a demand Lease."""

from __future__ import annotations

from typing import Any

from llama_operator.handlers.demand import demand_patch
from llama_operator.router.cluster import ClusterView, PodFacts, pod_facts, service_info, slice_endpoints


def slice_(address_type: str, *endpoints: dict[str, Any]) -> dict[str, Any]:
    return {
        "addressType": address_type,
        "ports": [{"name": "http", "port": 8000}],
        "endpoints": list(endpoints),
    }


def endpoint(address: str, pod: str | None = "vllm-1", ready: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"addresses": [address], "conditions": {"ready": ready}}
    if pod:
        out["targetRef"] = {"kind": "Pod", "name": pod}
    return out


def test_only_ready_ip_endpoints_that_name_a_pod_are_taken() -> None:
    assert slice_endpoints(slice_("IPv4", endpoint("10.0.0.1"), endpoint("10.0.0.2", ready=False))) == [
        ("10.0.0.1", 8000, "vllm-1")
    ]
    assert slice_endpoints(slice_("FQDN", endpoint("localhost.localdomain"))) == []
    assert slice_endpoints(slice_("IPv4", endpoint("127.0.0.1", pod=None))) == []
    node_ref = {"addresses": ["10.0.0.3"], "targetRef": {"kind": "Node", "name": "n"}}
    assert slice_endpoints(slice_("IPv4", node_ref)) == []


def pod(name: str, ip: str, labels: dict[str, str], *, host_network: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": name, "labels": labels},
        "spec": {"hostNetwork": host_network},
        "status": {"podIP": ip},
    }


OURS = {"app.kubernetes.io/managed-by": "llama-operator", "llama-operator.dev/llamaservice": "chat"}


def view_with(pods: list[dict[str, Any]], slices: list[dict[str, Any]]) -> ClusterView:
    view = ClusterView(None)
    for p in pods:
        facts = pod_facts(p)
        assert facts is not None
        view.pods[(facts.namespace, facts.name)] = facts
        view.pods_by_ip.setdefault(facts.ip, set()).add((facts.namespace, facts.name))
    for i, s in enumerate(slices):
        view.slices[("team-a", f"s{i}")] = (("team-a", "chat"), slice_endpoints(s))
        view.slices_of.setdefault(("team-a", "chat"), set()).add(("team-a", f"s{i}"))
    return view


def test_an_endpoint_counts_only_as_the_operators_pod_with_that_address() -> None:
    view = view_with(
        [
            pod("vllm-1", "10.0.0.1", OURS),
            pod("app", "10.0.0.9", {"app": "x"}),  # a tenant's pod: not a vLLM pod of the operator's
            pod("vllm-host", "192.168.1.5", OURS, host_network=True),
        ],
        [
            slice_(
                "IPv4",
                endpoint("10.0.0.1"),
                endpoint("10.0.0.7", pod="vllm-1"),  # a hand-made slice naming vllm-1 with another address
                endpoint("10.0.0.9", pod="app"),
                endpoint("192.168.1.5", pod="vllm-host"),
                endpoint("10.0.0.8", pod="gone"),
            )
        ],
    )
    assert view.endpoints(("team-a", "chat")) == ["10.0.0.1:8000"]


def test_a_callers_namespace_is_its_pods_and_ambiguous_addresses_are_nobodys() -> None:
    view = view_with(
        [pod("app", "10.0.0.9", {}), pod("node-agent", "192.168.1.5", {}, host_network=True)], []
    )
    assert view.namespace_of("10.0.0.9") == "team-a"
    assert view.namespace_of("192.168.1.5") is None, "a host-network pod shares the node's address"
    assert view.namespace_of("10.9.9.9") is None
    view.pods[("team-b", "reused")] = PodFacts("team-b", "reused", "10.0.0.9", None, False)
    view.pods_by_ip["10.0.0.9"].add(("team-b", "reused"))
    assert view.namespace_of("10.0.0.9") is None, "an address two namespaces claim (being reused) is refused"


def test_service_info_reads_the_served_model_and_the_allowed_namespaces() -> None:
    info = service_info(
        {
            "metadata": {
                "uid": "u1",
                "annotations": {"llama-operator.dev/router-allowed-namespaces": "team-b, team-c"},
            },
            "spec": {
                "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
                "autoscaling": {"minReplicas": 0, "activationTimeoutSeconds": 60},
            },
            "status": {"plan": {"accelerator": "t4", "servedModelName": "llama-1b", "maxNumSeqs": 64}},
        }
    )
    assert info.models == ("llama-1b",) and info.activation_timeout_seconds == 60
    assert info.allowed_namespaces == frozenset({"team-b", "team-c"}) and info.max_num_seqs == 64
    # A spec the operator cannot serve (Degraded) has nothing to route to, and the platform's hold time.
    unserved = service_info({"metadata": {}, "spec": {}})
    assert unserved.models == () and unserved.activation_timeout_seconds == 300


def test_the_operator_copies_only_the_activation_annotations_that_changed() -> None:
    lease = {
        "llama-operator.dev/demand-namespace": "team-a",
        "llama-operator.dev/activation-requested-at": "2026-01-01T00:00:01.000000Z",
        "llama-operator.dev/last-activation": '{"seconds":3.2}',
        "something-else": "x",
    }
    current = {"llama-operator.dev/last-activation": '{"seconds":3.2}'}
    assert demand_patch(lease, current) == {
        "llama-operator.dev/activation-requested-at": "2026-01-01T00:00:01.000000Z"
    }
    assert demand_patch(lease, {**current, **{k: v for k, v in lease.items() if "activation" in k}}) == {}
