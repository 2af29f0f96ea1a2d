"""`llama-operator bench`: every policy over the bundled traces, one table, one figure per trace."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from llama_operator.sim.fleet import SimulationResult
from llama_operator.sim.report import RunSummary, quantile
from llama_operator.sim.scenario import BASE_POLICIES, Scenario, ScenarioRunner
from llama_operator.sim.trace import BUNDLED_TRACES, Trace, load_trace

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class BenchRow:
    summary: RunSummary
    oracle_ratio: float  # GPU-hours relative to the oracle's on the same trace

    def to_json(self) -> dict[str, float | int | str]:
        return {**self.summary.to_json(), "gpu_hours_vs_oracle": self.oracle_ratio}


def run_trace(
    scenario: Scenario, trace: Trace, progress: Progress
) -> tuple[list[BenchRow], dict[str, SimulationResult]]:
    runner = ScenarioRunner(scenario, trace)
    progress(f"[{trace.name}] oracle schedule")
    runner.oracle_schedule()
    summaries: list[RunSummary] = []
    results: dict[str, SimulationResult] = {}
    for name in BASE_POLICIES:
        started = time.perf_counter()
        result, summary = runner.run(runner.policy(name))
        progress(f"[{trace.name}] {name}: {time.perf_counter() - started:.1f}s")
        summaries.append(summary)
        results[name] = result
    for base in ("hpa", "keda", "kpa"):
        result, summary, _ = runner.tuned(base, lambda line: progress(f"[{trace.name}] {line}"))
        summaries.append(summary)
        results[f"{base}-tuned"] = result
    oracle = next(s for s in summaries if s.policy == "oracle")
    rows = [BenchRow(s, s.gpu_hours / oracle.gpu_hours if oracle.gpu_hours else math.nan) for s in summaries]
    return rows, results


HEADER = (
    "| trace | policy | requests within SLO | 1-min windows within SLO | GPU-hours | x oracle | cost $ "
    "| changes/h | flaps | TTFT p50 s | TTFT p95 s | TTFT p99 s |"
)


def markdown_table(rows: Sequence[BenchRow]) -> str:
    lines = [HEADER, "|" + "---|" * 12]
    for row in rows:
        s = row.summary
        lines.append(
            f"| {s.trace} | {s.policy} | {s.requests_within_slo:.2%} | {s.windows_within_slo:.1%} "
            f"| {s.gpu_hours:.2f} | {row.oracle_ratio:.2f} | {s.cost:.2f} | {s.replica_changes_per_hour:.1f} "
            f"| {s.flaps} | {s.ttft_p50:.3f} | {s.ttft_p95:.3f} | {s.ttft_p99:.3f} |"
        )
    return "\n".join(lines)


def plot_trace(trace: Trace, results: dict[str, SimulationResult], slo_seconds: float, path: Path) -> None:
    """Load, replicas and TTFT p95 per minute over time, one line per policy."""
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
    for name, result in results.items():
        minutes = [s.time / 60 for s in result.snapshots]
        replicas = [s.ready + s.starting + s.draining for s in result.snapshots]
        replica_axis.step(minutes, replicas, where="post", lw=1.0, label=name)
        per_minute: dict[int, list[float]] = {}
        for request in result.requests:
            per_minute.setdefault(int(request.arrival // 60), []).append(
                request.first_token_time - request.arrival
            )
        xs = sorted(per_minute)
        ttft_axis.plot(xs, [quantile(sorted(per_minute[m]), 0.95) for m in xs], lw=1.0, label=name)
    replica_axis.set_ylabel("replicas (GPUs held)")
    replica_axis.legend(ncol=4, fontsize=8)
    ttft_axis.axhline(slo_seconds, color="black", ls="--", lw=0.8, label="SLO")
    ttft_axis.set_yscale("log")
    ttft_axis.set_ylabel("TTFT p95 per minute (s)")
    ttft_axis.set_xlabel("minutes")
    ttft_axis.legend(ncol=4, fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def run_bench(
    scenario: Scenario, out_dir: Path, progress: Progress, traces: Sequence[str] = tuple(BUNDLED_TRACES)
) -> tuple[list[BenchRow], list[Path]]:
    """Run everything, write table.md, results.json and one PNG per trace into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[BenchRow] = []
    figures: list[Path] = []
    for name in traces:
        trace = load_trace(name)
        trace_rows, results = run_trace(scenario, trace, progress)
        rows.extend(trace_rows)
        figure = out_dir / f"bench-{trace.name}.png"
        plot_trace(trace, results, scenario.slo_ttft_seconds, figure)
        figures.append(figure)
        progress(f"[{trace.name}] wrote {figure}")
    (out_dir / "table.md").write_text(markdown_table(rows) + "\n", encoding="utf-8")
    (out_dir / "results.json").write_text(
        json.dumps({"scenario": scenario_json(scenario), "rows": [r.to_json() for r in rows]}, indent=2)
        + "\n",
        encoding="utf-8",
    )
    return rows, figures


def scenario_json(scenario: Scenario) -> dict[str, float | int | str]:
    return {
        "accelerator": scenario.accelerator,
        "model": scenario.model,
        "sloTtftSeconds": scenario.slo_ttft_seconds,
        "percentile": scenario.percentile,
        "minReplicas": scenario.min_replicas,
        "maxReplicas": scenario.max_replicas,
        "coldStartSeconds": scenario.cold_start_seconds,
        "scrapeIntervalSeconds": scenario.scrape_interval,
    }
