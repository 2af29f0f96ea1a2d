"""The family bench (targets per trace, distribution, reasons of misses) and the frontier, on short slices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llama_bench.sim.bench import BenchRow
from llama_bench.sim.family import (
    RobustnessTargets,
    TraceOutcome,
    Verdict,
    _baseline_runs,
    base_name,
    change_pattern,
    draws_table,
    family_traces,
    judge,
    missed_windows,
)
from llama_bench.sim.frontier import FrontierPoint, dominated
from llama_bench.sim.report import RunSummary
from llama_bench.sim.scenario import Scenario, ScenarioRunner
from llama_bench.sim.trace import Trace, TraceRequest
from llama_bench.sim.tracegen import family, generate, reseeded, shape_of

from .conftest import call


def summary(
    policy: str, windows: float, gpu_hours: float, requests: float = 0.995, changes: float = 2.0
) -> RunSummary:
    return RunSummary(policy, "t", requests, windows, gpu_hours, gpu_hours, changes, 0, 0.1, 0.5, 0.9, 3)


def test_base_names_group_defaults_sweeps_and_oracles() -> None:
    assert base_name("hpa-tuned(target=0.5)") == "hpa-tuned"
    assert base_name("static(3)") == "static"
    assert base_name("oracle@99%") == "oracle@"
    assert base_name("reactive-oracle@99%(hold=5m)") == "reactive-oracle@"
    assert base_name("slo") == "slo"


def test_family_traces_include_the_bundled_ones_and_cut_slices() -> None:
    traces = family_traces("dev", minutes=3, only=["flash-8x", "code"])
    assert [t.name for t, _ in traces] == ["flash-8x", "code"]
    assert all(r.arrival < 180 for t, _ in traces for r in t.requests)
    assert "bundled" in traces[1][1]
    with pytest.raises(ValueError, match="not in family"):
        family_traces("dev", only=["nope"])


def test_a_draw_is_the_same_shape_from_other_seeds() -> None:
    """Draw k regenerates each shape from a seed of its own: other arrivals, the same shape, the same every
    time; draw 0 is the family as committed."""
    spec = next(s for s in family("dev") if s.name == "mmpp-bursts")
    assert reseeded(spec, 0) is spec
    drawn = reseeded(spec, 2)
    assert drawn.name == "mmpp-bursts#2" and shape_of(drawn.name) == "mmpp-bursts"
    assert drawn.seed not in {s.seed for f in ("dev", "holdout") for s in family(f)}
    first, again, committed = generate(drawn), generate(reseeded(spec, 2)), generate(spec)
    assert first.requests == again.requests
    assert first.requests[:50] != committed.requests[:50]
    # The same shape: a mean rate within a few percent of the committed draw's.
    assert len(first.requests) == pytest.approx(len(committed.requests), rel=0.15)
    with pytest.raises(ValueError, match="0 or more"):
        reseeded(spec, -1)


def test_family_draws_add_the_generated_shapes_only() -> None:
    """The bundled Azure traces are one real sample: they come with draw 0, never reseeded."""
    traces = family_traces("dev", minutes=1, only=["flash-8x", "code"], draws=[0, 1, 3])
    assert [t.name for t, _ in traces] == ["flash-8x", "code", "flash-8x#1", "flash-8x#3"]
    assert traces[2][1].endswith("(draw 1)")
    assert [t.name for t, _ in family_traces("holdout", minutes=1, only=["steep-ramp"], draws=[2])] == [
        "steep-ramp#2"
    ]
    for bad in ([], [1, 1], [-1]):
        with pytest.raises(ValueError, match="draws"):
            family_traces("dev", minutes=1, draws=bad)


def _outcome(trace: str, windows: float, gpu_hours: float, met: list[bool | None]) -> TraceOutcome:
    rows = [
        BenchRow(summary("slo", windows, gpu_hours), 1.0, 1.0),
        BenchRow(summary("oracle@99%", 1.0, 1.0), 1.0, 1.0),
    ]
    outcome = TraceOutcome(trace, "", 10, 100, rows, {})
    outcome.verdicts = [Verdict(f"target {i}", m, "") for i, m in enumerate(met)]
    return outcome


def test_the_draws_table_gives_each_shape_its_worst_draw_and_how_often_it_met() -> None:
    outcomes = [
        _outcome("flash-4x", 1.0, 1.1, [True, True, False, True, True]),
        _outcome("flash-4x#1", 0.95, 1.4, [False, None, False, False, True]),
        _outcome("flash-4x#2", 0.98, 1.2, [False, True, True, True, True]),
        _outcome("gamma-bursty", 1.0, 0.9, [True, True, True, True, True]),
    ]
    table = draws_table(outcomes, RobustnessTargets())
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()}
    assert rows["flash-4x"].startswith("| flash-4x | 3 | 95.00 (draw 1) | 1/3 |")
    assert "| 1.40 (draw 1) | 2/3 |" in rows["flash-4x"]
    assert "| 99.50 (draw 0) | 2/2 |" in rows["flash-4x"]  # requests: judged on two draws only
    assert rows["gamma-bursty"].startswith("| gamma-bursty | 1 | 100.00 (draw 0) | 1/1 |")
    assert rows["**all**"] == "| **all** | 4 | | 2/4 | | 3/3 | 2/4 | | 3/4 | | 4/4 |"


def test_bench_family_over_draws_writes_the_worst_per_shape_and_a_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "draws"
    argv = ["bench", "--family", "holdout", "--only", "steep-ramp", "--minutes", "3", "--out", str(out)]
    assert call([*argv, "--draws", "0", "1"]) == 0
    report = (out / "targets.md").read_text()
    assert "--family holdout --draws 0 1`" in report
    assert "## Over draws" in report and "| steep-ramp | 2 |" in report
    results = json.loads((out / "results.json").read_text())
    assert results["draws"] == [0, 1]
    assert [t["trace"] for t in results["traces"]] == ["steep-ramp", "steep-ramp#1"]
    assert (out / "draws.png").stat().st_size > 10_000
    assert "| shape | draws |" in capsys.readouterr().out
    assert call(["bench", "--draws", "1"]) == 2
    assert "--draws needs --family" in capsys.readouterr().err


def test_the_holdout_family_is_generated_traces_only() -> None:
    """The bundled Azure traces are judged in dev already; holdout adds none of them."""
    names = [t.name for t, _ in family_traces("holdout", minutes=1)]
    assert names == [s.name for s in family("holdout")]


def test_missed_windows_are_classified_burst_first() -> None:
    # Five quiet minutes, then a minute at 15x: one replica cannot hold it; the oracle (enough replicas
    # from the start) can.
    requests = [TraceRequest(i * 2.0, 1000, 50) for i in range(150)]
    requests += [TraceRequest(300 + i * 0.1, 1500, 50) for i in range(600)]
    trace = Trace("burst", tuple(requests))
    scenario = Scenario(max_replicas=8)
    runner = ScenarioRunner(scenario, trace)
    ours, _ = runner.run(runner.policy("slo"))
    oracle, _ = runner.run(runner.policy("oracle-target"))
    missed, causes = missed_windows(ours, oracle, scenario)
    assert 5 in missed
    assert 5 in causes["burst"]
    assert all(m not in missed for m in range(5))
    ups = sum(1 for e in ours.scaling_events if e.after > e.before)
    assert ups >= 1
    assert change_pattern(ours, 0).startswith(f"{len(ours.scaling_events)} changes: {ups} up (")


def outcome(rows: list[RunSummary], sweeps: dict[str, list[RunSummary]] | None = None) -> TraceOutcome:
    return TraceOutcome("t", "", 60, 100, [BenchRow(s, 1.0, 1.0) for s in rows], sweeps or {})


def verdicts_for(
    ours: RunSummary, baselines: list[RunSummary], oracle_requests: float = 0.995
) -> dict[str, bool | None]:
    rows = [
        ours,
        summary("oracle@99%", 1.0, 2.0, requests=oracle_requests),
        summary("reactive-oracle@99%(hold=5m)", 0.97, 2.6),
        *baselines,
    ]
    o = outcome(rows, {"static": [summary("static(2)", 0.90, 1.5, requests=0.90)]})
    verdicts = judge(o, ([], {}), Scenario(), RobustnessTargets())
    return {v.target.split(" ")[0]: v.met for v in verdicts}


def test_judge_targets_domination_and_oracle_ratio() -> None:
    ours = summary("slo", 0.995, 2.2, requests=0.992, changes=4.0)
    met = verdicts_for(ours, [summary("static", 1.0, 3.0), summary("hpa", 0.9, 1.5, requests=0.9)])
    assert met == {"windows": True, "requests": True, "not": True, "GPU-hours": True, "replica": True}

    # A cheaper static run at equal requests dominates; 2.5 GPU-h is 1.25x oracle@'s 2.0.
    ours = summary("slo", 0.95, 2.5, requests=0.98, changes=7.0)
    met = verdicts_for(ours, [summary("static", 0.95, 2.4, requests=0.98)])
    assert met == {"windows": False, "requests": False, "not": False, "GPU-hours": False, "replica": False}
    # Dominance is on requests (the promise), not windows: more windows for fewer requests is no domination.
    met = verdicts_for(ours, [summary("static", 0.99, 2.4, requests=0.97)])
    assert met["not"] is True

    # When the oracle itself misses 99 % of requests, the request target does not apply.
    met = verdicts_for(ours, [], oracle_requests=0.97)
    assert met["requests"] is None


def test_baseline_runs_include_sweeps_and_not_ours_or_oracles() -> None:
    o = outcome(
        [
            summary("slo", 1, 1),
            summary("hpa-tuned(target=1)", 1, 1),
            summary("oracle", 1, 1),
            summary("kpa", 1, 1),
        ],
        {"static": [summary("static(1)", 1, 1)], "keda": [summary("keda(target=2)", 1, 1)]},
    )
    assert sorted(s.policy for s in _baseline_runs(o)) == [
        "hpa-tuned(target=1)",
        "keda(target=2)",
        "kpa",
        "static(1)",
    ]


def test_frontier_domination_ignores_ours_and_the_oracles() -> None:
    ours = FrontierPoint("slo headroom", "headroom", 0.5, True, summary("slo", 0.95, 2.0))
    cheaper_oracle = FrontierPoint("oracle", "", float("nan"), True, summary("oracle", 1.0, 1.0))
    other_ours = FrontierPoint("slo percentile", "percentile", 90, False, summary("slo(p=90)", 1.0, 1.0))
    assert dominated(ours, [ours, cheaper_oracle, other_ours]) is None
    static = FrontierPoint("static", "replicas", 2, False, summary("static(2)", 0.95, 1.9))
    assert dominated(ours, [static]) is static


def test_bench_family_writes_targets_distribution_and_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "family"
    code = call(
        [
            "bench",
            "--family",
            "dev",
            "--only",
            "flash-8x",
            "on-off-spiky",
            "--minutes",
            "4",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    report = (out / "targets.md").read_text()
    for section in (
        "## Targets per trace",
        "## Distribution over the family",
        "## Misses, by how much and why",
    ):
        assert section in report
    assert "| **slo (ours)** |" in report and "| on-off-spiky |" in report
    results = json.loads((out / "results.json").read_text())
    assert [t["trace"] for t in results["traces"]] == ["flash-8x", "on-off-spiky"]
    assert len(results["traces"][0]["verdicts"]) == 5
    assert (out / "family.png").stat().st_size > 10_000
    assert "windows within SLO: worst" in capsys.readouterr().out


def test_bench_frontier_sweeps_every_policy(tmp_path: Path) -> None:
    out = tmp_path / "frontier"
    code = call(["bench", "--frontier", "--only", "flash-8x", "--minutes", "4", "--out", str(out)])
    assert code == 0
    table = (out / "frontier.md").read_text()
    for series in (
        "slo headroom",
        "slo percentile",
        "slo stabilization",
        "| static |",
        "| hpa |",
        "| keda |",
        "| kpa |",
        "oracle",
    ):
        assert series in table
    assert "(default)" in table
    assert (out / "frontier.png").stat().st_size > 10_000


def test_autoscalers_start_warm_with_the_replicas_the_opening_minute_needs() -> None:
    """A trace is a slice of continuous traffic: every autoscaler (ours and the baselines) starts with
    oracle@target's first minute, the fixed and scheduled replicas with their own count; a cold open
    starts the autoscalers at minReplicas."""
    heavy = Trace(
        "opening", tuple(TraceRequest(i * 0.05, 2000, 50) for i in range(2400))
    )  # 20 req/s of 2,000-token prompts from the first second: several T4 replicas
    warm = ScenarioRunner(Scenario(), heavy)
    opening = warm.oracle_schedule(Scenario().target_attainment)[0]
    assert opening > 1
    for name in ("slo", "hpa", "keda", "kpa"):
        assert warm.opening_replicas(warm.policy(name)) == opening
    assert warm.opening_replicas(warm.policy("static")) is None
    assert warm.opening_replicas(warm.policy("oracle-target")) is None
    result, _ = warm.run(warm.policy("slo"))
    assert sum(1 for r in result.replicas if r.created == 0.0) == opening

    cold = ScenarioRunner(Scenario(warm_start=False), heavy)
    assert cold.opening_replicas(cold.policy("slo")) is None
    result, _ = cold.run(cold.policy("slo"))
    assert sum(1 for r in result.replicas if r.created == 0.0) == 1
