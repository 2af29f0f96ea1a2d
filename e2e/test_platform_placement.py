"""On the real scheduler: a GPU replica's pod lands on a node labelled as each platform labels it (GPU Feature
Discovery, GKE, EKS with Karpenter, AKS), the operator set to that platform (config.platform) or reading
it from the nodes (auto)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llama_operator.catalog.platforms import PLATFORM_MARKERS
from support import Cluster, OperatorProcess, eventually, kwok_gpu_node, llamaservice_manifest

pytestmark = pytest.mark.e2e

# Each platform's labels on a node with one GPU, as that platform writes them (catalog/platforms.py names the
# sources); none of them carries GFD's nvidia.com/gpu.product but the GFD one.
PLATFORM_NODES: dict[str, tuple[str, dict[str, str]]] = {
    "gfd": ("l40s", {"nvidia.com/gpu.product": "NVIDIA-L40S", "nvidia.com/gpu.memory": "46068"}),
    "gke": ("l4", {"cloud.google.com/gke-accelerator": "nvidia-l4", "cloud.google.com/gke-nodepool": "l4"}),
    "eks-karpenter": (
        "l4",
        {
            "karpenter.k8s.aws/instance-gpu-name": "l4",
            "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
            "karpenter.k8s.aws/instance-gpu-memory": "22888",
            "karpenter.k8s.aws/instance-gpu-count": "1",
            "node.kubernetes.io/instance-type": "g6.xlarge",
        },
    ),
    "aks": (
        "t4",
        {
            "kubernetes.azure.com/accelerator": "nvidia",
            "kubernetes.azure.com/agentpool": "gpunp",
            "node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3",
        },
    ),
}


def gpu_node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return kwok_gpu_node(name, labels, {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "1"})


@pytest.fixture
def platform_node(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[tuple[str, str, str]]:
    platform: str = request.param
    accelerator, labels = PLATFORM_NODES[platform]
    name = f"gpu-{platform}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(gpu_node(name, labels)))
    yield platform, accelerator, name
    cluster.kubectl("delete", "node", name, "--wait=false", check=False)


@pytest.mark.parametrize("platform_node", sorted(PLATFORM_NODES), indirect=True)
@pytest.mark.parametrize("configured", ["explicit", "auto"])
def test_the_replica_schedules_on_a_node_labelled_as_its_platform_labels_it(
    cluster: Cluster, namespace: str, tmp_path: Path, platform_node: tuple[str, str, str], configured: str
) -> None:
    platform, accelerator, node_name = platform_node
    if configured == "auto" and platform != "gfd":
        # auto reads the platform from the nodes: make this node's cloud the only one besides GFD's.
        others = [n for n in cluster.list_objects("node", "default") if n["metadata"]["name"] != node_name]
        markers = {key for key, _ in PLATFORM_MARKERS}
        clouds = [n["metadata"]["name"] for n in others if markers & set(n["metadata"].get("labels") or {})]
        assert not clouds, f"other cloud-labelled nodes would sway auto: {clouds}"
    operator = OperatorProcess(
        cluster,
        log_dir=tmp_path,
        extra_env={"LLAMA_OPERATOR_PLATFORM": platform if configured == "explicit" else "auto"},
    )
    operator.start()
    try:
        body = llamaservice_manifest(
            "placed",
            model={"name": "meta-llama/Llama-3.2-1B-Instruct"},
            accelerator={"type": accelerator},
            replicas=1,
        )
        assert cluster.apply(body, namespace).returncode == 0

        def scheduled() -> str | None:
            pods = cluster.pods_of("placed", namespace)
            return next((p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")), None)

        landed = eventually(f"the {platform} replica scheduled", scheduled, 90)
        assert landed == node_name, operator.tail()
    finally:
        cluster.kubectl("delete", "llamaservice", "placed", "-n", namespace, "--wait=false", check=False)
        operator.stop()
