"""The router between tenants, end to end on the local cluster: the operator, the router process, two tenant
namespaces with a LlamaService each (kwok pods, the endpointslice controller's real slices) and a client pod
in each, whose address the test calls from (router_support.on_loopback).

What the issue measured, and what must hold now:
- a request from team-a's pod with `Host: secret.team-b`, `X-LlamaService: team-b/secret` or
  `X-LlamaService-Namespace: team-b` reaches nothing of team-b (404, nothing sent upstream, no wake);
- a source address that is no pod is refused (403);
- `model` routes within the caller's namespace; /v1/models lists the caller's namespace only;
- demand is a Lease in the router's namespace (the router may not patch LlamaServices: its RBAC has no
  write there), and the operator copies it onto the LlamaService;
- hand-made EndpointSlices (FQDN, or addresses without a pod behind them) attract no request.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from router_support import RecordingUpstream, Reply, RouterProcess, call, client_pod, namespaces, on_loopback
from support import Cluster, OperatorProcess, eventually, llamaservice_manifest

# Both tests run with the module's operator (it makes the pods and slices the router follows).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400), pytest.mark.usefixtures("tenancy_operator")]

ACTIVATION_REQUESTED = "llama-operator.dev/activation-requested-at"


@pytest.fixture(scope="module")
def spaces(cluster: Cluster) -> Iterator[dict[str, str]]:
    with namespaces(cluster, a="team-a", b="team-b", router="router") as names:
        yield names


@pytest.fixture(scope="module")
def tenancy_operator(
    cluster: Cluster, spaces: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(
        cluster,
        log_dir=tmp_path_factory.mktemp("operator"),
        extra_env={
            "LLAMA_OPERATOR_ACTIVATOR_SERVICE": "router",
            "LLAMA_OPERATOR_ACTIVATOR_NAMESPACE": spaces["router"],
        },
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordingUpstream]:
    up = RecordingUpstream()
    yield up
    up.close()


@pytest.fixture(scope="module")
def router(
    cluster: Cluster,
    spaces: dict[str, str],
    upstream: RecordingUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RouterProcess]:
    proc = RouterProcess(
        cluster,
        tmp_path_factory.mktemp("router"),
        upstream=upstream.url,
        own_namespace=spaces["router"],
        extra_args=["--max-hold-seconds=4"],
    )
    proc.start()
    yield proc
    proc.stop()


def served_name(cluster: Cluster, name: str, namespace: str) -> str:
    def planned() -> str | None:
        status = (cluster.llamaservice(name, namespace) or {}).get("status") or {}
        return (status.get("plan") or {}).get("servedModelName")

    return eventually(f"{namespace}/{name} planned", planned, 60)


def ready_endpoints(cluster: Cluster, name: str, namespace: str) -> bool:
    slices = cluster.list_objects("endpointslices", namespace, f"kubernetes.io/service-name={name}")
    return any(
        (e.get("conditions") or {}).get("ready") and e.get("targetRef", {}).get("kind") == "Pod"
        for s in slices
        for e in s.get("endpoints") or []
    )


def test_requests_reach_only_the_callers_namespace(
    cluster: Cluster,
    spaces: dict[str, str],
    router: RouterProcess,
    upstream: RecordingUpstream,
) -> None:
    a, b = spaces["a"], spaces["b"]
    chat = llamaservice_manifest("chat", accelerator={"type": "a100-80gb", "mig": "1g.10gb"})
    secret = llamaservice_manifest("secret", accelerator={"type": "a100-80gb", "mig": "1g.10gb"})
    # No node has this accelerator: its pod stays Pending, so a request for it would be held (a wake).
    pending = llamaservice_manifest("pending", accelerator={"type": "a100-40gb", "mig": "1g.5gb"})
    assert cluster.apply(chat, a).returncode == 0
    assert cluster.apply(secret, b).returncode == 0
    assert cluster.apply(pending, b).returncode == 0
    ip_a, ip_b = client_pod(cluster, a), client_pod(cluster, b)
    eventually("team-a's chat has a ready pod", lambda: ready_endpoints(cluster, "chat", a), 120)
    eventually("team-b's secret has a ready pod", lambda: ready_endpoints(cluster, "secret", b), 120)
    model_a, model_b = served_name(cluster, "chat", a), served_name(cluster, "secret", b)

    with on_loopback(ip_a, ip_b):
        # The router's watches see the client pods, the services and their slices.
        def routed() -> Reply | None:
            reply = call(
                router.address,
                source=ip_a,
                headers={"Authorization": "Bearer sk-team-a"},
                body={"model": model_a, "prompt": "hi"},
            )
            return reply if reply.status == 200 else None

        eventually("team-a's request served through the router", routed, 60)
        assert upstream.seen[-1]["headers"].get("Authorization") == "Bearer sk-team-a", (
            "API keys pass through"
        )

        # Every way the issue reached team-b from team-a: refused alike, nothing sent upstream.
        before = len(upstream.seen)
        attempts = [
            {"host": f"secret.{b}:8000", "body": {"model": model_b, "prompt": "x"}},
            {"host": f"secret.{b}.svc.cluster.local", "body": {"model": model_b, "prompt": "x"}},
            {"host": f"chat.{a}", "headers": {"X-LlamaService": f"{b}/secret"}, "body": {"model": model_b}},
            {"headers": {"X-LlamaService": f"{b}/pending"}, "body": {"model": "x"}},
            {"headers": {"X-LlamaService-Namespace": b}, "body": {"model": model_b, "prompt": "x"}},
        ]
        for attempt in attempts:
            reply = call(router.address, source=ip_a, **attempt)  # type: ignore[arg-type]
            assert reply.status == 404, (attempt, reply)
        assert len(upstream.seen) == before, "nothing of a refused request reached a vLLM"
        assert cluster.get("lease", f"demand.{b}.pending", spaces["router"]) is None, "no wake for team-b"

        # No pod behind the source address: refused outright.
        reply = call(router.address, source="127.0.0.1", host=f"chat.{a}", body={"model": model_a})
        assert reply.status == 403, reply

        # /v1/models: the caller's namespace only.
        listed = call(router.address, source=ip_a, method="GET", path="/v1/models").json()
        assert [(m["id"], m["owned_by"]) for m in listed["data"]] == [(model_a, f"{a}/chat")]
        listed = call(router.address, source=ip_b, method="GET", path="/v1/models").json()
        assert sorted(m["owned_by"] for m in listed["data"]) == [f"{b}/pending", f"{b}/secret"]

        # team-b itself: its model is served; its pending service is held, and the demand goes on a Lease
        # in the router's namespace, which the operator copies onto the LlamaService.
        reply = call(router.address, source=ip_b, host=f"secret.{b}", body={"model": model_b, "prompt": "x"})
        assert reply.status == 200
        started = time.monotonic()
        reply = call(router.address, source=ip_b, headers={"X-LlamaService": "pending"}, body={"model": "x"})
        assert reply.status == 503 and reply.headers.get("Retry-After"), reply
        assert 3.5 <= time.monotonic() - started < 10, "held for the platform's cap (--max-hold-seconds=4)"
        lease = cluster.get("lease", f"demand.{b}.pending", spaces["router"])
        assert lease is not None
        assert lease["metadata"]["annotations"]["llama-operator.dev/demand-namespace"] == b

        def copied() -> str | None:
            annotations = (cluster.llamaservice("pending", b) or {}).get("metadata", {}).get(
                "annotations"
            ) or {}
            return annotations.get(ACTIVATION_REQUESTED)

        assert (
            eventually("the operator copied the demand", copied, 30)
            == lease["metadata"]["annotations"][ACTIVATION_REQUESTED]
        )


def test_hand_made_endpoint_slices_attract_nothing(
    cluster: Cluster,
    spaces: dict[str, str],
    router: RouterProcess,
    upstream: RecordingUpstream,
) -> None:
    """A tenant (or anyone who can write EndpointSlices) labels slices as the endpointslice controller's for a
    LlamaService that has no ready pod: an FQDN slice naming localhost.localdomain, and an IP slice with no pod behind
    its address. The router holds the request (then 503) instead of sending it anywhere."""
    b = spaces["b"]
    ip_b = client_pod(cluster, b, "client-2")
    labels = {
        "kubernetes.io/service-name": "pending",
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
    }
    for name, address_type, address, ref in (
        ("fake-fqdn", "FQDN", "localhost.localdomain", None),
        ("fake-ip", "IPv4", "10.244.250.250", {"kind": "Pod", "name": "no-such-pod", "namespace": b}),
        ("fake-client", "IPv4", ip_b, {"kind": "Pod", "name": "client-2", "namespace": b}),  # not a vLLM pod
    ):
        endpoint: dict[str, Any] = {"addresses": [address], "conditions": {"ready": True}}
        if ref:
            endpoint["targetRef"] = ref
        manifest = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "labels": labels},
            "addressType": address_type,
            "ports": [{"name": "http", "port": 8000}],
            "endpoints": [endpoint],
        }
        assert cluster.apply(json.dumps(manifest), b).returncode == 0
    time.sleep(2)  # the router's watch has them
    before = len(upstream.seen)
    with on_loopback(ip_b):
        reply = call(router.address, source=ip_b, headers={"X-LlamaService": "pending"}, body={"model": "x"})
    assert reply.status == 503, reply
    assert len(upstream.seen) == before, "sent to an endpoint no vLLM pod of the operator's has"
