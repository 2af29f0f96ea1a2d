"""Does the simulator agree with a real vLLM? The pure half of `llama-bench replay`: the trace slice
both replay, the load levels, one simulated replica's latencies, and the comparison table.

A slice is the first requests of a trace with their lengths clipped to what the server accepts; each
load level compresses its arrival times so that its mean rate is a multiple of the replica's capacity
as the profile predicts it (requests per second with max_num_seqs sequences busy). The same requests,
at the same times, go to the real server and through the simulator; TTFT and TPOT (time per output
token after the first) are compared at p50 and p95."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llama_bench.sim.accelerators import ReplicaProfile
from llama_bench.sim.fleet import FleetConfig, simulate
from llama_bench.sim.oracle import FixedReplicas
from llama_bench.sim.report import quantile
from llama_bench.sim.trace import Trace, TraceRequest

METRICS = ("ttft_p50", "ttft_p95", "tpot_p50", "tpot_p95")


def trace_slice(trace: Trace, count: int, max_prompt: int, max_output: int) -> list[TraceRequest]:
    """The first `count` requests, arrivals from 0, prompts and outputs clipped."""
    chosen = trace.requests[:count]
    if not chosen:
        raise ValueError(f"trace {trace.name} has no requests")
    start = chosen[0].arrival
    return [
        TraceRequest(r.arrival - start, min(r.prompt_tokens, max_prompt), min(r.output_tokens, max_output))
        for r in chosen
    ]


def engine_seconds(profile: ReplicaProfile, request: TraceRequest) -> float:
    """The engine time a request takes in a full batch: its prefill steps hold up every sequence, its
    decode steps are shared by max_num_seqs sequences."""
    batch = profile.max_num_seqs
    chunks = max(1, math.ceil(request.prompt_tokens / profile.max_num_batched_tokens))
    prefill = profile.steps.prefill_seconds(request.prompt_tokens, chunks)
    context = request.prompt_tokens + request.output_tokens / 2
    step = profile.step_seconds(batch, int(batch * context), 0)
    return prefill + (request.output_tokens - 1) * step / batch


def capacity_rps(profile: ReplicaProfile, requests: Sequence[TraceRequest]) -> float:
    """Requests per second one replica sustains on this mix, by the profile."""
    return len(requests) / sum(engine_seconds(profile, r) for r in requests)


def at_rate(requests: Sequence[TraceRequest], rate: float) -> list[TraceRequest]:
    """The requests with arrival times compressed or stretched to a mean rate (requests per second)."""
    span = requests[-1].arrival - requests[0].arrival
    if len(requests) < 2 or span <= 0:
        return list(requests)
    factor = (len(requests) - 1) / rate / span
    return [TraceRequest(r.arrival * factor, r.prompt_tokens, r.output_tokens) for r in requests]


@dataclass(frozen=True, slots=True)
class Latencies:
    """Per-request TTFT and TPOT (seconds), TPOT only for answers of two tokens or more."""

    ttft: tuple[float, ...]
    tpot: tuple[float, ...]

    def figures(self) -> dict[str, float]:
        ttft, tpot = sorted(self.ttft), sorted(self.tpot)
        return {
            "ttft_p50": quantile(ttft, 0.5),
            "ttft_p95": quantile(ttft, 0.95),
            "tpot_p50": quantile(tpot, 0.5),
            "tpot_p95": quantile(tpot, 0.95),
        }


def pooled(runs: Sequence[Latencies]) -> Latencies:
    """Several runs' latencies as one sample."""
    return Latencies(tuple(t for run in runs for t in run.ttft), tuple(t for run in runs for t in run.tpot))


def simulated_latencies(profile: ReplicaProfile, requests: Sequence[TraceRequest]) -> Latencies:
    """One always-ready replica serving the requests, as the fleet simulator runs it."""
    result = simulate(
        Trace("replay", tuple(requests)),
        FixedReplicas(1, "replay"),
        FleetConfig(profile=profile, cold_start_seconds=0),
    )
    ttft = tuple(r.first_token_time - r.arrival for r in result.requests)
    tpot = tuple(
        (r.finish_time - r.first_token_time) / (r.output_tokens - 1)
        for r in result.requests
        if r.output_tokens > 1
    )
    return Latencies(ttft, tpot)


@dataclass(frozen=True, slots=True)
class LevelComparison:
    level: float  # offered load / predicted capacity
    rate: float  # requests per second
    requests: int
    real: dict[str, float]
    simulated: dict[str, float]

    def error(self, metric: str) -> float:
        """(simulated - real) / real; infinite when real is 0 and simulated is not (a stream the client
        read in one piece has a TPOT of 0)."""
        real, simulated = self.real[metric], self.simulated[metric]
        if real == 0:
            return 0.0 if simulated == 0 else math.inf
        return simulated / real - 1

    def worst(self) -> tuple[str, float]:
        return max(((m, self.error(m)) for m in METRICS), key=lambda item: abs(item[1]))


def comparison_table(rows: Sequence[LevelComparison], tolerance: float) -> str:
    """A markdown table: each figure real / simulated (error), and whether the level agrees."""
    head = (
        "| load | req/s | requests | " + " | ".join(f"{m} real / sim (err)" for m in METRICS) + " | agrees |"
    )
    lines = [head, "|" + "---|" * (len(METRICS) + 4)]
    for row in rows:
        cells = [
            f"{row.real[m] * 1000:.1f} / {row.simulated[m] * 1000:.1f} ms ({row.error(m):+.0%})"
            for m in METRICS
        ]
        verdict = "yes" if abs(row.worst()[1]) <= tolerance else f"no (worst {row.worst()[0]})"
        lines.append(
            f"| {row.level:.2f}x | {row.rate:.1f} | {row.requests} | " + " | ".join(cells) + f" | {verdict} |"
        )
    return "\n".join(lines)
