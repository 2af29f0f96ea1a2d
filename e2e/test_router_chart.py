"""The chart's router, rendered and its RBAC applied to the local cluster: what the router's ServiceAccount
may do there (the API server's own answer, `kubectl auth can-i`), its limits and trust reaching its
arguments, and the optional NetworkPolicy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from router_support import namespaces
from support import Cluster, repo_root

pytestmark = [pytest.mark.e2e, pytest.mark.beside_operators, pytest.mark.timeout(180)]

RELEASE = "rt"
ROUTER = f"{RELEASE}-llama-operator-activator"


def render(cluster: Cluster, namespaces: dict[str, str], *extra: str) -> list[dict[str, Any]]:
    done = cluster.helm(
        "template",
        RELEASE,
        str(repo_root() / "charts" / "llama-operator"),
        "-n",
        namespaces["release"],
        "--set",
        "activator.enabled=true",
        "--set",
        f"watchNamespaces={{{namespaces['a']},{namespaces['b']}}}",
        *extra,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module")
def spaces(cluster: Cluster) -> Iterator[dict[str, str]]:
    with namespaces(cluster, release="rt-sys", a="rt-a", b="rt-b", gw="rt-gw") as names:
        yield names


@pytest.fixture(scope="module")
def router_rbac(cluster: Cluster, spaces: dict[str, str]) -> Iterator[list[dict[str, Any]]]:
    docs = render(cluster, spaces, "--set", f"activator.trustedNamespaces={{{spaces['gw']}}}")
    rbac = [
        d
        for d in docs
        if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
        and d["metadata"]["name"].startswith(ROUTER)
    ]
    for doc in rbac:
        assert cluster.apply(doc, doc["metadata"].get("namespace") or spaces["release"]).returncode == 0, doc
    yield docs
    for doc in rbac:
        if doc["kind"].startswith("Cluster"):
            cluster.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], check=False)


@pytest.mark.parametrize(
    ("verb", "resource", "where", "allowed"),
    [
        ("list", "llamaservices.serving.llama-operator.dev", "a", True),
        (
            "patch",
            "llamaservices.serving.llama-operator.dev",
            "a",
            False,
        ),  # the issue: it could, cluster-wide
        ("update", "llamaservices.serving.llama-operator.dev", "a", False),
        ("patch", "llamaservices.serving.llama-operator.dev/status", "a", False),
        ("watch", "endpointslices.discovery.k8s.io", "b", True),
        ("create", "endpointslices.discovery.k8s.io", "b", False),
        ("list", "pods", "a", True),
        ("list", "pods", "gw", True),  # a trusted gateway's pods: to know its address
        ("list", "pods", "kube-system", False),
        ("get", "secrets", "a", False),
        ("create", "leases.coordination.k8s.io", "release", True),  # its demand Leases
        ("patch", "leases.coordination.k8s.io", "release", True),
        ("create", "leases.coordination.k8s.io", "a", False),
        ("create", "events", "a", False),
    ],
)
def test_the_router_reads_tenants_and_writes_only_its_own_leases(
    cluster: Cluster,
    spaces: dict[str, str],
    router_rbac: list[dict[str, Any]],
    verb: str,
    resource: str,
    where: str,
    allowed: bool,
) -> None:
    namespace = spaces.get(where, where)
    account = f"system:serviceaccount:{spaces['release']}:{ROUTER}"
    done = cluster.kubectl("auth", "can-i", verb, resource, "-n", namespace, f"--as={account}", check=False)
    assert done.stdout.strip() == ("yes" if allowed else "no"), f"can-i {verb} {resource} -n {namespace}"


def test_limits_trust_and_drain_reach_the_router(cluster: Cluster, spaces: dict[str, str]) -> None:
    docs = render(
        cluster,
        spaces,
        "--set",
        "activator.limits.maxBodyMib=2",
        "--set",
        "activator.limits.maxHoldSeconds=120",
        "--set",
        "activator.drainSeconds=30",
        "--set",
        "activator.trustedSources={10.1.2.3}",
    )
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == ROUTER]
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    for expected in (
        "--max-body-mib=2",
        "--max-hold-seconds=120",
        "--drain-seconds=30",
        "--trusted-source=10.1.2.3",
    ):
        assert expected in args, args
    assert pod["terminationGracePeriodSeconds"] == 45, "drain time plus preStop and a margin"
    env = {e["name"] for e in pod["containers"][0]["env"]}
    assert {"POD_NAMESPACE", "POD_NAME"} <= env


def test_the_network_policy_lets_only_the_router_and_the_operator_reach_vllm(
    cluster: Cluster, spaces: dict[str, str]
) -> None:
    docs = render(cluster, spaces, "--set", "activator.networkPolicy.enabled=true")
    policies = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "NetworkPolicy"}
    assert {spaces["a"], spaces["b"]} <= set(policies)
    policy = policies[spaces["a"]]
    assert policy["spec"]["podSelector"]["matchExpressions"] == [
        {"key": "llama-operator.dev/llamaservice", "operator": "Exists"}
    ]
    peers = policy["spec"]["ingress"][0]["from"]
    names = sorted(p["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for p in peers)
    assert names == ["llama-operator", "llama-operator-activator"]
    assert all(
        p["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": spaces["release"]}
        for p in peers
    )
    # The API server accepts it as written.
    assert cluster.apply(policy, spaces["a"]).returncode == 0
    # Without watchNamespaces there is no namespace to put a policy in: a clear error, not a silent no-op.
    done = cluster.helm(
        "template",
        RELEASE,
        str(repo_root() / "charts" / "llama-operator"),
        "--set",
        "activator.enabled=true",
        "--set",
        "activator.networkPolicy.enabled=true",
    )
    assert done.returncode != 0 and "needs watchNamespaces" in done.stderr


def test_the_router_as_the_endpoint_picker_of_every_watched_namespaces_pools(
    cluster: Cluster, spaces: dict[str, str]
) -> None:
    """activator.endpointPickerPort: the router serves ext_proc there, each watched namespace gets a Service
    leading to it (an InferencePool's endpointPickerRef is namespace-local), and the operator's config names
    that Service and port for every pool."""
    docs = render(cluster, spaces, "--set", "activator.endpointPickerPort=9002")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == ROUTER]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--ext-proc-port=9002" in container["args"], container["args"]
    assert {"name": "grpc-epp", "containerPort": 9002} in container["ports"]
    (service,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == ROUTER]
    assert any(p["name"] == "grpc-epp" and p["port"] == 9002 for p in service["spec"]["ports"])
    pickers = {
        d["metadata"]["namespace"]: d
        for d in docs
        if d["kind"] == "Service" and d["metadata"]["name"] == f"{RELEASE}-llama-operator-epp"
    }
    assert {spaces["a"], spaces["b"]} <= set(pickers)
    picker = pickers[spaces["a"]]
    assert picker["spec"]["externalName"] == f"{ROUTER}.{spaces['release']}.svc.cluster.local"
    assert cluster.apply(picker, spaces["a"]).returncode == 0, "the API server accepts it as written"
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d.get("data", {})]
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    assert config["inferencePoolEndpointPicker"] == f"{RELEASE}-llama-operator-epp"
    assert config["inferencePoolEndpointPickerPort"] == 9002
    # TLS by default, with the chart's self-signed certificate mounted where the arguments say.
    (secret,) = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == f"{ROUTER}-epp-tls"]
    assert secret["type"] == "kubernetes.io/tls" and {"tls.crt", "tls.key"} <= set(secret["data"])
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert f"--ext-proc-tls-cert={mounts['epp-tls']}/tls.crt" in container["args"]
    assert f"--ext-proc-tls-key={mounts['epp-tls']}/tls.key" in container["args"]
    assert cluster.apply(secret, spaces["release"]).returncode == 0
    docs = render(
        cluster,
        spaces,
        "--set",
        "activator.endpointPickerPort=9002",
        "--set",
        "activator.endpointPickerTls=false",
    )
    assert not [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-epp-tls")]
    # Off by default: no port, no Services, no picker named.
    docs = render(cluster, spaces)
    assert not [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-epp")]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == ROUTER]
    assert not [a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"] if "ext-proc" in a]
