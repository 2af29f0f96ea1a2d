"""A Kubernetes controller's manners, on the local cluster: level-triggered repair of every owned object
(hand-added pod-template fields included), Nodes re-plan, replica bounds at once, `kubectl scale` on an
autoscaled LlamaService is not silent, and one leader among two instances with a fast takeover."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from support import Cluster, OperatorProcess, eventually, kwok_gpu_node, llamaservice_manifest

pytestmark = pytest.mark.e2e

GROUP = "serving.llama-operator.dev"


@pytest.fixture(scope="module")
def controller(operator_with_pod_monitors: OperatorProcess) -> OperatorProcess:
    return operator_with_pod_monitors


def llamaservice(name: str, **spec: Any) -> dict[str, Any]:
    # vLLM's CPU build on the CPU nodes: room for every test's pods, leaving the GPU nodes to others.
    cpu = {
        "model": {"name": "TinyLlama/TinyLlama-1.1B-Chat-v1.0"},
        "accelerator": {"type": "cpu"},
        "engine": {"maxModelLen": 2048},
    }
    return llamaservice_manifest(name, **{**cpu, **spec})


def patch(cluster: Cluster, kind: str, name: str, namespace: str, ops: list[dict[str, Any]]) -> None:
    cluster.kubectl("patch", kind, name, "-n", namespace, "--type=json", "-p", json.dumps(ops))


def pod_spec(cluster: Cluster, name: str, namespace: str) -> dict[str, Any]:
    dep = cluster.get("deployment", name, namespace) or {}
    return dict(dep.get("spec", {}).get("template", {}).get("spec", {}))


def test_hand_added_fields_are_removed_and_repairs_keep_working(
    cluster: Cluster, controller: OperatorProcess, namespace: str
) -> None:
    assert cluster.apply(llamaservice("drift", replicas=1), namespace).returncode == 0
    eventually("the Deployment", lambda: cluster.get("deployment", "drift", namespace), 60)
    patch(
        cluster,
        "deployment",
        "drift",
        namespace,
        [
            {"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True},
            {
                "op": "replace",
                "path": "/spec/template/spec/containers/0/securityContext",
                "value": {"privileged": True, "allowPrivilegeEscalation": True},
            },
            {
                "op": "add",
                "path": "/spec/template/spec/volumes/-",
                "value": {"name": "host", "hostPath": {"path": "/"}},
            },
        ],
    )

    def clean() -> bool:
        spec = pod_spec(cluster, "drift", namespace)
        security = spec["containers"][0].get("securityContext") or {}
        return (
            not spec.get("hostNetwork")
            and not security.get("privileged")
            and security.get("allowPrivilegeEscalation") is False
            and all("hostPath" not in v for v in spec.get("volumes", []))
        )

    eventually("hand-added hostNetwork, privileged and hostPath removed", clean, 30)
    # A later hand edit is still corrected: one repair never blocks the next.
    cluster.kubectl("scale", "deployment", "drift", "-n", namespace, "--replicas=3")
    eventually(
        "replicas back to 1",
        lambda: (cluster.get("deployment", "drift", namespace) or {})["spec"]["replicas"] == 1,
        30,
    )
    repaired = [
        e
        for e in cluster.list_objects("events", namespace)
        if e["reason"] == "DriftRepaired" and e["involvedObject"]["name"] == "drift"
    ]
    assert repaired, "the repair is reported as an Event"


@pytest.mark.parametrize("kind", ["poddisruptionbudget", "podmonitors.monitoring.coreos.com", "service"])
def test_every_owned_kind_is_recreated_and_repaired(
    cluster: Cluster, controller: OperatorProcess, namespace: str, kind: str
) -> None:
    name = "owned"
    assert cluster.apply(llamaservice(name, replicas=2), namespace).returncode == 0
    first = eventually(f"the {kind}", lambda: cluster.get(kind, name, namespace), 60)
    cluster.kubectl("delete", kind, name, "-n", namespace)
    again = eventually(
        f"the {kind} recreated",
        lambda: (
            (o := cluster.get(kind, name, namespace))
            and o["metadata"]["uid"] != first["metadata"]["uid"]
            and o
        ),
        30,
    )
    # An edit of a field the operator sets is put back.
    path, value = {
        "poddisruptionbudget": ("/spec/maxUnavailable", 2),
        "podmonitors.monitoring.coreos.com": ("/spec/podMetricsEndpoints/0/path", "/evil"),
        "service": ("/spec/ports/0/targetPort", 9999),
    }[kind]
    patch(cluster, kind, name, namespace, [{"op": "replace", "path": path, "value": value}])

    def restored() -> bool:
        obj = cluster.get(kind, name, namespace) or {}
        node: Any = obj
        for part in path.strip("/").split("/"):
            node = node[int(part)] if isinstance(node, list) else node[part]
        return bool(node != value)

    eventually(f"the {kind} edit reverted", restored, 30)
    assert cluster.get(kind, name, namespace)["metadata"]["uid"] == again["metadata"]["uid"]  # type: ignore[index]


def test_bounds_are_immediate_and_kubectl_scale_is_not_silent(
    cluster: Cluster, controller: OperatorProcess, namespace: str
) -> None:
    body = llamaservice("bounded", autoscaling={"minReplicas": 1, "maxReplicas": 3})
    assert cluster.apply(body, namespace).returncode == 0
    eventually(
        "the autoscaler's first decision",
        lambda: (
            ((cluster.get(f"llamaservices.{GROUP}", "bounded", namespace) or {}).get("status") or {})
            .get("autoscaling", {})
            .get("desiredReplicas")
            == 1
        ),
        60,
    )
    cluster.kubectl("scale", "deployment", "bounded", "-n", namespace, "--replicas=50")
    start = time.monotonic()
    # Back to the autoscaler's own decision (1), not to the bound (3): the 50 is nobody's decision.
    eventually(
        "replicas back to the autoscaler's decision",
        lambda: (cluster.get("deployment", "bounded", namespace) or {})["spec"]["replicas"] == 1,
        30,
    )
    print(f"\nhand scale to 50 brought back to the autoscaler's 1 in {time.monotonic() - start:.1f}s")
    time.sleep(3)  # a few autoscaler cycles: the hand count is not taken as demand afterwards either
    assert (cluster.get("deployment", "bounded", namespace) or {})["spec"]["replicas"] == 1
    cluster.kubectl("scale", f"llamaservices.{GROUP}", "bounded", "-n", namespace, "--replicas=5")

    def ignored() -> list[dict[str, Any]]:
        return [
            e
            for e in cluster.list_objects("events", namespace)
            if e["reason"] == "ReplicasIgnored" and e["involvedObject"]["name"] == "bounded"
        ]

    events = eventually("a ReplicasIgnored Event", ignored, 30)
    assert "autoscaling owns replicas" in events[0]["message"]
    assert (cluster.get("deployment", "bounded", namespace) or {})["spec"]["replicas"] <= 2


NODE = kwok_gpu_node(
    "gpu-l4x8-e2e",
    {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-L4",
        "nvidia.com/gpu.memory": "23034",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "9",
    },
    capacity={"cpu": "96", "memory": "768Gi", "pods": "110", "nvidia.com/gpu": "8"},
    allocatable={"cpu": "95", "memory": "760Gi", "pods": "110", "nvidia.com/gpu": "8"},
)


def test_a_new_node_replans_what_no_node_could_take(
    cluster: Cluster, controller: OperatorProcess, namespace: str
) -> None:
    body = llamaservice(
        "big", model={"name": "meta-llama/Llama-3.1-70B-Instruct"}, accelerator={"type": "auto"}
    )
    assert cluster.apply(body, namespace).returncode == 0
    cond = eventually(
        "no accelerator fits yet",
        lambda: (c := cluster.condition("big", namespace, "Degraded")) and c["status"] == "True" and c,
        60,
    )
    assert "no accelerator present in the cluster fits" in cond["message"]
    cluster.kubectl("create", "-f", "-", input_text=json.dumps(NODE))
    try:
        dep = eventually(
            "a Deployment on the new node's GPUs", lambda: cluster.get("deployment", "big", namespace), 60
        )
        limits = dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "8"
        assert (cluster.llamaservice("big", namespace) or {})["status"]["accelerator"].startswith("8x")
    finally:
        cluster.kubectl("delete", "node", NODE["metadata"]["name"], "--wait=false", check=False)


def _holder(cluster: Cluster, lease: str) -> str:
    obj = cluster.get("lease", lease, "default") or {}
    return str((obj.get("spec") or {}).get("holderIdentity") or "")


def _metric(proc: OperatorProcess, name: str) -> float:
    """The sum of a metric's series on one operator's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((f"{name} ", f"{name}{{"))
    )


def test_one_leader_and_a_fast_takeover(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    lease = f"e2e-leader-{uuid.uuid4().hex[:6]}"
    env = {"LLAMA_OPERATOR_LEADER_ELECTION_LEASE": lease, "LLAMA_OPERATOR_POD_MONITOR": "never"}
    a = OperatorProcess(cluster, log_dir=tmp_path / "a", extra_env=env)
    b = OperatorProcess(cluster, log_dir=tmp_path / "b", extra_env=env)
    a.log_dir.mkdir()
    b.log_dir.mkdir()
    a.start()
    b.start()
    try:
        holder = eventually("a leader", lambda: _holder(cluster, lease), 30)
        procs = {str(p.proc.pid): p for p in (a, b) if p.proc is not None}
        leader = next(p for pid, p in procs.items() if f"_{pid}_" in holder)
        standby = next(p for p in (a, b) if p is not leader)
        # No replicas: the test is about who writes, not about capacity on the CPU nodes.
        assert cluster.apply(llamaservice("led", replicas=0), namespace).returncode == 0
        eventually(
            "the LlamaService reconciled (Deployment and status)",
            lambda: (
                cluster.get("deployment", "led", namespace) is not None
                and ((cluster.llamaservice("led", namespace) or {}).get("status") or {}).get(
                    "observedGeneration"
                )
                == 1
            ),
            60,
        )
        # The leader logs after its status write: the test may see the status a moment before the line.
        eventually(
            "the leader's log of its writes", lambda: "reconciled " in leader.log.read_text() or None, 10
        )
        assert "reconciled " not in standby.log.read_text(), "the standby wrote too"
        # Its own counters say the same: no API write and no autoscaler cycle on the standby.
        # (The leader gauge follows the heartbeat, every 5 s.)
        eventually("the leader gauge", lambda: _metric(leader, "llama_operator_leader") == 1, 15)
        assert _metric(standby, "llama_operator_leader") == 0
        assert _metric(leader, "llama_operator_object_writes_total") > 0
        assert _metric(standby, "llama_operator_object_writes_total") == 0, "writes doubled"
        assert _metric(standby, "llama_operator_autoscaler_cycle_duration_seconds_count") == 0
        assert _metric(leader, "llama_operator_autoscaler_cycle_duration_seconds_count") > 0

        assert leader.proc is not None
        killed = time.monotonic()
        os.killpg(leader.proc.pid, signal.SIGKILL)
        leader.proc.wait(timeout=10)
        assert standby.proc is not None
        standby_id = f"_{standby.proc.pid}_"
        eventually("the standby to take the lease", lambda: standby_id in _holder(cluster, lease), 30)
        takeover = time.monotonic() - killed
        print(f"\nleader SIGKILLed; the standby took over in {takeover:.1f}s")
        assert takeover <= 15.0
        # The new leader acts: a new LlamaService converges.
        assert cluster.apply(llamaservice("after-takeover", replicas=0), namespace).returncode == 0
        eventually(
            "the new leader reconciles", lambda: cluster.get("deployment", "after-takeover", namespace), 60
        )
    finally:
        a.stop()
        b.stop()
        cluster.kubectl("delete", "lease", lease, "-n", "default", check=False)
