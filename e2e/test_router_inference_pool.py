"""InferencePools on the local cluster, against the real v1 CRD of the Gateway API Inference Extension
(e2e/crds/inference.networking.k8s.io_inferencepools.yaml, vendored from its v1.6.0 release): the API server
validates what the operator writes with the CRD's own schema and CEL rules.

- the CRD is installed after the operator started (as when an inference gateway is added to a running
  cluster): the operator follows it and makes pools without a restart;
- the operator creates one InferencePool per LlamaService, owned by it, selecting exactly its vLLM pods on
  the vLLM port, naming the platform's endpoint picker;
- a pool of that name that someone else made is never adopted;
- deleting the LlamaService deletes its pool (garbage collection through the owner reference).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import Cluster, OperatorProcess, eventually, llamaservice_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CRD_FILE = Path(__file__).parent / "crds" / "inference.networking.k8s.io_inferencepools.yaml"
CRD_NAME = "inferencepools.inference.networking.k8s.io"


@pytest.fixture(scope="module")
def pool_operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The operator, started while the InferencePool CRD is absent, then the CRD installed under it: what it
    makes from then on shows it follows the CRD while running (it does not look only at start-up)."""
    existed = cluster.get("crd", CRD_NAME, "default") is not None
    if existed:  # left by an interrupted run: start from a cluster without it
        cluster.kubectl("delete", "crd", CRD_NAME, "--timeout=60s")
    proc = OperatorProcess(
        cluster,
        log_dir=tmp_path_factory.mktemp("operator"),
        extra_env={
            "LLAMA_OPERATOR_INFERENCE_POOL": "auto",
            "LLAMA_OPERATOR_INFERENCE_POOL_ENDPOINT_PICKER": "vllm-epp",
        },
    )
    proc.start()
    eventually(
        "the operator saying it makes no InferencePools",
        lambda: "InferencePool: False" in proc.log.read_text(errors="replace"),
        60,
    )
    cluster.kubectl("apply", "--server-side", "-f", str(CRD_FILE))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    eventually(
        "the operator following the CRD",
        lambda: "InferencePool kind served" in proc.log.read_text(errors="replace"),
        60,
    )
    yield proc
    proc.stop()
    cluster.kubectl("delete", "crd", CRD_NAME, "--timeout=60s", check=False)


@pytest.fixture
def pool_ns(cluster: Cluster) -> Iterator[str]:
    ns = f"pool-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_one_owned_pool_per_llamaservice_selecting_its_pods(
    cluster: Cluster, pool_operator: OperatorProcess, pool_ns: str
) -> None:
    ns = pool_ns
    assert (
        cluster.apply(
            llamaservice_manifest("chat", accelerator={"type": "a100-80gb", "mig": "1g.10gb"}), ns
        ).returncode
        == 0
    )
    pool: dict[str, Any] = eventually(
        "the InferencePool", lambda: cluster.get("inferencepool", "chat", ns), 60
    )
    svc = cluster.llamaservice("chat", ns) or {}
    (owner,) = pool["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "LlamaService",
        svc["metadata"]["uid"],
        True,
    )
    spec = pool["spec"]
    assert spec["targetPorts"] == [{"number": 8000}]
    assert spec["endpointPickerRef"] == {
        "group": "",
        "kind": "Service",
        "name": "vllm-epp",
        "port": {"number": 9002},
        "failureMode": "FailClose",
    }
    # The selector picks exactly the service's pods (what the endpoint picker will discover).
    pods = eventually("a vLLM pod", lambda: cluster.pods_of("chat", ns) or None, 60)
    selector = ",".join(f"{k}={v}" for k, v in spec["selector"]["matchLabels"].items())
    selected = cluster.list_objects("pods", ns, selector)
    assert {p["metadata"]["name"] for p in selected} == {p["metadata"]["name"] for p in pods}

    # Deleting the LlamaService deletes its pool.
    cluster.kubectl("delete", "llamaservice", "chat", "-n", ns, "--timeout=60s")
    eventually("the pool garbage-collected", lambda: cluster.get("inferencepool", "chat", ns) is None, 60)


def test_a_pool_made_by_someone_else_is_never_adopted(
    cluster: Cluster, pool_operator: OperatorProcess, pool_ns: str
) -> None:
    ns = pool_ns
    theirs = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "taken"},
        "spec": {"selector": {"matchLabels": {"app": "theirs"}}, "targetPorts": [{"number": 9000}]},
    }
    assert cluster.apply(theirs, ns).returncode == 0
    assert (
        cluster.apply(
            llamaservice_manifest("taken", accelerator={"type": "a100-80gb", "mig": "1g.10gb"}), ns
        ).returncode
        == 0
    )
    eventually("the LlamaService's Deployment", lambda: cluster.get("deployment", "taken", ns), 60)

    def reported() -> dict[str, Any] | None:
        svc = cluster.llamaservice("taken", ns) or {}
        text = str((svc.get("status") or {}).get("conditions") or [])
        return svc if "InferencePool" in text else None

    eventually("the conflict reported in the LlamaService's conditions", reported, 60)
    pool = cluster.get("inferencepool", "taken", ns) or {}
    assert not pool["metadata"].get("ownerReferences"), "adopted"
    assert pool["spec"]["targetPorts"] == [{"number": 9000}] and pool["spec"]["selector"]["matchLabels"] == {
        "app": "theirs"
    }
