"""A multi-node LlamaService's replicas are LeaderWorkerSet groups: the autoscaler reads its counts and writes
its spec.replicas (whole groups), under the same uid check and field manager as a Deployment's."""

from __future__ import annotations

from typing import Any, cast

import kopf

from llama_operator.handlers.autoscaler import AutoscalerMemory, autoscale_cycle
from llama_operator.handlers.indexes import Indexes
from tests.handlers.test_autoscaler_cycle import NOW, RecordingKube, deployment, memo, service


def leader_worker_set(name: str, groups: int) -> dict[str, Any]:
    lws = deployment(name, groups)
    lws["apiVersion"], lws["kind"] = "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"
    lws["metadata"]["uid"] = f"lws-{name}"
    return lws


class KindRecordingKube(RecordingKube):
    def __init__(self) -> None:
        super().__init__(refuse=set())
        self.kinds: dict[str, tuple[str, str]] = {}

    def apply(self, manifest: Any, *, field_manager: str, uid: str) -> dict[str, Any]:
        self.kinds[manifest["metadata"]["name"]] = (manifest["apiVersion"], manifest["kind"])
        return super().apply(manifest, field_manager=field_manager, uid=uid)


def test_the_autoscaler_scales_a_leader_worker_set_by_whole_groups() -> None:
    kube = KindRecordingKube()
    big = service("big")
    big["spec"]["accelerator"] = {"type": "h100-80gb", "count": 8, "nodes": 2}
    big["spec"]["model"] = {"name": "meta-llama/Llama-3.1-405B-Instruct"}
    kube.bodies = {"big": big}

    def index(content: dict[Any, list[dict[str, Any]]]) -> Any:
        return cast("kopf.Index[Any, dict[str, Any]]", content)

    fleet = Indexes(
        llamaservices=index({("team", "big"): [big]}),
        nodes=index({}),
        pods=index({}),
        deployments=index({}),  # a multi-node service has no Deployment
        services=index({}),
        pdbs=index({}),
        pod_monitors=index({}),
        endpoint_slices=index({}),
        leader_worker_sets=index({("team", "big"): [leader_worker_set("big", 1)]}),
    )
    assert fleet.workload(("team", "big"), "uid-big") is not None
    # One group, below minReplicas 2: the cycle brings a second group, on the LeaderWorkerSet.
    report = autoscale_cycle(memo(kube), fleet, AutoscalerMemory(), now=NOW)
    assert kube.replicas == {"big": 2} and report.replica_writes == 1
    assert kube.kinds["big"] == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
