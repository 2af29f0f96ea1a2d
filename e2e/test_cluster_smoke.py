"""Smoke tests of the local cluster (`e2e/cluster.sh up`): real control plane, kwok nodes,
Prometheus. Skipped when no cluster is up."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import info as cluster_info
from support import eventually

INFO = cluster_info.load()

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        INFO is None,
        reason=f"no local cluster: {cluster_info.cluster_json_path()} is absent (run e2e/cluster.sh up)",
    ),
]

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"


def _info() -> cluster_info.ClusterInfo:
    assert INFO is not None
    return INFO


def apply(manifest: dict[str, Any]) -> None:
    _info().kubectl("apply", "-f", "-", input_text=json.dumps(manifest))


def pods(namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = _info().kubectl_json("get", "pods", "-n", namespace, "-l", selector)[
        "items"
    ]
    return items


def is_ready(pod: dict[str, Any]) -> bool:
    conds = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def prom_get(path: str, **params: str) -> Any:
    url = f"{_info().prometheus_url}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    _info().kubectl("create", "namespace", name)
    yield name
    _info().kubectl("delete", "namespace", name, "--wait=false", check=False)


def deployment(
    name: str,
    namespace: str,
    *,
    replicas: int,
    resources: dict[str, str],
    node_selector: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tolerations": [GPU_TOLERATION],
        "containers": [
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:simulated",
                "ports": [{"name": "http", "containerPort": 8000}],
                "resources": {"requests": resources, "limits": resources},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                "spec": spec,
            },
        },
    }


def test_nodes_ready_with_gpu_allocatable() -> None:
    nodes = {n["metadata"]["name"]: n for n in _info().kubectl_json("get", "nodes")["items"]}
    expected = {
        "gpu-t4-1",
        "gpu-t4-2",
        "gpu-a10g-1",
        "gpu-a10g-2",
        "gpu-a100-mig-mixed",
        "gpu-h100-mig-single",
        "gpu-a100-mig-pending",
        "cpu-1",
        "cpu-2",
    }
    assert expected <= nodes.keys()
    for name in expected:
        assert is_ready(nodes[name]), f"{name} is not Ready"
    alloc = {name: nodes[name]["status"]["allocatable"] for name in expected}
    for name in ("gpu-t4-1", "gpu-t4-2", "gpu-a10g-1", "gpu-a10g-2"):
        assert alloc[name]["nvidia.com/gpu"] == "1", name
    assert alloc["gpu-h100-mig-single"]["nvidia.com/gpu"] == "7"
    for name in ("gpu-a100-mig-mixed", "gpu-a100-mig-pending"):
        assert alloc[name][MIG_RESOURCE] == "7", name
        assert "nvidia.com/gpu" not in alloc[name], name
    for name in ("cpu-1", "cpu-2"):
        assert not any(k.startswith("nvidia.com/") for k in alloc[name]), name
        assert not nodes[name]["spec"].get("taints"), name
    for name in expected - {"cpu-1", "cpu-2"}:
        taints = nodes[name]["spec"].get("taints") or []
        assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in taints, name


def test_t4_deployment_runs_only_on_t4_nodes_and_gpus_are_counted(namespace: str) -> None:
    apply(
        deployment(
            "t4",
            namespace,
            replicas=2,
            resources={"nvidia.com/gpu": "1"},
            node_selector={"nvidia.com/gpu.product": "Tesla-T4"},
            annotations={"pod-ready.stage.kwok.x-k8s.io/delay": "1s"},
        )
    )

    def two_ready() -> list[dict[str, Any]] | None:
        ready = [p for p in pods(namespace, "app=t4") if is_ready(p)]
        return ready if len(ready) == 2 else None

    ready = eventually("2 Ready t4 pods", two_ready)
    assert sorted(p["spec"]["nodeName"] for p in ready) == ["gpu-t4-1", "gpu-t4-2"]
    for p in ready:
        assert p["status"]["phase"] == "Running"
        assert p["status"].get("podIP"), "kwok must give pods an IP (Services, endpoints)"
    # Both T4s are now full: a third replica must stay Pending, not land elsewhere.
    _info().kubectl("scale", "deployment/t4", "-n", namespace, "--replicas=3")

    def unschedulable() -> dict[str, Any] | None:
        for p in pods(namespace, "app=t4"):
            if not p["spec"].get("nodeName"):
                for c in p["status"].get("conditions") or []:
                    if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                        return p
        return None

    pending = eventually("an Unschedulable third replica", unschedulable)
    assert any("nvidia.com/gpu" in (c.get("message") or "") for c in pending["status"]["conditions"])


def test_service_endpoints_list_the_ready_pod_ips(namespace: str) -> None:
    apply(
        deployment(
            "svc",
            namespace,
            replicas=2,
            resources={"cpu": "100m"},
            annotations={"pod-ready.stage.kwok.x-k8s.io/delay": "300ms"},
        )
    )
    apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "svc", "namespace": namespace},
            "spec": {"selector": {"app": "svc"}, "ports": [{"port": 80, "targetPort": 8000}]},
        }
    )

    def ready_ips() -> set[str] | None:
        ips = {p["status"]["podIP"] for p in pods(namespace, "app=svc") if is_ready(p)}
        return ips if len(ips) == 2 else None

    ips = eventually("2 Ready pods with IPs", ready_ips)

    def endpoint_ips() -> set[str] | None:
        slices = _info().kubectl_json(
            "get", "endpointslices", "-n", namespace, "-l", "kubernetes.io/service-name=svc"
        )["items"]
        found = {
            a
            for s in slices
            for e in s.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready")
            for a in e["addresses"]
        }
        return found if found == ips else None

    eventually("the Service's EndpointSlice to list both pod IPs", endpoint_ips)


def test_ready_delay_annotation_holds_readiness(namespace: str) -> None:
    apply(
        deployment(
            "slow",
            namespace,
            replicas=1,
            resources={"cpu": "100m"},
            annotations={"pod-ready.stage.kwok.x-k8s.io/delay": "6s"},
        )
    )
    running = eventually(
        "a Running pod",
        lambda: next((p for p in pods(namespace, "app=slow") if p["status"].get("phase") == "Running"), None),
    )
    t_running = time.monotonic()
    assert not is_ready(running)
    eventually(
        "the pod to be Ready", lambda: any(is_ready(p) for p in pods(namespace, "app=slow")), timeout=30
    )
    waited = time.monotonic() - t_running
    assert waited >= 4.0, f"Ready after {waited:.1f}s, the annotation asked for 6s"


def test_mig_pods_land_on_the_configured_node_never_the_pending_one(namespace: str) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/mig.config.state", "operator": "In", "values": ["success"]}
                        ],
                    }
                ]
            }
        }
    }
    # 8 pods for 7 slices: without the affinity the 8th would fit on the pending node.
    apply(
        deployment(
            "mig",
            namespace,
            replicas=8,
            resources={MIG_RESOURCE: "1"},
            affinity=affinity,
            annotations={"pod-ready.stage.kwok.x-k8s.io/delay": "500ms"},
        )
    )

    def settled() -> list[dict[str, Any]] | None:
        ps = pods(namespace, "app=mig")
        ready = [p for p in ps if is_ready(p)]
        unsched = [
            p
            for p in ps
            if any(
                c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in p["status"].get("conditions") or []
            )
        ]
        return ps if len(ps) == 8 and len(ready) == 7 and len(unsched) == 1 else None

    ps = eventually("7 Ready MIG pods and 1 Unschedulable", settled, timeout=90)
    placed = [p["spec"].get("nodeName") for p in ps if p["spec"].get("nodeName")]
    assert placed == ["gpu-a100-mig-mixed"] * 7
    assert "gpu-a100-mig-pending" not in placed


def test_prometheus_ready_and_answers_up() -> None:
    with urllib.request.urlopen(f"{_info().prometheus_url}/-/ready", timeout=5) as resp:
        assert resp.status == 200
    result = eventually(
        'a value for up{job="prometheus"}',
        lambda: prom_get("/api/v1/query", query='up{job="prometheus"}')["data"]["result"],
        timeout=30,
    )
    assert result[0]["value"][1] == "1"


def test_prometheus_discovers_annotated_pods_via_the_fleet_port(namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "scraped",
            "namespace": namespace,
            "labels": {"llama-operator.dev/llamaservice": "llama-1b"},
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "8000",
                "prometheus.io/path": "/metrics",
            },
        },
        "spec": {
            "containers": [
                {"name": "vllm", "image": "vllm", "ports": [{"containerPort": p} for p in (8000, 9000)]},
                {"name": "sidecar", "image": "sidecar", "ports": [{"containerPort": 9100}]},
            ],
        },
    }
    apply(pod)
    fleet = _info().fleet_port

    def target() -> list[dict[str, Any]] | None:
        active = prom_get("/api/v1/targets", state="active")["data"]["activeTargets"]
        mine = [t for t in active if t["labels"].get("namespace") == namespace]
        return mine or None

    found = eventually("the pod among Prometheus targets", target, timeout=45)
    assert len(found) == 1, "only the container port named by prometheus.io/port is scraped"
    t = found[0]
    assert t["scrapePool"] == "llama-pods"
    assert t["scrapeUrl"] == f"http://127.0.0.1:{fleet}/pods/{namespace}/scraped/metrics"
    assert t["labels"]["pod"] == "scraped"
    assert t["labels"]["llamaservice"] == "llama-1b"
    assert t["labels"]["container"] == "vllm"
    assert t["labels"]["instance"] == f"{namespace}/scraped"


def test_prometheus_static_targets_from_files() -> None:
    c = _info()
    prom = urllib.parse.urlparse(c.prometheus_url).netloc
    marker = uuid.uuid4().hex[:8]
    path = Path(c.prometheus_targets_dir) / f"smoke-{marker}.json"
    # Write then rename: Prometheus may read a half-written file otherwise.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": [prom], "labels": {"smoke": marker}}]))
    tmp.replace(path)
    try:
        result = eventually(
            "the static target's up series",
            lambda: prom_get("/api/v1/query", query=f'up{{job="static",smoke="{marker}"}}')["data"]["result"],
            timeout=45,
        )
        assert result[0]["value"][1] == "1"
    finally:
        path.unlink(missing_ok=True)


def test_garbage_collector_deletes_owned_objects(namespace: str) -> None:
    c = _info()
    c.kubectl("create", "configmap", "owner", "-n", namespace)
    uid = c.kubectl_json("get", "configmap", "owner", "-n", namespace)["metadata"]["uid"]
    apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "owned",
                "namespace": namespace,
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}],
            },
        }
    )
    apply(
        deployment(
            "gc",
            namespace,
            replicas=2,
            resources={"cpu": "100m"},
            annotations={"pod-ready.stage.kwok.x-k8s.io/delay": "200ms"},
        )
    )
    eventually("2 Ready gc pods", lambda: len([p for p in pods(namespace, "app=gc") if is_ready(p)]) == 2)
    c.kubectl("delete", "configmap", "owner", "-n", namespace, "--cascade=background")
    c.kubectl("delete", "deployment", "gc", "-n", namespace, "--cascade=background")
    eventually(
        "the owned ConfigMap to be collected",
        lambda: "NotFound" in c.kubectl("get", "configmap", "owned", "-n", namespace, check=False).stderr,
    )
    eventually(
        "ReplicaSets and pods of the deleted Deployment to be collected",
        lambda: (
            not c.kubectl_json("get", "replicasets", "-n", namespace)["items"]
            and not pods(namespace, "app=gc")
        ),
    )
