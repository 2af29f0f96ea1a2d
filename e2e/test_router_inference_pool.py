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

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import (
    Cluster,
    OperatorProcess,
    eventually,
    free_port,
    llamaservice_manifest,
    require_tool,
    wait_while_progressing,
)

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
    cluster.wait_crd_established(CRD_NAME)
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


def test_the_reference_endpoint_picker_discovers_the_pools_pods(
    cluster: Cluster, pool_operator: OperatorProcess, pool_ns: str, tmp_path: Path
) -> None:
    """The inference extension's own endpoint picker (lwepp, built from the Go module proxy), pointed at the
    operator's pool, adds exactly that LlamaService's Ready pods: a second service's pods in the same
    namespace stay out, and a replica added by a scale joins."""
    ns = pool_ns
    picker = require_tool("lwepp")
    accelerator = {"type": "a100-80gb", "mig": "1g.10gb"}
    for name in ("picked", "other"):
        assert cluster.apply(llamaservice_manifest(name, accelerator=accelerator), ns).returncode == 0
    eventually("the InferencePool", lambda: cluster.get("inferencepool", "picked", ns), 60)

    def ready_pods(name: str, count: int) -> set[str] | None:
        pods = cluster.pods_of(name, ns)
        ready = {
            p["metadata"]["name"]
            for p in pods
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        }
        return ready if len(ready) >= count else None

    picked = eventually("a Ready pod of the pool's service", lambda: ready_pods("picked", 1), 90)
    others = eventually("a Ready pod of the other service", lambda: ready_pods("other", 1), 90)
    log = tmp_path / "lwepp.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(picker),
                f"--kubeconfig={cluster.info.kubeconfig}",
                "--pool-name=picked",
                f"--pool-namespace={ns}",
                f"--grpc-port={free_port()}",
                f"--grpc-health-port={free_port()}",
                f"--metrics-port={free_port()}",
                "--secure-serving=false",
                # Its discovery logs "Pod added" at verbosity 2 (a pod's own event) or 4 (the pool's resync).
                "--zap-log-level=4",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def added() -> set[str]:
            """The pods the picker logged as added: by its pod reconciler ({"Pod": {"name": ...}}) or by the
            resync when it learns the pool ({"name": {"name": ...}})."""
            names: set[str] = set()
            for line in log.read_text(errors="replace").splitlines():
                if "Pod added" in line and "{" in line:
                    fields = json.loads(line[line.index("{") :])
                    names.add((fields.get("Pod") or fields.get("name") or {}).get("name", ""))
            return names

        # The picker starts, learns the pool and lists its pods in what time the host gives it: waited for
        # while it runs and makes progress (a fixed wait failed on busy hosts), failing with its log's tail.
        wait_while_progressing(f"the picker adding {sorted(picked)}", proc, lambda: picked <= added(), log)
        # A replica added to the service joins it; the other service's pods never do.
        two = llamaservice_manifest("picked", accelerator=accelerator, replicas=2)
        assert cluster.apply(two, ns).returncode == 0
        both = eventually("a second Ready pod", lambda: ready_pods("picked", 2), 90)
        wait_while_progressing(f"the picker adding {sorted(both)}", proc, lambda: both <= added(), log)
        assert not (added() & others), log.read_text(errors="replace")
        assert proc.poll() is None, log.read_text(errors="replace")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
