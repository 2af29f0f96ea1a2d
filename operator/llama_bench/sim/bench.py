"""`llama-bench bench`: every policy over the bundled traces, one table, one figure per trace."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llama_bench.sim.fleet import SimulationResult
from llama_bench.sim.progress import Progress
from llama_bench.sim.report import RunSummary, quantile
from llama_bench.sim.scenario import BASE_POLICIES, Scenario, ScenarioRunner, best_of_sweep
from llama_bench.sim.targets import Targets, verdicts
from llama_bench.sim.trace import BUNDLED_TRACES, Trace
from llama_bench.sim.tracegen import load_named


@dataclass(frozen=True, slots=True)
class BenchRow:
    summary: RunSummary
    oracle_ratio: float  # GPU-hours relative to the oracle's on the same trace
    target_oracle_ratio: float  # relative to the oracle that reaches the target attainment

    def to_json(self) -> dict[str, float | int | str]:
        return {
            **self.summary.to_json(),
            "gpu_hours_vs_oracle": self.oracle_ratio,
            "gpu_hours_vs_target_oracle": self.target_oracle_ratio,
        }


@dataclass(frozen=True, slots=True)
class TraceBench:
    """One trace's rows, the baselines' whole sweeps, and the runs behind the figure."""

    rows: list[BenchRow]
    sweeps: dict[str, list[RunSummary]]
    results: dict[str, SimulationResult]


def run_trace(scenario: Scenario, trace: Trace, progress: Progress) -> TraceBench:
    runner = ScenarioRunner(scenario, trace)
    progress(
        f"[{trace.name}] oracle schedules (SLO percentile, and {scenario.target_attainment:.0%} of requests)"
    )
    runner.oracle_schedule()
    runner.oracle_schedule(scenario.target_attainment)
    summaries: list[RunSummary] = []
    results: dict[str, SimulationResult] = {}
    for name in BASE_POLICIES:
        started = time.perf_counter()
        result, summary = runner.run(runner.policy(name))
        progress(f"[{trace.name}] {name}: {time.perf_counter() - started:.1f}s")
        summaries.append(summary)
        results[name] = result
    sweeps: dict[str, list[RunSummary]] = {}
    for base in ("hpa", "keda", "kpa"):
        runs = runner.sweep(base, lambda line: progress(f"[{trace.name}] {line}"))
        sweeps[base] = [summary for _, _, summary in runs]
        result, summary, _ = best_of_sweep(base, runs)
        summaries.append(summary)
        results[f"{base}-tuned"] = result
    oracle = summaries[BASE_POLICIES.index("oracle")].gpu_hours
    target_oracle = summaries[BASE_POLICIES.index("oracle-target")].gpu_hours
    rows = [
        BenchRow(
            s,
            s.gpu_hours / oracle if oracle else math.nan,
            s.gpu_hours / target_oracle if target_oracle else math.nan,
        )
        for s in summaries
    ]
    return TraceBench(rows, sweeps, results)


HEADER = (
    "| trace | policy | requests within SLO | 1-min windows within SLO | GPU-hours | x oracle "
    "| x oracle@target | cost $ | changes/h | flaps | TTFT p50 s | TTFT p95 s | TTFT p99 s "
    "| TPOT p50 ms | TPOT p95 ms | within TPOT SLO |"
)


def markdown_table(rows: Sequence[BenchRow]) -> str:
    lines = [HEADER, "|" + "---|" * 16]
    for row in rows:
        s = row.summary
        lines.append(
            f"| {s.trace} | {s.policy} | {s.requests_within_slo:.2%} | {s.windows_within_slo:.1%} "
            f"| {s.gpu_hours:.2f} | {row.oracle_ratio:.2f} | {row.target_oracle_ratio:.2f} | {s.cost:.2f} "
            f"| {s.replica_changes_per_hour:.1f} "
            f"| {s.flaps} | {s.ttft_p50:.3f} | {s.ttft_p95:.3f} | {s.ttft_p99:.3f} "
            f"| {s.tpot_p50 * 1000:.1f} | {s.tpot_p95 * 1000:.1f} "
            f"| {'-' if s.requests_within_tpot_slo is None else f'{s.requests_within_tpot_slo:.2%}'} |"
        )
    return "\n".join(lines)


# The policies drawn, with fixed colours; ours last and thick so it stays on top. KPA (which flaps every
# few seconds) and the reactive oracle are in the table only: eleven lines would hide the one that matters.
PLOTTED: dict[str, str] = {
    "static": "tab:gray",
    "hpa": "tab:orange",
    "hpa-tuned": "tab:brown",
    "keda": "tab:red",
    "keda-tuned": "tab:pink",
    "oracle": "tab:green",
    "oracle-target": "tab:olive",
    "slo": "black",
}
LEGEND_NAMES = {"slo": "slo (ours)", "oracle-target": "oracle@target"}


def plot_trace(trace: Trace, results: dict[str, SimulationResult], slo_seconds: float, path: Path) -> None:
    """Load, replicas and TTFT p95 per minute over time, one line per plotted policy."""
    import matplotlib  # noqa: PLC0415 - optional dependency, loaded only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, (load_axis, replica_axis, ttft_axis) = plt.subplots(3, 1, figsize=(12, 10), sharex=True)
    bin_seconds = 10
    bins = math.floor(trace.duration / bin_seconds) + 1
    counts = [0] * bins
    for arrival in trace.requests:
        counts[int(arrival.arrival // bin_seconds)] += 1
    load_axis.plot([i * bin_seconds / 60 for i in range(bins)], [c / bin_seconds for c in counts], lw=0.8)
    load_axis.set_ylabel("requests/s (10 s bins)")
    load_axis.set_title(f"{trace.name} trace (Azure LLM inference 2023, CC-BY 4.0)")
    for name, colour in PLOTTED.items():
        if name not in results:
            continue
        result = results[name]
        ours = name == "slo"
        style = {"color": colour, "lw": 2.0 if ours else 0.9, "alpha": 1.0 if ours else 0.8}
        label = LEGEND_NAMES.get(name, name)
        minutes = [s.time / 60 for s in result.snapshots]
        replicas = [s.ready + s.starting + s.draining for s in result.snapshots]
        replica_axis.step(minutes, replicas, where="post", label=label, **style)
        per_minute: dict[int, list[float]] = {}
        for request in result.requests:
            per_minute.setdefault(int(request.arrival // 60), []).append(
                request.first_token_time - request.arrival
            )
        xs = sorted(per_minute)
        ttft_axis.plot(xs, [quantile(sorted(per_minute[m]), 0.95) for m in xs], label=label, **style)
    replica_axis.set_ylabel("replicas (GPUs held)")
    replica_axis.legend(ncol=4, fontsize=8)
    ttft_axis.axhline(slo_seconds, color="black", ls="--", lw=0.8, label="SLO")
    ttft_axis.set_yscale("log")
    ttft_axis.set_ylabel("TTFT p95 per minute (s)")
    ttft_axis.set_xlabel("minutes")
    ttft_axis.legend(ncol=5, fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def run_bench(
    scenario: Scenario, out_dir: Path, progress: Progress, traces: Sequence[str] = tuple(BUNDLED_TRACES)
) -> tuple[list[BenchRow], list[str], list[Path]]:
    """Run everything; write table.md, targets.md, results.json and one PNG per trace into `out_dir`.
    Returns the rows, the verdict on each of the benchmark's targets, and the figures."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[BenchRow] = []
    verdict_lines: list[str] = []
    figures: list[Path] = []
    targets = Targets(attainment=scenario.target_attainment)
    for name in traces:
        trace = load_named(name)
        bench = run_trace(scenario, trace, progress)
        rows.extend(bench.rows)
        verdict_lines.extend(verdicts(trace.name, [row.summary for row in bench.rows], bench.sweeps, targets))
        figure = out_dir / f"bench-{trace.name}.png"
        plot_trace(trace, bench.results, scenario.slo_ttft_seconds, figure)
        figures.append(figure)
        progress(f"[{trace.name}] wrote {figure}")
    (out_dir / "table.md").write_text(markdown_table(rows) + "\n", encoding="utf-8")
    (out_dir / "targets.md").write_text("\n".join(verdict_lines) + "\n", encoding="utf-8")
    (out_dir / "results.json").write_text(
        json.dumps(
            {
                "scenario": scenario_json(scenario),
                "rows": [r.to_json() for r in rows],
                "targets": verdict_lines,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    return rows, verdict_lines, figures


def scenario_json(scenario: Scenario) -> dict[str, float | int | str]:
    tpot: dict[str, float | int | str] = (
        {} if scenario.slo_tpot_seconds is None else {"sloTpotSeconds": scenario.slo_tpot_seconds}
    )
    if scenario.scale_to_zero_after_seconds is not None:
        tpot |= {
            "scaleToZeroAfterSeconds": scenario.scale_to_zero_after_seconds,
            "activationTimeoutSeconds": scenario.activation_timeout_seconds,
        }
    return tpot | {
        "accelerator": scenario.accelerator,
        "model": scenario.model,
        "sloTtftSeconds": scenario.slo_ttft_seconds,
        "percentile": scenario.percentile,
        "minReplicas": scenario.min_replicas,
        "maxReplicas": scenario.max_replicas,
        "coldStartSeconds": scenario.cold_start_seconds,
        "scrapeIntervalSeconds": scenario.scrape_interval,
        "targetAttainment": scenario.target_attainment,
        "scaleDownStabilizationSeconds": scenario.scale_down_stabilization_seconds,
        "start": "warm" if scenario.warm_start else "cold open",
    }
