"""`llama-bench bench --frontier`: the cost-attainment frontier of every policy on every trace.

Each policy's main knob is swept: ours, its SLO headroom, the percentile it sizes for and its scale-down
stabilization (one at a time, the others at their defaults); static, the replica count; HPA and KEDA,
their target value; KPA, its target concurrency. Each run is a point (GPU-hours, share of one-minute
windows with the TTFT percentile within the SLO); the clairvoyant oracles are drawn as references. A
user picks an SLO/cost point from it; a point of ours that another policy's point beats on both axes
shows where ours leaves cost or attainment on the table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from llama_bench.baselines.keda import PRODUCTION_STACK_THRESHOLD
from llama_bench.sim.fleet import SimPolicy
from llama_bench.sim.oracle import FixedReplicas
from llama_bench.sim.policies import SloPolicy
from llama_bench.sim.progress import Progress, prefixed
from llama_bench.sim.report import RunSummary
from llama_bench.sim.scenario import TUNING_SWEEPS, Scenario, ScenarioRunner
from llama_bench.sim.trace import Trace
from llama_operator.autoscale.decision import DEFAULT_TUNING

HEADROOMS = (0.3, 0.4, 0.5, 0.6, 0.7)
PERCENTILES = (90.0, 95.0, 98.0, 99.0)
STABILIZATIONS = (120, 300, 600, 900)
STATIC_LIMIT = 24  # replica counts swept from 1 up to the oracle's peak, at most this many


@dataclass(frozen=True, slots=True)
class FrontierPoint:
    series: str  # "slo headroom", "static", "hpa", "oracle", ...
    knob: str  # what was swept ("" for references)
    value: float
    default: bool  # the policy's default setting
    summary: RunSummary


def _ours(runner: ScenarioRunner, knob: str, value: float) -> SimPolicy:
    base = runner.policy("slo")
    assert isinstance(base, SloPolicy)
    spec = base.spec
    tuning = base.tuning
    if knob == "headroom":
        tuning = replace(tuning, slo_headroom=value)
    elif knob == "percentile":
        spec = spec.model_copy(update={"slo": spec.slo.model_copy(update={"percentile": value})})
    elif knob == "stabilization":
        spec = spec.model_copy(update={"scale_down_stabilization_seconds": int(value)})
    else:
        raise ValueError(f"unknown knob {knob!r}")
    return SloPolicy(
        spec, capacity_prior=base.capacity_prior, plan=base.plan, tuning=tuning, name=f"slo({knob}={value:g})"
    )


def frontier_trace(scenario: Scenario, trace: Trace, progress: Progress) -> list[FrontierPoint]:
    """Every point of every policy's sweep on one trace (the oracles as references)."""
    runner = ScenarioRunner(scenario, trace)
    points: list[FrontierPoint] = []

    def run(series: str, knob: str, value: float, default: bool, policy: SimPolicy) -> None:
        _, summary = runner.run(policy)
        points.append(FrontierPoint(series, knob, value, default, summary))

    defaults = base_defaults(scenario)
    for knob, values in (
        ("headroom", HEADROOMS),
        ("percentile", PERCENTILES),
        ("stabilization", STABILIZATIONS),
    ):
        for value in values:
            run(f"slo {knob}", knob, value, value == defaults[knob], _ours(runner, knob, value))
        progress(f"slo {knob}: {len(values)} runs")
    progress("oracle schedules")
    peak = max(runner.oracle_schedule())
    for replicas in range(max(1, scenario.min_replicas), min(peak, STATIC_LIMIT) + 1):
        run(
            "static",
            "replicas",
            replicas,
            replicas == peak,
            FixedReplicas(replicas, name=f"static({replicas})"),
        )
    for base, knob in (("hpa", "target"), ("keda", "target"), ("kpa", "target concurrency")):
        default = defaults[base]
        for value in sorted({*TUNING_SWEEPS[base], default}):
            run(base, knob, value, value == default, runner.policy(base, value))
        progress(f"{base}: {len(TUNING_SWEEPS[base]) + 1} runs")
    for name in ("oracle", "oracle-target"):
        run(name, "", math.nan, True, runner.policy(name))
    return points


def base_defaults(scenario: Scenario) -> dict[str, float]:
    return {
        "headroom": DEFAULT_TUNING.slo_headroom,
        "percentile": scenario.percentile,
        "stabilization": scenario.scale_down_stabilization_seconds,
        "hpa": scenario.queue_depth_per_replica,
        "keda": PRODUCTION_STACK_THRESHOLD,
        "kpa": scenario.queue_depth_per_replica,
    }


def dominated(point: FrontierPoint, others: Sequence[FrontierPoint]) -> FrontierPoint | None:
    """A non-oracle point that beats `point` on one axis and is no worse on the other, if any."""
    s = point.summary
    for other in others:
        o = other.summary
        if other.series.startswith("oracle") or other.series.startswith("slo"):
            continue
        if (
            o.windows_within_slo >= s.windows_within_slo
            and o.gpu_hours <= s.gpu_hours
            and (o.windows_within_slo > s.windows_within_slo or o.gpu_hours < s.gpu_hours)
        ):
            return other
    return None


def frontier_table(per_trace: Sequence[tuple[str, list[FrontierPoint]]]) -> str:
    lines = [
        "| trace | policy | knob | value | windows within SLO | requests within SLO | GPU-h | changes/h | dominated by |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for trace, points in per_trace:
        for p in points:
            s = p.summary
            by = dominated(p, points) if p.series.startswith("slo") else None
            value = "" if math.isnan(p.value) else f"{p.value:g}" + (" (default)" if p.default else "")
            name = f"**{p.series}**" if p.series.startswith("slo") and p.default else p.series
            lines.append(
                f"| {trace} | {name} | {p.knob} | {value} | {s.windows_within_slo:.1%} | {s.requests_within_slo:.2%} "
                f"| {s.gpu_hours:.2f} | {s.replica_changes_per_hour:.1f} | {by.summary.policy if by else ''} |"
            )
    return "\n".join(lines)


def frontier_summary(per_trace: Sequence[tuple[str, list[FrontierPoint]]]) -> str:
    """Per trace: our default point, and whether any baseline point dominates it."""
    lines = [
        "| trace | ours (default): windows | GPU-h | dominated by | cheapest baseline at >= our windows |",
        "|---|---|---|---|---|",
    ]
    for trace, points in per_trace:
        ours = next(p for p in points if p.series == "slo headroom" and p.default)
        by = dominated(ours, points)
        s = ours.summary
        matching = [
            p
            for p in points
            if not p.series.startswith(("slo", "oracle"))
            and p.summary.windows_within_slo >= s.windows_within_slo
        ]
        cheapest = min(matching, key=lambda p: p.summary.gpu_hours) if matching else None
        lines.append(
            f"| {trace} | {s.windows_within_slo:.1%} | {s.gpu_hours:.2f} "
            f"| {f'{by.summary.policy} ({by.summary.windows_within_slo:.1%}, {by.summary.gpu_hours:.2f})' if by else 'none'} "
            f"| {f'{cheapest.summary.policy}: {cheapest.summary.gpu_hours:.2f} GPU-h' if cheapest else 'none reaches it'} |"
        )
    return "\n".join(lines)


SERIES_STYLE: dict[str, tuple[str, str]] = {
    "static": ("tab:gray", "s"),
    "hpa": ("tab:orange", "^"),
    "keda": ("tab:red", "v"),
    "kpa": ("tab:purple", "x"),
    "slo stabilization": ("tab:blue", "o"),
    "slo percentile": ("tab:cyan", "o"),
    "slo headroom": ("black", "o"),
}


def plot_frontier(per_trace: Sequence[tuple[str, list[FrontierPoint]]], path: Path) -> None:
    """One panel per trace: GPU-hours (x) against windows within SLO (y), each sweep a line, our default
    a large star, the oracles as references."""
    import matplotlib  # noqa: PLC0415 - optional dependency, loaded only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    count = len(per_trace)
    columns = min(4, count)
    rows = math.ceil(count / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.6 * rows), squeeze=False)
    for index, (trace, points) in enumerate(per_trace):
        axis = axes[index // columns][index % columns]
        for series, (colour, marker) in SERIES_STYLE.items():
            chosen = sorted((p for p in points if p.series == series), key=lambda p: p.summary.gpu_hours)
            if not chosen:
                continue
            ours = series.startswith("slo")
            axis.plot(
                [p.summary.gpu_hours for p in chosen],
                [p.summary.windows_within_slo * 100 for p in chosen],
                color=colour,
                marker=marker,
                ms=3.5,
                lw=1.6 if ours else 0.8,
                label=series,
            )
        for p in points:
            if p.series == "slo headroom" and p.default:
                axis.scatter(
                    [p.summary.gpu_hours],
                    [p.summary.windows_within_slo * 100],
                    marker="*",
                    s=220,
                    color="gold",
                    edgecolor="black",
                    zorder=5,
                    label="ours (default)",
                )
            if p.series.startswith("oracle"):
                axis.scatter(
                    [p.summary.gpu_hours],
                    [p.summary.windows_within_slo * 100],
                    marker="P",
                    s=60,
                    color="tab:green" if p.series == "oracle" else "tab:olive",
                    zorder=4,
                    label="oracle" if p.series == "oracle" else "oracle@99%",
                )
        low = min(
            (p.summary.windows_within_slo * 100 for p in points if p.series.startswith("slo")), default=90
        )
        axis.set_ylim(max(0.0, min(low, 90.0) - 2), 100.5)
        axis.axhline(99, color="black", ls="--", lw=0.6)
        axis.set_title(trace, fontsize=9)
        axis.tick_params(labelsize=7)
        if index % columns == 0:
            axis.set_ylabel("windows within SLO (%)", fontsize=8)
        if index // columns == rows - 1:
            axis.set_xlabel("GPU-hours", fontsize=8)
    for index in range(count, rows * columns):
        axes[index // columns][index % columns].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    figure.suptitle(
        "Cost against attainment: every policy's knob swept (T4, TTFT p95 <= 1 s, 40 s cold start)"
    )
    figure.tight_layout(rect=(0, 0.03, 1, 0.97))
    figure.savefig(path, dpi=90)
    plt.close(figure)


def run_frontier(
    scenario: Scenario, traces: Sequence[Trace], out_dir: Path, progress: Progress
) -> tuple[list[tuple[str, list[FrontierPoint]]], list[Path]]:
    """Sweep every trace; write frontier.md (summary and every point) and frontier.png into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    per_trace: list[tuple[str, list[FrontierPoint]]] = []
    for number, trace in enumerate(traces, start=1):
        points = frontier_trace(
            scenario, trace, prefixed(progress, f"({number}/{len(traces)} {trace.name}) frontier: ")
        )
        per_trace.append((trace.name, points))
    table = out_dir / "frontier.md"
    table.write_text(
        "# Cost-attainment frontier\n\n"
        "Generated by `llama-bench bench --frontier` ([frontier.png](frontier.png)). Each policy's main knob "
        f"swept: ours' SLO headroom {', '.join(f'{v:g}' for v in HEADROOMS)}, sizing percentile "
        f"{', '.join(f'{v:g}' for v in PERCENTILES)} and stabilization {', '.join(f'{v}s' for v in STABILIZATIONS)}; "
        "static's replica count; HPA's and KEDA's target; KPA's target concurrency.\n\n"
        f"## Our default point\n\n{frontier_summary(per_trace)}\n\n## Every point\n\n{frontier_table(per_trace)}\n",
        encoding="utf-8",
    )
    figure = out_dir / "frontier.png"
    plot_frontier(per_trace, figure)
    return per_trace, [table, figure]
