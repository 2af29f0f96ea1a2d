"""A new engine rolls out in the simulated fleet as the operator's Deployment does (maxSurge 1,
maxUnavailable 0), and the operator's policy re-plans the engine for the hardware it measured
(reconcile/engine.py): at 1.3x the catalog's speed it runs a larger engine and fewer replicas."""

from __future__ import annotations

import math

import pytest

from llama_bench.sim.calibration_bench import run_speed
from llama_bench.sim.fleet import FleetConfig, SimulationResult, simulate
from llama_bench.sim.metrics import MetricsView
from llama_bench.sim.replica import Phase

from .conftest import T4, synthetic_trace

NEW_ENGINE = (T4.max_num_batched_tokens + 512, T4.max_num_seqs // 2)


class EngineSwitch:
    """A scripted policy: `replicas` by `schedule` (time -> count), a new engine from `switch_at` on."""

    evaluation_interval = 5

    def __init__(self, schedule: dict[float, int], switch_at: float) -> None:
        self.schedule = schedule
        self.switch_at = switch_at
        self.name = "scripted"
        self.now = 0.0

    def initial_replicas(self) -> int:
        return self.schedule[0.0]

    def evaluate(self, view: MetricsView, now: float) -> int:
        self.now = now
        return self.schedule[max(t for t in self.schedule if t <= now)]

    def engine_flags(self) -> tuple[int, int] | None:
        return NEW_ENGINE if self.now >= self.switch_at else None


def engines(result: SimulationResult) -> dict[tuple[int, int], int]:
    """Replicas alive at the end, by engine."""
    count: dict[tuple[int, int], int] = {}
    for replica in result.replicas:
        if replica.removed == result.end_time:
            key = (replica.profile.max_num_batched_tokens, replica.profile.max_num_seqs)
            count[key] = count.get(key, 0) + 1
    return count


def starting_at(result: SimulationResult, t: float) -> int:
    return sum(
        1 for r in result.replicas if r.created <= t < r.ready_at and (math.isnan(r.removed) or r.removed > t)
    )


def test_every_replica_is_replaced_one_at_a_time_and_nothing_is_dropped() -> None:
    trace = synthetic_trace(seconds=900, rate=4.0)
    config = FleetConfig(T4, cold_start_seconds=40.0)
    rolled = simulate(trace, EngineSwitch({0.0: 4}, switch_at=120.0), config)
    kept = simulate(trace, EngineSwitch({0.0: 4}, switch_at=math.inf), config)
    assert all(r.finish_time >= r.first_token_time >= r.arrival for r in rolled.requests)
    assert engines(rolled) == {NEW_ENGINE: 4}
    assert engines(kept) == {(T4.max_num_batched_tokens, T4.max_num_seqs): 4}
    # maxSurge 1: one replacement starting at a time; maxUnavailable 0: never fewer than 4 ready.
    assert max(starting_at(rolled, t) for t in range(0, 900, 5)) == 1
    for t in range(120, 900, 5):
        ready = sum(
            1
            for r in rolled.replicas
            if r.ready_at <= t and (math.isnan(r.removed) or r.removed > t) and r.phase is not Phase.STARTING
        )
        assert ready >= 4
    # Four replacements, each holding a GPU through its cold start beside the replica it replaces.
    assert len(rolled.replicas) == 8
    assert rolled.gpu_seconds() >= kept.gpu_seconds() + 4 * 40.0


def test_a_scale_down_during_the_rollout_takes_the_starting_replacement_first() -> None:
    trace = synthetic_trace(seconds=900, rate=2.0)
    config = FleetConfig(T4, cold_start_seconds=40.0)
    # The engine changes at 120 s; at 130 s, while the first replacement starts, 4 -> 3.
    result = simulate(trace, EngineSwitch({0.0: 4, 130.0: 3}, switch_at=120.0), config)
    assert engines(result) == {NEW_ENGINE: 3}
    # The replacement started at 120 s went at 130 s without serving; the rollout went on with the rest.
    cancelled = [r for r in result.replicas if r.created == 120.0]
    assert len(cancelled) == 1 and cancelled[0].removed == 130.0
    assert all(r.finish_time >= r.first_token_time for r in result.requests)


@pytest.mark.parametrize("trace", ["poisson-steady", "diurnal-compressed"])
def test_on_faster_hardware_the_operator_re_plans_the_engine_and_the_fleet_costs_less(trace: str) -> None:
    """1.3x the catalog's speed, TTFT 1 s and TPOT 50 ms: once the calibration holds 50 observations the
    engine is re-planned once (a larger step budget), the replicas roll to it, and every window after the
    calibration period still holds; the hour costs less than with the engine the catalog planned."""
    runs = {run.arm: run for run in run_speed(trace, 40, 1.3, arms=("calibrated", "fixed-engine"))}
    calibrated, fixed = runs["calibrated"], runs["fixed-engine"]
    assert calibrated.replans == 1 and fixed.replans == 0
    assert calibrated.final_budget > fixed.final_budget
    assert calibrated.settled_ttft_windows == 1.0 and calibrated.settled_tpot_windows == 1.0
    assert calibrated.summary.gpu_hours < 0.9 * fixed.summary.gpu_hours


def test_on_slower_hardware_a_smaller_engine_would_lose_the_ttft_windows_the_catalogs_holds() -> None:
    """Why the engine is never re-planned below the catalog's: at 0.7x the engine planned with the true
    factors (a smaller chunk, so that every chunk-carrying step meets TPOT) cuts the longest prompt a
    replica prefills within the TTFT objective, and TTFT windows are lost that the catalog's engine, its
    prompts spread over more replicas, holds."""
    runs = {run.arm: run for run in run_speed("poisson-steady", 20, 0.7, arms=("exact", "exact-any"))}
    kept, smaller = runs["exact"], runs["exact-any"]
    assert smaller.final_budget < kept.final_budget
    assert kept.settled_ttft_windows == 1.0 and kept.settled_tpot_windows == 1.0
    assert smaller.settled_ttft_windows < 0.9
