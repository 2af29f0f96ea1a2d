"""The benchmark's verdicts on its targets, from run summaries."""

from __future__ import annotations

from dataclasses import replace

from llama_bench.sim.report import RunSummary
from llama_bench.sim.targets import Targets, verdicts

BASE = RunSummary(
    policy="slo",
    trace="conversation",
    requests_within_slo=0.995,
    windows_within_slo=1.0,
    gpu_hours=2.0,
    cost=1.0,
    replica_changes_per_hour=3.0,
    flaps=0,
    ttft_p50=0.1,
    ttft_p95=0.5,
    ttft_p99=0.9,
    peak_replicas=3,
)


def run(policy: str, attained: float, gpu_hours: float, changes: float = 3.0) -> RunSummary:
    return replace(
        BASE,
        policy=policy,
        requests_within_slo=attained,
        gpu_hours=gpu_hours,
        replica_changes_per_hour=changes,
    )


def test_each_target_gets_a_verdict_with_its_figures() -> None:
    summaries = [
        run("slo", 0.995, 2.0),
        run("hpa", 0.96, 1.5),
        run("keda", 0.91, 3.8),
        run("oracle", 0.986, 1.6),
        run("oracle@99%", 0.997, 2.1),
        run("reactive-oracle@99%", 0.993, 2.4),
    ]
    sweeps = {"hpa": [run("hpa(target=1)", 0.996, 2.8)], "keda": [run("keda(target=0.5)", 0.99, 2.7)]}
    lines = verdicts("conversation", summaries, sweeps, Targets())
    text = "\n".join(lines)
    assert "requests within SLO: 99.50% (target >= 99%): met" in text
    assert "1.25x the oracle's 1.60 (target <= 1.15x): NOT met" in text
    assert "the oracle that reaches 99.70% needs 1.31x" in text
    # HPA reaches our attainment only at target 1 (2.8 GPU-h): 29 % fewer, met.
    assert "vs hpa: its cheapest run at >= our attainment is hpa(target=1)" in text
    assert "ours uses 29% fewer (target >= 25% fewer): met" in text
    # No KEDA setting reaches 99.5 %.
    assert "vs keda: no target in its sweep reaches our 99.50%" in text
    assert "replica changes per hour: 3.0 (target <= 6): met" in text


def test_a_cheaper_baseline_at_equal_attainment_fails_the_saving_target() -> None:
    summaries = [run("slo", 0.95, 2.0, changes=9.0), run("hpa", 0.96, 1.9), run("oracle", 0.97, 1.0)]
    lines = verdicts("code", summaries, {}, Targets())
    text = "\n".join(lines)
    assert "(target >= 99%): NOT met" in text
    assert "2.00x the oracle's 1.00 (target <= 1.25x): NOT met" in text
    assert "ours uses 5% more (target >= 25% fewer): NOT met" in text
    assert "9.0 (target <= 6): NOT met" in text


def test_without_our_policy_there_is_nothing_to_judge() -> None:
    assert verdicts("code", [run("hpa", 0.9, 1.0)], {}, Targets()) == ["[code] no run of policy 'slo'"]
