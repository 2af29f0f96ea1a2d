"""The objective kept, family by family (`llama-bench objectives`, issue 46): from the results of
`llama-bench bench --family NAME --target-attainment OBJECTIVE` runs, our policy's requests within the
SLO against the objective it was asked to keep (spec.autoscaling.slo.objective), the error budget left,
windows within the SLO (a diagnostic), GPU-hours against oracle@objective, changes per hour and whether a
baseline dominates it; the worst case first. A plot sets requests within the SLO against GPU-hours (over
oracle@objective) per objective, ours beside the baselines tuned per trace."""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llama_bench.sim.report import ObjectiveKept

OURS = "slo"
# The rows drawn beside ours: the baselines as tuned per trace, and a static count.
BASELINE_ROWS = ("hpa-tuned", "keda-tuned", "kpa-tuned", "static")
DOMINANCE = "not dominated"


@dataclass(frozen=True, slots=True)
class TraceObjective:
    """One trace of one family run at one objective."""

    family: str
    trace: str
    kept: ObjectiveKept
    windows: float
    changes_per_hour: float
    reactive_requests: float | None  # what perfect sizing a minute late reaches
    undominated: bool | None
    dominance_why: str
    baselines: dict[str, tuple[float, float]]  # row name -> (requests within SLO, GPU-h x oracle@objective)


def _row(rows: Sequence[dict[str, object]], prefix: str) -> dict[str, object] | None:
    return next((r for r in rows if str(r["policy"]) == prefix or str(r["policy"]).startswith(prefix)), None)


def _number(row: dict[str, object], key: str) -> float:
    value = row[key]
    assert isinstance(value, int | float), f"{key} is not a number: {value!r}"
    return float(value)


def load(results: Path) -> list[TraceObjective]:
    """The traces of one `bench --family` results.json."""
    document = json.loads(results.read_text())
    objective = float(document["scenario"]["targetAttainment"])
    out = []
    for trace in document["traces"]:
        rows = trace["rows"]
        ours, oracle = _row(rows, OURS), _row(rows, "oracle@")
        if ours is None or oracle is None:
            raise ValueError(f"{results}: trace {trace['trace']} has no run of policy slo or oracle@")
        reactive = _row(rows, "reactive-oracle@")
        dominance = next((v for v in trace["verdicts"] if str(v["target"]).startswith(DOMINANCE)), None)
        oracle_hours = _number(oracle, "gpu_hours")
        baselines = {}
        for name in BASELINE_ROWS:
            row = _row(rows, name)
            if row is not None:
                baselines[name] = (
                    _number(row, "requests_within_slo"),
                    _number(row, "gpu_hours") / oracle_hours,
                )
        out.append(
            TraceObjective(
                family=str(document["family"]),
                trace=str(trace["trace"]),
                kept=ObjectiveKept(
                    objective, _number(ours, "requests_within_slo"), oracle_hours, _number(ours, "gpu_hours")
                ),
                windows=_number(ours, "windows_within_slo"),
                changes_per_hour=_number(ours, "replica_changes_per_hour"),
                reactive_requests=None if reactive is None else _number(reactive, "requests_within_slo"),
                undominated=None if dominance is None else bool(dominance["met"]),
                dominance_why="" if dominance is None else str(dominance["why"]),
                baselines=baselines,
            )
        )
    return out


def _worst_and_median(values: Sequence[float], fmt: str, *, worst_is_max: bool = False) -> str:
    worst = max(values) if worst_is_max else min(values)
    return f"{format(worst, fmt)} / {format(statistics.median(values), fmt)}"


def summary_table(runs: Sequence[TraceObjective]) -> str:
    """Per family and objective, worst / median over its traces, requests against the objective first."""
    lines = [
        "| family | objective | requests within SLO: worst / median | objective kept (where the reactive "
        "oracle keeps it) | within 1 point of the reactive oracle elsewhere | error budget left: worst | "
        "windows within SLO: worst / median | GPU-h x oracle@objective: worst / median | changes/h: worst / "
        "median | undominated |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, float], list[TraceObjective]] = {}
    for run in runs:
        groups.setdefault((run.family, run.kept.objective), []).append(run)
    for (family, objective), group in groups.items():
        reachable = [r for r in group if r.reactive_requests is not None and r.reactive_requests >= objective]
        unreachable = [r for r in group if r not in reachable]
        close = [
            r
            for r in unreachable
            if r.reactive_requests is None or r.kept.requests_within_slo >= r.reactive_requests - 0.01
        ]
        lines.append(
            f"| {family} | {objective:.0%} "
            f"| {_worst_and_median([r.kept.requests_within_slo for r in group], '.2%')} "
            f"| {sum(r.kept.met for r in reachable)} of {len(reachable)} "
            f"| {len(close)} of {len(unreachable)} "
            f"| {min(r.kept.budget_left for r in group):.0%} "
            f"| {_worst_and_median([r.windows for r in group], '.1%')} "
            f"| {_worst_and_median([r.kept.gpu_hours_vs_oracle for r in group], '.2f', worst_is_max=True)} "
            f"| {_worst_and_median([r.changes_per_hour for r in group], '.1f', worst_is_max=True)} "
            f"| {sum(1 for r in group if r.undominated)} of {len(group)} |"
        )
    return "\n".join(lines) + "\n"


def trace_table(runs: Sequence[TraceObjective]) -> str:
    """Every trace at every objective, the worst first (the fewest requests kept against the objective)."""
    lines = [
        "| family | trace | objective | requests within SLO | reactive oracle | error budget left | windows "
        "| GPU-h x oracle@objective | changes/h | dominated by |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(runs, key=lambda r: (r.kept.objective, r.kept.budget_left)):
        reactive = "" if r.reactive_requests is None else f"{r.reactive_requests:.2%}"
        dominated = "" if r.undominated or r.undominated is None else r.dominance_why.split(", e.g. ")[-1]
        lines.append(
            f"| {r.family} | {r.trace} | {r.kept.objective:.0%} | {r.kept.requests_within_slo:.2%} | {reactive} "
            f"| {r.kept.budget_left:.0%} | {r.windows:.1%} | {r.kept.gpu_hours_vs_oracle:.2f} "
            f"| {r.changes_per_hour:.1f} | {dominated} |"
        )
    return "\n".join(lines) + "\n"


def plot(runs: Sequence[TraceObjective], path: Path) -> None:
    """Requests within the SLO against GPU-hours over oracle@objective, one panel per objective."""
    import matplotlib  # noqa: PLC0415 - optional dependency, loaded only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    objectives = sorted({r.kept.objective for r in runs})
    figure, axes = plt.subplots(1, len(objectives), figsize=(6 * len(objectives), 5), squeeze=False)
    styles = {
        "hpa-tuned": ("tab:blue", "s"),
        "keda-tuned": ("tab:green", "^"),
        "kpa-tuned": ("tab:orange", "v"),
    }
    styles["static"] = ("tab:gray", "x")
    for axis, objective in zip(axes[0], objectives, strict=True):
        at = [r for r in runs if r.kept.objective == objective]
        for name, (color, marker) in styles.items():
            points = [r.baselines[name] for r in at if name in r.baselines]
            axis.scatter(
                [p[1] for p in points], [p[0] * 100 for p in points], c=color, marker=marker, label=name
            )
        axis.scatter(
            [r.kept.gpu_hours_vs_oracle for r in at],
            [r.kept.requests_within_slo * 100 for r in at],
            c="black",
            marker="o",
            label="slo (ours)",
            zorder=3,
        )
        axis.axhline(objective * 100, color="red", linestyle="--", linewidth=1, label="objective")
        axis.axvline(1.0, color="gray", linestyle=":", linewidth=1)
        axis.set_title(f"objective {objective:.0%} ({', '.join(sorted({r.family for r in at}))})")
        axis.set_xlabel(f"GPU-hours / oracle@{objective:.0%}")
        axis.set_ylabel("requests within SLO (%)")
        axis.set_ylim(max(50.0, min(r.kept.requests_within_slo * 100 for r in at) - 5), 100.5)
        axis.legend(fontsize="small", loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def run_objectives(args: argparse.Namespace) -> int:
    runs = [run for results in args.results for run in load(results)]
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    sources = " ".join(str(p) for p in args.results)
    text = (
        f"Generated by `llama-bench objectives --results {sources} --out {out}`.\n\n"
        + summary_table(runs)
        + "\n"
        + trace_table(runs)
    )
    (out / "objectives.md").write_text(text)
    plot(runs, out / "objectives.png")
    print(summary_table(runs), end="")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    command = subparsers.add_parser(
        "objectives",
        help="the objective kept, from `bench --family` results at one or more objectives",
        description="Read results.json files of `llama-bench bench --family NAME --target-attainment X` and "
        "report, per family and objective, requests within the SLO against the objective (worst first), "
        "the error budget left, windows, GPU-hours against oracle@objective, changes/h and dominance; write "
        "objectives.md and objectives.png into --out.",
    )
    command.add_argument("--results", type=Path, nargs="+", required=True, help="results.json files")
    command.add_argument("--out", type=Path, default=Path("bench-out/objectives"), help="output folder")
    command.set_defaults(func=run_objectives)
