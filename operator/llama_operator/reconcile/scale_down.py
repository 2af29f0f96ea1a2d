"""Which replica a scale-down removes, so that a node provisioner can then remove its node.

The ReplicaSet controller deletes the pods with the lowest `controller.kubernetes.io/pod-deletion-cost`
first (among equally ready ones): each replica's cost is the number of other pods on its node, so the
replica removed is the one whose node is emptiest and can go once it has drained (Karpenter's and the
cluster autoscaler's consolidation remove empty nodes). The replicas about to go are also marked so that
neither provisioner evicts them while they drain their requests (`karpenter.sh/do-not-disrupt`, the
cluster autoscaler's `safe-to-evict: "false"`). Pure: the pods and the counts come in as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SERVICE_LABEL = "llama-operator.dev/llamaservice"


def count_other_pods(pods_on_node: Iterable[Mapping[str, Any]], service: str) -> int:
    """The pods on a node that keep it from being removed once this service's replica has left: not the
    service's own, not a DaemonSet's (consolidation ignores those), not already terminating."""
    count = 0
    for pod in pods_on_node:
        meta = pod.get("metadata") or {}
        owners = meta.get("ownerReferences") or meta.get("owner_references") or []
        daemon = any((o.get("kind") == "DaemonSet") for o in owners)
        mine = (meta.get("labels") or {}).get(SERVICE_LABEL) == service
        if not (daemon or mine or meta.get("deletionTimestamp")):
            count += 1
    return count


@dataclass(frozen=True)
class Replica:
    pod: str
    node: str | None  # None: not scheduled (the ReplicaSet deletes those first anyway)


def scale_down_annotations(
    replicas: Sequence[Replica], other_pods_on_node: Mapping[str, int], remove: int
) -> dict[str, dict[str, str]]:
    """Annotations per pod before `remove` replicas are taken away: every replica's deletion cost (the other
    pods on its node), and the drain protection on the `remove` cheapest (fewest others first, then by name:
    the order the ReplicaSet controller follows for equal costs is its own, so ties are rare by design)."""
    costs = {r.pod: other_pods_on_node.get(r.node, 0) if r.node is not None else -1 for r in replicas}
    leaving = sorted(replicas, key=lambda r: (costs[r.pod], r.pod))[: max(0, remove)]
    annotations = {pod: {DELETION_COST_ANNOTATION: str(cost)} for pod, cost in costs.items()}
    for replica in leaving:
        annotations[replica.pod][DO_NOT_DISRUPT_ANNOTATION] = "true"
        annotations[replica.pod][SAFE_TO_EVICT_ANNOTATION] = "false"
    return annotations
