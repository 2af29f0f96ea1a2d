"""docs/call-your-model.md against the objects the operator builds for the LlamaService the doc shows:
the Service's name and port, the URLs, the served model name every example sends, the API key's Secret,
the readiness probe and what a scale-down does. (The examples themselves run against a real vLLM in
e2e/vllm/test_vllm_user_docs.py.)"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from llama_operator.api.settings import Settings
from llama_operator.desired.labels import selector_labels
from llama_operator.desired.pod import (
    PRESTOP_SLEEP_SECONDS,
    SHUTDOWN_MARGIN_SECONDS,
    shutdown_timeout_seconds,
)
from llama_operator.reconcile.outcome import ReconcileOutcome, reconcile
from tests.docs.markdown import code_blocks

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "call-your-model.md"


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC_PATH.read_text()


@pytest.fixture(scope="module")
def body(doc: str) -> dict[str, Any]:
    manifests = [yaml.safe_load(b.text) for b in code_blocks(doc) if b.language == "yaml"]
    services = [m for m in manifests if isinstance(m, dict) and m.get("kind") == "LlamaService"]
    assert len(services) == 1, "the doc shows one LlamaService, the one every example calls"
    found: dict[str, Any] = services[0]
    return {**found, "metadata": {**found["metadata"], "uid": "uid-of-the-doc-example", "generation": 1}}


@pytest.fixture(scope="module")
def outcome(body: dict[str, Any]) -> ReconcileOutcome:
    result = reconcile(
        body, Settings(), inventory=None, pod_monitor=True, now=datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert result.error is None, result.error
    return result


def _object(outcome: ReconcileOutcome, kind: str) -> dict[str, Any]:
    assert outcome.desired is not None
    (found,) = [o for o in outcome.desired.objects if o["kind"] == kind]
    return found


def test_the_service_and_the_urls(doc: str, body: dict[str, Any], outcome: ReconcileOutcome) -> None:
    service = _object(outcome, "Service")
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert (name, namespace) == (body["metadata"]["name"], body["metadata"]["namespace"])
    (port,) = service["spec"]["ports"]
    assert service["spec"]["type"] == "ClusterIP"
    assert f"`{name}` in `{namespace}`, type ClusterIP, port `{port['port']}` (named `{port['name']}`)" in doc
    assert f"http://{name}.{namespace}.svc:{port['port']}/v1" in doc
    assert f"http://<name>.<namespace>.svc:{port['port']}/v1" in doc
    assert f"kubectl -n {namespace} port-forward svc/{name} {port['port']}:{port['port']}" in doc
    assert f"`{next(iter(selector_labels(name)))}: {name}`" in doc


def test_every_example_sends_the_served_model_name(doc: str, outcome: ReconcileOutcome) -> None:
    assert outcome.plan is not None
    served = outcome.plan.served_model_name
    sent = [
        m
        for block in code_blocks(doc)
        if block.language in ("bash", "python")
        for m in re.findall(r"""(?:"model":\s*"|model=")([^"]+)\"""", block.text)
    ]
    assert len(sent) >= 6, "curl and Python examples of chat, completions and streaming"
    assert set(sent) == {served}


def test_the_api_key_reaches_vllm_from_the_secret_the_doc_creates(
    doc: str, body: dict[str, Any], outcome: ReconcileOutcome
) -> None:
    ref = body["spec"]["engine"]["apiKeySecretRef"]
    container = _object(outcome, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": ref["name"], "key": ref["key"]}
    assert not any("api-key" in arg for arg in container["args"]), "the key is never in args"
    assert f"create secret generic {ref['name']} --from-literal={ref['key']}=" in doc
    assert f"get secret {ref['name']} -o jsonpath='{{.data.{ref['key']}}}'" in doc
    assert f"secretKeyRef: {{name: {ref['name']}, key: {ref['key']}}}" in doc


def test_readiness_and_scale_down_as_the_doc_tells(doc: str, outcome: ReconcileOutcome) -> None:
    deployment = _object(outcome, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    probe = container["readinessProbe"]
    assert probe["httpGet"]["path"] == "/health"
    assert f"`/health` answers (checked\n  every {probe['periodSeconds']} s)" in doc
    grace = pod["terminationGracePeriodSeconds"]
    drain = shutdown_timeout_seconds(grace)
    assert container["args"][container["args"].index("--shutdown-timeout") + 1] == str(drain)
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == PRESTOP_SLEEP_SECONDS
    prose = " ".join(doc.split())
    assert f"for a {PRESTOP_SLEEP_SECONDS} s pause" in prose
    assert f"for up to {drain} s (the operator's {grace} s termination grace period" in prose
    assert f"and a {SHUTDOWN_MARGIN_SECONDS} s margin" in prose
    assert f"longer than {drain} s" in prose
    rolling = deployment["spec"]["strategy"]["rollingUpdate"]
    assert f"(`maxSurge: {rolling['maxSurge']}`, `maxUnavailable: {rolling['maxUnavailable']}`)" in prose
