"""The clairvoyant references: the SLO-percentile oracle, the attainment oracle and its reactive shadow."""

from __future__ import annotations

from llama_bench.sim.oracle import reactive_schedule
from llama_bench.sim.scenario import Scenario, ScenarioRunner

from .conftest import synthetic_trace


def test_the_attainment_oracle_pays_at_least_the_percentile_oracle_and_reaches_its_target() -> None:
    # 6 req/s of 100-3000 token prompts: a few replicas, with a tail that a p95 oracle lets through.
    runner = ScenarioRunner(Scenario(target_attainment=0.99), synthetic_trace(seconds=360.0, rate=6.0))
    by_percentile = runner.oracle_schedule()
    by_attainment = runner.oracle_schedule(0.99)
    assert len(by_percentile) == len(by_attainment)
    assert all(a >= p for a, p in zip(by_attainment, by_percentile, strict=True))
    _, summary = runner.run(runner.policy("oracle-target"))
    assert summary.policy == "oracle@99%"
    assert summary.requests_within_slo >= 0.98  # per minute >= 99 %, minus what its lead cannot cover
    _, percentile_summary = runner.run(runner.policy("oracle"))
    assert summary.gpu_hours >= percentile_summary.gpu_hours


def test_the_reactive_schedule_learns_a_minute_late_and_holds() -> None:
    schedule = [3, 1, 1, 7, 2, 1, 1, 1, 1]
    assert reactive_schedule(schedule, hold_minutes=2, initial=1) == [1, 3, 3, 1, 7, 7, 2, 1, 1]
    assert reactive_schedule([], hold_minutes=5, initial=1) == []
