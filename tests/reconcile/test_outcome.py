"""Reconcile as a pure function: a good spec yields objects and a plan; a bad one a Degraded status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from llama_operator.api.settings import Settings
from llama_operator.desired.objects import ActivatorRoute
from llama_operator.planning import inventory_from_nodes
from llama_operator.reconcile.outcome import reconcile
from llama_operator.reconcile.rollout import rollout_status

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": "u-1", "generation": 3},
        "spec": {"model": {"name": "meta-llama/Llama-3.2-1B-Instruct"}, **spec},
    }


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_good_spec_plans_and_builds() -> None:
    outcome = reconcile(
        body(accelerator={"type": "t4"}), Settings(), inventory=None, pod_monitor=False, now=NOW
    )
    assert outcome.error is None
    assert outcome.desired is not None
    assert [o["kind"] for o in outcome.desired.objects] == ["Service", "Deployment"]
    status = outcome.status_patch
    assert status["observedGeneration"] == 3
    assert status["plan"]["accelerator"] == "t4"
    assert status["selector"] == "llama-operator.dev/llamaservice=chat"
    assert conditions(status)["Degraded"]["status"] == "False"


def test_plan_failure_is_degraded_with_the_planners_message() -> None:
    outcome = reconcile(
        body(accelerator={"type": "t4"}, engine={"quantization": "fp8"}),
        Settings(),
        inventory=None,
        pod_monitor=False,
        now=NOW,
    )
    assert outcome.desired is None
    assert outcome.error is not None and "fp8" in outcome.error
    cond = conditions(outcome.status_patch)
    assert cond["Degraded"]["status"] == "True"
    assert cond["Degraded"]["reason"] == "PlanningFailed"
    assert cond["Degraded"]["message"] == outcome.error
    assert outcome.status_patch["phase"] == "Failed"


def test_invalid_spec_is_reported_not_raised() -> None:
    outcome = reconcile(
        body(autoscaling={"minReplicas": 5, "maxReplicas": 2}),
        Settings(),
        inventory=None,
        pod_monitor=False,
        now=NOW,
    )
    assert outcome.desired is None
    assert conditions(outcome.status_patch)["Degraded"]["reason"] == "InvalidSpec"
    assert "minReplicas" in (outcome.error or "")


def test_condition_transition_time_moves_only_on_change() -> None:
    first = reconcile(
        body(accelerator={"type": "t4"}), Settings(), inventory=None, pod_monitor=False, now=NOW
    )
    later = datetime(2026, 12, 2, 13, 0, tzinfo=UTC)
    again = reconcile(
        {**body(accelerator={"type": "t4"}), "status": first.status_patch},
        Settings(),
        inventory=None,
        pod_monitor=False,
        now=later,
    )
    assert conditions(again.status_patch)["Degraded"]["lastTransitionTime"] == "2026-12-02T12:00:00Z"


def deployment(replicas: int, ready: int, updated: int) -> dict[str, Any]:
    return {
        "metadata": {"generation": 2},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": 2, "readyReplicas": ready, "updatedReplicas": updated},
    }


def test_rollout_ready_and_progressing() -> None:
    ready = rollout_status(None, deployment(2, 2, 2), [], generation=3, now=NOW)
    assert ready["phase"] == "Ready"
    assert (ready["replicas"], ready["readyReplicas"]) == (2, 2)
    rolling = rollout_status(None, deployment(2, 1, 1), [], generation=3, now=NOW)
    assert rolling["phase"] == "Progressing"
    assert conditions(rolling)["Progressing"]["status"] == "True"


# A pod the scheduler could not place, as the API server reports it.
UNSCHEDULABLE_POD = {
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/9 nodes are available: 2 Insufficient nvidia.com/gpu.",
            }
        ],
    }
}


def test_unschedulable_pods_name_the_short_resource() -> None:
    status = rollout_status(None, deployment(3, 2, 2), [UNSCHEDULABLE_POD], generation=3, now=NOW)
    cond = conditions(status)
    assert cond["Schedulable"]["status"] == "False"
    assert "Insufficient nvidia.com/gpu" in cond["Schedulable"]["message"]
    assert "Insufficient nvidia.com/gpu" in cond["Progressing"]["message"]


def test_rollout_leaves_a_degraded_spec_alone() -> None:
    bad = reconcile(
        body(autoscaling={"minReplicas": 5, "maxReplicas": 2}),
        Settings(),
        inventory=None,
        pod_monitor=False,
        now=NOW,
    )
    assert rollout_status(bad.status_patch, deployment(1, 1, 1), [], generation=3, now=NOW) == {}


def _l4_nodepool(limit: int, used: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu-l4"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["l4"]}
                    ]
                }
            },
            "limits": {"nvidia.com/gpu": str(limit)},
        },
        "status": {"resources": {"nvidia.com/gpu": str(used)}},
    }


def test_a_nodepool_gpu_limit_below_max_replicas_is_a_condition_and_raising_it_clears_it() -> None:
    service = body(
        accelerator={"type": "auto"},
        autoscaling={"minReplicas": 1, "maxReplicas": 6, "slo": {"ttftSeconds": 1.0}},
    )
    limited = reconcile(
        service,
        Settings(),
        inventory=inventory_from_nodes([_l4_nodepool(limit=4, used=1)]),
        pod_monitor=False,
        now=NOW,
    )
    capacity = conditions(limited.status_patch)["CapacityLimited"]
    assert capacity["status"] == "True", capacity
    assert capacity["reason"] == "NodePoolLimit"
    assert "at most 3 replica(s)" in capacity["message"]
    assert "NodePool gpu-l4" in capacity["message"]

    service["status"] = limited.status_patch
    raised = reconcile(
        service,
        Settings(),
        inventory=inventory_from_nodes([_l4_nodepool(limit=16)]),
        pod_monitor=False,
        now=NOW,
    )
    assert conditions(raised.status_patch)["CapacityLimited"]["status"] == "False"


def test_no_nodepool_no_capacity_condition() -> None:
    outcome = reconcile(body(), Settings(), inventory=None, pod_monitor=False, now=NOW)
    assert "CapacityLimited" not in conditions(outcome.status_patch)


def test_status_gives_the_services_base_url_and_the_routers_where_it_serves() -> None:
    outcome = reconcile(
        body(accelerator={"type": "t4"}), Settings(), inventory=None, pod_monitor=False, now=NOW
    )
    assert outcome.status_patch["url"] == "http://chat.team-a.svc:8000/v1"
    # The Service the url names listens on that port.
    assert outcome.desired is not None
    (service,) = [o for o in outcome.desired.objects if o["kind"] == "Service"]
    assert service["metadata"]["name"] == "chat" and service["spec"]["ports"][0]["port"] == 8000
    assert (
        outcome.status_patch["routerUrl"] is None
    )  # no router deployed: nothing to name (and a stale one goes)
    with_router = Settings(activator_service="llm-activator", activator_namespace="llm-system")
    routed = reconcile(
        body(accelerator={"type": "t4"}),
        with_router,
        inventory=None,
        pod_monitor=False,
        now=NOW,
        activator=ActivatorRoute(addresses=("10.0.0.7",), port=8000),
    )
    assert routed.status_patch["routerUrl"] == "http://llm-activator.llm-system.svc:8000/v1"
    # Configured but no router pod ready: it serves nothing now.
    idle = reconcile(
        body(accelerator={"type": "t4"}), with_router, inventory=None, pod_monitor=False, now=NOW
    )
    assert idle.status_patch["routerUrl"] is None


def test_a_refused_spec_leaves_the_urls_as_they_were() -> None:
    outcome = reconcile(
        body(accelerator={"type": "no-such-gpu"}), Settings(), inventory=None, pod_monitor=False, now=NOW
    )
    assert "url" not in outcome.status_patch and "routerUrl" not in outcome.status_patch


def _nodeclaim(name: str, gpu_name: str, *, initialized: bool = False) -> dict[str, Any]:
    """A Karpenter NodeClaim as the operator indexes it (handlers/indexes.py nodeclaim_facts)."""
    return {
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "gpu-l4"}, "deletionTimestamp": None},
        "spec": {
            "requirements": [
                {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": [gpu_name]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g6.2xlarge"]},
            ]
        },
        "initialized": initialized,
    }


WAITING_FOR_AN_L4 = {
    **UNSCHEDULABLE_POD,
    "spec": {"nodeSelector": {"karpenter.k8s.aws/instance-gpu-name": "l4"}},
}


def test_a_replica_waiting_for_a_node_being_created_is_loading_not_degraded() -> None:
    status = rollout_status(
        None,
        deployment(1, 0, 1),
        [WAITING_FOR_AN_L4],
        generation=3,
        now=NOW,
        nodeclaims=[_nodeclaim("gpu-l4-abcde", "l4")],
    )
    assert status["phase"] == "Progressing"
    cond = conditions(status)
    assert (cond["Schedulable"]["status"], cond["Schedulable"]["reason"]) == ("False", "NodeProvisioning")
    assert "gpu-l4-abcde" in cond["Schedulable"]["message"]
    assert cond["Progressing"]["reason"] == "NodeProvisioning"


def test_a_replica_no_node_being_created_will_take_is_reported() -> None:
    for claims in ([], [_nodeclaim("gpu-t4-x", "t4")], [_nodeclaim("gpu-l4-y", "l4", initialized=True)]):
        status = rollout_status(
            None, deployment(1, 0, 1), [WAITING_FOR_AN_L4], generation=3, now=NOW, nodeclaims=claims
        )
        assert status["phase"] == "Degraded", claims
        assert conditions(status)["Schedulable"]["reason"] == "Unschedulable"


def test_a_replica_a_nodepool_will_create_a_node_for_is_loading_before_its_nodeclaim_exists() -> None:
    pool = {
        "metadata": {"name": "gpu-l4"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["l4"]}
                    ]
                }
            },
            "limits": {"nvidia.com/gpu": "4"},
        },
        "status": {"resources": {"nvidia.com/gpu": "1"}},
    }
    status = rollout_status(
        None, deployment(1, 0, 1), [WAITING_FOR_AN_L4], generation=3, now=NOW, nodepools=[pool]
    )
    assert status["phase"] == "Progressing"
    assert "NodePool gpu-l4" in conditions(status)["Schedulable"]["message"]
    full = {**pool, "status": {"resources": {"nvidia.com/gpu": "4"}}}
    status = rollout_status(
        None, deployment(1, 0, 1), [WAITING_FOR_AN_L4], generation=3, now=NOW, nodepools=[full]
    )
    assert status["phase"] == "Degraded"
