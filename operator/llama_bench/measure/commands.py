"""The `profile` and `replay` subcommands: measure a running vLLM, and check the simulator against it
(the CLI module wires them in with `register`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from llama_bench.measure.vllm_probe import (
    ProbeError,
    ProfileOptions,
    measure_profile,
    measure_speed,
    replay,
)
from llama_bench.sim.accelerators import MODELS
from llama_bench.sim.agreement import (
    Latencies,
    LevelComparison,
    at_rate,
    capacity_rps,
    comparison_table,
    pooled,
    simulated_latencies,
    trace_slice,
)
from llama_bench.sim.profile import (
    HostSpeed,
    MeasuredProfile,
    at_speed,
    drift,
    load_profile,
    speed_probe_points,
)
from llama_bench.sim.progress import Progress
from llama_bench.sim.trace import BUNDLED_TRACES
from llama_bench.sim.tracegen import GENERATED_TRACES, load_named


def _progress(started: float) -> Progress:
    def progress(line: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {line}", file=sys.stderr, flush=True)

    return progress


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `profile` and `replay` to the CLI's subparsers."""
    profile = subparsers.add_parser(
        "profile",
        help="measure a running vLLM and write an accelerator profile for simulate/bench (--profile)",
        description="Measure a running, otherwise idle vLLM through its OpenAI API and /metrics: TTFT "
        "against prompt length (one request at a time), decode step time against batch size (concurrent "
        "streams), the most requests it runs at once, and its KV-cache size. Writes the profile that "
        "`simulate`, `bench` and `replay` take with --profile.",
    )
    profile.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8000")
    profile.add_argument("--model", default=None, help="served model name (default: the first it serves)")
    profile.add_argument("--api-key", default=None, help="the server's API key (or $VLLM_API_KEY)")
    profile.add_argument("--out", type=Path, required=True, help="profile JSON to write")
    profile.add_argument("--name", default="", help="the profile's name (default measured-MODEL)")
    profile.add_argument("--device", default="", help="the device, e.g. the GPU name nvidia-smi gives")
    profile.add_argument("--price-per-hour", type=float, default=0.0, help="USD per replica-hour, for cost")
    profile.add_argument(
        "--model-shape", default="", choices=["", *sorted(MODELS)], help="the served model's architecture"
    )
    profile.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=2048,
        help="the server's chunked-prefill budget (vLLM's default 2048; vLLM does not export it)",
    )
    profile.add_argument("--max-batch", type=int, default=64, help="largest decode batch measured")
    profile.add_argument("--decode-tokens", type=int, default=48, help="tokens per decode stream")
    profile.set_defaults(func=run_profile)

    rep = subparsers.add_parser(
        "replay",
        help="replay a trace slice against a real vLLM and through the simulator; compare the latencies",
        description="Replay the first requests of a trace (arrival times, prompt and output lengths) "
        "against a running vLLM at several load levels, replay the same requests through one simulated "
        "replica with the measured profile, and print TTFT and TPOT p50/p95 side by side.",
    )
    rep.add_argument("--url", required=True)
    rep.add_argument("--model", default=None)
    rep.add_argument("--api-key", default=None)
    rep.add_argument("--profile", type=Path, required=True, help="the server's profile (llama-bench profile)")
    rep.add_argument(
        "--trace",
        default="conversation",
        help=f"CSV path or one of {', '.join((*BUNDLED_TRACES, *GENERATED_TRACES))}",
    )
    rep.add_argument("--requests", type=int, default=200, help="requests in the slice")
    rep.add_argument("--max-prompt", type=int, default=1024, help="clip prompts to this many tokens")
    rep.add_argument("--max-output", type=int, default=96, help="clip outputs to this many tokens")
    rep.add_argument(
        "--levels", default="0.5,0.8,1.5", help="offered load as multiples of the profile's capacity"
    )
    rep.add_argument("--tolerance", type=float, default=0.25, help="relative error allowed (default 0.25)")
    rep.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    rep.add_argument("--json", action="store_true", help="print the comparison as JSON")
    rep.add_argument(
        "--speed-probes",
        action="store_true",
        help="probe the server's speed before a level's first replay and after each, and simulate the level at "
        "the mean speed its probes found (a host whose speed drifts, a shared machine)",
    )
    rep.add_argument(
        "--replays",
        type=int,
        default=1,
        help="replays per level, their latencies pooled (default 1)",
    )
    rep.set_defaults(func=run_replay)


def run_profile(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    options = ProfileOptions(
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_batch=args.max_batch,
        decode_tokens=args.decode_tokens,
        name=args.name,
        device=args.device,
        price_per_hour=args.price_per_hour,
        model_shape=args.model_shape,
    )
    try:
        profile = asyncio.run(
            measure_profile(args.url, args.model, _api_key(args), options, _progress(started))
        )
    except ProbeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    document = profile.to_json()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    fit = document["fit"]
    print(f"profile {args.out}: {profile.name} on {profile.device}, model {profile.model}")
    print(
        f"  step {fit['stepBaseSeconds'] * 1000:.2f} ms + {fit['secondsPerDecodeSequence'] * 1000:.3f} ms per "
        f"sequence + {fit['secondsPerContextToken'] * 1e6:.4f} us per context token; prefill "
        f"{fit['prefillTokensPerSecond']:.0f} tokens/s; request latency {fit['requestOverheadSeconds'] * 1000:.1f} ms"
    )
    print(
        f"  max-num-seqs {profile.max_num_seqs} ({profile.max_num_seqs_source}), KV cache "
        f"{profile.kv_capacity_tokens} tokens, chunk {profile.max_num_batched_tokens} tokens"
    )
    return 0


def _api_key(args: argparse.Namespace) -> str | None:
    return args.api_key or os.environ.get("VLLM_API_KEY") or None


def compare(
    url: str,
    profile: MeasuredProfile,
    *,
    trace: str,
    count: int,
    max_prompt: int,
    max_output: int,
    levels: Sequence[float],
    model: str | None = None,
    api_key: str | None = None,
    progress: Progress | None = None,
    replays: int = 1,
    speed_probes: bool = False,
) -> list[LevelComparison]:
    """Replay the slice at each level against the server and through the simulator, `replays` times per
    level, the latencies of all of a level's replays pooled (on a shared host two replays of the same
    requests differ by a third at TTFT p50 and more at p95). `speed_probes`: a speed probe
    (`measure_speed`) before a level's first replay and after each, and the level simulated with the
    profile at the mean speed its probes found (`at_speed`): a host whose speed drifts between the profile
    and the replays moves the real and the simulated latencies together. The offered rates stay the
    profile's, so every run replays the same load."""
    replica = profile.replica_profile()
    requests = trace_slice(load_named(trace), count, max_prompt, max_output)
    capacity = capacity_rps(replica, requests)
    say: Progress = progress or (lambda _line: None)
    say(f"slice: {len(requests)} requests of {trace}; capacity by the profile {capacity:.1f} requests/s")
    points = speed_probe_points(profile)

    def probe() -> HostSpeed:
        speed = asyncio.run(measure_speed(url, model, api_key, points))
        prefill, decode = speed.ratios(profile)
        say(f"speed probe: prefill x{prefill:.2f}, decode step x{decode:.2f} of the profile's")
        return speed

    rows = []
    for level in levels:
        offered = at_rate(requests, level * capacity)
        say(f"level {level:g}x: {level * capacity:.1f} requests/s over {offered[-1].arrival:.1f}s")
        real: list[Latencies] = []
        probes = [probe()] if speed_probes else []
        for _ in range(max(1, replays)):
            timings = asyncio.run(replay(url, offered, model, api_key, say))
            real.append(
                Latencies(
                    tuple(t.ttft for t in timings), tuple(t.tpot for t in timings if t.tpot is not None)
                )
            )
            if speed_probes:
                probes.append(probe())
                say(f"the host's speed moved by {drift(probes[-2], probes[-1]):.0%} across the replay")
        # One probe is a few seconds of the server: the level's probes together say its speed.
        simulated = simulated_latencies(at_speed(profile, probes).replica_profile(), offered)
        rows.append(
            LevelComparison(
                level, level * capacity, len(offered) * len(real), pooled(real).figures(), simulated.figures()
            )
        )
    return rows


def run_replay(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    try:
        levels = [float(x) for x in args.levels.split(",") if x.strip()]
        if not levels or min(levels) <= 0:
            raise ValueError(f"--levels: positive numbers expected, got {args.levels!r}")
        profile = load_profile(args.profile)
        rows = compare(
            args.url,
            profile,
            trace=args.trace,
            count=args.requests,
            max_prompt=args.max_prompt,
            max_output=args.max_output,
            levels=levels,
            model=args.model,
            api_key=_api_key(args),
            progress=_progress(started),
            replays=args.replays,
            speed_probes=args.speed_probes,
        )
    except (ValueError, ProbeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    table = comparison_table(rows, args.tolerance)
    if args.json:
        print(
            json.dumps(
                [{"level": r.level, "rate": r.rate, "real": r.real, "simulated": r.simulated} for r in rows]
            )
        )
    else:
        print(table)
    if args.out is not None:
        args.out.write_text(table + "\n", encoding="utf-8")
    return 0
