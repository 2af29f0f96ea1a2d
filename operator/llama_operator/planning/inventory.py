"""What accelerators a cluster offers, read from Node objects (as plain dicts).

Nodes come from the API server or from YAML files (offline planning); either way they are
v1 Node manifests labelled by the NVIDIA GPU Operator (GPU Feature Discovery, MIG manager):
`nvidia.com/gpu.product`, `nvidia.com/gpu.memory` (MiB), `nvidia.com/mig.strategy`,
`nvidia.com/mig.config.state`, `nvidia.com/mig-<profile>.memory`, and allocatable
`nvidia.com/gpu` / `nvidia.com/mig-<profile>`; or, without the GPU Operator, by their cloud
(GKE, EKS with Karpenter, AKS: catalog/platforms.py), whose labels name the GPU model too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llama_operator.api.spec import AcceleratorType
from llama_operator.catalog.accelerators import BUILTIN_CATALOG, MIB, Accelerator, Catalog, mig_resource_name
from llama_operator.catalog.platforms import AUTO_PLATFORM, PLATFORM_MARKERS, Platform, platform_of_node
from llama_operator.planning.provisioning import (
    NodePoolReading,
    ProvisionableGpu,
    is_nodepool,
    read_nodepools,
)

PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MIG_STATE_SUCCESS = "success"
MIXED = "mixed"
SINGLE = "single"


@dataclass(frozen=True)
class Offer:
    """What one node offers of one accelerator kind: full GPUs, or slices of one MIG profile."""

    node: str
    accelerator: str  # an AcceleratorType, or a platform-defined accelerator's name
    product: str  # the node's `nvidia.com/gpu.product` value
    mig_profile: str | None
    mig_strategy: str | None  # 'mixed' | 'single' for slices, None for full GPUs and CPU
    resource: str  # the extended resource a pod requests ('cpu' for CPU nodes)
    allocatable: int
    memory_bytes: int | None  # per device (GPU or slice) from the node's labels, when labelled
    # A node that does not exist yet but a provisioner can create (Karpenter NodePool ...), or None.
    provisioner: str | None = None

    @property
    def parent_product(self) -> str:
        """The full GPU's product label (single-strategy nodes label the slice instead)."""
        index = self.product.upper().find("-MIG-")
        return self.product if index < 0 else self.product[:index]


@dataclass(frozen=True)
class SkippedNode:
    node: str
    reason: str


@dataclass(frozen=True)
class Inventory:
    """Offers of the nodes that can take a vLLM pod now, and the nodes left out (with why)."""

    offers: tuple[Offer, ...] = ()
    skipped: tuple[SkippedNode, ...] = ()
    # GPU nodes whose product label matches no accelerator of the catalog: product -> nodes. Reported
    # (an Event on services that wanted auto, a metric), never skipped in silence.
    unknown_gpus: tuple[tuple[str, int], ...] = ()
    # The cloud platform whose GPU labels most of the nodes carry (None: GFD's alone, or no GPU node):
    # config.platform auto selects GPUs by its labels.
    cloud_platform: Platform | None = None
    # The GPUs Karpenter NodePools can still create (also among `offers`, as nodes to be created).
    provisionable: tuple[ProvisionableGpu, ...] = ()

    def gpu_offers(self, accelerator: str, *, min_count: int = 1) -> tuple[Offer, ...]:
        """Nodes with at least `min_count` whole GPUs of a type allocatable."""
        return tuple(
            o
            for o in self.offers
            if o.accelerator == accelerator and o.mig_profile is None and o.allocatable >= min_count
        )

    def mig_offers(self, accelerator: str, profile: str, strategy: str | None = None) -> tuple[Offer, ...]:
        """Nodes with a slice of `profile` allocatable (in `strategy` when given)."""
        return tuple(
            o
            for o in self.offers
            if o.accelerator == accelerator
            and o.mig_profile == profile
            and (strategy is None or o.mig_strategy == strategy)
            and o.allocatable >= 1
        )

    def cpu_offers(self) -> tuple[Offer, ...]:
        return tuple(o for o in self.offers if o.accelerator == AcceleratorType.CPU)

    def describe(self) -> str:
        """Short human summary of what is present, for error messages."""
        if not self.offers:
            return "no node offers an accelerator"
        kinds: dict[str, int] = {}
        for o in self.offers:
            if o.accelerator == AcceleratorType.CPU:
                key = "cpu"
            elif o.mig_profile is None:
                key = str(o.accelerator)
            else:
                key = f"{o.accelerator}/{o.mig_profile} ({o.mig_strategy})"
            kinds[key] = kinds.get(key, 0) + o.allocatable
        return ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))


def _quantity_int(value: Any) -> int:
    """Integer of a Kubernetes quantity as found in allocatable ('4', 4, '3500m', '8Gi' -> whole units)."""
    text = str(value).strip()
    # ASCII digits only: str.isdigit() also accepts '²', which int() refuses.
    if text.endswith("m") and text[:-1].isascii() and text[:-1].isdigit():
        return int(text[:-1]) // 1000
    try:
        return int(float(text))
    except (ValueError, OverflowError):  # not a number, or 'inf' / '1e400' from a hand-written file
        return 0


def _label_mib(labels: Mapping[str, str], key: str) -> int | None:
    value = labels.get(key)
    if value is None:
        return None
    try:
        mib = int(str(value).strip())
    except ValueError:
        return None
    return mib * MIB if mib > 0 else None


UNKNOWN_PRODUCT = "is not in the accelerator catalog"


def _cpu_node_offers(name: str, allocatable: Mapping[str, Any]) -> tuple[list[Offer], str | None]:
    """A node without the GPU product label: its CPUs, unless it has GPUs nobody labelled."""
    if _quantity_int(allocatable.get(GPU_RESOURCE, 0)) > 0:
        return [], f"allocatable {GPU_RESOURCE} but no {PRODUCT_LABEL} label"
    cpus = _quantity_int(allocatable.get("cpu", 0))
    if cpus <= 0:
        return [], "no allocatable cpu"
    offer = Offer(
        node=name,
        accelerator=AcceleratorType.CPU,
        product="",
        mig_profile=None,
        mig_strategy=None,
        resource="cpu",
        allocatable=cpus,
        memory_bytes=None,
    )
    return [offer], None


def _gpu_offers(
    name: str,
    product: str,
    *,
    found: Accelerator,
    single_profile: str | None,
    allocatable: Mapping[str, Any],
    labels: Mapping[str, str],
    mig_ready: bool,
) -> list[Offer]:
    """Whole GPUs and MIG slices of a labelled GPU node. Slices only once the MIG manager said success."""

    def offer(mig_profile: str | None, strategy: str | None, resource: str, count: int, memory: str) -> Offer:
        return Offer(
            node=name,
            accelerator=found.type,
            product=product,
            mig_profile=mig_profile,
            mig_strategy=strategy,
            resource=resource,
            allocatable=count,
            memory_bytes=_label_mib(labels, memory),
        )

    gpus = _quantity_int(allocatable.get(GPU_RESOURCE, 0))
    if single_profile is not None:
        # Single strategy: every `nvidia.com/gpu` on this node is a slice named by the product label.
        ready = gpus > 0 and mig_ready
        return [offer(single_profile, SINGLE, GPU_RESOURCE, gpus, GPU_MEMORY_LABEL)] if ready else []
    offers = [offer(None, None, GPU_RESOURCE, gpus, GPU_MEMORY_LABEL)] if gpus > 0 else []
    known_profiles = {p.name for p in found.mig_profiles}
    for resource, quantity in sorted(allocatable.items()):
        profile = resource[len(MIG_RESOURCE_PREFIX) :]
        count = _quantity_int(quantity) if resource.startswith(MIG_RESOURCE_PREFIX) else 0
        if count > 0 and profile in known_profiles and mig_ready:
            memory = f"{MIG_RESOURCE_PREFIX}{profile}.memory"
            offers.append(offer(profile, MIXED, mig_resource_name(profile), count, memory))
    return offers


def _node_offers(
    node: Mapping[str, Any], catalog: Catalog = BUILTIN_CATALOG
) -> tuple[list[Offer], str | None]:
    """Offers of one node, or a reason it offers nothing."""
    metadata = node.get("metadata") or {}
    name = str(metadata.get("name", "<unnamed>"))
    labels: Mapping[str, str] = metadata.get("labels") or {}
    status = node.get("status") or {}
    allocatable: Mapping[str, Any] = status.get("allocatable") or status.get("capacity") or {}

    if (node.get("spec") or {}).get("unschedulable"):
        return [], "cordoned (spec.unschedulable)"
    mig_state = labels.get(MIG_CONFIG_STATE_LABEL)
    # A pod placed before the MIG manager reports success can grab a whole GPU: such nodes offer nothing.
    if mig_state is not None and mig_state != MIG_STATE_SUCCESS:
        return [], f"{MIG_CONFIG_STATE_LABEL}={mig_state} (MIG reconfiguration not done)"
    product = labels.get(PRODUCT_LABEL)
    if product is None:
        by_cloud = catalog.for_platform_labels(labels)
        if by_cloud is None:
            return _cpu_node_offers(name, allocatable)
        found, profile = by_cloud
        # The cloud partitions a GPU when it creates the node (GKE): no MIG manager state to wait for.
        offers = _gpu_offers(
            name,
            found.canonical_product,
            found=found,
            single_profile=profile,
            allocatable=allocatable,
            labels=labels,
            mig_ready=True,
        )
        return (offers, None) if offers else ([], f"{found.type} with nothing allocatable")
    matched = catalog.for_product(product)
    if matched is None:
        return [], f"{PRODUCT_LABEL}={product} {UNKNOWN_PRODUCT} (add it under config.accelerators)"
    found, single_profile = matched
    mig_ready = mig_state == MIG_STATE_SUCCESS  # plans of slices require that label
    offers = _gpu_offers(
        name,
        product,
        found=found,
        single_profile=single_profile,
        allocatable=allocatable,
        labels=labels,
        mig_ready=mig_ready,
    )
    if offers:
        return offers, None
    has_slices = any(k.startswith(MIG_RESOURCE_PREFIX) for k in allocatable)
    if (single_profile is not None or has_slices) and not mig_ready:
        return [], f"MIG slices but no {MIG_CONFIG_STATE_LABEL}={MIG_STATE_SUCCESS} label"
    return [], f"{product} with nothing allocatable"


def _selectable(
    offers: list[Offer], labels_of: Mapping[str, Mapping[str, str]], catalog: Catalog, platform: Platform
) -> tuple[list[Offer], list[SkippedNode]]:
    """The GPU offers of nodes that carry `platform`'s labels of their GPU: vLLM pods select those, so a
    node labelled only by GPU Feature Discovery (or by another cloud) cannot take them."""
    kept: list[Offer] = []
    dropped: dict[str, str] = {}
    for offer in offers:
        accel = catalog.accelerators.get(offer.accelerator)
        selection = accel.node_labels.get(platform) if accel is not None and accel.is_gpu else None
        if (
            accel is None
            or not accel.is_gpu
            or (selection is not None and selection.matches(labels_of.get(offer.node, {})))
        ):
            kept.append(offer)
        else:
            dropped[offer.node] = f"lacks the {platform} labels of {offer.accelerator} that vLLM pods select"
    return kept, [SkippedNode(node=n, reason=why) for n, why in sorted(dropped.items())]


def _nodepool_platform(nodepools: Iterable[Mapping[str, Any]]) -> Platform | None:
    """The cloud whose GPU labels the NodePools' templates name (with no GPU node yet to read it from)."""
    for pool in nodepools:
        spec = (pool.get("spec") or {}).get("template") or {}
        keys = {str(r.get("key")) for r in (spec.get("spec") or {}).get("requirements") or []}
        keys |= set((spec.get("metadata") or {}).get("labels") or {})
        for marker, platform in PLATFORM_MARKERS:
            if marker in keys:
                return platform
    return None


def _provisionable_offers(reading: NodePoolReading, catalog: Catalog) -> list[Offer]:
    """The GPUs the NodePools can create, as offers of a node that does not exist yet."""
    return [
        Offer(
            node=f"a new node of NodePool {p.nodepool}",
            accelerator=p.accelerator,
            product=catalog.get(p.accelerator).canonical_product,
            mig_profile=None,
            mig_strategy=None,
            resource=GPU_RESOURCE,
            allocatable=p.gpus_per_node,
            memory_bytes=None,
            provisioner=p.describe,
        )
        for p in reading.offers
    ]


def inventory_from_nodes(
    nodes: Iterable[Mapping[str, Any]],
    catalog: Catalog = BUILTIN_CATALOG,
    node_selector: Mapping[str, str] | None = None,
    platform: str = AUTO_PLATFORM,
) -> Inventory:
    """Build the inventory from v1 Node objects as plain dicts (API server JSON or YAML manifests),
    matching their GPUs against `catalog` (the built-in one with the platform's config.accelerators).
    `node_selector`: the platform's config.podNodeSelector; nodes outside it cannot take a vLLM pod.
    Karpenter NodePools among the objects add the GPUs they can create (planning/provisioning.py), judged
    by the labels of `platform` (config.platform; auto: the nodes' or the NodePools' cloud, else GFD's)."""
    offers: list[Offer] = []
    skipped: list[SkippedNode] = []
    unknown: dict[str, int] = {}
    platforms: dict[Platform, int] = {}
    nodepools: list[Mapping[str, Any]] = []
    labels_of: dict[str, Mapping[str, str]] = {}
    for node in nodes:
        if isinstance(node, Mapping) and is_nodepool(node):
            nodepools.append(node)
            continue
        if not isinstance(node, Mapping) or node.get("kind", "Node") != "Node":
            continue
        labels = (node.get("metadata") or {}).get("labels") or {}
        labels_of[str((node.get("metadata") or {}).get("name", "<unnamed>"))] = labels
        if (node_platform := platform_of_node(labels)) is not None:
            platforms[node_platform] = platforms.get(node_platform, 0) + 1
        outside = sorted(k for k, v in (node_selector or {}).items() if labels.get(k) != v)
        if outside:
            name = str((node.get("metadata") or {}).get("name", "<unnamed>"))
            skipped.append(
                SkippedNode(node=name, reason=f"outside config.podNodeSelector ({', '.join(outside)})")
            )
            continue
        node_offers, reason = _node_offers(node, catalog)
        offers.extend(node_offers)
        if reason is not None:
            name = str((node.get("metadata") or {}).get("name", "<unnamed>"))
            skipped.append(SkippedNode(node=name, reason=reason))
            if UNKNOWN_PRODUCT in reason:
                product = str(((node.get("metadata") or {}).get("labels") or {}).get(PRODUCT_LABEL, ""))
                unknown[product] = unknown.get(product, 0) + 1
    cloud = min(platforms, key=lambda p: (-platforms[p], p)) if platforms else _nodepool_platform(nodepools)
    judged_by = Platform(platform) if platform != AUTO_PLATFORM else (cloud or Platform.GFD)
    if judged_by is not Platform.GFD:
        offers, unselectable = _selectable(offers, labels_of, catalog, judged_by)
        skipped += unselectable
    offers.sort(key=lambda o: (o.node, o.resource))
    reading = None
    if nodepools:
        reading = read_nodepools(nodepools, catalog, judged_by)
        skipped += [SkippedNode(node=f"NodePool {name}", reason=why) for name, why in reading.skipped]
        offers += _provisionable_offers(reading, catalog)
    return Inventory(
        offers=tuple(offers),
        skipped=tuple(skipped),
        unknown_gpus=tuple(sorted(unknown.items())),
        cloud_platform=cloud,
        provisionable=reading.offers if reading is not None else (),
    )
