"""Capacity a node provisioner can create counts: Karpenter NodePools (karpenter.sh/v1) in the inventory."""

from __future__ import annotations

from typing import Any

import pytest

from llama_operator.planning import PlanningConfig, PlanningError, inventory_from_nodes
from tests.planning.builders import gpu_node, node, plan, spec

GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"


def nodepool(
    name: str,
    requirements: list[dict[str, Any]],
    *,
    limit: int | None = None,
    used: int = 0,
    weight: int | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec_: dict[str, Any] = {
        "template": {
            "metadata": {"labels": labels or {}},
            "spec": {
                "requirements": requirements,
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
        }
    }
    if limit is not None:
        spec_["limits"] = {"cpu": "1000", "nvidia.com/gpu": str(limit)}
    if weight is not None:
        spec_["weight"] = weight
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": spec_,
        "status": {"resources": {"nvidia.com/gpu": str(used)}},
    }


def gpu_names(*names: str) -> dict[str, Any]:
    return {"key": GPU_NAME, "operator": "In", "values": list(names)}


def test_auto_with_no_gpu_node_plans_the_gpu_a_nodepool_can_create() -> None:
    inventory = inventory_from_nodes([node("cpu-1"), nodepool("gpu-l4", [gpu_names("l4")], limit=4)])

    chosen = plan(spec({"type": "auto"}), PlanningConfig(), inventory)

    assert chosen.accelerator == "l4"
    assert chosen.node_selector[GPU_NAME] == "l4"
    assert any("a new node will be provisioned by Karpenter NodePool gpu-l4" in n for n in chosen.notes)


def test_without_the_nodepool_auto_finds_no_gpu() -> None:
    with pytest.raises(PlanningError, match="no accelerator present"):
        plan(spec({"type": "auto"}), PlanningConfig(), inventory_from_nodes([node("cpu-1")]))


def test_the_cheapest_gpu_the_nodepools_can_create_is_chosen() -> None:
    pools = [nodepool("gpu", [gpu_names("l4", "t4")]), nodepool("big", [gpu_names("h100")], weight=50)]
    chosen = plan(spec({"type": "auto"}), PlanningConfig(), inventory_from_nodes([node("cpu-1"), *pools]))
    assert chosen.accelerator == "t4"


def test_a_nodepool_at_its_gpu_limit_creates_nothing() -> None:
    full = nodepool("gpu-l4", [gpu_names("l4")], limit=4, used=4)
    inventory = inventory_from_nodes([node("cpu-1"), full])
    assert not inventory.gpu_offers("l4")
    assert ("NodePool gpu-l4", "its nvidia.com/gpu limit is reached (4 of 4)") in [
        (s.node, s.reason) for s in inventory.skipped
    ]


def test_a_nodepool_that_names_no_gpu_is_not_taken_to_create_one() -> None:
    general = nodepool(
        "general", [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]
    )
    inventory = inventory_from_nodes([node("cpu-1"), general], platform="eks-karpenter")
    assert [o for o in inventory.offers if o.provisioner] == []


def test_the_gpus_left_under_the_limit_bound_a_replica() -> None:
    inventory = inventory_from_nodes([nodepool("gpu", [gpu_names("l4")], limit=8, used=7)])
    [offer] = inventory.gpu_offers("l4")
    assert offer.allocatable == 1
    assert not inventory.gpu_offers("l4", min_count=2)


def test_notin_and_gpu_count_requirements() -> None:
    pool = nodepool(
        "gpu",
        [
            gpu_names("l4", "a10g"),
            {"key": GPU_NAME, "operator": "NotIn", "values": ["a10g"]},
            {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Lt", "values": ["5"]},
        ],
    )
    inventory = inventory_from_nodes([pool])
    assert [(o.accelerator, o.allocatable) for o in inventory.offers] == [("l4", 4)]


def test_a_node_that_exists_needs_no_new_one() -> None:
    eks_l4 = {GPU_NAME: "l4", "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia"}
    inventory = inventory_from_nodes(
        [node("gpu-1", eks_l4, {"nvidia.com/gpu": "1"}), nodepool("gpu", [gpu_names("l4")])]
    )
    chosen = plan(spec({"type": "l4"}), PlanningConfig(platform="eks-karpenter"), inventory)
    assert not any("new node" in n for n in chosen.notes)


def test_on_a_cloud_platform_a_node_with_gfd_labels_alone_is_no_gpu_its_pods_can_select() -> None:
    inventory = inventory_from_nodes(
        [gpu_node("gpu-t4", "Tesla-T4", 1), nodepool("gpu-l4", [gpu_names("l4")])], platform="eks-karpenter"
    )
    assert [o.node for o in inventory.gpu_offers("t4")] == []
    assert "lacks the eks-karpenter labels of t4" in {s.node: s.reason for s in inventory.skipped}["gpu-t4"]
    assert (
        plan(spec({"type": "auto"}), PlanningConfig(platform="eks-karpenter"), inventory).accelerator == "l4"
    )


def test_a_gke_style_nodepool_is_judged_by_gke_labels() -> None:
    pool = nodepool(
        "gke", [{"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-l4"]}]
    )
    inventory = inventory_from_nodes([node("cpu-1"), pool])
    chosen = plan(spec({"type": "auto"}), PlanningConfig(), inventory)
    assert chosen.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
