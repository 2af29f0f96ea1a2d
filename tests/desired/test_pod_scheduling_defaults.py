"""The platform's scheduling defaults for vLLM pods (config.podNodeSelector, podTolerations, podAffinity)
reach every Deployment the operator builds, combined with the planner's placement, never replacing it."""

from __future__ import annotations

from typing import Any

from llama_operator.api.settings import Settings
from llama_operator.desired.objects import build_desired_state
from tests.desired.test_objects import PLAN, by_kind, service

DEDICATED = {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}
ZONE_TERM = {
    "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}]
}
SPOT_TERM = {"matchExpressions": [{"key": "spot", "operator": "NotIn", "values": ["true"]}]}


def pod_spec(settings: Settings) -> dict[str, Any]:
    state = build_desired_state(service(replicas=1), PLAN, settings, pod_monitor=True)
    spec: dict[str, Any] = by_kind(state.objects)["Deployment"]["spec"]["template"]["spec"]
    return spec


def test_defaults_change_nothing() -> None:
    spec = pod_spec(Settings())
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "A100-SXM4-80GB"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_node_selector_and_tolerations_are_added_to_the_plans() -> None:
    spec = pod_spec(
        Settings.model_validate(
            {
                "podNodeSelector": {"pool": "inference", "nvidia.com/gpu.product": "other"},
                "podTolerations": [DEDICATED],
            }
        )
    )
    # The planner's product label wins: the plan was sized for that GPU.
    assert spec["nodeSelector"] == {"pool": "inference", "nvidia.com/gpu.product": "A100-SXM4-80GB"}
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        DEDICATED,
    ]


def test_required_node_terms_must_all_hold() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [ZONE_TERM, SPOT_TERM]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": SPOT_TERM}],
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    spec = pod_spec(Settings.model_validate({"podAffinity": affinity}))
    node = spec["affinity"]["nodeAffinity"]
    terms = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    mig_ready = {"key": "nvidia.com/mig.config.state", "operator": "In", "values": ["success"]}
    # Terms are ORed, expressions in a term ANDed: the MIG condition joins each of the platform's terms.
    assert terms == [
        {"matchExpressions": [mig_ready, *ZONE_TERM["matchExpressions"]]},
        {"matchExpressions": [mig_ready, *SPOT_TERM["matchExpressions"]]},
    ]
    assert node["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 1, "preference": SPOT_TERM}]
    assert spec["affinity"]["podAntiAffinity"] == affinity["podAntiAffinity"]


def test_auto_chooses_among_the_nodes_the_pods_may_land_on() -> None:
    """With config.podNodeSelector the vLLM pods land only in that pool: auto plans for its GPUs, not for
    a cheaper one outside it (the pod would stay Pending)."""
    from llama_operator.planning.inventory import inventory_from_nodes  # noqa: PLC0415
    from tests.planning.builders import gpu_node, plan, spec  # noqa: PLC0415

    t4, l4 = gpu_node("t4", "Tesla-T4", 1), gpu_node("l4", "NVIDIA-L4", 1)
    l4["metadata"]["labels"]["pool"] = "inference"
    assert plan(spec(), inventory=inventory_from_nodes([t4, l4])).accelerator == "t4"
    pool = inventory_from_nodes([t4, l4], node_selector={"pool": "inference"})
    assert plan(spec(), inventory=pool).accelerator == "l4"
    assert any(s.node == "t4" and "podNodeSelector" in s.reason for s in pool.skipped)
