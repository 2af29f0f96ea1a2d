"""The node labels each platform gives a GPU node, per GPU of the catalog: what a vLLM pod selects so that
the node it needs is one that platform's node provisioner can create, not only one that exists already.

GPU Feature Discovery (the `gfd` platform) writes `nvidia.com/gpu.product` after a node has booted and its
driver loaded: a provisioner (Karpenter, the cluster autoscaler, GKE's node auto-provisioning) cannot know
it before the node exists, so a Pending pod that requires it never gets a node made for it. The clouds'
own labels are known from the instance type alone, before launch.

Sources (values as each platform writes them):
- eks-karpenter: the AWS provider's instance-type reference (github.com/aws/karpenter-provider-aws,
  website/content/en/docs/reference/instance-types.md, commit 1d927085, 2026-08): g4dn
  `karpenter.k8s.aws/instance-gpu-name: t4` (instance-gpu-memory 16384), g5 `a10g` (22888), g6 and gr6
  `l4` (22888), g6e `l40s` (45776), p4d `a100` (40960), p4de `a100` (81920), p5 `h100` (81920), p5e and
  p5en `h200` (144384), p6-b200 `b200` (183359); instance-gpu-manufacturer `nvidia` on all of them. The
  two A100s share a name and differ by instance-gpu-memory, so that label is part of their selection.
  AWS offers no A10 (only the A10G), no H100 PCIe and no MIG labels.
- gke: `cloud.google.com/gke-accelerator` is the Compute Engine accelerator type (GKE's "Deploy GPU
  workloads in Autopilot" and "About GPUs" pages; Compute Engine's "GPU machine types" page):
  `nvidia-tesla-t4`, `nvidia-l4`, `nvidia-tesla-a100` (A2 High, 40 GB), `nvidia-a100-80gb` (A2 Ultra),
  `nvidia-h100-80gb` (A3 High) and `nvidia-h100-mega-80gb` (A3 Mega: the same H100 SXM),
  `nvidia-h200-141gb` (A3 Ultra), `nvidia-b200` (A4). A MIG slice is selected with
  `cloud.google.com/gke-gpu-partition-size: <profile>` and requested as `nvidia.com/gpu` (GKE partitions
  the GPUs when it creates the node: there is no MIG manager state to wait for). GKE offers no A10,
  A10G, L40S or H100 PCIe.
- aks: AKS labels every node of a GPU node pool `kubernetes.azure.com/accelerator: nvidia` (AKS's "Use
  labels" page, its table of labels AKS sets), the same for every GPU model; the model is the VM size,
  `node.kubernetes.io/instance-type`, which the cluster autoscaler and Node Auto Provisioning know before a
  node exists. The sizes with whole GPUs of each model (Azure's NC/ND/NV size pages; the list of GPU sizes
  in github.com/Azure/karpenter-provider-azure pkg/utils/supported-gpus.yaml, commit 352646f5): T4
  NC*as_T4_v3; A10 NC32ads_A10_v4, NV36ads/NV36adms/NV72ads_A10_v5 (the smaller sizes of those series are
  fractions of one A10 and are left out: their memory is not the catalog's); A100 40 GB ND96asr_v4; A100
  80 GB NC*ads_A100_v4 and ND96amsr_A100_v4; H100 SXM ND96isr_H100_v5; H200 ND96isr_H200_v5. Azure has no
  A10G, L4, L40S or B200 size, and its NC H100 v5 carries the H100 NVL (94 GB), which is not the catalog's
  H100 PCIe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Platform(StrEnum):
    """Whose labels a vLLM pod selects a GPU node by."""

    GFD = "gfd"  # NVIDIA GPU Feature Discovery (the GPU Operator): nvidia.com/gpu.product
    GKE = "gke"
    EKS_KARPENTER = "eks-karpenter"
    AKS = "aks"
    CUSTOM = "custom"  # the labels config.accelerators gives each GPU under nodeLabels.custom


# `auto` in the operator's config: the platform is read from the nodes' labels (detect_platform).
AUTO_PLATFORM = "auto"

GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GKE_PARTITION_SIZE_LABEL = "cloud.google.com/gke-gpu-partition-size"
EKS_GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
EKS_GPU_MANUFACTURER_LABEL = "karpenter.k8s.aws/instance-gpu-manufacturer"
EKS_GPU_MEMORY_LABEL = "karpenter.k8s.aws/instance-gpu-memory"
EKS_GPU_COUNT_LABEL = "karpenter.k8s.aws/instance-gpu-count"
AKS_ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


@dataclass(frozen=True)
class NodeLabels:
    """The labels of a node with one GPU model on one platform: `labels` each hold exactly (a
    nodeSelector), and each key of `one_of` holds one of its values (a required node affinity `In`)."""

    labels: Mapping[str, str]
    one_of: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def matches(self, node_labels: Mapping[str, str]) -> bool:
        return all(node_labels.get(k) == v for k, v in self.labels.items()) and all(
            node_labels.get(k) in values for k, values in self.one_of.items()
        )


def _eks(name: str, memory_mib: int | None = None) -> NodeLabels:
    labels = {EKS_GPU_NAME_LABEL: name, EKS_GPU_MANUFACTURER_LABEL: "nvidia"}
    if memory_mib is not None:
        labels[EKS_GPU_MEMORY_LABEL] = str(memory_mib)
    return NodeLabels(labels=labels)


def _gke(*accelerators: str) -> NodeLabels:
    if len(accelerators) == 1:
        return NodeLabels(labels={GKE_ACCELERATOR_LABEL: accelerators[0]})
    return NodeLabels(labels={}, one_of={GKE_ACCELERATOR_LABEL: accelerators})


def _aks(*vm_sizes: str) -> NodeLabels:
    return NodeLabels(labels={AKS_ACCELERATOR_LABEL: "nvidia"}, one_of={INSTANCE_TYPE_LABEL: vm_sizes})


# Per accelerator type of the built-in catalog (catalog/accelerators.py), per platform; a platform not
# listed for a GPU does not offer it (config.accelerators' nodeLabels can say otherwise).
BUILTIN_NODE_LABELS: Mapping[str, Mapping[Platform, NodeLabels]] = {
    "t4": {
        Platform.GKE: _gke("nvidia-tesla-t4"),
        Platform.EKS_KARPENTER: _eks("t4"),
        Platform.AKS: _aks(
            "Standard_NC4as_T4_v3", "Standard_NC8as_T4_v3", "Standard_NC16as_T4_v3", "Standard_NC64as_T4_v3"
        ),
    },
    "a10": {
        Platform.AKS: _aks(
            "Standard_NC32ads_A10_v4",
            "Standard_NV36ads_A10_v5",
            "Standard_NV36adms_A10_v5",
            "Standard_NV72ads_A10_v5",
        ),
    },
    "a10g": {Platform.EKS_KARPENTER: _eks("a10g")},
    "l4": {Platform.GKE: _gke("nvidia-l4"), Platform.EKS_KARPENTER: _eks("l4")},
    "l40s": {Platform.EKS_KARPENTER: _eks("l40s")},
    "a100-40gb": {
        Platform.GKE: _gke("nvidia-tesla-a100"),
        Platform.EKS_KARPENTER: _eks("a100", 40960),
        Platform.AKS: _aks("Standard_ND96asr_v4"),
    },
    "a100-80gb": {
        Platform.GKE: _gke("nvidia-a100-80gb"),
        Platform.EKS_KARPENTER: _eks("a100", 81920),
        Platform.AKS: _aks(
            "Standard_NC24ads_A100_v4",
            "Standard_NC48ads_A100_v4",
            "Standard_NC96ads_A100_v4",
            "Standard_ND96amsr_A100_v4",
        ),
    },
    "h100-80gb": {
        Platform.GKE: _gke("nvidia-h100-80gb", "nvidia-h100-mega-80gb"),
        Platform.EKS_KARPENTER: _eks("h100"),
        Platform.AKS: _aks("Standard_ND96isr_H100_v5"),
    },
    "h200": {
        Platform.GKE: _gke("nvidia-h200-141gb"),
        Platform.EKS_KARPENTER: _eks("h200"),
        Platform.AKS: _aks("Standard_ND96isr_H200_v5"),
    },
    "b200": {Platform.GKE: _gke("nvidia-b200"), Platform.EKS_KARPENTER: _eks("b200")},
}

# Labels by which a node tells which platform labelled it, most specific first (a GKE or EKS node with the
# GPU Operator also carries GFD's labels, and its provisioner knows only its own).
PLATFORM_MARKERS: tuple[tuple[str, Platform], ...] = (
    (GKE_ACCELERATOR_LABEL, Platform.GKE),
    (EKS_GPU_NAME_LABEL, Platform.EKS_KARPENTER),
    (AKS_ACCELERATOR_LABEL, Platform.AKS),
)


def platform_of_node(node_labels: Mapping[str, str]) -> Platform | None:
    """The cloud platform whose GPU labels a node carries, or None (then only GFD's, if any)."""
    for key, platform in PLATFORM_MARKERS:
        if key in node_labels:
            return platform
    return None
