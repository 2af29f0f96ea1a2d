"""The chart's optional ValidatingAdmissionPolicy (admissionPolicy.enabled) on the local cluster: a tenant
who may edit Deployments in its namespace cannot change, delete or adopt an object a LlamaService controls;
the operator's ServiceAccount and Kubernetes' own controllers (the garbage collector) can; objects no
LlamaService controls are untouched by it.

The policy is rendered from the chart as `helm install` would render it, for a release in the test's own
namespace, and bound to that namespace only (its label), so that other tests' operators are not affected."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import GROUP, Cluster, OperatorProcess, eventually, llamaservice_manifest, repo_root

pytestmark = pytest.mark.e2e

TENANT = "tenant-alice"
REFUSED = "is controlled by a LlamaService"


@dataclass(frozen=True)
class Policy:
    namespace: str
    operator_user: str  # the chart's operator ServiceAccount, as a username
    owner: dict[str, Any]  # the LlamaService the owned objects point at


def _render(cluster: Cluster, release: str, namespace: str, *args: str) -> list[dict[str, Any]]:
    """`helm template` of the chart with the admission policy on, and `args`."""
    done = cluster.helm(
        "template",
        release,
        str(repo_root() / "charts" / "llama-operator"),
        "-n",
        namespace,
        "--set",
        "admissionPolicy.enabled=true",
        *args,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _render_policy(cluster: Cluster, release: str, namespace: str, label: str) -> list[dict[str, Any]]:
    return _render(
        cluster,
        release,
        namespace,
        "--set",
        f"admissionPolicy.namespaceSelector.matchLabels.e2e-admission-policy={label}",
        "--show-only",
        "templates/admission-policy.yaml",
    )


def _deployment(name: str, owner: dict[str, Any] | None, image: str = "registry.example.com/app:1") -> str:
    meta: dict[str, Any] = {"name": name, "labels": {"app": name}}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": f"{GROUP}/v1alpha1",
                "kind": "LlamaService",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": image}]},
                },
            },
        }
    )


def _as(cluster: Cluster, user: str, *args: str, input_text: str | None = None) -> tuple[int, str]:
    done = cluster.kubectl(f"--as={user}", *args, input_text=input_text, check=False)
    return done.returncode, done.stdout + done.stderr


def _wait_in_force(cluster: Cluster, namespace: str, deployment: str) -> None:
    """The API server applies a new policy within seconds (its informer); a server-side dry run shows when,
    without changing anything (a real edit made before then would stick, and repeat as a no-op)."""
    eventually(
        "the policy in force",
        lambda: (
            REFUSED
            in _as(
                cluster, TENANT, "delete", "-n", namespace, f"deployment/{deployment}", "--dry-run=server"
            )[1]
        ),
    )


@pytest.fixture
def policy(cluster: Cluster, namespace: str) -> Iterator[Policy]:
    label = f"l{uuid.uuid4().hex[:8]}"  # not a number to helm --set
    release = f"vap-{label}"
    cluster.kubectl("label", "namespace", namespace, f"e2e-admission-policy={label}")
    objects = _render_policy(cluster, release, namespace, label)
    assert [o["kind"] for o in objects] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    operator_user = f"system:serviceaccount:{namespace}:{release}-llama-operator"
    # The tenant and the operator may both edit Deployments here (RBAC allows it); only the policy tells them
    # apart.
    for subject, user in (("tenant", TENANT), ("operator", operator_user)):
        cluster.kubectl(
            "create",
            "rolebinding",
            f"{subject}-edit",
            "-n",
            namespace,
            "--clusterrole=edit",
            f"--user={user}",
        )
    cluster.apply(llamaservice_manifest("owner"), namespace)
    owner = eventually("the LlamaService", lambda: cluster.llamaservice("owner", namespace))
    for obj in objects:
        cluster.kubectl("apply", "-f", "-", input_text=json.dumps(obj))
    yield Policy(namespace=namespace, operator_user=operator_user, owner=owner)
    for obj in reversed(objects):
        cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False)


def _create_owned_in_force(cluster: Cluster, policy: Policy) -> None:
    """The Deployment `owned`, created as the operator with a LlamaService owning it, once the policy is in
    force for it."""
    code, out = _as(
        cluster,
        policy.operator_user,
        "create",
        "-n",
        policy.namespace,
        "-f",
        "-",
        input_text=_deployment("owned", policy.owner),
    )
    assert code == 0, out
    _wait_in_force(cluster, policy.namespace, "owned")


def test_a_tenant_cannot_change_an_owned_object_and_the_operator_can(
    cluster: Cluster, policy: Policy
) -> None:
    ns = policy.namespace
    _create_owned_in_force(cluster, policy)
    code, message = _as(
        cluster, TENANT, "set", "image", "-n", ns, "deployment/owned", "c=evil.example.com/x:1"
    )
    assert code != 0 and REFUSED in message, message
    assert "change the LlamaService instead" in message
    assert TENANT in message
    deployment = cluster.get("deployment", "owned", ns) or {}
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.com/app:1"
    assert deployment["metadata"]["generation"] == 1  # no rollout started

    # Nor may the tenant delete it, or drop the LlamaService's ownerReference to take it over.
    code, out = _as(cluster, TENANT, "delete", "-n", ns, "deployment/owned")
    assert code != 0 and REFUSED in out, out
    code, out = _as(
        cluster,
        TENANT,
        "patch",
        "-n",
        ns,
        "deployment/owned",
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/metadata/ownerReferences"}]',
    )
    assert code != 0 and REFUSED in out, out
    # Nor create an object that claims to be the LlamaService's.
    code, out = _as(
        cluster, TENANT, "create", "-n", ns, "-f", "-", input_text=_deployment("fake", policy.owner)
    )
    assert code != 0 and REFUSED in out, out

    # The operator's ServiceAccount may (its drift repair and rollouts are its job).
    code, out = _as(
        cluster,
        policy.operator_user,
        "set",
        "image",
        "-n",
        ns,
        "deployment/owned",
        "c=registry.example.com/app:2",
    )
    assert code == 0, out


def test_objects_no_llamaservice_controls_are_not_the_policys(cluster: Cluster, policy: Policy) -> None:
    ns = policy.namespace
    code, out = _as(cluster, TENANT, "create", "-n", ns, "-f", "-", input_text=_deployment("mine", None))
    assert code == 0, out
    code, out = _as(
        cluster, TENANT, "set", "image", "-n", ns, "deployment/mine", "c=registry.example.com/app:2"
    )
    assert code == 0, out
    code, out = _as(cluster, TENANT, "delete", "-n", ns, "deployment/mine")
    assert code == 0, out


def test_kubernetes_controllers_still_act_on_owned_objects(cluster: Cluster, policy: Policy) -> None:
    """The garbage collector (a kube-system ServiceAccount) deletes the owned Deployment with its owner."""
    ns = policy.namespace
    _create_owned_in_force(cluster, policy)
    cluster.kubectl("delete", f"llamaservices.{GROUP}", "owner", "-n", ns, "--wait=false")
    eventually(
        "the garbage collector deleting the owned Deployment",
        lambda: cluster.get("deployment", "owned", ns) is None,
    )


def test_the_real_operator_under_the_policy_with_its_service_account_token(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """The operator as the chart runs it (its own ServiceAccount's token and RBAC) creates and updates the
    objects of a LlamaService while the policy is in force (the stage DaemonSet of spec.model.cache.nodeLocal
    among them); a tenant's edit of the same objects is refused."""
    label = f"l{uuid.uuid4().hex[:8]}"  # not a number to helm --set
    release = f"vap-{label}"
    fullname = f"{release}-llama-operator"
    cluster.kubectl("label", "namespace", namespace, f"e2e-admission-policy={label}")
    objects = _render(
        cluster,
        release,
        namespace,
        "--set",
        f"watchNamespaces={{{namespace}}}",
        "--show-only",
        "templates/serviceaccount.yaml",
        "--show-only",
        "templates/rbac.yaml",
        "--show-only",
        "templates/admission-policy.yaml",
    )
    # Bound to the watched namespace by default, so other tests' operators are outside it.
    binding = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        namespace
    ]
    cluster.kubectl(
        "create", "rolebinding", "tenant-edit", "-n", namespace, "--clusterrole=edit", f"--user={TENANT}"
    )
    cluster.kubectl(
        "apply", "-f", "-", input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    proc = OperatorProcess(
        cluster,
        log_dir=tmp_path,
        kubeconfig=cluster.info.service_account_kubeconfig(fullname, namespace, tmp_path / "sa.kubeconfig"),
        extra_args=[f"--namespace={namespace}"],
    )
    try:
        proc.start()
        model = {"name": "meta-llama/Llama-3.2-1B-Instruct", "cache": {"nodeLocal": True}}
        service = llamaservice_manifest("guarded", replicas=1, model=model)
        assert cluster.apply(service, namespace).returncode == 0
        eventually("the operator's Deployment", lambda: cluster.get("deployment", "guarded", namespace), 120)
        eventually(
            "the operator's stage DaemonSet", lambda: cluster.get("daemonset", "guarded-stage", namespace), 60
        )
        eventually(
            "a tenant's edit refused",
            lambda: (
                REFUSED
                in _as(
                    cluster,
                    TENANT,
                    "set",
                    "image",
                    "-n",
                    namespace,
                    "deployment/guarded",
                    "vllm=evil.example.com/x:1",
                )[1]
            ),
        )
        code, out = _as(
            cluster, TENANT, "delete", "-n", namespace, "daemonset/guarded-stage", "--dry-run=server"
        )
        assert code != 0 and REFUSED in out, out
        # The operator still changes what it owns: a new replica count reaches the Deployment.
        scaled_up = llamaservice_manifest("guarded", replicas=2, model=model)
        assert cluster.apply(scaled_up, namespace).returncode == 0

        def scaled() -> bool:
            deployment = cluster.get("deployment", "guarded", namespace) or {}
            return bool(deployment.get("spec", {}).get("replicas") == 2)

        eventually("the operator's update of its Deployment", scaled, 60)
        assert "is controlled by a LlamaService" not in proc.log.read_text(), proc.tail()
    finally:
        proc.stop()
        cluster.kubectl(
            "delete", f"llamaservices.{GROUP}", "guarded", "-n", namespace, "--wait=false", check=False
        )
        for obj in reversed(objects):
            if "namespace" not in obj["metadata"]:  # cluster-scoped: the namespace's deletion leaves them
                cluster.kubectl(
                    "delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False
                )
