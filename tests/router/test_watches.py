"""The router's lists and watches with the real kubernetes client against an HTTP server that answers as the
API server does: what Kubernetes really writes (null fields) is read, an outage makes the view unready with
one log line per watch (no traceback per retry), and the view re-syncs when the server is back."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from llama_operator.router.cluster import ClusterView
from llama_operator.router.watches import Backoff, SyncState
from tests.router.api_server import LLAMASERVICES, PODS, SLICES, FakeApiServer, fake_api_server

OURS = {"app.kubernetes.io/managed-by": "llama-operator", "llama-operator.dev/llamaservice": "chat"}
VLLM_SLICE_LABELS = {"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}


def slice_of(service: str, *pods: tuple[str, str]) -> dict[str, Any]:
    """An EndpointSlice as the endpointslice controller writes it: `endpoints: null` when no pod backs the
    Service (a LlamaService at zero)."""
    return {
        "metadata": {
            "namespace": "team-a",
            "name": f"{service}-abcde",
            "resourceVersion": "1",
            "labels": {"kubernetes.io/service-name": service, **VLLM_SLICE_LABELS},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [ip], "conditions": {"ready": True}, "targetRef": {"kind": "Pod", "name": name}}
            for name, ip in pods
        ]
        or None,
    }


def pod(name: str, ip: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": name, "labels": OURS, "resourceVersion": "1"},
        "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
        "status": {"podIP": ip, "phase": "Running"},
    }


def llamaservice(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {"namespace": "team-a", "name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"model": {"name": "meta-llama/Llama-3.2-1B-Instruct"}, "autoscaling": {"minReplicas": 0}},
    }


def eventually(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.05)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with fake_api_server() as server:
        server.items[LLAMASERVICES] = [llamaservice("chat"), llamaservice("idle")]
        server.items[PODS] = [pod("chat-0", "10.0.0.1")]
        # `idle` is at zero: its Service's slice has `endpoints: null` (kubernetes 35's typed client refuses it).
        server.items[SLICES] = [slice_of("chat", ("chat-0", "10.0.0.1")), slice_of("idle")]
        yield server


@pytest.fixture
def view(api: FakeApiServer) -> Iterator[ClusterView]:
    view = ClusterView(None, api=api.api_client())
    view.start()
    yield view
    view.stop()
    api.cut_watches()


def test_a_service_at_zero_does_not_keep_the_view_from_listing(api: FakeApiServer, view: ClusterView) -> None:
    eventually("the view ready", lambda: view.ready)
    assert view.endpoints(("team-a", "chat")) == ["10.0.0.1:8000"]
    assert view.endpoints(("team-a", "idle")) == []
    assert set(view.known()) == {("team-a", "chat"), ("team-a", "idle")}
    assert view.problems() == []


def test_an_object_that_cannot_be_read_is_skipped_not_the_list(api: FakeApiServer) -> None:
    api.items[PODS] = [
        {"metadata": {"name": "no-namespace"}, "status": {"podIP": "10.0.0.9"}},
        pod("chat-0", "10.0.0.1"),
    ]
    view = ClusterView(None, api=api.api_client())
    view.start()
    try:
        eventually("the view ready", lambda: view.ready)
        assert view.endpoints(("team-a", "chat")) == ["10.0.0.1:8000"]
    finally:
        view.stop()


def test_an_outage_makes_the_view_unready_quietly_and_it_resyncs_after(
    api: FakeApiServer, view: ClusterView, caplog: pytest.LogCaptureFixture
) -> None:
    eventually("the view ready", lambda: view.ready)
    caplog.set_level(logging.INFO, logger="llama_operator")
    api.down = True
    api.cut_watches()
    eventually("the view unready while the API server is away", lambda: not view.ready)
    requests_at_start = api.requests
    time.sleep(3.0)
    # While it is away, the pod woke: the slice of `idle` gets an endpoint the view sees only after.
    api.items[PODS].append(pod("idle-0", "10.0.0.2"))
    api.items[SLICES][1] = slice_of("idle", ("idle-0", "10.0.0.2"))
    pods_of_idle = {"llama-operator.dev/llamaservice": "idle"}
    api.items[PODS][-1]["metadata"]["labels"] = {**OURS, **pods_of_idle}
    assert any("out of sync" in p for p in view.problems()), view.problems()
    retries = api.requests - requests_at_start
    assert retries <= 3 * 4, f"backoff: {retries} requests in 3 s from three watches"
    api.down = False
    eventually("the view ready again", lambda: view.ready, timeout=10)
    assert view.endpoints(("team-a", "idle")) == ["10.0.0.2:8000"], "re-listed after the outage"
    lines = [r for r in caplog.records if r.name.startswith("llama_operator")]
    assert not [r for r in lines if r.exc_info], "no traceback"
    out_of_sync = [r.getMessage() for r in lines if "out of sync (" in r.getMessage()]
    back = [r.getMessage() for r in lines if "in sync again" in r.getMessage()]
    assert len(out_of_sync) == 3 and len(back) == 3, [r.getMessage() for r in lines]


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    backoff = Backoff(first=0.5, cap=5.0)
    assert [backoff.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_sync_state_is_ready_only_when_every_watch_listed_and_none_fails() -> None:
    state = SyncState()
    assert not state.ready, "nothing expected yet is not ready"
    state.expect("pods/*")
    state.expect("endpointslices/*")
    state.synced("pods/*", 0.0)
    assert not state.ready and state.problems() == ["endpointslices/*: not listed yet"]
    state.synced("endpointslices/*", 0.0)
    assert state.ready
    state.failed("pods/*", "503 Service Unavailable", 1.0)
    assert not state.ready and "pods/*: out of sync" in state.problems()[0]
    state.synced("pods/*", 2.0)
    assert state.ready
