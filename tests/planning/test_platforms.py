"""A GPU replica selects its node by labels the cluster's platform writes (and its node provisioner knows
before the node exists): each platform's pods against a node labelled as that platform labels it."""

from __future__ import annotations

from typing import Any

import pytest

from llama_operator.api.plan import Plan
from llama_operator.api.settings import Settings
from llama_operator.catalog.accelerators import catalog_from_settings
from llama_operator.planning import PlanningConfig, PlanningError, inventory_from_nodes
from tests.planning.builders import gpu_node, node, plan, spec

# Labels as each platform writes them on a node with one GPU (catalog/platforms.py names the sources).
GKE_L4 = {
    "cloud.google.com/gke-accelerator": "nvidia-l4",
    "cloud.google.com/gke-nodepool": "l4-pool",
    "node.kubernetes.io/instance-type": "g2-standard-8",
}
EKS_L4 = {
    "karpenter.k8s.aws/instance-gpu-name": "l4",
    "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
    "karpenter.k8s.aws/instance-gpu-memory": "22888",
    "karpenter.k8s.aws/instance-gpu-count": "1",
    "karpenter.sh/nodepool": "gpu",
    "node.kubernetes.io/instance-type": "g6.xlarge",
}
AKS_T4 = {
    "kubernetes.azure.com/accelerator": "nvidia",
    "kubernetes.azure.com/agentpool": "gpunp",
    "node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3",
}
EKS_A100_40GB = {
    "karpenter.k8s.aws/instance-gpu-name": "a100",
    "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
    "karpenter.k8s.aws/instance-gpu-memory": "40960",
    "node.kubernetes.io/instance-type": "p4d.24xlarge",
}


def _requirement_holds(requirement: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = requirement["key"], requirement["operator"], requirement.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {operator} not modelled")


def schedulable_on(p: Plan, target: dict[str, Any]) -> bool:
    """Whether the plan's pod may land on the node, as the scheduler's NodeAffinity and resource fit judge it:
    nodeSelector, one required term whose expressions all hold, and every extended resource allocatable."""
    labels = target["metadata"]["labels"]
    allocatable = target["status"]["allocatable"]
    if any(labels.get(k) != v for k, v in p.node_selector.items()):
        return False
    terms = [t.model_dump(by_alias=True, exclude_none=True) for t in p.node_affinity]
    if terms and not any(all(_requirement_holds(r, labels) for r in t["matchExpressions"]) for t in terms):
        return False
    return all(int(allocatable.get(r, "0")) >= int(q) for r, q in p.resources.items())


def _gpu(labels: dict[str, str], gpus: int = 1, name: str = "gpu-1") -> dict[str, Any]:
    return node(name, labels, {"nvidia.com/gpu": str(gpus)})


@pytest.mark.parametrize(
    ("platform", "accelerator", "labels", "expected_selector"),
    [
        ("gke", "l4", GKE_L4, {"cloud.google.com/gke-accelerator": "nvidia-l4"}),
        (
            "eks-karpenter",
            "l4",
            EKS_L4,
            {
                "karpenter.k8s.aws/instance-gpu-name": "l4",
                "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
            },
        ),
        ("aks", "t4", AKS_T4, {"kubernetes.azure.com/accelerator": "nvidia"}),
    ],
)
@pytest.mark.parametrize("configured", ["auto", "explicit"])
def test_a_cloud_labelled_node_is_offered_and_selected_by_the_clouds_labels(
    platform: str,
    accelerator: str,
    labels: dict[str, str],
    expected_selector: dict[str, str],
    configured: str,
) -> None:
    target = _gpu(labels)
    inventory = inventory_from_nodes([target, node("cpu-1")])
    config = PlanningConfig(platform="auto" if configured == "auto" else platform)

    chosen = plan(spec({"type": "auto"}), config, inventory)

    assert chosen.accelerator == accelerator
    assert chosen.node_selector == expected_selector
    assert "nvidia.com/gpu.product" not in chosen.node_selector
    assert schedulable_on(chosen, target)
    # ... and not on another GPU of the same platform.
    other = {**labels, **dict.fromkeys(expected_selector, "other")}
    other["node.kubernetes.io/instance-type"] = "Standard_D4s_v5" if platform == "aks" else "other"
    assert not schedulable_on(chosen, _gpu(other))


def test_gfd_selects_the_product_label_the_nodes_carry() -> None:
    target = gpu_node("gpu-1", "NVIDIA-L4", 1)
    chosen = plan(spec({"type": "l4"}), PlanningConfig(platform="auto"), inventory_from_nodes([target]))
    assert chosen.node_selector == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    assert schedulable_on(chosen, target)


def test_aks_selects_the_vm_sizes_of_the_gpu_model() -> None:
    chosen = plan(spec({"type": "t4"}), PlanningConfig(platform="aks"))
    [term] = chosen.node_affinity
    [requirement] = term.match_expressions
    assert requirement.key == "node.kubernetes.io/instance-type"
    assert "Standard_NC4as_T4_v3" in requirement.values
    assert not schedulable_on(
        chosen, _gpu({**AKS_T4, "node.kubernetes.io/instance-type": "Standard_NC6s_v3"})
    )


def test_eks_tells_the_two_a100s_apart_by_gpu_memory() -> None:
    target = _gpu(EKS_A100_40GB, gpus=8)
    inventory = inventory_from_nodes([target])
    assert [o.accelerator for o in inventory.offers] == ["a100-40gb"]
    forty = plan(spec({"type": "a100-40gb"}), PlanningConfig(platform="eks-karpenter"), inventory)
    eighty = plan(spec({"type": "a100-80gb"}), PlanningConfig(platform="eks-karpenter"), inventory)
    assert schedulable_on(forty, target)
    assert not schedulable_on(eighty, target)


def test_a_gke_mig_partition_is_requested_as_a_gpu_and_selected_by_its_size() -> None:
    labels = {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
        "cloud.google.com/gke-gpu-partition-size": "1g.5gb",
    }
    target = _gpu(labels, gpus=7)
    inventory = inventory_from_nodes([target])
    chosen = plan(spec({"type": "a100-40gb", "mig": "1g.5gb"}), PlanningConfig(platform="auto"), inventory)

    assert chosen.resources == {"nvidia.com/gpu": "1"}
    assert chosen.node_selector == labels
    # GKE partitions a GPU when it creates the node: no MIG manager state label to wait for.
    assert "nvidia.com/mig.config.state" not in str(chosen.node_affinity)
    assert schedulable_on(chosen, target)


def test_a_gpu_the_platform_does_not_offer_is_refused_with_where_to_add_it() -> None:
    with pytest.raises(PlanningError, match=r"config\.accelerators\.a10g\.nodeLabels\.gke"):
        plan(spec({"type": "a10g"}), PlanningConfig(platform="gke"))


def test_config_accelerators_give_a_gpu_its_labels_per_platform() -> None:
    settings = Settings.model_validate(
        {
            "platform": "custom",
            "accelerators": {
                "h20": {
                    "memoryMiB": 97871,
                    "bandwidthGBps": 4000,
                    "fp16Tflops": 148,
                    "computeCapability": "9.0",
                    "pricePerHour": 2.0,
                    "productLabels": ["NVIDIA-H20"],
                    "nodeLabels": {
                        "custom": {"example.com/gpu": "h20"},
                        "gke": {"cloud.google.com/gke-accelerator": "nvidia-h20"},
                    },
                },
                "l4": {"nodeLabels": {"custom": {"example.com/gpu": "l4"}}},
            },
        }
    )
    catalog = catalog_from_settings(settings.accelerators)
    custom = PlanningConfig(platform=settings.platform, catalog=catalog)
    assert plan(spec({"type": "h20"}), custom).node_selector == {"example.com/gpu": "h20"}
    assert plan(spec({"type": "l4"}), custom).node_selector == {"example.com/gpu": "l4"}
    gke = PlanningConfig(platform="gke", catalog=catalog)
    assert plan(spec({"type": "h20"}), gke).node_selector == {
        "cloud.google.com/gke-accelerator": "nvidia-h20"
    }
    # The built-in labels of the other platforms stay.
    assert plan(spec({"type": "l4"}), gke).node_selector == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    # A node labelled only with the custom labels is recognised by them.
    target = _gpu({"example.com/gpu": "h20"})
    assert catalog.for_platform_labels(target["metadata"]["labels"]) is None  # custom labels mark no cloud
