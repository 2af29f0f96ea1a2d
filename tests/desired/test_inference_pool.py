"""The InferencePool of a LlamaService (e2e/test_router_inference_pool.py applies it to the real v1 CRD)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from llama_operator.api.resource import LlamaService, parse_metadata, parse_spec
from llama_operator.api.settings import Settings
from llama_operator.desired.inference_pool import (
    InferencePoolSchema,
    build_inference_pool,
    inference_pool_unavailable,
)
from llama_operator.desired.objects import build_desired_state
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.planner import plan_service
from llama_operator.reconcile.execution import (
    ExecutionReport,
    ObjectRef,
    Rejection,
    degraded_event,
    inference_pool_event,
    report_execution,
)
from llama_operator.reconcile.outcome import ReconcileOutcome, reconcile


def service() -> LlamaService:
    spec: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
        "accelerator": {"type": "t4"},
    }
    return LlamaService(
        metadata=parse_metadata({"name": "chat", "namespace": "team-a", "uid": "uid-1"}),
        spec=parse_spec(spec),
    )


def test_the_pool_selects_the_services_pods_on_the_vllm_port_and_is_owned() -> None:
    svc = service()
    pool = build_inference_pool(svc, Settings())
    assert pool is not None
    plan = plan_service(svc.spec, name="chat", config=PlanningConfig())
    desired = build_desired_state(svc, plan, Settings(), pod_monitor=False)
    (deployment,) = [o for o in desired.objects if o["kind"] == "Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1" and pool["kind"] == "InferencePool"
    assert pool["metadata"]["name"] == "chat" and pool["metadata"]["namespace"] == "team-a"
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (port,) = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert pool["spec"]["targetPorts"] == [{"number": port["containerPort"]}]
    (owner,) = pool["metadata"]["ownerReferences"]
    assert owner["uid"] == "uid-1" and owner["controller"] is True
    assert "endpointPickerRef" not in pool["spec"], "no picker named by the platform: none referenced"


def test_the_platforms_endpoint_picker_is_referenced() -> None:
    settings = Settings(
        inference_pool_endpoint_picker="vllm-epp",
        inference_pool_endpoint_picker_port=9003,
        inference_pool_failure_mode="FailOpen",
    )
    pool = build_inference_pool(service(), settings)
    assert pool is not None
    ref = pool["spec"]["endpointPickerRef"]
    assert ref == {
        "group": "",
        "kind": "Service",
        "name": "vllm-epp",
        "port": {"number": 9003},
        "failureMode": "FailOpen",
    }


BODY = {
    "apiVersion": "serving.llama-operator.dev/v1alpha1",
    "kind": "LlamaService",
    "metadata": {"name": "chat", "namespace": "team-a", "uid": "uid-1", "generation": 1},
    "spec": {"model": {"name": "meta-llama/Llama-3.2-1B-Instruct"}, "accelerator": {"type": "t4"}},
}


@pytest.mark.parametrize("served", [True, False])
def test_reconcile_adds_the_pool_only_when_the_crd_is_served(served: bool) -> None:
    outcome = reconcile(
        BODY,
        Settings(),
        inventory=None,
        pod_monitor=False,
        now=datetime.now(UTC),
        inference_pool=InferencePoolSchema() if served else None,
    )
    assert outcome.desired is not None
    kinds = [o["kind"] for o in outcome.desired.objects]
    assert ("InferencePool" in kinds) is served


# The inference extension's real CRDs, as vendored for the e2e tests (e2e/crds/, from those tags).
CRDS = Path(__file__).resolve().parents[2] / "e2e" / "crds"
CRD_FILES = {
    "v1.0.0": CRDS / "inference.networking.k8s.io_inferencepools-v1.0.0.yaml",
    "v1.3.0": CRDS / "inference.networking.k8s.io_inferencepools-v1.3.0.yaml",
    "v1.6.0": CRDS / "inference.networking.k8s.io_inferencepools.yaml",
}


def served_schema(version: str) -> InferencePoolSchema:
    return InferencePoolSchema.from_crd(yaml.safe_load(CRD_FILES[version].read_text()))


@pytest.mark.parametrize(
    ("version", "picker_required", "app_protocol"),
    [("v1.0.0", True, False), ("v1.3.0", True, False), ("v1.6.0", False, True)],
)
def test_what_each_served_crd_accepts_is_read_from_its_schema(
    version: str, picker_required: bool, app_protocol: bool
) -> None:
    schema = served_schema(version)
    assert (schema.picker_required, schema.app_protocol, schema.version) == (
        picker_required,
        app_protocol,
        version,
    )


def test_a_crd_that_requires_a_picker_gets_no_pool_without_one() -> None:
    schema = served_schema("v1.3.0")
    assert build_inference_pool(service(), Settings(), schema) is None
    reason = inference_pool_unavailable(Settings(), schema)
    assert reason is not None and "v1.3.0" in reason and "inferencePoolEndpointPicker" in reason
    assert inference_pool_unavailable(Settings(inference_pool_endpoint_picker="epp"), schema) is None
    assert inference_pool_unavailable(Settings(), served_schema("v1.6.0")) is None


@pytest.mark.parametrize("version", ["v1.0.0", "v1.3.0"])
def test_no_field_the_crd_does_not_know_is_sent(version: str) -> None:
    pool = build_inference_pool(
        service(), Settings(inference_pool_endpoint_picker="epp"), served_schema(version)
    )
    assert pool is not None and "appProtocol" not in pool["spec"]
    assert pool["spec"]["endpointPickerRef"]["name"] == "epp"


def reconciled(schema: InferencePoolSchema | None, settings: Settings | None = None) -> ReconcileOutcome:
    return reconcile(
        BODY,
        settings or Settings(),
        inventory=None,
        pod_monitor=False,
        now=datetime.now(UTC),
        inference_pool=schema,
    )


def conditions_of(outcome: ReconcileOutcome) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in outcome.status_patch["conditions"]}


def test_a_pool_that_cannot_be_valid_is_its_own_condition_not_degraded() -> None:
    outcome = reconciled(served_schema("v1.0.0"))
    assert outcome.desired is not None
    assert "InferencePool" not in [o["kind"] for o in outcome.desired.objects]
    found = conditions_of(outcome)
    assert found["InferencePoolReady"] == ("False", "EndpointPickerRequired")
    assert found["Degraded"][0] == "False"
    # The CRD gone: the condition goes with it.
    previous = {"conditions": outcome.status_patch["conditions"]}
    gone = reconcile(
        {**BODY, "status": previous}, Settings(), inventory=None, pod_monitor=False, now=datetime.now(UTC)
    )
    assert "InferencePoolReady" not in conditions_of(gone)


POOL = ObjectRef("InferencePool", "team-a", "chat")
DEPLOYMENT = ObjectRef("Deployment", "team-a", "chat")


def test_a_refused_pool_is_its_own_condition_and_one_event() -> None:
    now = datetime.now(UTC)
    report = ExecutionReport(rejections=[Rejection(POOL, 422, "spec.endpointPickerRef: Required value")])
    patch = report_execution({}, {"conditions": []}, report, now=now, generation=1, inference_pool=POOL)
    found = {c["type"]: (c["status"], c["reason"]) for c in patch["conditions"]}
    assert found == {"InferencePoolReady": ("False", "ApplyRejected")}
    assert patch.get("phase") != "Degraded"
    assert degraded_event({}, patch) is None
    event = inference_pool_event({}, patch)
    assert event is not None and event.reason == "ApplyRejected" and "endpointPickerRef" in event.message
    assert inference_pool_event(patch, patch) is None  # said once, not at every reconcile
    # A conflict on the pool is the pool's too; one on the Deployment is still the service's.
    both = ExecutionReport(conflicts=[POOL, DEPLOYMENT])
    patch = report_execution({}, {"conditions": []}, both, now=now, generation=1, inference_pool=POOL)
    found = {c["type"]: (c["status"], c["reason"]) for c in patch["conditions"]}
    assert found == {"InferencePoolReady": ("False", "NameConflict"), "Degraded": ("True", "NameConflict")}
    assert "InferencePool" not in next(c for c in patch["conditions"] if c["type"] == "Degraded")["message"]


def test_an_applied_pool_is_ready() -> None:
    patch = report_execution(
        {}, {"conditions": []}, ExecutionReport(), now=datetime.now(UTC), generation=1, inference_pool=POOL
    )
    assert [(c["type"], c["status"]) for c in patch["conditions"]] == [("InferencePoolReady", "True")]
