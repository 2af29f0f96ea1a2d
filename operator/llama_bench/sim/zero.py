"""Scale to zero in the simulator: policy slo with and without it on the same trace, in one process.

With the option (`simulate`/`bench --scale-to-zero SECONDS`) the service may go to zero replicas after
that many idle seconds; an activator holds what arrives while no replica is ready and the policy wakes
one replica (sim.fleet). The report sets the GPU-hours against the same run without the option, counts the
wakes, and gives the TTFT paid by the first requests after idle (those the activator held: the cold start
and the wait for the evaluation that woke the service are in it) and the requests answered 503 after the
activation timeout."""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from llama_bench.sim.bench import scenario_json
from llama_bench.sim.fleet import SimulationResult
from llama_bench.sim.progress import Progress
from llama_bench.sim.report import RunSummary, quantile
from llama_bench.sim.scenario import Scenario, ScenarioRunner
from llama_bench.sim.trace import Trace


@dataclass(frozen=True, slots=True)
class ZeroReport:
    """One trace, one scaleToZeroAfterSeconds: what scale to zero saved and what it cost."""

    trace: str
    scale_to_zero_after_seconds: int
    activation_timeout_seconds: int
    cold_start_seconds: float
    requests: int
    gpu_hours_without: float
    gpu_hours_with: float
    gpu_hours_ratio: float  # with / without
    gpu_hours_saved: float  # 1 - ratio
    hours_at_zero: float  # no replica at all (none starting, none draining)
    scale_downs_to_zero: int
    wakes: int  # scale-ups from zero
    # The first requests after idle: held by the activator (arrived while no replica was ready).
    held_requests: int
    held_ttft_p50: float | None
    held_ttft_p95: float | None
    held_ttft_max: float | None
    held_within_slo: float | None  # share of the held requests answered within the TTFT objective
    # Per wake, the first held request's arrival to its first token (the activation latency users see).
    activation_seconds_p50: float | None
    activation_seconds_max: float | None
    requests_503: int  # held past activationTimeoutSeconds: answered 503 (a miss in requests within SLO)
    requests_within_slo_without: float
    requests_within_slo_with: float
    windows_within_slo_without: float
    windows_within_slo_with: float
    changes_per_hour_without: float
    changes_per_hour_with: float
    peak_replicas_with: int
    wake_times: tuple[float, ...]

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The report for people, as `simulate` and `bench` print it."""

        def seconds(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}s"

        saved = (
            f"{self.gpu_hours_saved:.1%} saved"
            if self.gpu_hours_saved >= 0
            else f"{-self.gpu_hours_saved:.1%} more"
        )
        held = (
            f"{self.held_requests} held: TTFT p50/p95/max {seconds(self.held_ttft_p50)} / "
            f"{seconds(self.held_ttft_p95)} / {seconds(self.held_ttft_max)}"
        )
        if self.held_within_slo is not None:
            held += f", {self.held_within_slo:.1%} within SLO"
        return [
            f"scale to zero after {self.scale_to_zero_after_seconds}s (activation timeout "
            f"{self.activation_timeout_seconds}s, cold start {self.cold_start_seconds:g}s) on {self.trace}, "
            "against the same trace without it:",
            f"  GPU-hours                  {self.gpu_hours_without:.2f} -> {self.gpu_hours_with:.2f}  "
            f"(x{self.gpu_hours_ratio:.2f}: {saved}; {self.hours_at_zero:.2f} h at zero)",
            f"  wakes from zero            {self.wakes}  (to zero {self.scale_downs_to_zero} times)",
            f"  first requests after idle  {held}",
            "  activation (per wake)      "
            + (
                "the first held request was answered 503 at every wake"
                if self.wakes and self.activation_seconds_p50 is None
                else f"first held request to first token p50/max {seconds(self.activation_seconds_p50)} / "
                f"{seconds(self.activation_seconds_max)}"
            ),
            f"  answered 503 (timeout)     {self.requests_503} of {self.requests} requests",
            f"  requests within SLO        {self.requests_within_slo_without:.2%} -> "
            f"{self.requests_within_slo_with:.2%}",
            f"  1-min windows within SLO   {self.windows_within_slo_without:.1%} -> "
            f"{self.windows_within_slo_with:.1%}",
            f"  replica changes per hour   {self.changes_per_hour_without:.1f} -> {self.changes_per_hour_with:.1f}",
        ]


def activation_latencies(result: SimulationResult) -> list[float]:
    """Per wake from zero, the first request the activator held for it: arrival to first token (NaN
    when it was answered 503)."""
    downs = sorted(e.time for e in result.scaling_events if e.after == 0)
    latencies: list[float] = []
    last_group = -1
    for request in sorted(result.held, key=lambda r: r.arrival):
        # Held requests after the k-th scale to zero belong to the k-th wake.
        group = sum(1 for t in downs if t <= request.arrival)
        if group != last_group:
            latencies.append(request.first_token_time - request.arrival)
            last_group = group
    return latencies


def zero_report(
    scenario: Scenario,
    without: tuple[SimulationResult, RunSummary],
    with_zero: tuple[SimulationResult, RunSummary],
) -> ZeroReport:
    """`with_zero` ran `scenario` (scale to zero on), `without` the same scenario and trace without it."""
    after = scenario.scale_to_zero_after_seconds
    if after is None:
        raise ValueError("the scenario has no scale to zero")
    _, base = without
    result, summary = with_zero
    answered = sorted(
        r.first_token_time - r.arrival for r in result.held if not math.isnan(r.first_token_time)
    )
    activations = sorted(t for t in activation_latencies(result) if not math.isnan(t))
    at_zero = sum(1 for s in result.snapshots if s.ready + s.starting + s.draining == 0)
    wakes = tuple(e.time for e in result.scaling_events if e.before == 0 and e.after > 0)
    ratio = summary.gpu_hours / base.gpu_hours if base.gpu_hours else math.nan
    return ZeroReport(
        trace=summary.trace,
        scale_to_zero_after_seconds=after,
        activation_timeout_seconds=scenario.activation_timeout_seconds,
        cold_start_seconds=scenario.cold_start_seconds,
        requests=len(result.requests),
        gpu_hours_without=base.gpu_hours,
        gpu_hours_with=summary.gpu_hours,
        gpu_hours_ratio=ratio,
        gpu_hours_saved=1.0 - ratio,
        hours_at_zero=at_zero / 3600.0,
        scale_downs_to_zero=sum(1 for e in result.scaling_events if e.after == 0),
        wakes=len(wakes),
        held_requests=len(result.held),
        held_ttft_p50=quantile(answered, 0.50) if answered else None,
        held_ttft_p95=quantile(answered, 0.95) if answered else None,
        held_ttft_max=answered[-1] if answered else None,
        held_within_slo=sum(1 for t in answered if t <= scenario.slo_ttft_seconds) / len(result.held)
        if result.held
        else None,
        activation_seconds_p50=quantile(activations, 0.50) if activations else None,
        activation_seconds_max=activations[-1] if activations else None,
        requests_503=len(result.dropped),
        requests_within_slo_without=base.requests_within_slo,
        requests_within_slo_with=summary.requests_within_slo,
        windows_within_slo_without=base.windows_within_slo,
        windows_within_slo_with=summary.windows_within_slo,
        changes_per_hour_without=base.replica_changes_per_hour,
        changes_per_hour_with=summary.replica_changes_per_hour,
        peak_replicas_with=summary.peak_replicas,
        wake_times=wakes,
    )


@dataclass(frozen=True, slots=True)
class ZeroRun:
    result: SimulationResult
    summary: RunSummary
    report: ZeroReport


@dataclass(frozen=True, slots=True)
class TraceZero:
    """One trace: policy slo without scale to zero, and with it at each setting."""

    trace: Trace
    description: str
    without: tuple[SimulationResult, RunSummary]
    runs: list[ZeroRun]


def compare(
    scenario: Scenario,
    trace: Trace,
    settings: Sequence[int],
    activation_timeout: int,
    *,
    progress: Progress | None = None,
    description: str = "",
) -> TraceZero:
    """Policy slo on `trace` without scale to zero, then with it after each of `settings` idle seconds."""
    base = replace(scenario, scale_to_zero_after_seconds=None)

    def run(s: Scenario, label: str) -> tuple[SimulationResult, RunSummary]:
        started = time.perf_counter()
        runner = ScenarioRunner(s, trace)
        result, summary = runner.run(runner.policy("slo"))
        if progress is not None:
            progress(
                f"[{trace.name}] {label}: {time.perf_counter() - started:.1f}s, {summary.gpu_hours:.2f} GPU-h, "
                f"{summary.requests_within_slo:.2%} within SLO"
            )
        return result, summary

    without = run(base, "slo without scale to zero")
    runs = []
    for after in settings:
        zero = replace(base, scale_to_zero_after_seconds=after, activation_timeout_seconds=activation_timeout)
        result, summary = run(zero, f"slo, scale to zero after {after}s")
        report = zero_report(zero, without, (result, summary))
        runs.append(ZeroRun(result, summary, report))
        if progress is not None:
            longest = "" if report.held_ttft_max is None else f" (TTFT max {report.held_ttft_max:.1f}s)"
            progress(
                f"[{trace.name}]   x{report.gpu_hours_ratio:.2f} GPU-h, {report.wakes} wakes, "
                f"{report.held_requests} held{longest}, {report.requests_503} answered 503"
            )
    return TraceZero(trace, description, without, runs)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


ZERO_HEADER = (
    "| trace | to zero after | GPU-h without | GPU-h with | x without | saved (negative: spent) | hours at zero | to zero "
    "| wakes | held requests | held TTFT p50 s | held TTFT p95 s | held TTFT max s | held within SLO "
    "| activation p50 / max s | 503 | requests within SLO (without -> with) "
    "| 1-min windows within SLO | changes/h | peak replicas |"
)


def zero_table(reports: Sequence[ZeroReport]) -> str:
    lines = [ZERO_HEADER, "|" + "---|" * 20]
    for r in reports:
        held_within = "-" if r.held_within_slo is None else f"{r.held_within_slo:.1%}"
        lines.append(
            f"| {r.trace} | {r.scale_to_zero_after_seconds}s | {r.gpu_hours_without:.2f} "
            f"| {r.gpu_hours_with:.2f} | {r.gpu_hours_ratio:.2f} | {r.gpu_hours_saved:.1%} "
            f"| {r.hours_at_zero:.2f} | {r.scale_downs_to_zero} | {r.wakes} | {r.held_requests} "
            f"| {_seconds(r.held_ttft_p50)} | {_seconds(r.held_ttft_p95)} | {_seconds(r.held_ttft_max)} "
            f"| {held_within} | {_seconds(r.activation_seconds_p50)} / {_seconds(r.activation_seconds_max)} "
            f"| {r.requests_503} | {r.requests_within_slo_without:.2%} -> {r.requests_within_slo_with:.2%} "
            f"| {r.windows_within_slo_without:.1%} -> {r.windows_within_slo_with:.1%} "
            f"| {r.changes_per_hour_without:.1f} -> {r.changes_per_hour_with:.1f} | {r.peak_replicas_with} |"
        )
    return "\n".join(lines)


def traces_table(traces: Sequence[TraceZero]) -> str:
    lines = [
        "| trace | what | requests | minutes | longest gap between requests (min) |",
        "|---|---|---|---|---|",
    ]
    for t in traces:
        arrivals = [r.arrival for r in t.trace.requests]
        gap = max((b - a for a, b in itertools.pairwise(arrivals)), default=0.0)
        lines.append(
            f"| {t.trace.name} | {t.description or '-'} | {len(arrivals)} | {t.trace.duration / 60:.0f} "
            f"| {gap / 60:.1f} |"
        )
    return "\n".join(lines)


COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def plot_zero(traced: TraceZero, slo_seconds: float, path: Path) -> None:
    """Load; replicas over time without and with scale to zero (wakes marked); the TTFT of each request
    the activator held (503s marked at the timeout)."""
    import matplotlib  # noqa: PLC0415 - optional dependency, loaded only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    trace = traced.trace
    figure, (load_axis, replica_axis, held_axis) = plt.subplots(
        3, 1, figsize=(12, 9), sharex=True, gridspec_kw={"height_ratios": [1, 2, 1.3]}
    )
    minutes = math.floor(trace.duration / 60) + 1
    counts = [0] * minutes
    for request in trace.requests:
        counts[int(request.arrival // 60)] += 1
    load_axis.step(range(minutes), [c / 60 for c in counts], where="post", lw=0.8)
    load_axis.set_ylabel("requests/s\n(per minute)")
    load_axis.set_title(f"{trace.name}: policy slo without and with scale to zero")

    def replicas(result: SimulationResult) -> tuple[list[float], list[int]]:
        return [s.time / 60 for s in result.snapshots], [
            s.ready + s.starting + s.draining for s in result.snapshots
        ]

    xs, ys = replicas(traced.without[0])
    replica_axis.step(
        xs, ys, where="post", color="gray", lw=4.0, alpha=0.5, label="without scale to zero (min 1)"
    )
    for colour, run in zip(COLOURS, traced.runs, strict=False):
        r = run.report
        xs, ys = replicas(run.result)
        label = (
            f"to zero after {r.scale_to_zero_after_seconds}s: {r.gpu_hours_with:.2f} GPU-h "
            f"(x{r.gpu_hours_ratio:.2f}), {r.wakes} wakes"
        )
        replica_axis.step(xs, ys, where="post", color=colour, lw=1.0, label=label)
        if not r.wake_times:
            continue  # nothing held; an empty artist outside the axes also upsets tight_layout
        replica_axis.plot(
            [t / 60 for t in r.wake_times], [0] * len(r.wake_times), "^", color=colour, ms=7, clip_on=False
        )
        held = [q for q in run.result.held if not math.isnan(q.first_token_time)]
        held_axis.scatter(
            [q.arrival / 60 for q in held],
            [q.first_token_time - q.arrival for q in held],
            s=6,
            color=colour,
            label=f"after {r.scale_to_zero_after_seconds}s: {r.held_requests} held",
        )
        dropped = run.result.dropped
        if dropped:
            held_axis.scatter(
                [q.arrival / 60 for q in dropped],
                [r.activation_timeout_seconds] * len(dropped),
                marker="x",
                s=20,
                color=colour,
                label=f"{len(dropped)} answered 503",
            )
    replica_axis.set_ylabel("replicas (GPUs held)\n▲ wake from zero")
    replica_axis.legend(fontsize=8, loc="upper right")
    held_axis.axhline(slo_seconds, color="black", ls="--", lw=0.8, label="TTFT SLO")
    held_axis.set_yscale("log")
    held_axis.set_ylabel("TTFT of held\nrequests (s)")
    held_axis.set_xlabel("minutes")
    held_axis.legend(fontsize=8, ncol=4, loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def run_table(traces: Sequence[TraceZero]) -> str:
    """Every run with the bench's usual measures."""
    lines = [
        "| trace | policy | requests within SLO | 1-min windows within SLO | GPU-hours | changes/h | flaps "
        "| TTFT p50 s | TTFT p95 s | TTFT p99 s | peak replicas |",
        "|" + "---|" * 11,
    ]
    for traced in traces:
        for s in [traced.without[1], *(run.summary for run in traced.runs)]:
            lines.append(
                f"| {s.trace} | {s.policy} | {s.requests_within_slo:.2%} | {s.windows_within_slo:.1%} "
                f"| {s.gpu_hours:.2f} | {s.replica_changes_per_hour:.1f} | {s.flaps} | {s.ttft_p50:.3f} "
                f"| {s.ttft_p95:.3f} | {s.ttft_p99:.3f} | {s.peak_replicas} |"
            )
    return "\n".join(lines)


def write_zero(traces: Sequence[TraceZero], scenario: Scenario, out_dir: Path) -> list[Path]:
    """table.md (the comparison and every run), results.json and zero-<trace>.png into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    reports = [run.report for traced in traces for run in traced.runs]
    table = out_dir / "table.md"
    table.write_text(
        "# Scale to zero: policy slo with and without it, same traces\n\n"
        f"## Traces\n\n{traces_table(traces)}\n\n"
        f"## GPU-hours saved, wakes, and the TTFT of the first requests after idle\n\n{zero_table(reports)}\n\n"
        f"## Every run\n\n{run_table(traces)}\n",
        encoding="utf-8",
    )
    results = out_dir / "results.json"
    results.write_text(
        json.dumps(
            {
                "scenario": scenario_json(replace(scenario, scale_to_zero_after_seconds=None)),
                "activationTimeoutSeconds": scenario.activation_timeout_seconds,
                "traces": [
                    {
                        "trace": traced.trace.name,
                        "description": traced.description,
                        "without": traced.without[1].to_json(),
                        "runs": [
                            {"summary": run.summary.to_json(), "scale_to_zero": run.report.to_json()}
                            for run in traced.runs
                        ],
                    }
                    for traced in traces
                ],
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    files = [table, results]
    for traced in traces:
        figure = out_dir / f"zero-{traced.trace.name}.png"
        plot_zero(traced, scenario.slo_ttft_seconds, figure)
        files.append(figure)
    return files
