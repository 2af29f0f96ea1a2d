"""A real kube-apiserver and etcd and nothing else (no scheduler, no controllers, no kwok, no Prometheus):
the API a reconcile talks to, started in seconds, in the spirit of controller-runtime's envtest. The
binaries and flags are the local cluster's (e2e/localcluster), built once and cached under
~/.cache/llama-operator/bin by `make cluster-up`; without them the tests skip (in CI they fail)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "e2e"))  # localcluster is e2e's package (e2e/ is not itself one)

from localcluster.binaries import Binaries  # noqa: E402
from localcluster.cluster import Layout, build_components  # noqa: E402
from localcluster.config import ETCD_VERSION, KUBERNETES_VERSION, CachePaths, cache_dir  # noqa: E402
from localcluster.pki import ensure_pki, kubeconfig  # noqa: E402
from localcluster.procs import Processes  # noqa: E402
from localcluster.util import NO_BUILDS_ENV, TLSClient, release_ports, reserve_port  # noqa: E402

os.environ[NO_BUILDS_ENV] = "1"  # the API server's binaries come from the set-up step, never built in a test

STARTUP_SECONDS = 60.0


@dataclass(frozen=True)
class ApiServer:
    """A running kube-apiserver (with its etcd) and a client of it as cluster-admin."""

    kubeconfig: Path
    api_client: client.ApiClient


def _binaries() -> Binaries | None:
    cache = CachePaths(cache_dir())
    etcd = cache.binary("etcd", ETCD_VERSION)
    apiserver = cache.binary("kube-apiserver", KUBERNETES_VERSION)
    if not etcd.exists() or not apiserver.exists():
        return None
    unused = Path("/nonexistent")  # build_components describes every process; only two are started
    return Binaries(
        etcd=etcd,
        kube_apiserver=apiserver,
        kube_controller_manager=unused,
        kube_scheduler=unused,
        kwok=unused,
        kubectl=unused,
        helm=unused,
        prometheus=unused,
        promtool=unused,
        tools_dir=unused,
        karpenter_kwok=unused,
    )


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    bins = _binaries()
    if bins is None:
        message = f"no etcd {ETCD_VERSION} / kube-apiserver {KUBERNETES_VERSION} under {cache_dir()} (make cluster-up builds them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = tmp_path_factory.mktemp("apiserver")
    lay = Layout(root)
    pki = ensure_pki(lay.pki)
    taken: set[int] = set()
    ports: dict[str, int] = {}
    for name in (
        "etcd",
        "etcd-peer",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
        "prometheus",
        "fleet",
    ):
        ports[name] = reserve_port(root, taken=taken)
        taken.add(ports[name])
    components = build_components(bins, lay, pki, ports)
    started = [components["etcd"], components["kube-apiserver"]]
    admin = pki.client("admin")
    procs = Processes(root, TLSClient(pki.ca_cert, admin.cert, admin.key))
    try:
        for component in started:
            procs.start(component)
            deadline = time.monotonic() + STARTUP_SECONDS
            while not procs.healthy(component):
                note = procs.death_note(component)
                if note is not None:
                    pytest.fail(f"{component.name} exited: {note}")
                if time.monotonic() > deadline:
                    pytest.fail(f"{component.name} not healthy after {STARTUP_SECONDS:.0f}s")
                time.sleep(0.1)
        path = root / "kubeconfig"
        path.write_text(kubeconfig(f"https://127.0.0.1:{ports['kube-apiserver']}", pki, admin, "admin"))
        yield ApiServer(kubeconfig=path, api_client=config.new_client_from_config(config_file=str(path)))
    finally:
        # A throwaway API server: its graceful shutdown (about 10 s of draining) protects nothing here.
        procs.stop_all(list(reversed(started)), timeout=1.0)
        release_ports(root)
