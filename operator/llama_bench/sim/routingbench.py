"""Routers compared under the SLO autoscaler: round robin (a Kubernetes Service), least-loaded, and the
operator's prefix-affine picker (and, as an ablation, that picker on request counts alone), on traces whose
requests share prefixes (sim/prefixgen.py) or an autoscaler family's (`--family`, no shared prefix). For each:
1-minute TTFT windows within the SLO, requests within it, the prefix-cache hit rate (cached prompt tokens
over prompt tokens looked up, vLLM's prefix_cache_hits over prefix_cache_queries) and GPU-hours."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from llama_bench.sim.accelerators import ACCELERATORS, MODELS
from llama_bench.sim.family import family_traces
from llama_bench.sim.fleet import ROUTERS, SimulationResult
from llama_bench.sim.mooncake import BUNDLED_MOONCAKE, load_mooncake
from llama_bench.sim.prefixgen import PREFIX_TRACES, conversations
from llama_bench.sim.scenario import Scenario, ScenarioRunner
from llama_bench.sim.trace import Trace
from llama_bench.sim.tracegen import FAMILIES, head

ROUTING_TRACES = (*PREFIX_TRACES, *BUNDLED_MOONCAKE)
DEFAULT_ROUTERS = ("round-robin", "least-loaded", "prefix-affine")


def routing_trace(name: str, minutes: float | None = None) -> Trace:
    """A generated trace with prefixes (PREFIX_TRACES) or a bundled Mooncake one; its first `minutes`."""
    if name in PREFIX_TRACES:
        spec = PREFIX_TRACES[name]
        return conversations(spec if minutes is None else replace(spec, duration_seconds=minutes * 60))
    trace = load_mooncake(name)
    return trace if minutes is None else head(trace, minutes)


@dataclass(frozen=True, slots=True)
class RoutingRow:
    trace: str
    router: str
    windows_within_slo: float
    requests_within_slo: float
    hit_rate: float
    gpu_hours: float
    ttft_p50: float
    ttft_p95: float
    peak_replicas: int


def hit_rate(result: SimulationResult) -> float:
    """Cached prompt tokens over prompt tokens looked up, over every replica of the run."""
    queries = sum(replica.cache.query_tokens for replica in result.replicas)
    hits = sum(replica.cache.hit_tokens for replica in result.replicas)
    return hits / queries if queries else 0.0


def compare_routers(
    trace: Trace,
    scenario: Scenario,
    routers: Sequence[str] = DEFAULT_ROUTERS,
    progress: Callable[[str], None] | None = None,
) -> list[RoutingRow]:
    """The SLO policy on `trace` behind each router."""
    runner = ScenarioRunner(scenario, trace)
    base = runner.config
    # Every router opens with the same warm replicas: the oracle's, on the default (least-loaded) fleet.
    runner.oracle_schedule(scenario.target_attainment)
    rows = []
    for router in routers:
        runner.config = replace(base, routing=router)
        result, summary = runner.run(runner.policy("slo"))
        rows.append(
            RoutingRow(
                trace=trace.name,
                router=router,
                windows_within_slo=summary.windows_within_slo,
                requests_within_slo=summary.requests_within_slo,
                hit_rate=hit_rate(result),
                gpu_hours=summary.gpu_hours,
                ttft_p50=summary.ttft_p50,
                ttft_p95=summary.ttft_p95,
                peak_replicas=summary.peak_replicas,
            )
        )
        if progress is not None:
            progress(f"[{trace.name}] {router}: {rows[-1].hit_rate:.1%} hits, {summary.gpu_hours:.2f} GPU-h")
    return rows


def routing_table(rows: Sequence[RoutingRow]) -> str:
    lines = [
        "| trace | router | TTFT windows within SLO | requests within SLO | prefix-cache hit rate | GPU-hours "
        "| TTFT p50 | TTFT p95 | peak replicas |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.trace} | {r.router} | {r.windows_within_slo:.1%} | {r.requests_within_slo:.2%} | {r.hit_rate:.1%} "
        f"| {r.gpu_hours:.2f} | {r.ttft_p50:.3f} s | {r.ttft_p95:.3f} s | {r.peak_replicas} |"
        for r in rows
    ]
    return "\n".join(lines)


def plot_routing(rows: Sequence[RoutingRow], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - the bench extra; only this command draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    traces = list(dict.fromkeys(r.trace for r in rows))
    routers = list(dict.fromkeys(r.router for r in rows))
    metrics: tuple[tuple[str, Callable[[RoutingRow], float]], ...] = (
        ("TTFT windows within SLO (%)", lambda r: 100 * r.windows_within_slo),
        ("requests within SLO (%)", lambda r: 100 * r.requests_within_slo),
        ("prefix-cache hit rate (%)", lambda r: 100 * r.hit_rate),
        ("GPU-hours", lambda r: r.gpu_hours),
    )
    if not any(r.hit_rate for r in rows):  # no shared prefix (a family): nothing to show
        metrics = tuple(m for m in metrics if not m[0].startswith("prefix-cache"))
    many = len(traces) > 4
    figure, axes = plt.subplots(
        len(metrics) if many else 1,
        1 if many else len(metrics),
        figsize=(max(8.0, 0.22 * len(traces) * len(routers)), 3.2 * len(metrics)) if many else (20, 4),
    )
    width = 0.8 / max(1, len(routers))
    for axis, (label, value) in zip(axes, metrics, strict=True):
        for k, router in enumerate(routers):
            values = [value(r) for t in traces for r in rows if r.trace == t and r.router == router]
            if len(values) == len(traces):
                axis.bar([i + k * width for i in range(len(traces))], values, width, label=router)
        axis.set_xticks(
            [i + width * (len(routers) - 1) / 2 for i in range(len(traces))],
            traces,
            rotation=60 if many else 0,
        )
        axis.set_title(label)
        if label.endswith("(%)") and label != "prefix-cache hit rate (%)":
            low = min(value(r) for r in rows)
            axis.set_ylim(max(0.0, math.floor(low / 5) * 5 - 5), 100.5)
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "routing",
        help="compare routers (round robin, least-loaded, prefix-affine) under the SLO autoscaler on traces "
        "with shared prefixes: TTFT windows within SLO, prefix-cache hit rate, GPU-hours",
    )
    parser.add_argument(
        "--traces",
        nargs="+",
        default=None,
        choices=ROUTING_TRACES,
        help=f"generated ({', '.join(PREFIX_TRACES)}) or Mooncake's ({', '.join(BUNDLED_MOONCAKE)}); default: the "
        "generated ones, unless --family is given",
    )
    parser.add_argument(
        "--family",
        nargs="+",
        default=[],
        choices=sorted(FAMILIES),
        help="also every trace of these autoscaler families (draw 0; no shared prefix: the routers differ in "
        "how they spread the load)",
    )
    parser.add_argument(
        "--routers", nargs="+", default=list(DEFAULT_ROUTERS), choices=ROUTERS, help="the routers compared"
    )
    parser.add_argument("--accelerator", default="t4", choices=sorted(ACCELERATORS))
    parser.add_argument("--model", default="llama-3.2-1b", choices=sorted(MODELS))
    parser.add_argument("--slo-ttft", type=float, default=1.0, help="TTFT objective in seconds (default 1)")
    parser.add_argument("--minutes", type=float, default=None, help="only the first minutes of each trace")
    parser.add_argument("--out", type=Path, default=None, help="write routing.json and routing.png here")
    parser.set_defaults(func=run_routing_command)


def run_routing_command(args: argparse.Namespace) -> int:
    scenario = Scenario(accelerator=args.accelerator, model=args.model, slo_ttft_seconds=args.slo_ttft)
    rows: list[RoutingRow] = []
    names = args.traces if args.traces is not None else ([] if args.family else list(PREFIX_TRACES))
    traces = [routing_trace(name, args.minutes) for name in names]
    for name in args.family:
        traces += [trace for trace, _ in family_traces(name, args.minutes)]
    for trace in traces:
        rows += compare_routers(
            trace,
            scenario,
            routers=args.routers,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    print(routing_table(rows))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "routing.json").write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
        plot_routing(rows, args.out / "routing.png")
    return 0
