"""The cold start per accelerator and cache state, and the sweep of what each second of it costs."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest

from llama_bench.cli import build_parser
from llama_bench.sim.accelerators import ACCELERATORS, MODELS
from llama_bench.sim.coldstart import (
    CACHE_STATES,
    NODE_PROVISION_SECONDS,
    cold_start,
    host_to_device_bytes_per_second,
)
from llama_bench.sim.coldsweep import cache_state_table, run_sweep, slope, slopes, sweep_table
from llama_bench.sim.scenario import Scenario
from llama_bench.sim.trace import Trace, TraceRequest


@pytest.mark.parametrize("accelerator", ["t4", "l4", "a100-80gb", "h100-80gb-1g.10gb", "b200"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_each_staging_step_shortens_the_start(accelerator: str, model: str) -> None:
    cold, image, warm = (cold_start(accelerator, model, state) for state in CACHE_STATES)
    assert cold.total > image.total > warm.total > 0
    # Pre-pulling removes the pull and nothing else; staging the weights and the compile cache the rest.
    assert cold.image_pull > 0 and image.image_pull == warm.image_pull == 0
    assert image.weight_load == cold.weight_load > warm.weight_load
    assert image.compile == cold.compile > warm.compile
    assert warm.graph_capture == cold.graph_capture  # vLLM does not cache CUDA graphs


def test_bigger_weights_load_longer_and_a_faster_host_link_loads_faster() -> None:
    small = cold_start("t4", "llama-3.2-1b", "warm").weight_load
    big = cold_start("t4", "llama-3.1-8b", "warm").weight_load
    assert big > 6 * small
    assert host_to_device_bytes_per_second("h100-80gb") > host_to_device_bytes_per_second("t4")
    # A MIG slice shares its GPU's host link.
    assert host_to_device_bytes_per_second("a100-80gb-1g.10gb") == host_to_device_bytes_per_second(
        "a100-80gb"
    )


def test_every_catalog_accelerator_has_a_cold_start() -> None:
    for accelerator in ACCELERATORS:
        assert cold_start(accelerator, "llama-3.2-1b", "cold").total > 0


def test_unknown_cache_state_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown cache state 'hot'"):
        cold_start("t4", "llama-3.2-1b", "hot")


def test_slope_is_least_squares() -> None:
    assert slope([0, 10, 20], [1, 3, 5]) == pytest.approx(0.2)
    assert slope([5, 5], [1, 9]) == 0.0


def step_trace(low: float = 1.0, high: float = 12.0, seed: int = 3) -> Trace:
    """Two quiet minutes, then three at `high` requests/s: the replicas it needs start after the step."""
    rng = random.Random(seed)
    requests, t = [], 0.0
    while t < 300.0:
        t += rng.expovariate(low if t < 120.0 else high)
        requests.append(TraceRequest(t, rng.randint(200, 1200), rng.randint(20, 120)))
    return Trace("step", tuple(requests))


def test_a_longer_cold_start_loses_more_windows_on_a_step() -> None:
    points = run_sweep(Scenario(max_replicas=4), [step_trace()], [0.0, 200.0], lambda _: None)
    fast, slow = points
    assert fast.windows == slow.windows == 5
    assert slow.windows_missed > fast.windows_missed
    per_second = slopes(points)
    assert per_second["step"] == pytest.approx((slow.windows_missed - fast.windows_missed) / 200.0)
    assert per_second["family"] == per_second["step"]
    table = sweep_table(points)
    assert "| step | 5 |" in table and "missed @ 200 s" in table


def test_cache_state_table_names_every_part() -> None:
    table = cache_state_table("t4", "llama-3.2-1b")
    assert "image pull" in table and "| warm |" in table and "| cold |" in table


def test_cache_state_sets_the_scenario_cold_start(tmp_path: Path) -> None:
    from llama_bench.sim.commands import _scenario  # noqa: PLC0415

    args: argparse.Namespace = build_parser().parse_args(
        ["bench", "--cache-state", "warm", "--model", "llama-3.1-8b", "--out", str(tmp_path)]
    )
    assert _scenario(args).cold_start_seconds == cold_start("t4", "llama-3.1-8b", "warm").total
    default = build_parser().parse_args(["bench", "--out", str(tmp_path)])
    assert _scenario(default).cold_start_seconds == 40.0


def test_a_node_to_create_comes_before_the_replicas_own_start(tmp_path: Path) -> None:
    from llama_bench.sim.commands import _scenario  # noqa: PLC0415

    warm = cold_start("l4", "llama-3.2-1b", "warm")
    cold_node = cold_start("l4", "llama-3.2-1b", "warm", node_provision_seconds=NODE_PROVISION_SECONDS)
    assert cold_node.total == pytest.approx(warm.total + NODE_PROVISION_SECONDS)
    assert 60 <= NODE_PROVISION_SECONDS <= 240  # the published range: Ready in 80-100 s, "2-4 minutes"
    args = build_parser().parse_args(
        [
            "simulate",
            "--trace",
            "code",
            "--policy",
            "slo",
            "--cache-state",
            "warm",
            "--accelerator",
            "l4",
            "--node-provision-seconds",
            "150",
        ]
    )
    assert _scenario(args).cold_start_seconds == pytest.approx(warm.total + 150)
    default = build_parser().parse_args(["bench", "--out", str(tmp_path), "--node-provision-seconds", "90"])
    assert _scenario(default).cold_start_seconds == 40.0 + 90
