"""A tenant who may only create LlamaServices cannot break what it does not own (the local cluster, the
operator as a process, `kubectl` as a ServiceAccount bound to LlamaServices alone).

- Create, never adopt: objects that already have a LlamaService's names keep their resourceVersion
  through its create, update, scale to 1 and delete; the LlamaService says NameConflict, once.
- A write the API server refuses for good (an admission policy) is shown in status and retried with
  backoff, and converges once the policy goes.
- Invalid input is refused at `kubectl apply` or reported in status with an Event, never silently.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from support import Cluster, OperatorProcess, eventually, llamaservice_manifest

pytestmark = pytest.mark.e2e

GROUP = "serving.llama-operator.dev"
# The kinds the operator creates for a LlamaService, as kubectl names them.
OWNED_KINDS = ("service", "poddisruptionbudget", "deployment", "podmonitors.monitoring.coreos.com")


@pytest.fixture(scope="module")
def tenant_operator(operator_with_pod_monitors: OperatorProcess) -> OperatorProcess:
    return operator_with_pod_monitors


def tenant_kubeconfig(cluster: Cluster, namespace: str, path: Path) -> Path:
    """A ServiceAccount that may do everything with LlamaServices in one namespace, and nothing else."""
    cluster.kubectl("create", "serviceaccount", "tenant", "-n", namespace)
    cluster.kubectl(
        "create",
        "role",
        "llamaservices-only",
        "-n",
        namespace,
        "--verb=get,list,watch,create,update,patch,delete",
        f"--resource=llamaservices.{GROUP},llamaservices.{GROUP}/scale",
    )
    cluster.kubectl(
        "create",
        "rolebinding",
        "tenant",
        "-n",
        namespace,
        "--role=llamaservices-only",
        f"--serviceaccount={namespace}:tenant",
    )
    kubeconfig = cluster.info.service_account_kubeconfig("tenant", namespace, path)
    can_i = cluster.kubectl(
        "auth", "can-i", "update", "services", "-n", namespace, kubeconfig=kubeconfig, check=False
    )
    assert can_i.stdout.strip() == "no", "the tenant must not be able to touch Services itself"
    return kubeconfig


def llamaservice(name: str, **spec: Any) -> dict[str, Any]:
    return llamaservice_manifest(name, **spec)


def tenant_apply(cluster: Cluster, kubeconfig: Path, namespace: str, body: dict[str, Any]) -> Any:
    return cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input_text=json.dumps(body), kubeconfig=kubeconfig, check=False
    )


def fingerprint(
    cluster: Cluster, kind: str, name: str, namespace: str
) -> tuple[str, str, list[Any], list[str]]:
    obj = cluster.get(kind, name, namespace)
    assert obj is not None, f"{kind} {name} is gone"
    meta = obj["metadata"]
    managers = sorted(m["manager"] for m in meta.get("managedFields") or [])
    return meta["uid"], meta["resourceVersion"], meta.get("ownerReferences") or [], managers


def settled(cluster: Cluster, namespace: str) -> dict[str, Any]:
    """The foreign objects once their own controllers stopped writing status (a quiet 5 s)."""
    last: dict[str, Any] = {}
    quiet_since = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = {kind: fingerprint(cluster, kind, "cache", namespace) for kind in OWNED_KINDS}
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= 5:
            return now
        time.sleep(1)
    pytest.fail(f"the foreign objects never settled: {last}")


def events(cluster: Cluster, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    items = cluster.list_objects("events", namespace)
    return [
        e
        for e in items
        if e["involvedObject"].get("kind") == "LlamaService"
        and e["involvedObject"].get("name") == name
        and e.get("reason") == reason
    ]


def degraded(cluster: Cluster, name: str, namespace: str, reason: str, *, contains: str = "") -> Any:
    def check() -> dict[str, Any] | None:
        cond = cluster.condition(name, namespace, "Degraded")
        if cond and cond["status"] == "True" and cond["reason"] == reason and contains in cond["message"]:
            return cond
        return None

    return check


def test_name_collision_takes_over_nothing(
    cluster: Cluster, tenant_operator: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = tenant_kubeconfig(cluster, namespace, tmp_path / "tenant.kubeconfig")
    cluster.kubectl("create", "service", "clusterip", "cache", "--tcp=6379:6379", "-n", namespace)
    cluster.kubectl("create", "pdb", "cache", "--selector=app=cache", "--min-available=1", "-n", namespace)
    cluster.kubectl("create", "deployment", "cache", "--image=redis:7", "-n", namespace)
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "cache"},
        "spec": {"selector": {"matchLabels": {"app": "cache"}}},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input_text=json.dumps(monitor))
    before = settled(cluster, namespace)

    assert tenant_apply(cluster, kubeconfig, namespace, llamaservice("cache", replicas=2)).returncode == 0
    cond = eventually(
        "Degraded NameConflict",
        degraded(cluster, "cache", namespace, "NameConflict", contains="Deployment"),
        60,
    )
    for kind in ("Service", "PodDisruptionBudget", "PodMonitor", "Deployment"):
        assert (
            f"{kind} {namespace}/cache exists and is not controlled by this LlamaService" in cond["message"]
        )
    time.sleep(20)  # at least one retry (15 s backoff) has run: still one Event for one problem
    assert len(events(cluster, namespace, "cache", "NameConflict")) == 1
    assert events(cluster, namespace, "cache", "NameConflict")[0]["type"] == "Warning"

    # An update and a scale to 1 (the PodDisruptionBudget is then unwanted: it must not be deleted).
    assert tenant_apply(cluster, kubeconfig, namespace, llamaservice("cache", replicas=3)).returncode == 0
    scaled = cluster.kubectl(
        "scale", f"llamaservices.{GROUP}/cache", "--replicas=1", "-n", namespace, kubeconfig=kubeconfig
    )
    assert scaled.returncode == 0
    eventually(
        "the conflict message without the unwanted PDB",
        lambda: (
            (c := cluster.condition("cache", namespace, "Degraded"))
            and "PodDisruptionBudget" not in c["message"]
            and "Service" in c["message"]
        ),
        60,
    )
    cluster.kubectl(
        "delete",
        f"llamaservices.{GROUP}",
        "cache",
        "-n",
        namespace,
        "--wait=true",
        "--timeout=60s",
        kubeconfig=kubeconfig,
    )
    time.sleep(3)  # give the garbage collector a chance to act wrongly
    after = {kind: fingerprint(cluster, kind, "cache", namespace) for kind in OWNED_KINDS}
    assert after == before, "a foreign object was changed"
    assert not any("llama-operator" in m for fp in after.values() for m in fp[3])
    assert not (errors := tenant_operator.tracebacks()), "\n\n".join(errors)


def test_a_freed_name_is_then_created(
    cluster: Cluster, tenant_operator: OperatorProcess, namespace: str
) -> None:
    cluster.kubectl("create", "service", "clusterip", "freed", "--tcp=6379:6379", "-n", namespace)
    assert cluster.apply(llamaservice("freed"), namespace).returncode == 0
    eventually(
        "NameConflict on the Service",
        degraded(cluster, "freed", namespace, "NameConflict", contains="Service"),
        60,
    )
    # Everything else converged meanwhile.
    deployment = eventually("the Deployment", lambda: cluster.get("deployment", "freed", namespace), 30)
    uid = cluster.llamaservice("freed", namespace)["metadata"]["uid"]  # type: ignore[index]
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == uid
    cluster.kubectl("delete", "service", "freed", "-n", namespace)

    def ours() -> dict[str, Any] | None:
        svc = cluster.get("service", "freed", namespace)
        refs = (svc or {}).get("metadata", {}).get("ownerReferences") or []
        return svc if any(r["uid"] == uid and r.get("controller") for r in refs) else None

    svc = eventually("our own Service once the name is free", ours, 90)
    assert svc["spec"]["ports"][0]["port"] == 8000
    eventually(
        "Degraded cleared",
        lambda: (c := cluster.condition("freed", namespace, "Degraded")) and c["status"] == "False",
        30,
    )


def test_a_permanent_refusal_is_shown_and_retried_with_backoff(
    cluster: Cluster, tenant_operator: OperatorProcess, namespace: str
) -> None:
    """A platform's admission policy (here a ValidatingAdmissionPolicy) refuses the Deployment."""
    policy = f"freeze-{namespace}"
    cluster.kubectl("label", "namespace", namespace, f"freeze={namespace}")
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input_text=json.dumps(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": policy},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": ["apps"],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE", "UPDATE"],
                                "resources": ["deployments"],
                            }
                        ]
                    },
                    "validations": [{"expression": "false", "message": "deployments are frozen here"}],
                },
            }
        ),
    )
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy},
        "spec": {
            "policyName": policy,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"freeze": namespace}}},
        },
    }
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(binding))
    try:
        # The policy takes a moment to be enforced: wait until it refuses a Deployment.
        eventually(
            "the policy in force",
            lambda: (
                cluster.kubectl(
                    "create",
                    "deployment",
                    "probe",
                    "--image=x",
                    "-n",
                    namespace,
                    "--dry-run=server",
                    check=False,
                ).returncode
                != 0
            ),
            30,
        )
        assert cluster.apply(llamaservice("frozen"), namespace).returncode == 0
        cond = eventually(
            "Degraded ApplyRejected",
            degraded(cluster, "frozen", namespace, "ApplyRejected", contains="deployments are frozen here"),
            60,
        )
        assert f"Deployment {namespace}/frozen" in cond["message"]
        time.sleep(20)
        assert len(events(cluster, namespace, "frozen", "ApplyRejected")) == 1
        assert cluster.get("service", "frozen", namespace) is not None  # the rest converged
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding", policy, check=False)
        cluster.kubectl("delete", "validatingadmissionpolicy", policy, check=False)
    eventually(
        "the Deployment once the policy is gone", lambda: cluster.get("deployment", "frozen", namespace), 120
    )
