"""The `simulate` and `bench` subcommands (the CLI module wires them in with `register`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from llama_bench.sim.accelerators import ACCELERATORS, MODELS
from llama_bench.sim.coldstart import CACHE_STATES, NODE_PROVISION_SECONDS, cold_start
from llama_bench.sim.fleet import ROUTERS
from llama_bench.sim.profile import load_profile
from llama_bench.sim.report import objective_kept
from llama_bench.sim.scenario import BASE_POLICIES, TUNED_POLICIES, Scenario, ScenarioRunner
from llama_bench.sim.trace import BUNDLED_TRACES
from llama_bench.sim.tracegen import FAMILIES, GENERATED_TRACES, load_named

if TYPE_CHECKING:
    from llama_bench.sim.zero import ZeroReport

JSON_KEYS = (
    "requests_within_slo",
    "windows_within_slo",
    "gpu_hours",
    "cost",
    "replica_changes_per_hour",
    "flaps",
    "ttft_p50",
    "ttft_p95",
    "ttft_p99",
    "tpot_p50",
    "tpot_p95",
    "requests_within_tpot_slo",
    "windows_within_tpot_slo",
)


def _draw(value: str) -> int:
    """`--draws`: a draw number, 0 or more."""
    draw = int(value)
    if draw < 0:
        raise argparse.ArgumentTypeError(f"a draw is 0 or more, got {value}")
    return draw


def _scenario_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accelerator", default="t4", choices=sorted(ACCELERATORS), help="replica hardware")
    parser.add_argument("--model", default="llama-3.2-1b", choices=sorted(MODELS), help="model architecture")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="a profile measured by `llama-bench profile` (JSON): replaces --accelerator/--model's "
        "data-sheet estimate and the policy's capacity prior",
    )
    parser.add_argument("--slo-ttft", type=float, default=1.0, help="TTFT objective in seconds (default 1)")
    parser.add_argument(
        "--slo-tpot",
        type=float,
        default=None,
        help="TPOT objective in seconds (default none): the policy sizes decode for it and the replicas run "
        "the engine the planner tunes for it",
    )
    parser.add_argument(
        "--percentile", type=float, default=95.0, help="TTFT percentile held to it (default 95)"
    )
    parser.add_argument("--cold-start", type=float, default=40.0, help="seconds before a new replica serves")
    parser.add_argument(
        "--cache-state",
        choices=CACHE_STATES,
        default=None,
        help="take the cold start from its parts (sim/coldstart.py, docs/cold-start.md) for the accelerator and "
        "model with this cache state: cold, image (pre-pulled), warm (image, weights on the node, compile "
        "cache); replaces --cold-start",
    )
    parser.add_argument(
        "--node-provision-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds a new replica first waits for a GPU node to be created (launch, boot, driver, device "
        f"plugin), added to its cold start: 0 (default) where a warm node waits, ~{NODE_PROVISION_SECONDS:.0f} "
        "for a node per replica (sim/coldstart.py gives the sources)",
    )
    parser.add_argument(
        "--router",
        choices=ROUTERS,
        default="least-loaded",
        help="what spreads requests over the replicas (sim/fleet.py): least-loaded (fewest in-flight requests, "
        "the default), round-robin (a Kubernetes Service), prefix-affine (the operator's router: "
        "llama_operator.router.picker, every request keyed on its prompt's leading blocks)",
    )
    parser.add_argument("--min-replicas", type=int, default=1)
    parser.add_argument("--max-replicas", type=int, default=20)
    parser.add_argument("--scrape-interval", type=int, default=5, help="Prometheus scrape interval, seconds")
    parser.add_argument(
        "--queue-target",
        type=float,
        default=4.0,
        help="the LlamaService's waiting requests per replica target",
    )
    parser.add_argument(
        "--stabilization",
        type=int,
        default=300,
        help="the LlamaService's scaleDownStabilizationSeconds; also how long the reactive oracle "
        "holds what it learned (default 300)",
    )
    parser.add_argument(
        "--target-attainment",
        type=float,
        default=0.99,
        help="share of requests the benchmark asks within the SLO: the SLO policy's objective "
        "(spec.autoscaling.slo.objective), priced with foresight by the oracle-target policy (default 0.99)",
    )
    parser.add_argument(
        "--cold-open",
        action="store_true",
        help="start every autoscaler at minReplicas under the trace's opening load (default: a warm start, "
        "with the replicas the opening minute needs, as after the traffic before the slice)",
    )


def _zero_arguments(parser: argparse.ArgumentParser, *, several: bool) -> None:
    parser.add_argument(
        "--scale-to-zero",
        type=int,
        nargs="+" if several else None,
        default=None,
        metavar="SECONDS",
        help="policy slo with minReplicas 0 and this scaleToZeroAfterSeconds (an activator holds requests "
        "while no replica is ready), compared with the same trace without it: GPU-hours saved, wakes, the "
        "TTFT of the first requests after idle, 503s"
        + ("; several values: one run each. Runs only that comparison" if several else ""),
    )
    parser.add_argument(
        "--activation-timeout",
        type=int,
        default=300,
        metavar="SECONDS",
        help="with --scale-to-zero: activationTimeoutSeconds, how long a held request waits before a 503 "
        "(default 300)",
    )


def _scenario(args: argparse.Namespace) -> Scenario:
    measured = load_profile(args.profile).replica_profile() if args.profile is not None else None
    return Scenario(
        measured=measured,
        accelerator=args.accelerator,
        model=args.model,
        slo_ttft_seconds=args.slo_ttft,
        slo_tpot_seconds=args.slo_tpot,
        percentile=args.percentile,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        cold_start_seconds=(
            cold_start(args.accelerator, args.model, args.cache_state).total
            if args.cache_state is not None
            else args.cold_start
        )
        + args.node_provision_seconds,
        scrape_interval=args.scrape_interval,
        queue_depth_per_replica=args.queue_target,
        target_attainment=args.target_attainment,
        scale_down_stabilization_seconds=args.stabilization,
        warm_start=not args.cold_open,
        routing=args.router,
    )


def _hardware(scenario: Scenario) -> str:
    if scenario.measured is not None:
        return f"{scenario.measured.accelerator} (measured profile)"
    return scenario.accelerator


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `simulate` and `bench` to the CLI's subparsers."""
    simulate = subparsers.add_parser(
        "simulate",
        help="replay a request trace against simulated vLLM replicas under an autoscaling policy",
        description="Replay a trace (Azure format CSV, or the bundled 'code' / 'conversation') against "
        "simulated vLLM replicas scaled by a policy, and report SLO attainment and GPU cost.",
    )
    simulate.add_argument(
        "--trace", required=True, help=f"CSV path or one of {', '.join((*BUNDLED_TRACES, *GENERATED_TRACES))}"
    )
    simulate.add_argument("--policy", required=True, choices=(*BASE_POLICIES, *TUNED_POLICIES))
    _scenario_arguments(simulate)
    _zero_arguments(simulate, several=False)
    simulate.add_argument("--rate-scale", type=float, default=1.0, help="multiply the request rate")
    simulate.add_argument("--time-scale", type=float, default=1.0, help="stretch the time axis")
    simulate.add_argument("--json", action="store_true", help="print one JSON object")
    simulate.set_defaults(func=run_simulate)

    bench = subparsers.add_parser(
        "bench",
        help="run every policy over the bundled traces; print a table, write figures",
        description="Run every policy (tuned HPA/KEDA included) over the bundled traces; print one table "
        "and write table.md, results.json and a PNG per trace into --out.",
    )
    bench.add_argument(
        "--out", type=Path, default=Path("bench-out"), help="output folder (default bench-out)"
    )
    bench.add_argument(
        "--traces",
        nargs="+",
        default=list(BUNDLED_TRACES),
        choices=[*BUNDLED_TRACES, *GENERATED_TRACES],
        help="bundled traces (default all) or generated ones: the dev and holdout families', or idle-hours (long idle "
        "periods)",
    )
    bench.add_argument(
        "--family",
        choices=sorted(FAMILIES),
        default=None,
        help="run on a trace family instead (generated traces and the bundled ones): the robustness "
        "targets per trace and their distribution (worst, median)",
    )
    bench.add_argument("--only", nargs="+", default=[], help="with --family: only these of its traces")
    bench.add_argument(
        "--minutes", type=float, default=None, help="with --family: the first N minutes of each trace"
    )
    bench.add_argument(
        "--draws",
        type=_draw,
        nargs="+",
        default=None,
        metavar="K",
        help="with --family: its generated shapes from each of these draws' seeds (0: the family as "
        "committed; the bundled traces come with 0 only): the targets per trace, and the worst of each "
        "shape over its draws (draws.png)",
    )
    bench.add_argument(
        "--frontier",
        action="store_true",
        help="sweep every policy's main knob over the family (default dev): GPU-hours against windows "
        "within SLO per trace, frontier.md and frontier.png",
    )
    bench.add_argument(
        "--cold-start-sweep",
        type=float,
        nargs="+",
        default=None,
        metavar="SECONDS",
        help="policy slo on --family (default dev) at each of these cold starts: windows missed and how "
        "many each second of cold start costs; cold-start.md and cold-start.png into --out",
    )
    _scenario_arguments(bench)
    _zero_arguments(bench, several=True)
    bench.set_defaults(func=run_bench_command)


def run_simulate(args: argparse.Namespace) -> int:
    zero: ZeroReport | None = None
    try:
        scenario = _scenario(args)
        trace = load_named(args.trace, rate_scale=args.rate_scale, time_scale=args.time_scale)
        runner = ScenarioRunner(scenario, trace)
        if args.scale_to_zero is not None:
            from llama_bench.sim.zero import compare  # noqa: PLC0415 - pulls in the bench module

            if args.policy != "slo":
                raise ValueError(f"--scale-to-zero is an option of policy slo, not of {args.policy}")
            scenario = replace(
                scenario,
                scale_to_zero_after_seconds=args.scale_to_zero,
                activation_timeout_seconds=args.activation_timeout,
            )
            compared = compare(scenario, trace, [args.scale_to_zero], args.activation_timeout)
            summary, zero = compared.runs[0].summary, compared.runs[0].report
        elif args.policy in TUNED_POLICIES:
            _, summary, _ = runner.tuned(args.policy.removesuffix("-tuned"))
        else:
            _, summary = runner.run(runner.policy(args.policy))
        # The objective's price with foresight: what the GPU-hours are set against.
        _, at_objective = runner.run(runner.policy("oracle-target"))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    kept = objective_kept(summary, scenario.target_attainment, at_objective)
    if args.json:
        document: dict[str, object] = {**summary.to_json(), **kept.to_json()}
        if zero is not None:
            document["scale_to_zero"] = zero.to_json()
        print(json.dumps(document))
        return 0
    scaled = ""
    if args.rate_scale != 1.0 or args.time_scale != 1.0:
        scaled = f" (rate x{args.rate_scale:g}, time x{args.time_scale:g})"
    print(f"trace {trace.name}{scaled}: {len(trace.requests)} requests over {trace.duration / 60:.1f} min")
    print(
        f"policy {summary.policy} on {_hardware(scenario)} ({scenario.model}), "
        f"SLO p{scenario.percentile:g} TTFT <= {scenario.slo_ttft_seconds:g}s"
        + (f", TPOT <= {scenario.slo_tpot_seconds:g}s" if scenario.slo_tpot_seconds is not None else "")
    )
    print(
        f"  requests within SLO        {summary.requests_within_slo:.2%}  against the objective "
        f"{kept.objective:.2%}: {'kept' if kept.met else 'NOT kept'}, error budget left {kept.budget_left:.0%}"
    )
    print(f"  1-min windows within SLO   {summary.windows_within_slo:.2%}")
    print(
        f"  GPU-hours                  {summary.gpu_hours:.2f}  (cost ${summary.cost:.2f}; "
        f"{kept.gpu_hours_vs_oracle:.2f}x oracle@{kept.objective:.0%}'s {kept.oracle_gpu_hours:.2f})"
    )
    print(f"  replica changes per hour   {summary.replica_changes_per_hour:.1f}  (flaps {summary.flaps})")
    print(
        f"  TTFT p50/p95/p99           {summary.ttft_p50:.3f}s / {summary.ttft_p95:.3f}s / {summary.ttft_p99:.3f}s"
    )
    print(f"  TPOT p50/p95 (per request) {summary.tpot_p50 * 1000:.1f}ms / {summary.tpot_p95 * 1000:.1f}ms")
    if summary.requests_within_tpot_slo is not None:
        print(f"  requests within TPOT SLO   {summary.requests_within_tpot_slo:.2%}")
    if summary.windows_within_tpot_slo is not None:
        print(
            f"  1-min windows within TPOT  {summary.windows_within_tpot_slo:.2%}  (inter-token latency p{scenario.percentile:g})"
        )
    if zero is not None:
        for line in zero.lines():
            print(line)
    return 0


def run_bench_command(args: argparse.Namespace) -> int:
    from llama_bench.sim.bench import markdown_table, run_bench  # noqa: PLC0415 - pulls in plotting

    started = time.perf_counter()

    def progress(line: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {line}", file=sys.stderr, flush=True)

    if args.draws is not None and args.family is None and args.cold_start_sweep is None:
        print(
            "error: --draws needs --family (or --cold-start-sweep): the draws are a family's", file=sys.stderr
        )
        return 2
    if args.cold_start_sweep is not None:
        try:
            return run_cold_start_sweep(args, _scenario(args), progress)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.scale_to_zero is not None:
        try:
            return run_zero_bench(args, _scenario(args), progress, started)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.family is not None or args.frontier:
        from llama_bench.sim.family import run_family_command  # noqa: PLC0415 - pulls in plotting

        try:
            code = run_family_command(args, _scenario(args), progress)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"bench took {time.perf_counter() - started:.1f}s", file=sys.stderr)
        return code
    try:
        rows, verdict_lines, figures = run_bench(_scenario(args), args.out, progress, args.traces)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(markdown_table(rows))
    print()
    print("targets (policy slo):")
    for line in verdict_lines:
        print(f"  {line}")
    for figure in figures:
        print(f"figure: {figure}")
    print(
        f"table: {args.out / 'table.md'}, targets: {args.out / 'targets.md'}, results: {args.out / 'results.json'}"
    )
    print(f"bench took {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return 0


def run_cold_start_sweep(
    args: argparse.Namespace, scenario: Scenario, progress: Callable[[str], None]
) -> int:
    """`bench --cold-start-sweep SECONDS...`: windows missed by policy slo on the family at each cold start."""
    from llama_bench.sim.coldsweep import (  # noqa: PLC0415 - pulls in plotting
        cache_state_table,
        plot_sweep,
        run_sweep,
        sweep_table,
    )
    from llama_bench.sim.family import family_traces  # noqa: PLC0415

    traces = [t for t, _ in family_traces(args.family or "dev", args.minutes, args.only, args.draws or [0])]
    points = run_sweep(scenario, traces, args.cold_start_sweep, progress)
    parts = cache_state_table(scenario.accelerator, scenario.model)
    table = sweep_table(points)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cold-start.md").write_text(table + "\n\n" + parts + "\n")
    plot_sweep(points, scenario, args.out / "cold-start.png")
    print(table)
    print()
    print(parts)
    print(f"table: {args.out / 'cold-start.md'}, figure: {args.out / 'cold-start.png'}")
    return 0


def run_zero_bench(
    args: argparse.Namespace, scenario: Scenario, progress: Callable[[str], None], started: float
) -> int:
    """`bench --scale-to-zero SECONDS...`: policy slo with and without scale to zero on --traces (or the
    traces of --family); table.md, results.json and zero-<trace>.png into --out."""
    from llama_bench.sim.family import BUNDLED_DESCRIPTIONS, family_traces  # noqa: PLC0415
    from llama_bench.sim.zero import compare, write_zero, zero_table  # noqa: PLC0415 - plotting

    if args.frontier:
        raise ValueError("--scale-to-zero and --frontier do not go together")
    zero = replace(
        scenario,
        scale_to_zero_after_seconds=args.scale_to_zero[0],
        activation_timeout_seconds=args.activation_timeout,
    )
    for after in args.scale_to_zero[1:]:
        replace(zero, scale_to_zero_after_seconds=after)  # checks each setting before the first run
    if args.family is not None:
        traces = family_traces(args.family, args.minutes, args.only, args.draws or [0])
    else:
        traces = [
            (
                load_named(name),
                GENERATED_TRACES[name].description
                if name in GENERATED_TRACES
                else BUNDLED_DESCRIPTIONS.get(name, name),
            )
            for name in args.traces
        ]
    compared = []
    for trace, description in traces:
        progress(f"[{trace.name}] {len(trace.requests)} requests over {trace.duration / 60:.0f} min")
        compared.append(
            compare(
                zero,
                trace,
                args.scale_to_zero,
                args.activation_timeout,
                progress=progress,
                description=description,
            )
        )
    files = write_zero(compared, zero, args.out)
    print(zero_table([run.report for traced in compared for run in traced.runs]))
    print()
    for traced in compared:
        for run in traced.runs:
            for line in run.report.lines():
                print(line)
    for path in files:
        print(f"wrote {path}")
    print(f"bench took {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return 0
