"""The simulate subcommand, called through its own argparse registration (the CLI wires it in)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llama_bench.sim.commands import JSON_KEYS
from llama_bench.sim.scenario import Scenario

from .conftest import call, synthetic_trace


@pytest.fixture
def trace_csv(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for request in synthetic_trace(seconds=240.0).requests:
        whole = int(request.arrival)
        fraction = f"{request.arrival - whole:.7f}"[2:]
        lines.append(
            f"2023-11-16 18:{whole // 60:02d}:{whole % 60:02d}.{fraction},{request.prompt_tokens},"
            f"{request.output_tokens}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "policy", ["slo", "hpa", "keda", "kpa", "static", "oracle", "oracle-target", "oracle-reactive"]
)
def test_simulate_json_has_the_keys(policy: str, trace_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = call(
        [
            "simulate",
            "--trace",
            str(trace_csv),
            "--policy",
            policy,
            "--accelerator",
            "t4",
            "--slo-ttft",
            "1",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(JSON_KEYS) <= set(out)
    assert 0.0 <= out["requests_within_slo"] <= 1.0
    assert out["gpu_hours"] > 0


def test_simulate_prints_a_report(trace_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert call(["simulate", "--trace", str(trace_csv), "--policy", "slo", "--rate-scale", "2"]) == 0
    out = capsys.readouterr().out
    assert "requests within SLO" in out
    assert "rate x2" in out


def test_simulate_reports_the_objective_kept(trace_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Requests within the SLO against the objective (--target-attainment, the policy's objective), the
    error budget left, and GPU-hours against oracle@objective."""
    argv = ["simulate", "--trace", str(trace_csv), "--policy", "slo", "--target-attainment", "0.95"]
    assert call([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["objective"] == 0.95
    assert out["error_budget_left"] == pytest.approx(1 - (1 - out["requests_within_slo"]) / 0.05)
    assert out["objective_met"] == (out["requests_within_slo"] >= 0.95)
    assert out["gpu_hours_vs_oracle_at_objective"] == pytest.approx(
        out["gpu_hours"] / out["oracle_at_objective_gpu_hours"]
    )
    assert call(argv) == 0
    text = capsys.readouterr().out
    assert "against the objective 95.00%" in text and "error budget left" in text and "x oracle@95%" in text


def test_simulate_reports_a_bad_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert call(["simulate", "--trace", "/nope.csv", "--policy", "slo"]) == 2
    assert "error:" in capsys.readouterr().err


def test_the_wired_cli_prints_the_json_keys(trace_csv: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "llama_bench", "simulate", "--trace", str(trace_csv), "--policy", "slo",
         "--accelerator", "t4", "--slo-ttft", "1", "--json"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert set(JSON_KEYS) <= set(json.loads(completed.stdout))


def test_bench_writes_the_table_the_verdicts_and_a_figure(trace_csv: Path, tmp_path: Path) -> None:
    from llama_bench.sim.bench import run_bench  # noqa: PLC0415 - pulls in plotting

    out = tmp_path / "bench"
    progress: list[str] = []
    rows, verdict_lines, figures = run_bench(Scenario(), out, progress.append, traces=[str(trace_csv)])
    policies = [row.summary.policy for row in rows]
    assert policies[:8] == [
        "slo",
        "hpa",
        "keda",
        "kpa",
        "static",
        "oracle",
        "oracle@99%",
        "reactive-oracle@99%(hold=5m)",
    ]
    assert [p.split("(")[0] for p in policies[8:]] == ["hpa-tuned", "keda-tuned", "kpa-tuned"]
    assert all(row.target_oracle_ratio > 0 for row in rows)
    assert any("requests within SLO" in line for line in verdict_lines)
    assert (out / "targets.md").read_text().splitlines() == verdict_lines
    assert "x oracle@target" in (out / "table.md").read_text()
    assert figures == [out / "bench-trace.png"]
    assert figures[0].stat().st_size > 10_000
    assert any("oracle schedules" in line for line in progress)


def test_the_stabilization_window_reaches_the_spec_and_the_reactive_oracle(
    trace_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--trace", str(trace_csv), "--policy", "oracle-reactive", "--json"]
    assert call([*argv, "--stabilization", "900"]) == 0
    assert json.loads(capsys.readouterr().out)["policy"] == "reactive-oracle@99%(hold=15m)"
    assert Scenario(scale_down_stabilization_seconds=900).spec().scale_down_stabilization_seconds == 900


def test_a_target_attainment_outside_0_1_is_refused(
    trace_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--trace", str(trace_csv), "--policy", "oracle-target", "--target-attainment", "99"]
    assert call(argv) == 2
    assert "target attainment must be in (0, 1], got 99" in capsys.readouterr().err
