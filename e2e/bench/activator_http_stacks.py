"""Activator HTTP stack benchmark (`make activator-http-bench`): candidate streaming reverse proxies.

The activator holds requests for a scaled-to-zero LlamaService and then forwards them to a vLLM pod:
OpenAI-style JSON POSTs whose responses are often server-sent events. This compares, in front of the
same upstream, each candidate as a minimal streaming reverse proxy:

- aiohttp:                aiohttp server + aiohttp ClientSession, default asyncio loop (aiohttp is
                          already in the operator's dependency tree, through kopf);
- aiohttp-uvloop:         the same on uvloop;
- starlette-httpx:        uvicorn (uvloop + httptools, what `uvicorn[standard]` picks) + starlette +
                          httpx.AsyncClient streaming;
- starlette-httpx-h11:    the same on the plain asyncio loop with h11 (uvicorn without its extras);
- direct:                 the client talks to the upstream, no proxy: the baseline every figure is
                          compared with, measured in the same run, interleaved with the proxies.

The upstream (aiohttp, its own process) answers POST /v1/completions with an SSE stream of 64 chunks of
100 bytes, 2 ms apart, then `data: [DONE]`, and POST /v1/embeddings with a small JSON body. Every
server runs in its own process (this interpreter), so none shares an event loop with the load
generator. The load generator (aiohttp client, uvloop when installed) runs closed loops at each
concurrency level for --seconds after a short warm-up, checks every response's status and length, and
measures requests/s, time to first body byte (TTFB) and total latency (p50/p99, nearest rank), and the
proxy process's CPU time per request and RSS from /proc/<pid>/stat and /proc/<pid>/status (psutil when
there is no /proc).

A stack whose libraries cannot be imported is skipped with a line saying so. Prints a markdown table
and writes results.json and table.md to --out. A benchmark: it asserts nothing.

    python e2e/bench/activator_http_stacks.py --seconds 4 --out bench-out/activator-http
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.metadata
import json
import math
import os
import platform
import resource
import select
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

SSE_CHUNKS = 64
SSE_CHUNK_BYTES = 100
SSE_GAP_S = 0.002
PROXY_POOL = 256  # upstream connections a proxy may hold open (above the highest concurrency)
# Hop-by-hop headers (RFC 9110 7.6.1) and the ones each side sets itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
REQUEST_DROP = HOP_BY_HOP | {"host", "content-length"}
RESPONSE_DROP = HOP_BY_HOP | {"date", "server"}
CLIENT_HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer bench"}


def _sse_chunk(i: int) -> bytes:
    prefix = 'data: {"id":"cmpl-bench","object":"text_completion","choices":[{"index":0,"text":"'
    suffix = '"}]}\n\n'
    text = f" tok{i:04d}"
    text += "x" * (SSE_CHUNK_BYTES - len(prefix) - len(text) - len(suffix))
    return (prefix + text + suffix).encode()


SSE_BODY = [_sse_chunk(i) for i in range(SSE_CHUNKS)] + [b"data: [DONE]\n\n"]
EMBEDDING_BODY = json.dumps(
    {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [round(0.01 * i, 4) for i in range(16)]}],
        "model": "bench",
        "usage": {"prompt_tokens": 8, "total_tokens": 8},
    },
    separators=(",", ":"),
).encode()


@dataclass(frozen=True)
class Workload:
    name: str
    path: str
    body: bytes
    expected_bytes: int
    describe: str


WORKLOADS = {
    w.name: w
    for w in (
        Workload(
            "completions-sse",
            "/v1/completions",
            json.dumps(
                {"model": "bench", "prompt": "Hello " * 32, "max_tokens": 64, "stream": True}
            ).encode(),
            sum(len(c) for c in SSE_BODY),
            f"POST /v1/completions, SSE: {SSE_CHUNKS} chunks of {SSE_CHUNK_BYTES} B, {SSE_GAP_S * 1000:g} ms apart",
        ),
        Workload(
            "embeddings-json",
            "/v1/embeddings",
            json.dumps({"model": "bench", "input": "Hello world"}).encode(),
            len(EMBEDDING_BODY),
            f"POST /v1/embeddings, one JSON body of {len(EMBEDDING_BODY)} B",
        ),
    )
}


@dataclass(frozen=True)
class Stack:
    name: str
    modules: tuple[str, ...]  # what it imports beyond aiohttp
    describe: str


STACKS = {
    s.name: s
    for s in (
        Stack("direct", (), "no proxy: the client talks to the upstream (baseline)"),
        Stack("aiohttp", (), "aiohttp web server + aiohttp.ClientSession, asyncio loop"),
        Stack("aiohttp-uvloop", ("uvloop",), "aiohttp web server + aiohttp.ClientSession, uvloop"),
        Stack(
            "starlette-httpx",
            ("uvicorn", "starlette", "httpx", "uvloop", "httptools"),
            "uvicorn (uvloop, httptools) + starlette StreamingResponse + httpx.AsyncClient stream",
        ),
        Stack(
            "starlette-httpx-h11",
            ("uvicorn", "starlette", "httpx", "h11"),
            "uvicorn (asyncio, h11) + starlette StreamingResponse + httpx.AsyncClient stream",
        ),
    )
}
PACKAGES = ("aiohttp", "uvicorn", "starlette", "httpx", "httpcore", "h11", "anyio", "uvloop", "httptools")


def _optional(name: str) -> Any:
    """Import a library the operator's environment may lack (typed as Any: no stubs needed there)."""
    return importlib.import_module(name)


def _missing(modules: Iterable[str]) -> list[str]:
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    if _missing(["uvloop"]):
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = _optional("uvloop").new_event_loop
    return factory


def _forward(headers: Iterable[tuple[str, str]], drop: frozenset[str]) -> dict[str, str]:
    return {k: v for k, v in headers if k.lower() not in drop}


# --- the servers (each in its own process: `--serve ROLE`) -----------------------------------------


def _upstream_app() -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for i, chunk in enumerate(SSE_BODY):
            if 0 < i < len(SSE_BODY) - 1:
                await asyncio.sleep(SSE_GAP_S)
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def embeddings(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=EMBEDDING_BODY, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/embeddings", embeddings)
    return app


SESSION = web.AppKey("session", aiohttp.ClientSession)


def _aiohttp_proxy_app(upstream: str) -> web.Application:
    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=PROXY_POOL),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
        )
        app[SESSION] = session
        yield
        await session.close()

    async def proxy(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        async with request.app[SESSION].request(
            request.method,
            upstream + request.path_qs,
            data=body,
            headers=_forward(request.headers.items(), REQUEST_DROP),
        ) as up:
            resp = web.StreamResponse(status=up.status, headers=_forward(up.headers.items(), RESPONSE_DROP))
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_route("*", "/{tail:.*}", proxy)
    return app


def _starlette_proxy_app(upstream: str) -> Any:
    httpx = _optional("httpx")
    applications = _optional("starlette.applications")
    background = _optional("starlette.background")
    responses = _optional("starlette.responses")
    routing = _optional("starlette.routing")
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=PROXY_POOL, max_keepalive_connections=PROXY_POOL)
        async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(None, connect=5.0)) as client:
            state["client"] = client
            yield

    async def proxy(request: Any) -> Any:
        client = state["client"]
        body = await request.body()
        query = request.url.query
        up = await client.send(
            client.build_request(
                request.method,
                upstream + request.url.path + (f"?{query}" if query else ""),
                content=body,
                headers=_forward(request.headers.items(), REQUEST_DROP),
            ),
            stream=True,
        )
        return responses.StreamingResponse(
            up.aiter_raw(),
            status_code=up.status_code,
            headers=_forward(up.headers.items(), RESPONSE_DROP),
            background=background.BackgroundTask(up.aclose),
        )

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return applications.Starlette(
        routes=[routing.Route("/{path:path}", proxy, methods=methods)], lifespan=lifespan
    )


async def _serve_aiohttp(app: web.Application, sock: socket.socket) -> None:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    await asyncio.Event().wait()  # until the parent terminates this process


def serve(role: str, upstream: str) -> int:
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on accepted connections only when the listening
    # socket's proto is IPPROTO_TCP (base_events._set_nodelay); with proto 0 the asyncio-loop servers that
    # do not set it themselves (uvicorn) answer 40 ms late (Nagle + delayed ACK). uvloop and aiohttp set it.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # nothing more on the pipe the parent reads
    if role in {"upstream", "aiohttp", "aiohttp-uvloop"}:
        app = _upstream_app() if role == "upstream" else _aiohttp_proxy_app(upstream)
        factory = None if role == "aiohttp" else _uvloop_factory()
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(_serve_aiohttp(app, sock))
        return 0
    if role in {"starlette-httpx", "starlette-httpx-h11"}:
        uvicorn = _optional("uvicorn")
        fast = role == "starlette-httpx"
        config = uvicorn.Config(
            _starlette_proxy_app(upstream),
            loop="uvloop" if fast else "asyncio",
            http="httptools" if fast else "h11",
            lifespan="on",
            log_level="warning",
            access_log=False,
            server_header=False,
        )
        uvicorn.Server(config).run(sockets=[sock])
        return 0
    print(f"unknown role {role!r}", file=sys.stderr)
    return 2


# --- the processes ---------------------------------------------------------------------------------


@dataclass
class Server:
    role: str
    proc: subprocess.Popen[bytes]
    url: str


def spawn(role: str, upstream: str, log_dir: Path, timeout: float = 20.0) -> Server:
    log = (log_dir / f"{role}.log").open("wb")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", role, "--upstream", upstream]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline().decode() if ready else ""
    if not line.startswith("PORT "):
        stop(proc)
        tail = (log_dir / f"{role}.log").read_text(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"{role} did not start: {' | '.join(tail) or 'no output'}")
    return Server(role, proc, f"http://127.0.0.1:{int(line.split()[1])}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the whole process (all threads)."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        fields = stat.read_text().rsplit(")", 1)[1].split()  # fields from the 3rd (state) on
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime: fields 14 and 15
    times = _optional("psutil").Process(pid).cpu_times()
    return float(times.user + times.system)


def rss_mib(pid: int) -> tuple[float, float | None]:
    """(VmRSS, VmHWM) in MiB; the peak is None without /proc."""
    status = Path(f"/proc/{pid}/status")
    if status.exists():
        values = {}
        for line in status.read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in {"VmRSS", "VmHWM"}:
                values[key] = int(rest.split()[0]) / 1024
        return values["VmRSS"], values["VmHWM"]
    return float(_optional("psutil").Process(pid).memory_info().rss) / 2**20, None


# --- the load generator ----------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest rank; q in [0, 1]."""
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))]


async def one_request(session: aiohttp.ClientSession, url: str, workload: Workload) -> tuple[float, float]:
    """(seconds to the first body byte, seconds to the last); raises on a wrong status or length."""
    start = time.perf_counter()
    async with session.post(url, data=workload.body, headers=CLIENT_HEADERS) as resp:
        received = len(await resp.content.readany())
        first = time.perf_counter()
        while chunk := await resp.content.readany():
            received += len(chunk)
        end = time.perf_counter()
        if resp.status != 200 or received != workload.expected_bytes:
            raise ValueError(f"status {resp.status}, {received} of {workload.expected_bytes} bytes")
    return first - start, end - start


@dataclass
class Tally:
    ttfb: list[float]
    total: list[float]
    errors: int = 0
    last_error: str = ""


async def closed_loop(
    session: aiohttp.ClientSession, url: str, workload: Workload, concurrency: int, seconds: float
) -> Tally:
    tally = Tally([], [])
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            try:
                ttfb, total = await one_request(session, url, workload)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                tally.errors += 1
                tally.last_error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(0.01)
                continue
            tally.ttfb.append(ttfb)
            tally.total.append(total)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tally


async def wait_ready(url: str, workload: Workload, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                await one_request(session, url, workload)
                return
            except (aiohttp.ClientError, TimeoutError, ValueError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


async def measure(
    stack: str,
    url: str,
    proxy_pid: int | None,
    upstream_pid: int,
    workload: Workload,
    concurrency: int,
    seconds: float,
    warmup: float,
) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        if warmup > 0:
            await closed_loop(session, url, workload, concurrency, warmup)
        pids = {"proxy": proxy_pid, "upstream": upstream_pid}
        cpu0 = {k: cpu_seconds(p) for k, p in pids.items() if p is not None}
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        tally = await closed_loop(session, url, workload, concurrency, seconds)
        elapsed = time.perf_counter() - start
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items() if p is not None}
    done = len(tally.total)
    ttfb, total = sorted(tally.ttfb), sorted(tally.total)
    row: dict[str, Any] = {
        "workload": workload.name,
        "stack": stack,
        "concurrency": concurrency,
        "seconds": round(elapsed, 3),
        "requests": done,
        "errors": tally.errors,
        "last_error": tally.last_error or None,
        "rps": done / elapsed,
        "ttfb_ms": {"p50": 1000 * percentile(ttfb, 0.5), "p99": 1000 * percentile(ttfb, 0.99)},
        "total_ms": {"p50": 1000 * percentile(total, 0.5), "p99": 1000 * percentile(total, 0.99)},
        "upstream_cpu_ms_per_request": 1000 * cpu["upstream"] / done if done else None,
        "client_cpu_percent": 100
        * (self1.ru_utime + self1.ru_stime - self0.ru_utime - self0.ru_stime)
        / elapsed,
        "proxy_cpu_ms_per_request": None,
        "proxy_cpu_percent": None,
        "proxy_rss_mib": None,
        "proxy_peak_rss_mib": None,
    }
    if proxy_pid is not None:
        rss, peak = rss_mib(proxy_pid)
        row |= {
            "proxy_cpu_ms_per_request": 1000 * cpu["proxy"] / done if done else None,
            "proxy_cpu_percent": 100 * cpu["proxy"] / elapsed,
            "proxy_rss_mib": rss,
            "proxy_peak_rss_mib": peak,
        }
    return row


def compare(row: dict[str, Any], direct: dict[str, Any] | None) -> None:
    """Add the ratios and the added latency against the direct run at the same workload and concurrency."""
    if direct is None or row["stack"] == "direct":
        row["rps_vs_direct"] = 1.0 if row["stack"] == "direct" else None
        row["added_ttfb_ms"] = row["added_total_ms"] = None
        return
    row["rps_vs_direct"] = row["rps"] / direct["rps"] if direct["rps"] else None
    for key in ("ttfb_ms", "total_ms"):
        added = {q: row[key][q] - direct[key][q] for q in ("p50", "p99")}
        row[f"added_{key}"] = added


def progress(index: int, count: int, row: dict[str, Any]) -> str:
    parts = [
        f"[{index:2d}/{count}] {row['workload']:<15} c={row['concurrency']:<3} {row['stack']:<19}",
        f"{row['rps']:7.1f} req/s",
    ]
    if row["stack"] != "direct" and row["rps_vs_direct"] is not None:
        added = row["added_ttfb_ms"]
        parts += [
            f"({row['rps_vs_direct']:.2f}x direct)",
            f"ttfb p50 {row['ttfb_ms']['p50']:.1f} ms (+{added['p50']:.1f})",
        ]
    else:
        parts.append(f"ttfb p50 {row['ttfb_ms']['p50']:.1f} ms")
    parts.append(f"total p50 {row['total_ms']['p50']:.1f} ms")
    if row["proxy_cpu_ms_per_request"] is not None:
        parts.append(
            f"proxy {row['proxy_cpu_ms_per_request']:.2f} ms CPU/req ({row['proxy_cpu_percent']:.0f} %), "
            f"{row['proxy_rss_mib']:.0f} MiB"
        )
    parts.append(f"client {row['client_cpu_percent']:.0f} % CPU")
    if row["errors"]:
        parts.append(f"{row['errors']} errors ({row['last_error']})")
    return "  ".join(parts)


def _ms(value: float, added: float | None) -> str:
    return f"{value:.1f}" if added is None else f"{value:.1f} ({added:+.1f})"


def _opt(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for name in dict.fromkeys(r["workload"] for r in rows):
        lines += [
            f"**{name}**: {WORKLOADS[name].describe}",
            "",
            "| stack | conc | req/s | vs direct | TTFB p50 ms (added) | TTFB p99 ms (added) "
            "| total p50 ms | total p99 ms | proxy CPU ms/req | proxy CPU % | proxy RSS MiB | errors |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for r in (r for r in rows if r["workload"] == name):
            added = r["added_ttfb_ms"] or {}
            lines.append(
                f"| {r['stack']} | {r['concurrency']} | {r['rps']:.1f} | {_opt(r['rps_vs_direct'], '.2f')} "
                f"| {_ms(r['ttfb_ms']['p50'], added.get('p50'))} | {_ms(r['ttfb_ms']['p99'], added.get('p99'))} "
                f"| {r['total_ms']['p50']:.1f} | {r['total_ms']['p99']:.1f} "
                f"| {_opt(r['proxy_cpu_ms_per_request'], '.2f')} | {_opt(r['proxy_cpu_percent'], '.0f')} "
                f"| {_opt(r['proxy_rss_mib'], '.0f')} | {r['errors']} |"
            )
        lines.append("")
    return lines


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


async def bench(
    servers: dict[str, Server],
    upstream: Server,
    workloads: list[Workload],
    levels: list[int],
    seconds: float,
    warmup: float,
) -> list[dict[str, Any]]:
    targets = {"direct": (upstream.url, None)} | {name: (s.url, s.proc.pid) for name, s in servers.items()}
    for url, _ in targets.values():
        for workload in workloads:
            await wait_ready(url + workload.path, workload)
    rows: list[dict[str, Any]] = []
    count = len(workloads) * len(levels) * len(targets)
    # Interleaved (every stack at one level, then the next level) so that drift on a shared machine
    # hits the baseline and the proxies alike.
    for workload in workloads:
        for concurrency in levels:
            direct: dict[str, Any] | None = None
            for stack, (url, pid) in targets.items():
                row = await measure(
                    stack, url + workload.path, pid, upstream.proc.pid, workload, concurrency, seconds, warmup
                )
                if stack == "direct":
                    direct = row
                compare(row, direct)
                rows.append(row)
                print(progress(len(rows), count, row), flush=True)
                await asyncio.sleep(0.2)
    return rows


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per stack and level")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds before each run")
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated concurrency levels")
    parser.add_argument(
        "--stacks", default=",".join(STACKS), help=f"comma-separated, from {', '.join(STACKS)}"
    )
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"comma-separated, from {', '.join(WORKLOADS)}"
    )
    parser.add_argument("--out", default="bench-out/activator-http")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # internal: run one server in this process
    parser.add_argument("--upstream", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.serve, args.upstream)

    unknown = [s for s in _csv(args.stacks) if s not in STACKS] + [
        w for w in _csv(args.workloads) if w not in WORKLOADS
    ]
    if unknown:
        parser.error(f"unknown stack or workload: {', '.join(unknown)}")
    stacks = ["direct"] + [s for s in dict.fromkeys(_csv(args.stacks)) if s != "direct"]
    workloads = [WORKLOADS[w] for w in dict.fromkeys(_csv(args.workloads))]
    levels = [int(c) for c in _csv(args.concurrency)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    loop_factory = _uvloop_factory()
    print(
        f"==> {sys.executable} (Python {platform.python_version()}), {os.cpu_count()} CPUs; "
        f"client and upstream on {'uvloop' if loop_factory else 'asyncio'}",
        flush=True,
    )

    started = time.time()
    servers: dict[str, Server] = {}
    skipped: dict[str, str] = {}
    upstream = spawn("upstream", "", out)
    try:
        for name in stacks[1:]:
            missing = _missing(STACKS[name].modules)
            if missing:
                skipped[name] = f"cannot import {', '.join(missing)}"
                print(f"skip {name}: cannot import {', '.join(missing)} with {sys.executable}", flush=True)
                continue
            try:
                servers[name] = spawn(name, upstream.url, out)
            except RuntimeError as exc:
                skipped[name] = str(exc)
                print(f"skip {name}: {exc}", flush=True)
        runs = len(workloads) * len(levels) * (1 + len(servers))
        print(
            f"==> {runs} runs of {args.warmup:g} + {args.seconds:g} s: ~{runs * (args.warmup + args.seconds + 0.3):.0f} s",
            flush=True,
        )
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            rows = runner.run(bench(servers, upstream, workloads, levels, args.seconds, args.warmup))
    finally:
        for server in [*servers.values(), upstream]:
            stop(server.proc)

    lines = table(rows)
    if skipped:
        lines += [f"Skipped: {'; '.join(f'{k} ({v})' for k, v in skipped.items())}", ""]
    results = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "python": sys.executable,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "wall_seconds": round(time.time() - started, 1),
        "client_and_upstream_loop": "uvloop" if loop_factory else "asyncio",
        "packages": versions(),
        "seconds": args.seconds,
        "warmup": args.warmup,
        "concurrency": levels,
        "workloads": {w.name: w.describe for w in workloads},
        "stacks": {name: STACKS[name].describe for name in stacks},
        "skipped": skipped,
        "rows": rows,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "table.md").write_text("\n".join(lines))
    print()
    print("\n".join(lines))
    print(f"written: {out}/results.json, {out}/table.md (server logs: {out}/*.log)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
