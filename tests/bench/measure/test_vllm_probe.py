"""The profile's decode step, read from client-side stream timings: the gaps a foreign prefill stalls
are left out, merged chunks count as the steps they were."""

from __future__ import annotations

import asyncio
import math

import aiohttp
import pytest

from llama_bench.measure.vllm_probe import (
    StreamTiming,
    VllmClient,
    admitted_together,
    concurrency_between,
    decode_step_seconds,
    scheduled_without_waiting,
)

STEP = 0.010
PREFILL = 0.200  # a long prompt's prefill: every decoding stream waits this long


def _stream(sent: float, first: float, tokens: int, stalls: dict[int, float] | None = None) -> StreamTiming:
    """A stream whose first token comes at `first`, then one every STEP, the gap before token i
    lengthened by stalls[i]."""
    timing = StreamTiming(sent=sent, prompt_tokens=16, output_tokens=tokens, posted=sent)
    now = first
    timing.chunk_times.append(now)
    for i in range(1, tokens):
        now += STEP + (stalls or {}).get(i, 0.0)
        timing.chunk_times.append(now)
    return timing


def test_gaps_that_overlap_another_streams_prefill_are_left_out() -> None:
    # Stream a decodes 48 tokens; stream b's long prompt is prefilled during a's 10th-11th gap.
    a = _stream(0.0, 0.010, 48, stalls={10: PREFILL})
    prefill_start = a.chunk_times[9] + 0.001
    b = _stream(prefill_start, a.chunk_times[10], 48)
    # The plain mean per token (what TPOT gives) holds the stall; the clean step does not.
    assert a.tpot is not None and a.tpot > STEP * 1.3
    step = decode_step_seconds([a, b])
    assert step == pytest.approx(STEP, rel=1e-6)


def test_merged_chunks_count_as_the_steps_they_were() -> None:
    # The API server fell behind and sent tokens 5-7 in one read: three chunks at one instant.
    a = _stream(0.0, 0.010, 20)
    merged = a.chunk_times[7]
    a.chunk_times[5] = a.chunk_times[6] = merged
    assert decode_step_seconds([a]) == pytest.approx(STEP, rel=1e-6)


def test_the_median_over_streams_and_none_without_clean_gaps() -> None:
    streams = [_stream(0.0, 0.010, 30), _stream(0.0, 0.010, 30), _stream(0.0, 0.010, 30)]
    slow = _stream(0.0, 0.010, 30)
    slow.chunk_times = [t * 3 for t in slow.chunk_times]  # one stream read late throughout
    assert decode_step_seconds([*streams, slow]) == pytest.approx(STEP, rel=1e-6)
    # Every gap of a overlaps b's prefill (b's prompt went out before a's first token, came back after).
    a = _stream(0.0, 0.010, 10)
    b = _stream(0.005, 1.0, 10)
    assert decode_step_seconds([a]) is not None
    assert decode_step_seconds([a, StreamTiming(0.0, 16, 8, posted=0.0)]) == decode_step_seconds([a])
    assert decode_step_seconds([a, b]) == pytest.approx(STEP, rel=1e-6)  # b itself decodes clean
    assert decode_step_seconds([_stream(0.0, 0.010, 3)]) is None  # two gaps: too few to tell a pace


def test_streams_sent_at_once_tell_how_many_the_server_ran_together() -> None:
    # Four sent at 0 to a server running two at a time: two stream from 0.1 to 1.0, the others start only
    # once one has ended.
    def stream(first: float, last: float) -> StreamTiming:
        return StreamTiming(
            sent=0.0, prompt_tokens=8, output_tokens=10, chunk_times=[first, last], posted=0.0
        )

    assert admitted_together([stream(0.1, 1.0), stream(0.1, 1.0), stream(1.01, 2.0), stream(1.02, 2.0)]) == 2
    assert admitted_together([stream(0.1, 1.0), stream(0.2, 1.1)]) == 2  # all ran together


def test_the_queue_time_histogram_tells_how_many_began_without_waiting() -> None:
    before = {0.3: 5.0, 0.5: 5.0, 1.0: 6.0, math.inf: 6.0}  # what the server had served before the probe
    # Eight sent at once to a server running two at a time, each for about 0.8 s: two never waited, then
    # two waited 0.8 s, two 1.6 s, two 2.4 s.
    after = {0.3: 7.0, 0.5: 7.0, 1.0: 10.0, math.inf: 14.0}
    assert scheduled_without_waiting(before, after, probe=8) == 2
    # Not yet all of them in the histogram (it is written as each ends), or none waited beyond its smallest
    # bucket (requests faster than 0.3 s), or no histogram: it cannot tell.
    assert scheduled_without_waiting(before, {**after, math.inf: 12.0}, probe=8) is None
    assert scheduled_without_waiting(before, {0.3: 13.0, 0.5: 13.0, 1.0: 14.0, math.inf: 14.0}, 8) is None
    assert scheduled_without_waiting({}, {}, probe=8) is None


def test_a_running_count_seen_while_others_waited_outweighs_the_histogram() -> None:
    assert concurrency_between(2, 2) == 2
    assert concurrency_between(2, 5) == 2  # five began at once: some reached the engine only late
    assert concurrency_between(None, 4) == 4  # no metrics poll came back in time: the bound alone
    assert concurrency_between(3, None) == 3
    assert concurrency_between(None, None) is None


def test_a_request_on_a_connection_the_server_dropped_is_sent_again() -> None:
    """The server closes its first connection without an answer, as a server closing an idle keep-alive
    connection just as the client reuses it does; the client sends the request again and streams it."""
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        + b"".join(
            b"%x\r\n%s\r\n" % (len(c), c)
            for c in (b'data: {"choices":[{"text":"a"}]}\n\n', b'data: {"choices":[{"text":"b"}]}\n\n')
        )
        + b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
    )
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
        )
        await reader.readexactly(length)
        if connections > 1:
            writer.write(answer)
            await writer.drain()
        writer.close()

    async def run() -> StreamTiming:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            client = VllmClient(f"http://127.0.0.1:{port}", model="m")
            async with aiohttp.ClientSession() as session:
                client._session = session  # no discovery: this server speaks only the completion
                return await client.stream(4, 2)

    timing = asyncio.run(run())
    assert timing.error == "" and len(timing.chunk_times) == 2 and connections == 2
