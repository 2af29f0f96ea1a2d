"""The Helm chart: lint, install into the local cluster, and the operator doing its whole job with the
chart's ServiceAccount token (not the admin credentials), within least privilege."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import Cluster, OperatorProcess, eventually, http_get, repo_root

pytestmark = pytest.mark.e2e

# Unique per run: sessions share the local cluster, and a fixed release name collides with another's.
RUN = uuid.uuid4().hex[:6]
RELEASE = f"llama-op-{RUN}"
RELEASE_NS = f"llama-op-system-{RUN}"
FULLNAME = f"{RELEASE}-llama-operator"  # the chart's names: <release>-llama-operator
SA = f"system:serviceaccount:{RELEASE_NS}:{FULLNAME}"
CRD = "customresourcedefinition/llamaservices.serving.llama-operator.dev"


def helm(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return cluster.helm(*args)


def template(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`helm template x` of the chart with `args`."""
    return helm(cluster, "template", "x", str(repo_root() / "charts" / "llama-operator"), *args)


@pytest.fixture(scope="module")
def watched(cluster: Cluster) -> Iterator[str]:
    name = f"helm-team-{RUN}"
    cluster.kubectl("create", "namespace", name, check=False)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def release(cluster: Cluster, watched: str) -> Iterator[str]:
    # The session applied the CRD with kubectl; label it so Helm adopts it instead of refusing.
    cluster.kubectl("label", CRD, "app.kubernetes.io/managed-by=Helm", "--overwrite")
    cluster.kubectl(
        "annotate",
        CRD,
        f"meta.helm.sh/release-name={RELEASE}",
        f"meta.helm.sh/release-namespace={RELEASE_NS}",
        "--overwrite",
    )
    done = helm(
        cluster,
        "upgrade",
        "--install",
        RELEASE,
        str(repo_root() / "charts" / "llama-operator"),
        "-n",
        RELEASE_NS,
        "--create-namespace",
        "-f",
        str(repo_root() / "e2e" / "helm" / "platform-values.yaml"),
        "--set",
        f"watchNamespaces={{{watched}}}",
        "--wait=false",
        # The CRD is cluster-wide: another session's release may hold it (Helm 3.17+ adopts it).
        "--take-ownership",
    )
    assert done.returncode == 0, done.stderr
    yield RELEASE
    helm(cluster, "uninstall", RELEASE, "-n", RELEASE_NS)
    cluster.kubectl("delete", "namespace", RELEASE_NS, "--wait=false", check=False)


def test_helm_lint(cluster: Cluster) -> None:
    done = helm(cluster, "lint", "--strict", str(repo_root() / "charts" / "llama-operator"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_release_objects_exist(cluster: Cluster, release: str, watched: str) -> None:
    assert cluster.get("serviceaccount", FULLNAME, RELEASE_NS) is not None
    assert cluster.get("configmap", FULLNAME, RELEASE_NS) is not None
    assert cluster.get("deployment", FULLNAME, RELEASE_NS) is not None
    assert cluster.get("role", FULLNAME, watched) is not None
    crd = yaml.safe_load(cluster.kubectl("get", CRD, "-o", "yaml").stdout)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_a_platform_teams_usual_values_reach_the_operator(cluster: Cluster, release: str) -> None:
    deployment = cluster.get("deployment", FULLNAME, RELEASE_NS)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "platform"
    assert pod["metadata"]["annotations"]["example.com/owner"] == "platform"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["spec"]["priorityClassName"] == "platform-critical"
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    container = pod["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    config = yaml.safe_load(cluster.get("configmap", FULLNAME, RELEASE_NS)["data"]["config.yaml"])  # type: ignore[index]
    assert config["prometheusUrl"] == "https://thanos-query.monitoring.svc:10902"
    assert config["podMonitorLabels"] == {"release": "kube-prometheus-stack"}
    assert cluster.get("service", f"{FULLNAME}-metrics", RELEASE_NS) is not None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "config.migStratgy=single"], "additional properties 'migStratgy' not allowed"),
        (["--set", "config.migStrategy=bogus"], "at '/config/migStrategy'"),
        (["--set", "replicaCount=two"], "at '/replicaCount'"),
        (["--set", "imagePullSecret=regcred"], "additional properties 'imagePullSecret' not allowed"),
        (
            ["--set-string", "config.podLabels.llama-operator\\.dev/x=1"],
            "invalid propertyName 'llama-operator.dev/x'",
        ),
        (["--set", "metrics.serviceMonitor.enable=true"], "additional properties 'enable' not allowed"),
        (["--set", "config.healthPort=0"], "config.healthPort: 0 turns the endpoint off"),
    ],
)
def test_a_bad_value_fails_at_install_time_naming_the_field(
    cluster: Cluster, args: list[str], message: str
) -> None:
    done = template(cluster, *args)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


def test_the_install_docs_values_render(cluster: Cluster, tmp_path: Path) -> None:
    """docs/install.md's usual values file is one the chart takes."""
    doc = (repo_root() / "docs" / "install.md").read_text()
    values = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert "watchNamespaces" in values and "monitoring:" in values, "the usual values block moved"
    (tmp_path / "values.yaml").write_text(values)
    done = template(cluster, "-f", str(tmp_path / "values.yaml"))
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    kinds = {d["kind"] for d in docs}
    assert {"ServiceMonitor", "PrometheusRule", "Deployment"} <= kinds, kinds
    # The release label, said once in monitoring.labels, is on every monitor and rule and reaches the
    # operator's own PodMonitors through its config.
    for d in docs:
        if d["kind"] in ("ServiceMonitor", "PrometheusRule"):
            assert d["metadata"]["labels"]["release"] == "kube-prometheus-stack", d["metadata"]["name"]
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d["data"]]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["podMonitorLabels"] == {"release": "kube-prometheus-stack"}


def test_the_service_monitor_can_live_where_prometheus_looks(cluster: Cluster) -> None:
    done = template(
        cluster,
        "-n",
        "ops",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.namespace=monitoring",
        "--set",
        "metrics.serviceMonitor.additionalLabels.release=kube-prometheus-stack",
    )
    assert done.returncode == 0, done.stderr
    monitor = next(d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # It still selects the operator's metrics Service, in the release namespace.
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}


@pytest.mark.parametrize(
    ("value", "namespaces"),
    [
        ("team-a", ["team-a"]),
        ("team-a\\,team-b", ["team-a", "team-b"]),
        ("{team-a,team-b}", ["team-a", "team-b"]),
    ],
)
def test_watch_namespaces_as_a_string_or_a_list(cluster: Cluster, value: str, namespaces: list[str]) -> None:
    done = template(cluster, "--set", f"watchNamespaces={value}")
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    roles = sorted(
        d["metadata"]["namespace"]
        for d in docs
        if d["kind"] == "Role" and "leader" not in d["metadata"]["name"]
    )
    assert roles == namespaces
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a.removeprefix("--namespace=") for a in args if a.startswith("--namespace=")] == namespaces


@pytest.mark.parametrize(
    ("verb", "resource", "namespace", "allowed"),
    [
        ("get", "secrets", "watched", False),
        ("list", "secrets", "watched", False),
        ("watch", "secrets", "watched", False),
        ("create", "deployments", "watched", True),
        ("patch", "llamaservices.serving.llama-operator.dev/status", "watched", True),
        ("update", "llamaservices.serving.llama-operator.dev", "watched", True),
        ("create", "deployments", "kube-system", False),
        ("create", "daemonsets", "watched", True),  # the stage DaemonSet (spec.model.cache.nodeLocal)
        ("delete", "daemonsets", "watched", True),
        ("create", "daemonsets", "kube-system", False),
        ("delete", "services", "default", False),
        ("create", "pods", "watched", False),
        ("create", "pods/exec", "watched", False),
        ("patch", "pods/status", "watched", True),  # the LoRA adapters' readiness gate
        # The replicas' pod-deletion-cost and drain protection before a scale-down (reconcile/scale_down.py).
        ("patch", "pods", "watched", True),
        ("patch", "pods", "kube-system", False),
        ("list", "nodes", None, True),
        ("patch", "nodes", None, False),
        ("delete", "customresourcedefinitions", None, False),
        ("update", "leases.coordination.k8s.io", "release", True),
        ("update", "leases.coordination.k8s.io", "kube-system", False),
        ("update", "leases.coordination.k8s.io", "watched", False),
        ("create", "events", "release", True),
    ],
)
def test_least_privilege(
    cluster: Cluster,
    release: str,
    watched: str,
    verb: str,
    resource: str,
    namespace: str | None,
    allowed: bool,
) -> None:
    # kubectl reads `kind/x` as a resource and a name: a subresource is its own flag.
    kind, _, subresource = resource.partition("/")
    args = [
        "auth",
        "can-i",
        verb,
        kind,
        f"--as={SA}",
        *([f"--subresource={subresource}"] if subresource else []),
    ]
    if namespace is not None:
        args += ["-n", {"watched": watched, "release": RELEASE_NS}.get(namespace, namespace)]
    done = cluster.kubectl(*args, check=False)
    assert done.stdout.strip() == ("yes" if allowed else "no"), f"can-i {verb} {resource}: {done.stdout}"


def _token_kubeconfig(cluster: Cluster, path: Path) -> Path:
    return cluster.info.service_account_kubeconfig(FULLNAME, RELEASE_NS, path)


def test_operator_works_with_the_charts_service_account(
    cluster: Cluster, release: str, watched: str, tmp_path: Path
) -> None:
    kubeconfig = _token_kubeconfig(cluster, tmp_path / "sa.kubeconfig")
    assert (
        cluster.kubectl(
            "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", kubeconfig=kubeconfig
        ).stdout
        == SA
    )
    proc = OperatorProcess(
        cluster,
        log_dir=tmp_path,
        kubeconfig=kubeconfig,
        extra_args=[f"--namespace={watched}"],
        # No namespace setting: out of the cluster, as `make demo` runs it, the operator takes its Lease's
        # namespace from the kubeconfig context (the ServiceAccount's namespace).
    )
    proc.start()
    try:
        manifest = (repo_root() / "examples" / "a10g-chat.yaml").read_text()
        assert cluster.apply(manifest, watched).returncode == 0

        def ready() -> bool:
            status = (cluster.llamaservice("chat-a10g", watched) or {}).get("status") or {}
            return status.get("phase") == "Ready"

        eventually("chat-a10g Ready under the chart's RBAC", ready, timeout=120)
        for kind in ("deployment", "service", "poddisruptionbudget"):
            assert cluster.get(kind, "chat-a10g", watched) is not None, kind
        assert "Forbidden" not in proc.log.read_text(), proc.tail()
    finally:
        proc.stop()


def test_the_activator_renders_with_its_rbac_and_reaches_the_operators_config(cluster: Cluster) -> None:
    done = template(
        cluster,
        "-n",
        "llama-system",
        "--set",
        "activator.enabled=true",
        "--set",
        "watchNamespaces=team-a",
    )
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    by_kind_name = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")): d for d in docs}
    name = "x-llama-operator-activator"
    activator = by_kind_name[("Deployment", name, "llama-system")]
    operator = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] != name)
    # Two replicas (stateless), selectors that never overlap the operator's own pods.
    assert activator["spec"]["replicas"] == 2
    ours, theirs = operator["spec"]["selector"]["matchLabels"], activator["spec"]["selector"]["matchLabels"]
    assert ours.items() - theirs.items() and theirs.items() - ours.items()
    container = activator["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "activator"
    # The operator follows the activator's endpoints in the release namespace: it watches that one too.
    assert [a for a in container["args"] if a.startswith("--namespace=")] == [
        "--namespace=team-a",
        "--namespace=llama-system",
    ]
    config = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"])
    assert config["activatorService"] == name and config["activatorNamespace"] == "llama-system"
    service = by_kind_name[("Service", name, "llama-system")]
    assert service["spec"]["selector"] == theirs
    assert {p["name"] for p in service["spec"]["ports"]} == {"http", "metrics"}
    assert ("PodDisruptionBudget", name, "llama-system") in by_kind_name
    # Its RBAC: read LlamaServices, EndpointSlices and Pods; no write in a tenant's namespace (its demand goes
    # on Leases of its own namespace: e2e/test_router_chart.py asks the API server).
    roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == name]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["llama-system", "team-a"]
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in roles[0]["rules"]}
    assert rules == {
        (("serving.llama-operator.dev",), ("llamaservices",)): {"get", "list", "watch"},
        (("discovery.k8s.io",), ("endpointslices",)): {"get", "list", "watch"},
        (("",), ("pods",)): {"get", "list", "watch"},
    }
    (demand,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == f"{name}-demand"]
    assert demand["metadata"]["namespace"] == "llama-system"
    assert [(r["resources"], set(r["verbs"])) for r in demand["rules"]] == [
        (["leases"], {"get", "create", "patch", "update"})
    ]
    operator_rules = [
        r
        for d in docs
        if d["kind"] == "Role" and d["metadata"]["name"] == "x-llama-operator"
        for r in d["rules"]
    ]
    assert any("endpointslices" in r["resources"] and "create" in r["verbs"] for r in operator_rules)


def _operator_probe(proc: OperatorProcess, path: str) -> tuple[int, str]:
    return http_get(f"http://127.0.0.1:{proc.health_port}{path}")


def _metrics(proc: OperatorProcess) -> str:
    return http_get(f"http://127.0.0.1:{proc.metrics_port}/metrics")[1]


def test_in_cluster_settings_lead_in_the_pods_namespace(
    cluster: Cluster, release: str, watched: str, tmp_path: Path
) -> None:
    """As in the chart's pod: POD_NAMESPACE and POD_NAME from the downward API, a kubeconfig (the mounted
    token) whose context names no namespace."""
    kubeconfig = cluster.info.service_account_kubeconfig(
        FULLNAME, RELEASE_NS, tmp_path / "sa.kubeconfig", context_namespace=False
    )
    proc = OperatorProcess(
        cluster,
        log_dir=tmp_path,
        kubeconfig=kubeconfig,
        extra_args=[f"--namespace={watched}"],
        extra_env={"POD_NAMESPACE": RELEASE_NS, "POD_NAME": f"{FULLNAME}-0"},
    )
    proc.start()
    try:
        eventually("the operator leads", lambda: "llama_operator_leader 1.0" in _metrics(proc), timeout=60)
        lease = cluster.get("lease", "llama-operator", RELEASE_NS)
        assert lease is not None
        assert _operator_probe(proc, "/readyz")[0] == 200
    finally:
        proc.stop()


def _leading_in_kube_system(
    cluster: Cluster,
    log_dir: Path,
    kubeconfig: Path,
    watched: str,
    pod_namespace: str,
    pod: str,
    more_env: dict[str, str] | None = None,
) -> OperatorProcess:
    """The operator as a pod of the chart whose Lease is in kube-system: what the chart's ConfigMap and the
    downward API give the pod, as environment (OperatorProcess writes no config file)."""
    return OperatorProcess(
        cluster,
        log_dir=log_dir,
        kubeconfig=kubeconfig,
        extra_args=[f"--namespace={watched}"],
        extra_env={
            "LLAMA_OPERATOR_LEADER_ELECTION_NAMESPACE": "kube-system",
            "POD_NAMESPACE": pod_namespace,
            "POD_NAME": pod,
            **(more_env or {}),
        },
    )


def test_a_refused_lease_is_said_once_not_ready_with_a_metric_and_an_event(
    cluster: Cluster, release: str, watched: str, tmp_path: Path
) -> None:
    """The chart's ServiceAccount may not touch Leases in kube-system: the instance says so in one line
    naming the Lease, its namespace and the missing RBAC, stays unready, sets a gauge and posts a Warning
    Event on its own Pod; it does not dump the HTTP exchange every renew period."""
    kubeconfig = _token_kubeconfig(cluster, tmp_path / "sa.kubeconfig")
    pod = f"{FULLNAME}-refused"
    proc = _leading_in_kube_system(cluster, tmp_path, kubeconfig, watched, RELEASE_NS, pod)
    proc.start()
    try:

        def unready_with_reason() -> str | None:
            code, body = _operator_probe(proc, "/readyz")
            return body if code == 503 and "leader election blocked" in body else None

        body = eventually("/readyz names the refused Lease", unready_with_reason, timeout=90)
        assert "Lease kube-system/llama-operator" in body and "403" in body, body
        assert "leases.coordination.k8s.io" in body and "LLAMA_OPERATOR_LEADER_ELECTION_NAMESPACE" in body
        assert 'llama_operator_leader_election_blocked{reason="Forbidden"} 1.0' in _metrics(proc)
        assert "llama_operator_leader 0.0" in _metrics(proc)

        def event() -> dict[str, Any] | None:
            events = cluster.info.kubectl_json(
                "get", "events", "-n", RELEASE_NS, f"--field-selector=involvedObject.name={pod}"
            )["items"]
            return next((e for e in events if e["reason"] == "LeaderElectionBlocked"), None)

        posted = eventually("a Warning Event on the operator's Pod", event, timeout=30)
        assert posted["type"] == "Warning" and "kube-system/llama-operator" in posted["message"]
        time.sleep(6)  # three renew periods: the refusal is said once, not each round
        # Said once at ERROR (the client's own DEBUG lines under --verbose may quote the Event's body).
        said = [
            line
            for line in proc.log.read_text().splitlines()
            if "leader election blocked" in line and "[ERROR" in line
        ]
        assert len(said) == 1, proc.tail()
    finally:
        proc.stop()


def test_a_release_whose_lease_is_in_kube_system_leads_there(
    cluster: Cluster, release: str, watched: str, tmp_path: Path
) -> None:
    """config.leaderElectionNamespace: kube-system (where some platforms keep every Lease): the chart's Role
    for the Lease is in kube-system, so the operator, with the chart's ServiceAccount, leads there."""
    name = f"lease-{RUN}"
    fullname, namespace = f"{name}-llama-operator", f"{name}-system"
    lease = f"llama-operator-{RUN}"
    done = helm(
        cluster,
        "upgrade",
        "--install",
        name,
        str(repo_root() / "charts" / "llama-operator"),
        "-n",
        namespace,
        "--create-namespace",
        "--set",
        "crds.install=false",
        "--set",
        f"watchNamespaces={{{watched}}}",
        "--set",
        "config.leaderElectionNamespace=kube-system",
        "--set",
        f"config.leaderElectionLease={lease}",
        "--wait=false",
    )
    assert done.returncode == 0, done.stderr
    kubeconfig = cluster.info.service_account_kubeconfig(
        fullname, namespace, tmp_path / "sa.kubeconfig", context_namespace=False
    )
    proc = _leading_in_kube_system(
        cluster,
        tmp_path,
        kubeconfig,
        watched,
        namespace,
        f"{fullname}-0",
        {"LLAMA_OPERATOR_LEADER_ELECTION_LEASE": lease},
    )
    proc.start()
    try:
        eventually("the operator leads", lambda: "llama_operator_leader 1.0" in _metrics(proc), timeout=60)
        assert cluster.get("lease", lease, "kube-system") is not None
    finally:
        proc.stop()
        helm(cluster, "uninstall", name, "-n", namespace)
        cluster.kubectl("delete", "lease", lease, "-n", "kube-system", check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
