"""End-to-end fixtures: the local cluster (e2e/cluster.sh up), the CRD, the operator as a process."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from localcluster import info as cluster_info
from support import Cluster, OperatorProcess, repo_root


def pytest_sessionstart(session: pytest.Session) -> None:
    # Locally a missing cluster skips the e2e tests; in CI it is an error, never a silent pass.
    if os.environ.get("CI") and cluster_info.load() is None:
        raise pytest.UsageError(f"CI needs the local cluster: {cluster_info.cluster_json_path()} is absent")


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
    c.kubectl(
        "wait", "--for=condition=Established", "crd/llamaservices.serving.llama-operator.dev", "--timeout=60s"
    )
    return c


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
