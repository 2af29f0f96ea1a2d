"""What shortens a replica's start: the compile cache on the cache volume, the node-local cache, and the
stage DaemonSet that pre-pulls the image and stages the weights on the accelerator's nodes."""

from __future__ import annotations

from typing import Any

import pytest

from llama_operator.api.resource import InvalidSpecError, parse_spec
from llama_operator.api.settings import Settings
from llama_operator.desired.labels import SERVICE_LABEL, selector_labels
from llama_operator.desired.objects import build_desired_state
from llama_operator.desired.pod import build_pod_template
from llama_operator.desired.staging import STAGE_LABEL, build_stage_daemonset, stage_name
from llama_operator.reconcile.ownership import controller_uid
from tests.desired.test_objects import PLAN, service


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container["env"]}


def _pod(**cache: Any) -> dict[str, Any]:
    svc = service(model={"name": "meta-llama/Llama-3.2-1B-Instruct", "cache": cache})
    spec: dict[str, Any] = build_pod_template(svc, PLAN, Settings(), pod_monitor=False)["spec"]
    return spec


def test_compile_cache_lives_on_the_model_cache_volume() -> None:
    spec = _pod(persistentVolumeClaim="weights")
    (container,) = spec["containers"]
    assert _env(container)["VLLM_CACHE_ROOT"] == "/models/vllm"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/models"]]["persistentVolumeClaim"] == {"claimName": "weights"}


def test_node_local_cache_is_a_host_path_per_namespace_handed_to_the_vllm_user() -> None:
    spec = _pod(nodeLocal=True)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["model-cache"]["hostPath"] == {
        "path": "/var/lib/llama-operator/models/team-a",
        "type": "DirectoryOrCreate",
    }
    (owner,) = spec["initContainers"]
    assert owner["command"] == ["chown", "1000:1000", "/models"]
    assert owner["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert owner["securityContext"]["allowPrivilegeEscalation"] is False


def test_without_node_local_there_is_no_init_container_nor_host_path() -> None:
    spec = _pod(sizeLimit="20Gi")
    assert "initContainers" not in spec
    assert not any("hostPath" in v for v in spec["volumes"])


def test_node_local_and_a_claim_exclude_each_other() -> None:
    with pytest.raises(InvalidSpecError, match=r"nodeLocal and model\.cache\.persistentVolumeClaim"):
        parse_spec({"model": {"name": "m", "cache": {"nodeLocal": True, "persistentVolumeClaim": "w"}}})


def test_stage_daemonset_pre_pulls_the_plan_image_on_the_plan_nodes() -> None:
    svc = service()
    ds = build_stage_daemonset(svc, PLAN, Settings(pod_tolerations=[{"key": "x", "operator": "Exists"}]))
    assert ds["kind"] == "DaemonSet"
    assert ds["metadata"]["name"] == "chat-stage"
    assert ds["metadata"]["ownerReferences"][0]["uid"] == "1234"
    pod = ds["spec"]["template"]["spec"]
    (hold,) = pod["containers"]
    assert hold["image"] == PLAN.image
    assert hold["command"] == ["sleep", "infinity"]
    assert pod["nodeSelector"] == PLAN.node_selector
    assert {"key": "x", "operator": "Exists"} in pod["tolerations"]
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ] == [t.to_wire() for t in PLAN.node_affinity]
    # Image only: no weights staged, no host path.
    assert "initContainers" not in pod
    assert not any("hostPath" in v for v in pod["volumes"])


def test_stage_pods_are_never_selected_as_replicas() -> None:
    ds = build_stage_daemonset(service(), PLAN, Settings())
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert SERVICE_LABEL not in labels
    assert not set(selector_labels("chat").items()) <= set(labels.items())
    assert ds["spec"]["selector"]["matchLabels"] == {STAGE_LABEL: "chat"}
    # The DaemonSet itself carries the service's label: the operator's watch and index select on it.
    assert ds["metadata"]["labels"][SERVICE_LABEL] == "chat"


def test_stage_daemonset_downloads_the_weights_into_the_node_local_cache() -> None:
    svc = service(
        model={
            "name": "meta-llama/Llama-3.2-1B-Instruct",
            "revision": "abc123",
            "tokenSecretRef": {"name": "hf", "key": "token"},
            "cache": {"nodeLocal": True},
        }
    )
    pod = build_stage_daemonset(svc, PLAN, Settings())["spec"]["template"]["spec"]
    owner, download = pod["initContainers"]
    assert owner["name"] == "node-cache-owner"
    env = {e["name"]: e for e in download["env"]}
    assert env["MODEL"]["value"] == "meta-llama/Llama-3.2-1B-Instruct"
    assert env["REVISION"]["value"] == "abc123"
    assert env["HF_HOME"]["value"] == "/models/hf"
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert download["securityContext"]["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    # The very directory the replicas mount: what the stage writes, vLLM reads.
    replica = build_pod_template(svc, PLAN, Settings(), pod_monitor=False)["spec"]
    replica_volumes = {v["name"]: v for v in replica["volumes"]}
    assert volumes["model-cache"]["hostPath"] == replica_volumes["model-cache"]["hostPath"]
    (vllm,) = replica["containers"]
    assert _env(vllm)["HF_HOME"] == env["HF_HOME"]["value"]


NODE_LOCAL = {"name": "meta-llama/Llama-3.2-1B-Instruct", "cache": {"nodeLocal": True}}


def test_no_revision_is_no_variable_rather_than_an_empty_one() -> None:
    # The API server drops an empty value: the live object would never match it, a write every reconcile.
    pod = build_stage_daemonset(service(model=NODE_LOCAL), PLAN, Settings())["spec"]["template"]["spec"]
    env = pod["initContainers"][1]["env"]
    assert "REVISION" not in {e["name"] for e in env}
    assert all(e.get("value") != "" for e in env)


def test_node_local_desired_state_applies_the_stage_daemonset_before_the_replicas() -> None:
    svc = service(model=NODE_LOCAL, replicas=2)
    state = build_desired_state(svc, PLAN, Settings(), pod_monitor=False)
    kinds = [o["kind"] for o in state.objects]
    assert kinds == ["Service", "PodDisruptionBudget", "DaemonSet", "Deployment"]
    ds = state.objects[kinds.index("DaemonSet")]
    assert ds == build_stage_daemonset(svc, PLAN, Settings())
    assert ds["metadata"]["name"] == stage_name(svc) == "chat-stage"
    assert ("apps/v1", "DaemonSet", "chat-stage") not in state.absent
    # Found by the operator's DaemonSet index (SERVICE_LABEL) and owned (a controller reference) like the rest.
    assert ds["metadata"]["labels"][SERVICE_LABEL] == "chat"
    assert controller_uid(ds) == "1234"


def test_stage_pods_match_no_selector_of_the_replicas() -> None:
    state = build_desired_state(service(model=NODE_LOCAL, replicas=2), PLAN, Settings(), pod_monitor=True)
    objects = {o["kind"]: o for o in state.objects}
    stage_pod_labels = set(objects["DaemonSet"]["spec"]["template"]["metadata"]["labels"].items())
    selectors = [
        objects["Service"]["spec"]["selector"],
        objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        objects["PodMonitor"]["spec"]["selector"]["matchLabels"],
        objects["Deployment"]["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert not set(selector.items()) <= stage_pod_labels, selector
    # Nor do the replicas match the stage's selector: the DaemonSet never claims a replica pod.
    replica_labels = set(objects["Deployment"]["spec"]["template"]["metadata"]["labels"].items())
    assert not set(objects["DaemonSet"]["spec"]["selector"]["matchLabels"].items()) <= replica_labels


@pytest.mark.parametrize("cache", [None, {"sizeLimit": "20Gi"}, {"persistentVolumeClaim": "w"}])
def test_without_node_local_the_stage_daemonset_is_absent(cache: dict[str, Any] | None) -> None:
    model: dict[str, Any] = {
        "name": "meta-llama/Llama-3.2-1B-Instruct",
        **({"cache": cache} if cache else {}),
    }
    state = build_desired_state(service(model=model), PLAN, Settings(), pod_monitor=False)
    assert "DaemonSet" not in [o["kind"] for o in state.objects]
    # nodeLocal turned off: a stage DaemonSet made before is removed (if this service controls it).
    assert ("apps/v1", "DaemonSet", "chat-stage") in state.absent
