"""Which node labels a GPU replica selects, on the platform the cluster runs: the labels its node
provisioner can act on before the node exists (catalog/platforms.py), or GFD's product label."""

from __future__ import annotations

from dataclasses import dataclass, field

from llama_operator.api.plan import NodeSelectorRequirement
from llama_operator.catalog.accelerators import Accelerator, MigProfile
from llama_operator.catalog.platforms import AUTO_PLATFORM, GKE_PARTITION_SIZE_LABEL, Platform
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.inventory import PRODUCT_LABEL, Inventory


def resolve_platform(configured: str, inventory: Inventory | None) -> Platform:
    """config.platform, or for `auto` the cloud whose GPU labels the nodes carry (GFD's without one)."""
    if configured != AUTO_PLATFORM:
        return Platform(configured)
    if inventory is not None and inventory.cloud_platform is not None:
        return inventory.cloud_platform
    return Platform.GFD


@dataclass(frozen=True)
class NodeSelection:
    """The labels a GPU replica's pod requires: `node_selector` exactly, each of `requirements` as a node
    affinity expression. `slices_as_gpus`: the platform exposes a MIG slice as `nvidia.com/gpu` (GKE);
    `mig_manager`: slices appear once NVIDIA's MIG manager has repartitioned a running node (not on GKE,
    which partitions when it creates the node)."""

    node_selector: dict[str, str]
    requirements: list[NodeSelectorRequirement] = field(default_factory=list)
    slices_as_gpus: bool = False
    mig_manager: bool = True


def gpu_node_selection(
    accel: Accelerator, mig: MigProfile | None, platform: Platform, product: str
) -> NodeSelection:
    """The selection of a node with `accel` (a `mig` slice of it) on `platform`; `product` is GFD's product
    label of the placement (the nodes' own variant). Raises PlanningError when the platform offers no such
    GPU and config.accelerators gives it no labels there."""
    if platform is Platform.GFD:
        return NodeSelection(node_selector={PRODUCT_LABEL: product})
    labels = accel.node_labels.get(platform)
    if labels is None:
        offered = sorted(str(a) for a in accel.node_labels) or ["none but gfd"]
        raise PlanningError(
            f"accelerator {accel.type} has no node labels for platform {platform} (the platforms that label it: "
            f"{', '.join(offered)}); choose another accelerator, or give its labels in the operator's "
            f"config.accelerators.{accel.type}.nodeLabels.{platform}"
        )
    selector = dict(labels.labels)
    requirements = [
        NodeSelectorRequirement(key=key, operator="In", values=list(values))
        for key, values in sorted(labels.one_of.items())
    ]
    if platform is Platform.GKE and mig is not None:
        selector[GKE_PARTITION_SIZE_LABEL] = mig.name
        return NodeSelection(selector, requirements, slices_as_gpus=True, mig_manager=False)
    return NodeSelection(selector, requirements)
