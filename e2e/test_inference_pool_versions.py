"""InferencePools against the gateways people run: the inference extension's real CRDs v1.0, v1.3 and v1.6
(e2e/crds/, vendored from those tags) on the local cluster. Their schemas differ: v1.0-v1.5 require
spec.endpointPickerRef, v1.0-v1.3 know no spec.appProtocol (the API server drops it). The operator reads the
served CRD's schema and writes a pool only where it can be valid, without fields the CRD does not know; an
optional integration never turns a LlamaService Degraded: InferencePoolReady and an Event say what is wrong.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import Cluster, OperatorProcess, eventually, http_get, llamaservice_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

CRDS = Path(__file__).parent / "crds"
CRD_FILES = {
    "v1.0.0": CRDS / "inference.networking.k8s.io_inferencepools-v1.0.0.yaml",
    "v1.3.0": CRDS / "inference.networking.k8s.io_inferencepools-v1.3.0.yaml",
    "v1.6.0": CRDS / "inference.networking.k8s.io_inferencepools.yaml",
}
CRD_NAME = "inferencepools.inference.networking.k8s.io"
MIG = {"type": "a100-80gb", "mig": "1g.10gb"}
RESYNC_SECONDS = 2  # every LlamaService reconciled this often: a pool re-applied each time would show


def install_crd(cluster: Cluster, version: str) -> None:
    """The CRD of `version` alone: a left-over one (another version, its pools) is deleted first."""
    cluster.kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--timeout=60s")
    cluster.kubectl("apply", "--server-side", "-f", str(CRD_FILES[version]))
    cluster.wait_crd_established(CRD_NAME)


@pytest.fixture(scope="module", autouse=True)
def no_crd_left(cluster: Cluster) -> Iterator[None]:
    yield
    cluster.kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--timeout=60s", check=False)


def start_operator(cluster: Cluster, log_dir: Path, namespace: str, picker: str | None) -> OperatorProcess:
    env = {"LLAMA_OPERATOR_INFERENCE_POOL": "auto", "LLAMA_OPERATOR_RESYNC_SECONDS": str(RESYNC_SECONDS)}
    if picker:
        env["LLAMA_OPERATOR_INFERENCE_POOL_ENDPOINT_PICKER"] = picker
    proc = OperatorProcess(cluster, log_dir=log_dir, extra_env=env, extra_args=[f"--namespace={namespace}"])
    proc.start()
    return proc


def pool_writes(proc: OperatorProcess) -> float:
    text = http_get(f"http://127.0.0.1:{proc.metrics_port}/metrics")[1]
    found = re.search(r'^llama_operator_object_writes_total\{kind="InferencePool"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def events(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.info.kubectl_json(
        "get", "events", "-n", namespace, f"--field-selector=involvedObject.name={name}"
    )["items"]
    return items


def pool_condition(cluster: Cluster, namespace: str, status: str) -> dict[str, Any]:
    """chat's InferencePoolReady condition, once it has `status`."""

    def found() -> dict[str, Any] | None:
        condition = cluster.condition("chat", namespace, "InferencePoolReady")
        return condition if condition and condition["status"] == status else None

    return eventually(f"InferencePoolReady {status}", found, 60)


def ready_and_not_degraded(cluster: Cluster, name: str, namespace: str) -> bool:
    ready = cluster.condition(name, namespace, "Ready") or {}
    degraded = cluster.condition(name, namespace, "Degraded") or {}
    return ready.get("status") == "True" and degraded.get("status") == "False"


@pytest.mark.parametrize("version", ["v1.0.0", "v1.3.0"])
def test_a_crd_that_requires_a_picker_gets_no_pool_and_the_service_stays_healthy(
    cluster: Cluster, namespace: str, tmp_path: Path, version: str
) -> None:
    install_crd(cluster, version)
    proc = start_operator(cluster, tmp_path, namespace, picker=None)
    try:
        assert cluster.apply(llamaservice_manifest("chat", accelerator=MIG), namespace).returncode == 0

        condition = pool_condition(cluster, namespace, "False")
        assert condition["reason"] == "EndpointPickerRequired", condition
        assert version in condition["message"] and "inferencePoolEndpointPicker" in condition["message"]
        eventually(
            "chat Ready and not Degraded", lambda: ready_and_not_degraded(cluster, "chat", namespace), 90
        )
        time.sleep(2 * RESYNC_SECONDS)  # resyncs: still no pool, still not Degraded, the Event said once
        assert ready_and_not_degraded(cluster, "chat", namespace), proc.tail()
        assert cluster.get("inferencepool", "chat", namespace) is None
        said = [e for e in events(cluster, namespace, "chat") if e["reason"] == "EndpointPickerRequired"]
        assert len(said) == 1 and said[0]["type"] == "Warning" and said[0].get("count", 1) == 1, said
        assert not proc.tracebacks(), proc.tracebacks()
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("version", "app_protocol"), [("v1.0.0", False), ("v1.3.0", False), ("v1.6.0", True)]
)
def test_a_pool_with_only_the_fields_the_crd_knows_is_written_once(
    cluster: Cluster, namespace: str, tmp_path: Path, version: str, app_protocol: bool
) -> None:
    install_crd(cluster, version)
    proc = start_operator(cluster, tmp_path, namespace, picker="vllm-epp")
    try:
        assert cluster.apply(llamaservice_manifest("chat", accelerator=MIG), namespace).returncode == 0
        pool = eventually("the InferencePool", lambda: cluster.get("inferencepool", "chat", namespace), 60)
        assert pool["spec"]["endpointPickerRef"]["name"] == "vllm-epp"
        assert ("appProtocol" in pool["spec"]) is app_protocol, pool["spec"]

        pool_condition(cluster, namespace, "True")
        eventually(
            "chat Ready and not Degraded", lambda: ready_and_not_degraded(cluster, "chat", namespace), 90
        )
        status = (cluster.llamaservice("chat", namespace) or {})["status"]
        assert status["url"] == f"http://chat.{namespace}.svc:8000/v1"  # what the pool's pods serve behind
        # Written once: resyncs find the pool as the CRD keeps it, nothing to re-apply.
        written = pool_writes(proc)
        time.sleep(3 * RESYNC_SECONDS)
        assert pool_writes(proc) == written, f"re-applied: {written} -> {pool_writes(proc)} writes"
    finally:
        proc.stop()


def test_a_pool_the_api_server_refuses_leaves_the_service_healthy(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """A pool of the service's name that someone else made: the pool is not the operator's to write, so
    InferencePoolReady says so; the LlamaService itself is served, not Degraded."""
    install_crd(cluster, "v1.6.0")
    theirs = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "chat"},
        "spec": {"selector": {"matchLabels": {"app": "theirs"}}, "targetPorts": [{"number": 9000}]},
    }
    assert cluster.apply(theirs, namespace).returncode == 0
    proc = start_operator(cluster, tmp_path, namespace, picker=None)
    try:
        assert cluster.apply(llamaservice_manifest("chat", accelerator=MIG), namespace).returncode == 0

        condition = pool_condition(cluster, namespace, "False")
        assert condition["reason"] == "NameConflict" and "InferencePool" in condition["message"], condition
        eventually(
            "chat Ready and not Degraded", lambda: ready_and_not_degraded(cluster, "chat", namespace), 90
        )
        said = [e for e in events(cluster, namespace, "chat") if e["reason"] == "NameConflict"]
        assert len(said) == 1 and said[0]["type"] == "Warning", said
    finally:
        proc.stop()
