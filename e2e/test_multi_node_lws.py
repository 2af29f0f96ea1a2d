"""Multi-node replicas on the local cluster, against the real LeaderWorkerSet v1 CRD
(e2e/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml, from sigs.k8s.io/lws v0.8.0's config/crd).

- the LeaderWorkerSet the operator renders for a 405B on H100 nodes of eight (a group of two nodes per
  replica) passes the API server's validation with the CRD's own schema, and a wrong one is refused (the
  check is real);
- the LWS controller (built from the module proxy by the set-up step) runs against the cluster (webhooks
  off: they need a TLS endpoint the API server can call) and makes a leader StatefulSet (one pod per group)
  and a worker StatefulSet per group, whose pods the scheduler places on kwok H100 nodes, a whole node's GPUs
  each, one pod per node; scaling spec.replicas removes a whole group. Without the pod webhook the pods lack the
  LWS_LEADER_ADDRESS/LWS_GROUP_SIZE variables it injects (nothing runs in kwok pods to read them);
  docs/multi-node.md says what cannot be exercised without GPUs.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llama_operator.api.resource import LlamaService, ObjectMeta, parse_spec
from llama_operator.api.settings import Settings
from llama_operator.desired.labels import SERVICE_LABEL
from llama_operator.desired.leader_worker_set import WORKER_OF_LABEL
from llama_operator.desired.objects import build_desired_state
from llama_operator.planning import PlanningConfig, plan_service
from llama_operator.planning.inventory import inventory_from_nodes
from support import (
    Cluster,
    OperatorProcess,
    eventually,
    free_port,
    kwok_gpu_node,
    llamaservice_manifest,
    require_tool,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CRD_FILE = Path(__file__).parent / "crds" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
CRD_NAME = "leaderworkersets.leaderworkerset.x-k8s.io"
H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"
# Two groups of two pods for the controller's test, and the operator's service after it (pods of a deleted
# namespace may still hold their nodes): six nodes of eight H100s.
NODES = [f"lws-h100-{i}" for i in range(6)]


def h100_node(name: str) -> dict[str, Any]:
    """A kwok node with 8 H100s."""
    return kwok_gpu_node(
        name,
        {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": H100_PRODUCT,
            "nvidia.com/gpu.count": "8",
            "nvidia.com/mig.capable": "false",
        },
        capacity={"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"},
    )


def rendered(namespace: str, replicas: int) -> dict[str, Any]:
    """What the operator applies for a 405B over two H100 nodes per replica (the pure core, as it runs)."""
    svc = LlamaService(
        metadata=ObjectMeta(name="big", namespace=namespace, uid=str(uuid.uuid4())),
        spec=parse_spec(
            {
                "model": {"name": "meta-llama/Llama-3.1-405B-Instruct"},
                "accelerator": {"type": "auto"},
                "replicas": replicas,
            }
        ),
    )
    inventory = inventory_from_nodes([h100_node(n) for n in NODES])
    plan = plan_service(svc.spec, name="big", config=PlanningConfig(), inventory=inventory)
    assert (plan.nodes, plan.count) == (2, 8)
    desired = build_desired_state(svc, plan, Settings(), pod_monitor=False)
    lws = next(o for o in desired.objects if o["kind"] == "LeaderWorkerSet")
    # No LlamaService owns it here: the garbage collector would delete an object whose owner is absent.
    lws = copy.deepcopy(lws)
    del lws["metadata"]["ownerReferences"]
    return lws


@pytest.fixture(scope="module")
def lws_crd(cluster: Cluster) -> Iterator[None]:
    cluster.kubectl("apply", "--server-side", "-f", str(CRD_FILE))
    cluster.wait_crd_established(CRD_NAME)
    yield
    cluster.kubectl("delete", "crd", CRD_NAME, "--timeout=60s", check=False)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    ns = f"lws-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def dry_run(cluster: Cluster, manifest: dict[str, Any], namespace: str) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=llama-operator",
        "-n",
        namespace,
        "-f",
        "-",
        input_text=json.dumps(manifest),
        check=False,
    )


def test_the_rendered_leader_worker_set_passes_the_real_crd(
    cluster: Cluster, lws_crd: None, namespace: str
) -> None:
    lws = rendered(namespace, replicas=2)
    done = dry_run(cluster, lws, namespace)
    assert done.returncode == 0, done.stderr
    # The API server really checks: a rollout type the CRD does not have, a group of no pods, are refused.
    wrong = copy.deepcopy(lws)
    wrong["spec"]["rolloutStrategy"]["type"] = "Recreate"
    refused = dry_run(cluster, wrong, namespace)
    assert refused.returncode != 0 and "rolloutStrategy.type" in refused.stderr
    empty = copy.deepcopy(lws)
    empty["spec"]["leaderWorkerTemplate"]["size"] = "two"
    refused = dry_run(cluster, empty, namespace)
    assert refused.returncode != 0 and "leaderWorkerTemplate.size" in refused.stderr


@pytest.fixture(scope="module")
def h100_nodes(cluster: Cluster) -> Iterator[list[str]]:
    for name in NODES:
        assert cluster.apply(h100_node(name), "default").returncode == 0
    yield NODES
    for name in NODES:
        cluster.kubectl("delete", "node", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def lws_controller(
    cluster: Cluster, lws_crd: None, h100_nodes: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """The LWS controller the set-up step built (LLAMA_OPERATOR_E2E_LWS_CONTROLLER=0 skips)."""
    if os.environ.get("LLAMA_OPERATOR_E2E_LWS_CONTROLLER", "1") == "0":
        pytest.skip("LLAMA_OPERATOR_E2E_LWS_CONTROLLER=0")
    binary = require_tool("lws-controller")
    workdir = tmp_path_factory.mktemp("lws")
    config = workdir / "lws-config.yaml"
    config.write_text(
        "apiVersion: config.lws.x-k8s.io/v1alpha1\nkind: Configuration\n"
        "leaderElection:\n  leaderElect: false\n"
        "internalCertManagement:\n  enable: false\n"
        f"metrics:\n  bindAddress: 127.0.0.1:{free_port()}\n"
        f"health:\n  healthProbeBindAddress: 127.0.0.1:{free_port()}\n"
        f"webhook:\n  port: {free_port()}\n"
    )
    with (workdir / "lws.log").open("w") as log:
        env = {**os.environ, "KUBECONFIG": str(cluster.info.kubeconfig), "ENABLE_WEBHOOKS": "false"}
        controller = subprocess.Popen(
            [str(binary), f"--config={config}", "--leader-elect=false"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        yield
        controller.terminate()
        try:
            controller.wait(timeout=20)
        except subprocess.TimeoutExpired:
            controller.kill()


def placed_pods(cluster: Cluster, namespace: str, count: int) -> list[dict[str, Any]] | None:
    pods = [p for p in cluster.list_objects("pods", namespace) if not p["metadata"].get("deletionTimestamp")]
    scheduled = [p for p in pods if p["spec"].get("nodeName")]
    return scheduled if len(scheduled) == count == len(pods) else None


def test_groups_land_on_kwok_h100_nodes_a_node_each(
    cluster: Cluster, lws_controller: None, namespace: str
) -> None:
    lws = rendered(namespace, replicas=2)
    done = cluster.apply(lws, namespace)
    assert done.returncode == 0, done.stderr
    # The leader StatefulSet: one pod per group (LWS spec.replicas counts groups).
    leaders = eventually(
        "the controller's leader StatefulSet", lambda: cluster.get("statefulset", "big", namespace), 60
    )
    assert leaders["spec"]["replicas"] == 2
    # Two groups of two pods (a leader and the worker the controller makes for it): four H100 nodes.
    pods = eventually(
        "both groups' pods scheduled on kwok H100 nodes", lambda: placed_pods(cluster, namespace, 4), 60
    )
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 4 and nodes <= set(NODES)  # a whole node's GPUs each: one pod per node
    for pod in pods:
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # Only leaders are the LlamaService's pods (its Service, PodMonitor and router select them).
    leader_pods = [p for p in pods if p["metadata"]["labels"].get(SERVICE_LABEL) == "big"]
    workers = [p for p in pods if p["metadata"]["labels"].get(WORKER_OF_LABEL) == "big"]
    assert len(leader_pods) == 2 and len(workers) == 2
    assert all(
        p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0" for p in leader_pods
    )
    # Scaling whole groups: spec.replicas, as the autoscaler writes it.
    cluster.kubectl("scale", "leaderworkersets.leaderworkerset.x-k8s.io/big", "-n", namespace, "--replicas=1")
    eventually("the second group's pods gone", lambda: placed_pods(cluster, namespace, 2), 60)
    cluster.kubectl("delete", "leaderworkersets.leaderworkerset.x-k8s.io/big", "-n", namespace)


@pytest.fixture(scope="module")
def lws_operator(
    cluster: Cluster, lws_crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator, started with the LeaderWorkerSet kind present."""
    proc = OperatorProcess(cluster, log_dir=tmp_path_factory.mktemp("operator"))
    proc.start()
    yield proc
    proc.stop()


def test_the_operator_serves_a_405b_as_groups_of_two_nodes(
    cluster: Cluster, lws_controller: None, lws_operator: OperatorProcess, namespace: str
) -> None:
    manifest = llamaservice_manifest(
        "big",
        model={"name": "meta-llama/Llama-3.1-405B-Instruct"},
        accelerator={"type": "h100-80gb", "count": 8, "nodes": 2},
        replicas=1,
    )
    assert cluster.apply(manifest, namespace).returncode == 0
    lws = eventually(
        "the operator's LeaderWorkerSet",
        lambda: cluster.get("leaderworkersets.leaderworkerset.x-k8s.io", "big", namespace),
        60,
    )
    assert lws["metadata"]["ownerReferences"][0]["kind"] == "LlamaService"
    assert lws["spec"]["replicas"] == 1 and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert cluster.get("deployment", "big", namespace) is None
    pods = eventually(
        "the group's two pods on two H100 nodes", lambda: placed_pods(cluster, namespace, 2), 60
    )
    assert {p["spec"]["nodeName"] for p in pods} <= set(NODES) and len(
        {p["spec"]["nodeName"] for p in pods}
    ) == 2
    # Two replicas: a second group, on two more nodes.
    cluster.kubectl(
        "patch", "llamaservice", "big", "-n", namespace, "--type=merge", "-p", '{"spec": {"replicas": 2}}'
    )
    eventually(
        "the LeaderWorkerSet at two groups",
        lambda: (
            (cluster.get("leaderworkersets.leaderworkerset.x-k8s.io", "big", namespace) or {})
            .get("spec", {})
            .get("replicas")
            == 2
        ),
        60,
    )
    eventually("both groups' pods placed", lambda: placed_pods(cluster, namespace, 4), 60)
    plan = (cluster.llamaservice("big", namespace) or {}).get("status", {}).get("plan", {})
    assert plan.get("nodes") == 2 and plan.get("count") == 8


def test_nodes_with_a_mig_slice_or_cpu_is_refused_at_apply(cluster: Cluster, namespace: str) -> None:
    for accelerator in ({"type": "a100-80gb", "mig": "1g.10gb", "nodes": 2}, {"type": "cpu", "nodes": 2}):
        done = cluster.apply(llamaservice_manifest("bad", accelerator=accelerator), namespace)
        assert done.returncode != 0 and "spec.accelerator.nodes" in done.stderr, done.stderr
