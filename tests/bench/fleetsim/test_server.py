"""The simulator's HTTP endpoints, served for real on a free port (the cluster view given directly)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from llama_bench.fleetsim.client import FleetClient
from llama_bench.fleetsim.engine import FleetEngine
from llama_bench.fleetsim.exposition import CONTENT_TYPE
from llama_bench.fleetsim.load import LoadSpec
from llama_bench.fleetsim.server import FleetSimulator

from .conftest import KEY, SLICE, pod


@pytest.fixture
def simulator() -> Iterator[FleetSimulator]:
    sim = FleetSimulator(FleetEngine(seed=2), None, port=0)
    sim.start()
    yield sim
    sim.stop()


def get(sim: FleetSimulator, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{sim.port}{path}", timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def put(sim: FleetSimulator, path: str, body: Any) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{sim.port}{path}", data=json.dumps(body).encode(), method="PUT"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_metrics_per_pod_phase(simulator: FleetSimulator) -> None:
    simulator.sync([pod("a"), pod("b", ready=False)], {KEY: SLICE})
    status, content_type, body = get(simulator, "/pods/team/a/metrics")
    assert status == 200 and content_type == CONTENT_TYPE
    assert 'vllm:num_requests_running{engine="0",model_name="chat"} 0.0' in body
    assert get(simulator, "/pods/team/b/metrics")[0] == 503  # loading its model: the target is down
    assert get(simulator, "/pods/team/zzz/metrics")[0] == 404
    assert get(simulator, "/nothing")[0] == 404


def test_load_control_changes_what_the_pods_serve(simulator: FleetSimulator) -> None:
    simulator.sync([pod("a"), pod("b")], {KEY: SLICE})
    status, entry = put(simulator, "/load/team/chat", {"rate": 40, "prompt_tokens": 200, "output_tokens": 5})
    assert status == 200 and entry["nominal_rate"] == 40
    time.sleep(1.5)  # real time: the stepping thread serves them
    state = FleetClient(f"http://127.0.0.1:{simulator.port}").service("team", "chat")
    assert state["offered"] > 20 and state["completed"] > 10 and state["rejected"] == 0
    assert state["ttft_p95_30s"] is not None
    assert {p["name"] for p in state["pods"]} == {"a", "b"}
    status, body = put(simulator, "/load/team/chat", {"rate": 1, "trace": "conversation"})
    assert status == 400 and "either rate" in body["error"]
    status, body = put(simulator, "/load/team/chat", {"trace": "conversation", "offset": 1e9})
    assert status == 400 and "no request" in body["error"]


def test_stop_is_prompt() -> None:
    sim = FleetSimulator(FleetEngine(), None, port=0)
    sim.start()
    sim.sync([pod("a")], {KEY: SLICE})
    sim.set_load(*KEY, LoadSpec(rate=100.0))
    started = time.monotonic()
    sim.stop()
    assert time.monotonic() - started < 2.0
    with pytest.raises(urllib.error.URLError, match="refused"):
        urllib.request.urlopen(f"http://127.0.0.1:{sim.port}/healthz", timeout=1)
