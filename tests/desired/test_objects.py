"""The desired-state builders: what every object must carry, independent of the planner."""

from __future__ import annotations

from typing import Any

import pytest

from llama_operator.api.plan import NodeSelectorRequirement, NodeSelectorTerm, Plan, Toleration
from llama_operator.api.resource import LlamaService, ObjectMeta, parse_spec
from llama_operator.api.settings import Settings
from llama_operator.desired.labels import SERVICE_LABEL
from llama_operator.desired.objects import build_desired_state
from llama_operator.desired.pod import PRESTOP_SLEEP_SECONDS, shutdown_timeout_seconds
from llama_operator.reconcile.drift import drifted

PLAN = Plan(
    accelerator="a100-80gb",
    mig="1g.10gb",
    mig_strategy="mixed",
    display_name="a100-80gb/1g.10gb",
    image="vllm/vllm-openai:v0.32.0",
    resources={"nvidia.com/mig-1g.10gb": "1"},
    node_selector={"nvidia.com/gpu.product": "A100-SXM4-80GB"},
    node_affinity=[
        NodeSelectorTerm(
            match_expressions=[
                NodeSelectorRequirement(key="nvidia.com/mig.config.state", operator="In", values=["success"])
            ]
        )
    ],
    tolerations=[Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
    vllm_args=["--model", "meta-llama/Llama-3.2-1B-Instruct", "--port", "8000"],
    vllm_env={"VLLM_EXAMPLE": "1"},
)


def service(**spec: Any) -> LlamaService:
    return LlamaService(
        metadata=ObjectMeta(name="chat", namespace="team-a", uid="1234"),
        spec=parse_spec({"model": {"name": "meta-llama/Llama-3.2-1B-Instruct"}, **spec}),
    )


def by_kind(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objs}


def test_every_object_is_owned_and_labelled() -> None:
    state = build_desired_state(service(replicas=2), PLAN, Settings(), pod_monitor=True)
    assert [o["kind"] for o in state.objects] == [
        "Service",
        "PodDisruptionBudget",
        "PodMonitor",
        "Deployment",
    ]
    for obj in state.objects:
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "serving.llama-operator.dev/v1alpha1",
            "kind": "LlamaService",
            "name": "chat",
            "uid": "1234",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert obj["metadata"]["labels"][SERVICE_LABEL] == "chat"
        assert obj["metadata"]["namespace"] == "team-a"


def test_deployment_shape() -> None:
    dep = by_kind(build_desired_state(service(replicas=3), PLAN, Settings(), pod_monitor=False).objects)[
        "Deployment"
    ]
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert {
        p: c[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe", "livenessProbe")
    } == dict.fromkeys(("startupProbe", "readinessProbe", "livenessProbe"), "/health")
    # The startup probe allows the whole model load; liveness stays strict.
    startup = c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"]
    assert startup >= Settings().startup_timeout_seconds
    assert c["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "A100-SXM4-80GB"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms[0]["matchExpressions"][0]["values"] == ["success"]
    assert pod["enableServiceLinks"] is False
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["terminationGracePeriodSeconds"] >= 60
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"


def test_token_secret_and_cache_claim() -> None:
    svc = service(
        model={
            "name": "meta-llama/Llama-3.2-1B-Instruct",
            "tokenSecretRef": {"name": "hf"},
            "cache": {"persistentVolumeClaim": "models"},
        }
    )
    dep = by_kind(build_desired_state(svc, PLAN, Settings(), pod_monitor=False).objects)["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert env["VLLM_EXAMPLE"]["value"] == "1"
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "models"}} in pod["volumes"]


def test_autoscaled_deployment_leaves_replicas_to_the_autoscaler() -> None:
    svc = service(autoscaling={"minReplicas": 1, "maxReplicas": 4})
    state = build_desired_state(svc, PLAN, Settings(), pod_monitor=False)
    assert "replicas" not in by_kind(state.objects)["Deployment"]["spec"]
    assert "PodDisruptionBudget" in by_kind(state.objects)


@pytest.mark.parametrize("replicas", [0, 1])
def test_single_replica_has_no_disruption_budget(replicas: int) -> None:
    state = build_desired_state(service(replicas=replicas), PLAN, Settings(), pod_monitor=False)
    assert "PodDisruptionBudget" not in by_kind(state.objects)
    assert ("policy/v1", "PodDisruptionBudget", "chat") in state.absent


def test_drift_detects_hand_edits_but_not_server_defaults() -> None:
    dep = by_kind(build_desired_state(service(replicas=2), PLAN, Settings(), pod_monitor=False).objects)[
        "Deployment"
    ]
    live = {
        **dep,
        "spec": {
            **dep["spec"],
            "progressDeadlineSeconds": dep["spec"]["progressDeadlineSeconds"],
            "paused": False,
        },
        "status": {"readyReplicas": 2},
    }
    assert not drifted(dep, live)
    edited = {**live, "spec": {**live["spec"], "replicas": 5}}
    assert drifted(dep, edited)
    assert drifted(dep, None)


def test_vllm_drains_within_the_grace_period() -> None:
    assert shutdown_timeout_seconds(120) == 120 - PRESTOP_SLEEP_SECONDS - 5
    assert shutdown_timeout_seconds(10) == 0  # no room: vLLM aborts, as it would by default


def test_platform_settings_reach_every_vllm_pod_and_the_pod_monitor() -> None:
    settings = Settings(
        image_pull_secrets=["regcred"],
        priority_class_name="gpu-serving",
        runtime_class_name="nvidia",
        pod_labels={"cost-center": "ml", "team": "platform"},
        pod_annotations={"example.com/owner": "ml"},
        pod_monitor_labels={"release": "kube-prometheus-stack"},
    )
    objs = by_kind(build_desired_state(service(replicas=2), PLAN, settings, pod_monitor=True).objects)
    template = objs["Deployment"]["spec"]["template"]
    assert template["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert template["spec"]["priorityClassName"] == "gpu-serving"
    assert template["spec"]["runtimeClassName"] == "nvidia"
    assert template["metadata"]["labels"]["cost-center"] == "ml"
    assert template["metadata"]["labels"][SERVICE_LABEL] == "chat"  # the selector label stays the operator's
    assert template["metadata"]["annotations"]["example.com/owner"] == "ml"
    assert objs["PodMonitor"]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert objs["PodMonitor"]["metadata"]["labels"][SERVICE_LABEL] == "chat"


def test_without_platform_settings_the_pod_has_none_of_them() -> None:
    spec = by_kind(build_desired_state(service(replicas=1), PLAN, Settings(), pod_monitor=False).objects)[
        "Deployment"
    ]["spec"]["template"]["spec"]
    assert not {"imagePullSecrets", "priorityClassName", "runtimeClassName"} & set(spec)


@pytest.mark.parametrize("field", ["pod_labels", "pod_monitor_labels"])
@pytest.mark.parametrize("key", ["llama-operator.dev/llamaservice", "app.kubernetes.io/name"])
def test_the_operators_own_labels_cannot_be_set_by_settings(field: str, key: str) -> None:
    with pytest.raises(ValueError, match="are the operator's own"):
        Settings.model_validate({field: {key: "x"}})
