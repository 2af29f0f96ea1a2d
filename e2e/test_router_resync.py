"""The router through what the API server really writes and does, end to end on the local cluster.

1. A router started while a LlamaService is at zero: the Service of a service with no pod has an
   EndpointSlice with `"endpoints": null` (the typed kubernetes client refuses it, and the router's lists of
   EndpointSlices failed forever). The router must become ready, hold a request, and serve it once the
   operator woke a replica.
2. The API server stopped and started again under a running router: the router reports it is not ready
   while its watches cannot re-sync, logs a line per state change (no traceback per retry), re-syncs when
   the API server is back, and a request sent to the service at zero during the outage is served once the
   replica it woke is ready.

The operator and the fleet simulator (the idle metrics that let the service scale to zero) run as in
e2e/test_scale_to_zero.py; a recording upstream stands for vLLM (--upstream-override: the pods' readiness
still decides when a held request goes). The client calls from 127.0.0.1, trusted as a gateway would be."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fleet import FleetProcess
from router_support import (
    RecordingUpstream,
    Reply,
    RouterProcess,
    call,
    namespaces,
    operator_for_zero,
    router_stand_in,
    running,
)
from support import Cluster, OperatorProcess, eventually, llamaservice_manifest, repo_root

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NAME = "idle"
IDLE_SECONDS = 6  # spec.autoscaling.scaleToZeroAfterSeconds
COLD_START_SECONDS = 4  # kwok makes a new pod Ready this long after it runs
ROUTER_SERVICE = "router"


@pytest.fixture(scope="module")
def spaces(cluster: Cluster) -> Iterator[dict[str, str]]:
    with namespaces(cluster, service="resync", router="router") as names:
        router_stand_in(cluster, names["router"], ROUTER_SERVICE)
        yield names


@pytest.fixture(scope="module")
def resync_operator(
    cluster: Cluster, spaces: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    with running(
        operator_for_zero(
            cluster,
            tmp_path_factory.mktemp("operator"),
            spaces["router"],
            ROUTER_SERVICE,
            cold_start_seconds=COLD_START_SECONDS,
        )
    ) as proc:
        yield proc


@pytest.fixture(scope="module")
def fleet(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetProcess]:
    with running(FleetProcess(cluster.info, tmp_path_factory.mktemp("fleet"))) as proc:
        yield proc


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordingUpstream]:
    with contextlib.closing(RecordingUpstream()) as up:
        yield up


@pytest.fixture(scope="module")
def at_zero(
    cluster: Cluster, spaces: dict[str, str], resync_operator: OperatorProcess, fleet: FleetProcess
) -> str:
    """The LlamaService, scaled to zero once (its first replica idle): its namespace."""
    ns = spaces["service"]
    manifest = llamaservice_manifest(
        NAME,
        accelerator={"type": "a100-80gb", "mig": "1g.10gb"},
        autoscaling={
            "minReplicas": 0,
            "maxReplicas": 1,
            "scaleToZeroAfterSeconds": IDLE_SECONDS,
            "activationTimeoutSeconds": 150,
            "scaleDownStabilizationSeconds": 6,
        },
    )
    assert cluster.apply(manifest, ns).returncode == 0
    eventually("one replica ready", lambda: ready_replicas(cluster, ns) == 1, 90)
    wait_scaled_to_zero(cluster, ns)
    return ns


@pytest.fixture(scope="module")
def router(
    at_zero: str,
    cluster: Cluster,
    upstream: RecordingUpstream,
    spaces: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RouterProcess]:
    """A router, started only once the service is at zero (the first test times its start)."""
    proc = RouterProcess(
        cluster,
        log_dir=tmp_path_factory.mktemp("router"),
        own_namespace=spaces["router"],
        upstream=upstream.url,
        listen_address="127.0.0.1",
        extra_args=["--trusted-source=127.0.0.1"],
        ready_timeout=60,
    )
    with running(proc):
        yield proc


def ready_replicas(cluster: Cluster, ns: str) -> int:
    return int(((cluster.get("deployment", NAME, ns) or {}).get("status") or {}).get("readyReplicas") or 0)


def wait_scaled_to_zero(cluster: Cluster, ns: str, timeout: float = 150) -> None:
    def zero() -> bool:
        status = (cluster.llamaservice(NAME, ns) or {}).get("status") or {}
        return status.get("phase") == "ScaledToZero" and not cluster.pods_of(NAME, ns)

    eventually("the LlamaService scaled to zero, no pod left", zero, timeout, interval=1.0)


def vllm_slices(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    """The Service's EndpointSlices as the API server writes them (raw JSON, as the router reads them)."""
    done = cluster.kubectl(
        "get",
        "--raw",
        f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector="
        f"kubernetes.io/service-name%3D{NAME},endpointslice.kubernetes.io/managed-by%3D"
        "endpointslice-controller.k8s.io",
    )
    return list(json.loads(done.stdout).get("items") or [])


def held_request(router: RouterProcess, ns: str, timeout: float = 170) -> Reply:
    return call(
        router.address,
        source="127.0.0.1",
        host=f"{NAME}.{ns}:8000",
        body={"model": NAME, "messages": [{"role": "user", "content": "hi"}], "stream": True},
        timeout=timeout,
    )


def log_lines(router: RouterProcess) -> list[str]:
    return router.log.read_text(errors="replace").splitlines()


def test_a_router_started_while_a_service_is_at_zero_becomes_ready_and_serves_it(
    cluster: Cluster, at_zero: str, router: RouterProcess, upstream: RecordingUpstream
) -> None:
    slices = vllm_slices(cluster, at_zero)
    assert slices and all(s.get("endpoints") is None for s in slices), "the Service has a slice, no endpoint"
    print(f"\nrouter started with the service at zero: ready in {router.started_seconds:.1f}s")
    seen = len(upstream.seen)
    started = time.monotonic()
    reply = held_request(router, at_zero)
    assert reply.status == 200, reply.body
    assert len(upstream.seen) == seen + 1
    print(f"held request served after {time.monotonic() - started:.1f}s (the wake)")
    assert "Traceback" not in router.log.read_text(errors="replace")


def cluster_sh(*args: str, timeout: float) -> None:
    done = subprocess.run(
        ["bash", str(repo_root() / "e2e" / "cluster.sh"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_api_server_restarted_under_a_running_router(
    cluster: Cluster, at_zero: str, router: RouterProcess, upstream: RecordingUpstream
) -> None:
    wait_scaled_to_zero(cluster, at_zero)
    eventually("the router ready", lambda: router.readyz()[0] == 200, 30)
    lines_before = len(log_lines(router))

    def unready() -> str | None:
        status, text = router.readyz()
        return text if status == 503 else None

    seen = len(upstream.seen)
    cluster_sh("stop", "kube-apiserver", timeout=60)
    stopped = time.monotonic()
    try:
        why = eventually("the router unready while its watches cannot re-sync", unready, 20, interval=0.2)
        assert "out of sync" in why, why
        print(f"\nrouter unready {time.monotonic() - stopped:.1f}s after the API server stopped: {why!r}")
        # A request sent to the service at zero while the API server is away is held (its demand report
        # fails, and is written again once the API server is back).
        replies: list[Reply | Exception] = []

        def send() -> None:
            try:
                replies.append(held_request(router, at_zero))
            except Exception as err:  # the assertion below shows it
                replies.append(err)

        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(max(0.0, 12.0 - (time.monotonic() - stopped)))
    finally:
        cluster_sh("up", timeout=240)
    back = time.monotonic()
    print(f"API server away {back - stopped:.1f}s")
    eventually("the router ready again", lambda: router.readyz()[0] == 200, 60, interval=0.2)
    print(f"router ready {time.monotonic() - back:.1f}s after the API server was back")
    sender.join(timeout=200)
    assert replies and isinstance(replies[0], Reply), replies
    assert replies[0].status == 200, replies[0].body
    assert len(upstream.seen) == seen + 1
    print(f"the request sent during the outage: served {time.monotonic() - back:.1f}s after it was back")
    outage_log = log_lines(router)[lines_before:]
    assert not [line for line in outage_log if "Traceback" in line], "\n".join(outage_log)
    # Three watches out of sync and in sync again, the demand reports failing and working again, the wake.
    assert len(outage_log) <= 12, "\n".join(outage_log)
