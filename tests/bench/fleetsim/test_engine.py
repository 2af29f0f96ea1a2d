"""The fleet engine: least-loaded routing, pod life cycle (starting, ready, draining, gone),
conservation of requests, the real-time stepping, per-service loads."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from llama_bench.fleetsim.engine import MAX_SEGMENT_SECONDS, FleetEngine, ServiceInfo
from llama_bench.fleetsim.load import LoadSpec
from llama_bench.sim.accelerators import replica_profile

from .conftest import KEY, SLICE, engine_with, pod

SLICE_PROFILE = replica_profile("a100-80gb-1g.10gb", max_num_seqs=64)


def service(engine: FleetEngine, now: float) -> dict[str, Any]:
    entry: dict[str, Any] = engine.state(now)["services"][0]
    return entry


def pods_by_name(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in entry["pods"]}


def test_least_loaded_routing_shares_the_load_evenly() -> None:
    engine = engine_with([pod("a"), pod("b"), pod("c")])
    engine.set_load(KEY, LoadSpec(rate=15.0, prompt_tokens=500, output_tokens=50, seed=1), 0.0)
    engine.advance(120.0)
    routed = [p["routed"] for p in service(engine, 120.0)["pods"]]
    assert sum(routed) > 1500
    assert max(routed) - min(routed) <= 0.05 * sum(routed) / 3


def test_a_backlogged_replica_gets_nothing_new_until_the_others_catch_up() -> None:
    engine = engine_with([pod("a")])
    engine.set_load(KEY, LoadSpec(rate=40.0, prompt_tokens=1000, output_tokens=10, seed=2), 0.0)
    engine.advance(10.0)  # one slice serves ~8.5 of these per second: a queue builds on "a"
    backlog = pods_by_name(service(engine, 10.0))["a"]["waiting"]
    assert backlog > 100
    engine.set_load(KEY, LoadSpec(rate=4.0, prompt_tokens=1000, output_tokens=10, seed=3), 10.0)
    engine.sync([pod("a"), pod("b")], {KEY: SLICE}, 10.0)
    before = pods_by_name(service(engine, 10.0))["a"]["routed"]
    engine.advance(15.0)
    after = pods_by_name(service(engine, 15.0))
    assert after["a"]["routed"] == before  # least loaded is always "b"
    assert after["b"]["routed"] > 10


def test_pods_serve_only_once_ready_and_starting_pods_export_nothing() -> None:
    engine = engine_with([pod("a", ready=False)])
    engine.set_load(KEY, LoadSpec(rate=5.0, seed=4), 0.0)
    engine.advance(10.0)
    entry = service(engine, 10.0)
    assert entry["routed"] == 0 and entry["rejected"] == entry["offered"] > 20
    assert engine.pod_phase("team", "a") == "starting"
    assert engine.pod_metrics("team", "a") is None  # 503: vLLM is not listening yet
    engine.sync([pod("a")], {KEY: SLICE}, 10.0)
    engine.advance(20.0)
    assert engine.pod_phase("team", "a") == "ready"
    assert service(engine, 20.0)["routed"] > 20
    assert engine.pod_metrics("team", "nope") is None and engine.pod_phase("team", "nope") is None


def test_a_terminating_pod_finishes_what_it_holds_and_takes_nothing_new() -> None:
    engine = engine_with([pod("a"), pod("b")])
    engine.set_load(KEY, LoadSpec(rate=10.0, prompt_tokens=200, output_tokens=400, seed=5), 0.0)
    engine.advance(20.0)
    held = pods_by_name(service(engine, 20.0))["b"]
    assert held["running"] > 0
    engine.sync([pod("a"), pod("b", terminating=True)], {KEY: SLICE}, 20.0)
    engine.advance(60.0)
    entry = service(engine, 60.0)
    b = pods_by_name(entry)["b"]
    assert b["phase"] == "draining" and b["routed"] == held["routed"]
    assert b["running"] == b["waiting"] == 0  # finished, not dropped
    assert entry["dropped"] == 0


def test_a_pod_that_disappears_drops_its_requests_and_everything_is_accounted_for() -> None:
    engine = engine_with([pod("a"), pod("b")])
    engine.set_load(KEY, LoadSpec(rate=20.0, prompt_tokens=1000, output_tokens=200, seed=6), 0.0)
    engine.advance(30.0)
    in_b = pods_by_name(service(engine, 30.0))["b"]
    in_flight = in_b["waiting"] + in_b["running"]
    assert in_flight > 0
    engine.sync([pod("a")], {KEY: SLICE}, 30.0)
    entry = service(engine, 30.0)
    assert entry["dropped"] == in_flight
    assert engine.pod_phase("team", "b") is None
    engine.advance(60.0)
    entry = service(engine, 60.0)
    in_a = entry["waiting"] + entry["running"]
    assert entry["offered"] == entry["routed"] + entry["rejected"]
    assert entry["routed"] == entry["completed"] + entry["dropped"] + in_a


def test_stepping_granularity_does_not_change_the_simulation() -> None:
    """Events run at their own times: a loop that wakes every 10 ms and one that wakes every 2 s
    produce the same fleet, so a busy machine's late wake-ups do not distort TTFTs."""

    def run(step: float) -> str | None:
        engine = engine_with([pod("a"), pod("b")])
        engine.set_load(KEY, LoadSpec(rate=12.0, prompt_tokens=800, output_tokens=60, seed=7), 0.0)
        t = 0.0
        while t < 40.0:
            t = min(40.0, t + step)
            engine.advance(t)
        return engine.pod_metrics("team", "a")

    assert run(0.01) == run(2.0)


def test_token_counters_advance_during_a_long_decode() -> None:
    """One request decoding 5000 tokens (~80 s): a scrape each second sees the counter move by about a
    second's worth of steps, not jump at the end (decode runs are cut at MAX_SEGMENT_SECONDS)."""
    engine = engine_with([pod("a")])
    engine.set_load(KEY, LoadSpec(rate=1000.0, prompt_tokens=100, output_tokens=5000, seed=8), 0.0)
    engine.advance(0.0011)
    engine.set_load(KEY, LoadSpec(), 0.0011)
    assert service(engine, 0.0011)["offered"] == 1
    step = SLICE_PROFILE.steps.weight_read_seconds  # one sequence: the context term is negligible
    seen = []
    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        engine.advance(t)
        text = engine.pod_metrics("team", "a")
        assert text is not None
        line = next(x for x in text.splitlines() if x.startswith("vllm:generation_tokens_total{"))
        seen.append(float(line.rsplit(" ", 1)[1]))
    for before, after in itertools.pairwise(seen):
        assert (1.0 - MAX_SEGMENT_SECONDS) / step <= after - before <= (1.0 + MAX_SEGMENT_SECONDS) / step, (
            seen
        )


def test_a_new_load_replaces_the_old_one() -> None:
    engine = engine_with([pod("a")])
    engine.set_load(KEY, LoadSpec(rate=50.0, seed=9), 0.0)
    engine.advance(10.0)
    offered = service(engine, 10.0)["offered"]
    engine.set_load(KEY, LoadSpec(rate=0.0), 10.0)
    engine.advance(30.0)
    assert service(engine, 30.0)["offered"] == offered
    assert engine.next_event_time() is None or service(engine, 30.0)["running"] > 0


def test_services_follow_the_cluster_and_their_plans() -> None:
    engine = FleetEngine(default_load=LoadSpec(rate=2.0), seed=1)
    t4 = ("team", "small")
    engine.sync([pod("a")], {KEY: SLICE, t4: ServiceInfo()}, 0.0)
    by_name = {s["name"]: s for s in engine.state(0.0)["services"]}
    assert by_name["chat"]["accelerator"] == "a100-80gb-1g.10gb"
    assert by_name["small"]["accelerator"] == "t4"  # no plan the simulator knows: the fallback
    assert by_name["chat"]["nominal_rate"] == 2.0  # the default load applies to new services
    engine.set_load(KEY, LoadSpec(rate=7.0), 0.0)
    engine.sync([], {t4: ServiceInfo()}, 1.0)  # chat deleted
    assert [s["name"] for s in engine.state(1.0)["services"]] == ["small"]
    engine.sync([], None, 2.0)  # listing failed: nothing is forgotten
    assert [s["name"] for s in engine.state(2.0)["services"]] == ["small"]


def test_a_load_set_before_the_service_exists_is_kept() -> None:
    engine = FleetEngine(seed=1)
    engine.set_load(KEY, LoadSpec(rate=3.0), 0.0)
    engine.sync([], {}, 1.0)
    engine.sync([pod("a")], {KEY: SLICE}, 2.0)
    assert engine.state(2.0)["services"][0]["nominal_rate"] == 3.0


def test_forced_accelerator_overrides_plans() -> None:
    engine = FleetEngine(accelerator="a10g", seed=1)
    engine.sync([pod("a")], {KEY: SLICE}, 0.0)
    assert engine.state(0.0)["services"][0]["accelerator"] == "a10g"
    with pytest.raises(ValueError, match="unknown accelerator"):
        FleetEngine(accelerator="tpu")
