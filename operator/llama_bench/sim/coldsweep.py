"""`llama-bench bench --cold-start-sweep S...`: what each second of cold start costs on a trace family.

Policy slo runs on every trace of the family at each cold start; the table gives the one-minute windows
out of the SLO at each value, and per trace the least-squares slope: windows lost per second of cold start
(and per 10 s). The cache states of sim.coldstart (cold, image pre-pulled, warm) are marked on the plot at
the scenario's accelerator and model, so the slope reads as what each staging step is worth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from llama_bench.sim.coldstart import CACHE_STATES, cold_start
from llama_bench.sim.progress import Progress
from llama_bench.sim.scenario import Scenario, ScenarioRunner
from llama_bench.sim.trace import Trace


@dataclass(frozen=True, slots=True)
class SweepPoint:
    trace: str
    cold_start_seconds: float
    windows: int  # one-minute windows in the trace
    windows_missed: int  # windows whose TTFT percentile exceeded the SLO
    requests_within_slo: float
    gpu_hours: float


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys on xs (0 when xs do not vary)."""
    n = len(xs)
    if n != len(ys) or n == 0:
        raise ValueError("slope needs as many ys as xs, at least one")
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def run_sweep(
    scenario: Scenario, traces: Sequence[Trace], values: Sequence[float], progress: Progress
) -> list[SweepPoint]:
    if not values or any(v < 0 for v in values):
        raise ValueError("cold start values must be given and not negative")
    points: list[SweepPoint] = []
    for trace in traces:
        for value in sorted(values):
            runner = ScenarioRunner(replace(scenario, cold_start_seconds=value), trace)
            _, summary = runner.run(runner.policy("slo"))
            windows = max(1, round(trace.duration / 60))
            missed = round((1.0 - summary.windows_within_slo) * windows)
            points.append(
                SweepPoint(trace.name, value, windows, missed, summary.requests_within_slo, summary.gpu_hours)
            )
            progress(f"{trace.name} cold start {value:g}s: {missed}/{windows} windows missed")
    return points


def slopes(points: Sequence[SweepPoint]) -> dict[str, float]:
    """Per trace (and "family", the sum over traces): windows missed per second of cold start."""
    by_trace: dict[str, list[SweepPoint]] = {}
    for p in points:
        by_trace.setdefault(p.trace, []).append(p)
    out = {
        name: slope([p.cold_start_seconds for p in ps], [float(p.windows_missed) for p in ps])
        for name, ps in by_trace.items()
    }
    out["family"] = sum(out.values())
    return out


def sweep_table(points: Sequence[SweepPoint]) -> str:
    values = sorted({p.cold_start_seconds for p in points})
    traces = list(dict.fromkeys(p.trace for p in points))
    cell = {(p.trace, p.cold_start_seconds): p for p in points}
    per_second = slopes(points)
    header = "| trace | windows | " + " | ".join(f"missed @ {v:g} s" for v in values)
    lines = [header + " | windows per s of cold start | per 10 s |"]
    lines.append("|---|---:|" + "---:|" * len(values) + "---:|---:|")
    for t in traces:
        row = " | ".join(str(cell[(t, v)].windows_missed) for v in values)
        windows = cell[(t, values[0])].windows
        lines.append(f"| {t} | {windows} | {row} | {per_second[t]:.3f} | {10 * per_second[t]:.2f} |")
    totals = " | ".join(str(sum(cell[(t, v)].windows_missed for t in traces)) for v in values)
    windows = sum(cell[(t, values[0])].windows for t in traces)
    fam = per_second["family"]
    lines.append(f"| **family** | {windows} | {totals} | {fam:.3f} | {10 * fam:.2f} |")
    return "\n".join(lines)


def cache_state_table(accelerator: str, model: str) -> str:
    """The cold start's parts at each cache state (sim.coldstart)."""
    lines = [
        f"| {accelerator}, {model} | image pull | container | import | weights | compile | graphs | total |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for state in CACHE_STATES:
        c = cold_start(accelerator, model, state)
        parts = (c.image_pull, c.container_start, c.python_import, c.weight_load, c.compile, c.graph_capture)
        lines.append(f"| {state} | " + " | ".join(f"{x:.1f}" for x in parts) + f" | {c.total:.1f} |")
    return "\n".join(lines)


def plot_sweep(points: Sequence[SweepPoint], scenario: Scenario, path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - optional dependency, loaded only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(figsize=(10, 6))
    values = sorted({p.cold_start_seconds for p in points})
    for trace in dict.fromkeys(p.trace for p in points):
        ys = [
            next(p.windows_missed for p in points if p.trace == trace and p.cold_start_seconds == v)
            for v in values
        ]
        axes.plot(values, ys, marker="o", lw=1, label=trace)
    totals = [sum(p.windows_missed for p in points if p.cold_start_seconds == v) for v in values]
    axes.plot(values, totals, marker="D", lw=2.5, color="black", label="family (sum)")
    for state in CACHE_STATES:
        seconds = cold_start(scenario.accelerator, scenario.model, state).total
        axes.axvline(seconds, color="grey", ls="--", lw=0.8)
        axes.text(seconds, max(totals) * 0.95 if totals else 1, f" {state}", fontsize=8, color="grey")
    axes.set_xlabel("cold start (s)")
    axes.set_ylabel("one-minute windows with TTFT p95 over the SLO")
    axes.set_title(
        f"Windows lost to cold start, policy slo ({scenario.accelerator}, {scenario.model}, "
        f"TTFT p{scenario.percentile:g} <= {scenario.slo_ttft_seconds:g} s)"
    )
    axes.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
