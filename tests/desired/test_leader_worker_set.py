"""A multi-node plan renders a LeaderWorkerSet (one group per replica) in place of the Deployment."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from llama_operator.api.resource import LlamaService, ObjectMeta, parse_spec
from llama_operator.api.settings import Settings
from llama_operator.desired.labels import SERVICE_LABEL
from llama_operator.desired.leader_worker_set import (
    LWS_API_VERSION,
    MULTI_NODE_SCRIPT,
    WORKER_OF_LABEL,
    build_leader_worker_set,
)
from llama_operator.desired.objects import build_desired_state
from llama_operator.planning import PlanningConfig, plan_service

LLAMA_405B = "meta-llama/Llama-3.1-405B-Instruct"


def service(**spec: Any) -> LlamaService:
    return LlamaService(
        metadata=ObjectMeta(name="big", namespace="team-a", uid="1234"),
        spec=parse_spec(
            {
                "model": {"name": LLAMA_405B},
                "accelerator": {"type": "h100-80gb", "count": 8, "nodes": 2},
                **spec,
            }
        ),
    )


def render(svc: LlamaService) -> dict[str, Any]:
    plan = plan_service(svc.spec, name=svc.metadata.name, config=PlanningConfig())
    desired = build_desired_state(svc, plan, Settings(), pod_monitor=False)
    kinds = [o["kind"] for o in desired.objects]
    assert "Deployment" not in kinds and ("apps/v1", "Deployment", "big") in desired.absent
    return next(o for o in desired.objects if o["kind"] == "LeaderWorkerSet")


def test_a_group_per_replica_with_the_ray_leader_serving_and_workers_joining() -> None:
    lws = render(service(replicas=3))
    assert lws["apiVersion"] == LWS_API_VERSION
    assert lws["metadata"]["ownerReferences"][0]["uid"] == "1234"
    spec = lws["spec"]
    assert spec["replicas"] == 3  # groups
    template = spec["leaderWorkerTemplate"]
    assert template["size"] == 2 and template["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    # The leader: Ray head sized to the group, then vLLM with both parallelisms and the Ray backend.
    script = leader["command"][2]
    head, _, serve = script.partition(" && exec ")
    assert head.startswith(f"bash {MULTI_NODE_SCRIPT} leader") and '"$LWS_GROUP_SIZE"' in head
    served = shlex.split(serve)
    for flag, value in (
        ("--tensor-parallel-size", "8"),
        ("--pipeline-parallel-size", "2"),
        ("--distributed-executor-backend", "ray"),
    ):
        assert served[served.index(flag) + 1] == value
    assert "readinessProbe" in leader and "args" not in leader
    # Workers: same image and GPUs, no HTTP, not selected by the Service.
    assert worker["command"][2] == (
        f'exec bash {MULTI_NODE_SCRIPT} worker --ray_port=6379 --ray_address="$LWS_LEADER_ADDRESS"'
    )
    assert worker["image"] == leader["image"]
    assert (
        worker["resources"]["limits"]["nvidia.com/gpu"]
        == "8"
        == leader["resources"]["limits"]["nvidia.com/gpu"]
    )
    assert "readinessProbe" not in worker and "args" not in worker
    assert SERVICE_LABEL not in template["workerTemplate"]["metadata"]["labels"]
    assert template["workerTemplate"]["metadata"]["labels"][WORKER_OF_LABEL] == "big"
    assert template["leaderTemplate"]["metadata"]["labels"][SERVICE_LABEL] == "big"


def test_an_autoscaled_group_count_is_left_to_the_autoscaler() -> None:
    lws = render(service(autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 4}))
    assert "replicas" not in lws["spec"]


def test_a_single_node_plan_is_no_group() -> None:
    svc = service()
    plan = plan_service(svc.spec, name="big", config=PlanningConfig()).model_copy(update={"nodes": 1})
    with pytest.raises(ValueError, match="several nodes"):
        build_leader_worker_set(svc, plan, Settings(), replicas=1, pod_monitor=False)


def test_back_on_one_node_the_groups_go() -> None:
    """A service moved from several nodes to one gets its Deployment, and its LeaderWorkerSet is removed
    (it would hold a group of nodes' GPUs for nothing)."""
    svc = LlamaService(
        metadata=ObjectMeta(name="big", namespace="team-a", uid="1234"),
        spec=parse_spec(
            {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "accelerator": {"type": "a10g"}}
        ),
    )
    plan = plan_service(svc.spec, name="big", config=PlanningConfig())
    desired = build_desired_state(svc, plan, Settings(), pod_monitor=False)
    assert [o["kind"] for o in desired.objects].count("Deployment") == 1
    assert (LWS_API_VERSION, "LeaderWorkerSet", "big") in desired.absent
