"""A scale-down removes the replica whose node can then go, and keeps provisioners off it while it drains."""

from __future__ import annotations

from typing import Any

from llama_operator.reconcile.scale_down import (
    DELETION_COST_ANNOTATION,
    DO_NOT_DISRUPT_ANNOTATION,
    SAFE_TO_EVICT_ANNOTATION,
    Replica,
    count_other_pods,
    scale_down_annotations,
)


def test_the_replica_on_the_emptiest_node_is_removed_first_and_protected_while_it_drains() -> None:
    replicas = [Replica("a", "busy"), Replica("b", "alone"), Replica("c", "shared")]
    others = {"busy": 5, "alone": 0, "shared": 2}

    annotations = scale_down_annotations(replicas, others, remove=1)

    assert {p: a[DELETION_COST_ANNOTATION] for p, a in annotations.items()} == {"a": "5", "b": "0", "c": "2"}
    assert annotations["b"][DO_NOT_DISRUPT_ANNOTATION] == "true"
    assert annotations["b"][SAFE_TO_EVICT_ANNOTATION] == "false"
    assert (
        DO_NOT_DISRUPT_ANNOTATION not in annotations["a"]
        and DO_NOT_DISRUPT_ANNOTATION not in annotations["c"]
    )


def test_two_removed_and_an_unscheduled_one_goes_before_any_running_one() -> None:
    replicas = [Replica("a", "busy"), Replica("p", None), Replica("c", "shared")]
    annotations = scale_down_annotations(replicas, {"busy": 5, "shared": 2}, remove=2)
    assert annotations["p"][DELETION_COST_ANNOTATION] == "-1"
    assert [p for p, a in sorted(annotations.items()) if DO_NOT_DISRUPT_ANNOTATION in a] == ["c", "p"]


def test_nothing_removed_marks_no_drain() -> None:
    annotations = scale_down_annotations([Replica("a", "n")], {"n": 1}, remove=0)
    assert annotations == {"a": {DELETION_COST_ANNOTATION: "1"}}


def test_a_nodes_other_pods_leave_out_the_service_daemonsets_and_terminating_ones() -> None:
    pods: list[dict[str, Any]] = [
        {"metadata": {"labels": {"llama-operator.dev/llamaservice": "chat"}}},
        {"metadata": {"ownerReferences": [{"kind": "DaemonSet", "name": "dcgm-exporter"}]}},
        {"metadata": {"deletionTimestamp": "2026-12-08T00:00:00Z"}},
        {"metadata": {"labels": {"app": "batch"}, "ownerReferences": [{"kind": "Job"}]}},
        {"metadata": {"labels": {"llama-operator.dev/llamaservice": "other"}}},
    ]
    assert count_other_pods(pods, "chat") == 2
