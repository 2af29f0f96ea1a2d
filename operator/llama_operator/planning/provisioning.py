"""GPU capacity a node provisioner can create: Karpenter NodePools (`karpenter.sh/v1`), read as plain dicts.

A NodePool offers a GPU when the nodes it may launch carry the labels a vLLM pod selects that GPU by on the
cluster's platform (catalog/platforms.py): its template's labels and requirements (`spec.template.metadata.
labels`, `spec.template.spec.requirements`: In, NotIn, Exists, DoesNotExist, Gt, Lt) admit every one of
them and pin at least one (a NodePool that says nothing of GPUs is not taken to launch them: instance
categories and families outside the labels are not modelled). Its `spec.limits` of `nvidia.com/gpu`, less
what its nodes hold already (`status.resources`), bounds how many GPUs it can still add; `spec.weight`
orders NodePools as Karpenter does (the highest first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llama_operator.catalog.accelerators import Accelerator, Catalog
from llama_operator.catalog.platforms import EKS_GPU_COUNT_LABEL, NodeLabels, Platform

KARPENTER_API_VERSION = "karpenter.sh/v1"
NODEPOOL_KIND = "NodePool"
GPU_RESOURCE = "nvidia.com/gpu"
# Without a bound on GPUs per instance (karpenter.k8s.aws/instance-gpu-count), the largest GPU instances of
# each model carry 8 (AWS's g4dn.metal, g5/g6/g6e.48xlarge, p4d, p5; GKE's a2/a3 -8g; Azure's ND96).
MAX_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class ProvisionableGpu:
    """A GPU model a NodePool can launch nodes with: up to `gpus_per_node` on one node, and at most
    `remaining_gpus` more in all (None: no GPU limit)."""

    nodepool: str
    weight: int
    accelerator: str
    gpus_per_node: int
    remaining_gpus: int | None

    @property
    def describe(self) -> str:
        limit = "" if self.remaining_gpus is None else f", {self.remaining_gpus} GPU(s) left under its limit"
        return f"Karpenter NodePool {self.nodepool} (weight {self.weight}{limit})"


@dataclass(frozen=True)
class NodePoolReading:
    offers: tuple[ProvisionableGpu, ...]
    skipped: tuple[tuple[str, str], ...]  # (NodePool, why it offers no GPU)


def is_nodepool(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == NODEPOOL_KIND and str(obj.get("apiVersion", "")).startswith("karpenter.sh/")


def _quantity(value: Any) -> int | None:
    try:
        return int(float(str(value)))
    except ValueError:
        return None


def _admits(requirement: Mapping[str, Any], value: str) -> bool:
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return True
    if operator == "DoesNotExist":
        return False
    number = _quantity(value)
    bound = _quantity(values[0]) if values else None
    if number is None or bound is None:
        return False
    return number > bound if operator == "Gt" else number < bound if operator == "Lt" else False


@dataclass(frozen=True)
class _Template:
    labels: Mapping[str, str]
    requirements: tuple[Mapping[str, Any], ...]

    def admits(self, key: str, value: str) -> bool:
        if key in self.labels:
            return self.labels[key] == value
        return all(_admits(r, value) for r in self.requirements if r.get("key") == key)

    def pins(self, key: str) -> bool:
        """Whether the NodePool constrains `key` to named values (a label, or an In requirement)."""
        return key in self.labels or any(
            r.get("key") == key and r.get("operator") == "In" for r in self.requirements
        )

    def gpus_per_node(self) -> int:
        bound = MAX_GPUS_PER_NODE
        for r in self.requirements:
            if r.get("key") != EKS_GPU_COUNT_LABEL:
                continue
            values = [n for v in r.get("values") or [] if (n := _quantity(v)) is not None]
            if r.get("operator") == "In" and values:
                bound = min(bound, max(values))
            elif r.get("operator") == "Lt" and values:
                bound = min(bound, values[0] - 1)
        if EKS_GPU_COUNT_LABEL in self.labels:
            bound = min(bound, _quantity(self.labels[EKS_GPU_COUNT_LABEL]) or 0)
        return bound


def _selection(accel: Accelerator, platform: Platform) -> NodeLabels | None:
    if platform is Platform.GFD:
        return NodeLabels(labels={"nvidia.com/gpu.product": accel.canonical_product})
    return accel.node_labels.get(platform)


def _offers_accelerator(template: _Template, selection: NodeLabels) -> bool:
    exact = all(template.admits(k, v) for k, v in selection.labels.items())
    one_of = all(any(template.admits(k, v) for v in values) for k, values in selection.one_of.items())
    pinned = any(template.pins(k) for k in [*selection.labels, *selection.one_of])
    return exact and one_of and pinned


def read_nodepools(
    nodepools: Iterable[Mapping[str, Any]], catalog: Catalog, platform: Platform
) -> NodePoolReading:
    """The GPUs each NodePool can launch on `platform`, and the NodePools that can launch none (and why)."""
    offers: list[ProvisionableGpu] = []
    skipped: list[tuple[str, str]] = []
    for pool in nodepools:
        name = str((pool.get("metadata") or {}).get("name", "<unnamed>"))
        spec = pool.get("spec") or {}
        template_spec = (spec.get("template") or {}).get("spec") or {}
        template = _Template(
            labels={
                str(k): str(v)
                for k, v in (((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}).items()
            },
            requirements=tuple(template_spec.get("requirements") or []),
        )
        limit = (
            _quantity((spec.get("limits") or {}).get(GPU_RESOURCE))
            if (spec.get("limits") or {}).get(GPU_RESOURCE) is not None
            else None
        )
        used = _quantity(((pool.get("status") or {}).get("resources") or {}).get(GPU_RESOURCE, 0)) or 0
        remaining = None if limit is None else max(0, limit - used)
        found = [
            accel
            for accel in catalog.accelerators.values()
            if accel.is_gpu
            and (selection := _selection(accel, platform)) is not None
            and _offers_accelerator(template, selection)
        ]
        if not found:
            skipped.append((name, f"its requirements name no GPU of the catalog by {platform} labels"))
            continue
        if remaining == 0:
            skipped.append((name, f"its {GPU_RESOURCE} limit is reached ({used} of {limit})"))
            continue
        per_node = template.gpus_per_node()
        weight = int(spec.get("weight") or 0)
        offers += [
            ProvisionableGpu(
                nodepool=name,
                weight=weight,
                accelerator=accel.type,
                gpus_per_node=per_node if remaining is None else min(per_node, remaining),
                remaining_gpus=remaining,
            )
            for accel in found
        ]
    offers.sort(key=lambda o: (-o.weight, o.nodepool, o.accelerator))
    return NodePoolReading(offers=tuple(offers), skipped=tuple(skipped))


@dataclass(frozen=True)
class ReplicaCapacity:
    """How many replicas of `gpus_per_replica` GPUs the existing nodes and the NodePools' limits allow."""

    replicas: int
    on_nodes: int  # GPUs of the model the nodes have now
    under_limits: int  # GPUs the NodePools that create the model may still add
    nodepools: tuple[str, ...]

    def message(self, accelerator: str, gpus_per_replica: int, wanted: int) -> str:
        return (
            f"{wanted} replicas need {wanted * gpus_per_replica} {accelerator} GPU(s); the nodes have "
            f"{self.on_nodes} and the GPU limit of NodePool {', '.join(self.nodepools)} leaves "
            f"{self.under_limits} more: at most {self.replicas} replica(s) can run (raise the NodePool's "
            "spec.limits, or lower maxReplicas)"
        )


def replica_capacity(
    provisionable: Iterable[ProvisionableGpu],
    node_gpus: Iterable[int],
    accelerator: str,
    gpus_per_replica: int,
) -> ReplicaCapacity | None:
    """The replicas the GPU model allows in all, where NodePools create it and every one of them has a GPU
    limit (None otherwise: nothing bounds it that the operator can see). `node_gpus`: the model's GPUs
    allocatable on each existing node (a replica does not span nodes)."""
    pools = [p for p in provisionable if p.accelerator == accelerator]
    if not pools or any(p.remaining_gpus is None for p in pools):
        return None
    per_node = list(node_gpus)
    by_pool = {p.nodepool: p.remaining_gpus or 0 for p in pools}
    replicas = sum(n // gpus_per_replica for n in per_node) + sum(
        left // gpus_per_replica for left in by_pool.values()
    )
    return ReplicaCapacity(
        replicas=replicas,
        on_nodes=sum(per_node),
        under_limits=sum(by_pool.values()),
        nodepools=tuple(sorted(by_pool)),
    )


def nodeclaims_on_the_way(
    nodeclaims: Iterable[Mapping[str, Any]], node_selector: Mapping[str, str]
) -> tuple[str, ...]:
    """The Karpenter NodeClaims whose node has not joined yet (not Initialized, not being deleted) and will
    carry every label of `node_selector`: the nodes a Pending pod with that selector may be waiting for."""
    found = []
    for claim in nodeclaims:
        meta = claim.get("metadata") or {}
        if claim.get("initialized") or meta.get("deletionTimestamp"):
            continue
        node = _Template(
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            requirements=tuple((claim.get("spec") or {}).get("requirements") or []),
        )
        if all(node.admits(k, v) for k, v in node_selector.items()):
            found.append(str(meta.get("name", "")))
    return tuple(sorted(found))


def nodepools_admitting(
    nodepools: Iterable[Mapping[str, Any]], node_selector: Mapping[str, str]
) -> tuple[str, ...]:
    """The Karpenter NodePools that can still create a node carrying every label of `node_selector` (their
    template admits it, naming at least one of its keys, and their GPU limit is not reached): a Pending pod
    with that selector is Karpenter's to provision, within its batching window."""
    found = []
    for pool in nodepools:
        spec = pool.get("spec") or {}
        template = spec.get("template") or {}
        node = _Template(
            labels={
                str(k): str(v) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()
            },
            requirements=tuple((template.get("spec") or {}).get("requirements") or []),
        )
        limit = (spec.get("limits") or {}).get(GPU_RESOURCE)
        used = _quantity(((pool.get("status") or {}).get("resources") or {}).get(GPU_RESOURCE, 0)) or 0
        full = limit is not None and (_quantity(limit) or 0) <= used
        if (
            not full
            and any(node.pins(k) for k in node_selector)
            and all(node.admits(k, v) for k, v in node_selector.items())
        ):
            found.append(str((pool.get("metadata") or {}).get("name", "")))
    return tuple(sorted(found))
