"""Where a candidate runs: the node product and MIG strategy the inventory offers, and the resources,
selectors and tolerations that keep its pods there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from llama_operator.api.plan import NodeSelectorRequirement, NodeSelectorTerm, Toleration
from llama_operator.catalog.accelerators import (
    mig_resource_name,
    mig_slice_product,
)
from llama_operator.catalog.platforms import Platform
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.inventory import (
    GPU_RESOURCE,
    MIG_CONFIG_STATE_LABEL,
    MIG_STATE_SUCCESS,
    MIXED,
    SINGLE,
    Inventory,
    Offer,
)
from llama_operator.planning.model import Candidate
from llama_operator.planning.node_selection import gpu_node_selection, resolve_platform

GPU_TOLERATION = Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")
# States of the MIG manager in which a pod must not land (it could grab a whole GPU).
MIG_NOT_READY_STATES = ("pending", "rebooting", "failed")


# --- placement ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    candidate: Candidate
    mig_strategy: str | None
    product: str
    notes: tuple[str, ...]
    # Whose node labels its pods select (config.platform, or the nodes' cloud for auto).
    platform: Platform = Platform.GFD


def _pick_product(offers: tuple[Offer, ...], *, use_parent: bool) -> str:
    totals: dict[str, int] = {}
    for offer in offers:
        product = offer.parent_product if use_parent else offer.product
        totals[product] = totals.get(product, 0) + offer.allocatable
    return min(totals, key=lambda p: (-totals[p], p))


def _with_label_memory(candidate: Candidate, offers: tuple[Offer, ...]) -> Candidate:
    """Size from the memory the nodes label (NVML inside a slice may report the parent GPU's)."""
    labelled = [o.memory_bytes for o in offers if o.memory_bytes is not None]
    if not labelled:
        return candidate
    return Candidate(
        accelerator=candidate.accelerator,
        mig=candidate.mig,
        count=candidate.count,
        device_memory_bytes=min(labelled),
        nodes=candidate.nodes,
    )


def place_candidate(
    candidate: Candidate, config: PlanningConfig, inventory: Inventory | None, mig_strategy: str | None = None
) -> Placement:
    """Where the candidate runs. `mig_strategy`: the one the spec asks for (accelerator.migStrategy), kept
    even when only nodes of the other strategy offer the slice; else the nodes', else the operator's."""
    placed = _place(candidate, config, inventory, mig_strategy)
    return replace(placed, platform=resolve_platform(config.platform, inventory))


def _place(
    candidate: Candidate, config: PlanningConfig, inventory: Inventory | None, mig_strategy: str | None
) -> Placement:
    accel = candidate.accelerator
    notes: list[str] = []
    if not accel.is_gpu:
        return Placement(candidate=candidate, mig_strategy=None, product="", notes=())
    if candidate.mig is not None:
        profile = candidate.mig.name
        strategy: str = mig_strategy or config.mig_strategy
        offers: tuple[Offer, ...] = ()
        if inventory is not None:
            offers = inventory.mig_offers(accel.type, profile, strategy)
            if not offers and mig_strategy is None:
                other = SINGLE if strategy == MIXED else MIXED
                other_offers = inventory.mig_offers(accel.type, profile, other)
                if other_offers:
                    notes.append(
                        f"MIG strategy {other}: the nodes offering {profile} use it (operator default "
                        f"{strategy})"
                    )
                    strategy, offers = other, other_offers
            if not offers:
                notes.append(f"no node offers {candidate.name} now; the pod waits until one does")
        if offers:
            product = _pick_product(offers, use_parent=True)
            candidate = _with_label_memory(candidate, offers)
        else:
            product = accel.canonical_product
        if strategy == SINGLE:
            product = mig_slice_product(product, profile)
        return Placement(candidate=candidate, mig_strategy=strategy, product=product, notes=tuple(notes))

    offers = inventory.gpu_offers(accel.type, min_count=candidate.count) if inventory is not None else ()
    if offers and all(o.provisioner is not None for o in offers):
        notes.append(
            f"no node has {candidate.count} {accel.type} GPU(s) now: a new node will be provisioned by "
            + "; or ".join(str(o.provisioner) for o in offers)
        )
    if offers:
        product = _pick_product(offers, use_parent=False)
        candidate = _with_label_memory(candidate, tuple(o for o in offers if o.product == product))
    else:
        product = accel.canonical_product
        if inventory is not None:
            notes.append(
                f"no node has {candidate.count} {accel.type} GPU(s) allocatable now; the pod waits for one"
            )
    return Placement(candidate=candidate, mig_strategy=None, product=product, notes=tuple(notes))


def is_present(candidate: Candidate, inventory: Inventory) -> bool:
    accel = candidate.accelerator
    if not accel.is_gpu:
        return bool(inventory.cpu_offers())
    if candidate.mig is not None:
        return bool(inventory.mig_offers(accel.type, candidate.mig.name))
    return len(inventory.gpu_offers(accel.type, min_count=candidate.count)) >= candidate.nodes


@dataclass(frozen=True)
class Scheduling:
    """Where a replica may run, in Kubernetes' terms: the extended resources it requests, and the node
    selector, affinity and tolerations that keep it on a node with that accelerator in a usable state."""

    resources: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    node_affinity: list[NodeSelectorTerm] = field(default_factory=list)
    tolerations: list[Toleration] = field(default_factory=list)


def scheduling_of(candidate: Candidate, placement: Placement) -> Scheduling:
    accel = candidate.accelerator
    if not accel.is_gpu:
        return Scheduling(node_selector={"kubernetes.io/arch": "amd64"})  # the CPU image is x86_64
    selection = gpu_node_selection(accel, candidate.mig, placement.platform, placement.product)
    where = Scheduling(node_selector=selection.node_selector, tolerations=[GPU_TOLERATION])
    requirements = list(selection.requirements)
    if candidate.mig is not None and placement.mig_strategy == MIXED and not selection.slices_as_gpus:
        where.resources[mig_resource_name(candidate.mig.name)] = "1"
    else:
        where.resources[GPU_RESOURCE] = str(candidate.count)
    if candidate.mig is not None:
        if selection.mig_manager:  # a slice: only on a node whose MIG configuration has been applied
            requirements.append(
                NodeSelectorRequirement(key=MIG_CONFIG_STATE_LABEL, operator="In", values=[MIG_STATE_SUCCESS])
            )
    elif accel.mig_profiles:  # a whole MIG-capable GPU: not on a node being repartitioned
        requirements.append(
            NodeSelectorRequirement(
                key=MIG_CONFIG_STATE_LABEL, operator="NotIn", values=list(MIG_NOT_READY_STATES)
            )
        )
    if requirements:
        where.node_affinity.append(NodeSelectorTerm(match_expressions=requirements))
    return where
