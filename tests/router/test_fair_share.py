"""Fair share between namespaces (issue 45): a namespace may take a share of the router's totals of held
requests, held bytes and concurrent streams (the platform's default share, or its own); at its share its
requests get 429 with Retry-After while the other namespaces are served."""

from __future__ import annotations

import asyncio
import time

from llama_operator.router.routing import Limits, namespace_share
from tests.router.test_budgets import request_head
from tests.router.test_proxy import KEY, SECRET, FakeView, post, stack

TEAM_B_HOST = "secret.team-b"


def test_a_namespace_at_its_share_of_held_requests_gets_429_while_others_are_held() -> None:
    async def scenario() -> None:
        view = FakeView(timeout=30)
        limits = Limits(max_held_requests=10, namespace_share=0.5)
        async with stack(view, limits) as (upstream, proxy, router):
            held_b = [asyncio.create_task(post(proxy, TEAM_B_HOST, source="127.0.0.2")) for _ in range(5)]
            await asyncio.sleep(0.4)
            assert router.budgets.total_held() == 5
            status, headers, data, seconds = await post(proxy, TEAM_B_HOST, source="127.0.0.2")
            assert status == 429 and int(headers["Retry-After"]) >= 1 and b"team-b" in data, data
            assert seconds < 1, "refused at once"
            held_a = asyncio.create_task(post(proxy))  # team-a's own service, at zero too: held, not refused
            await asyncio.sleep(0.3)
            assert not held_a.done() and router.budgets.total_held() == 6
            view.turn_ready(KEY, upstream)
            view.turn_ready(SECRET, upstream)
            assert (await held_a)[0] == 200
            assert [r[0] for r in await asyncio.gather(*held_b)] == [200] * 5
            assert router.metrics.rejected.labels(limit="namespace_held")._value.get() == 1

    asyncio.run(scenario())


def test_a_namespace_at_its_share_of_held_bytes_gets_429() -> None:
    async def scenario() -> None:
        view = FakeView(timeout=30)
        limits = Limits(max_buffered_bytes=400_000, namespace_share=0.25)  # 100,000 held bytes a namespace
        big = {"model": "chat-model", "prompt": "x" * 45_000}
        async with stack(view, limits) as (upstream, proxy, _router):
            held = [
                asyncio.create_task(post(proxy, TEAM_B_HOST, source="127.0.0.2", body=big)) for _ in range(2)
            ]
            await asyncio.sleep(0.4)
            status, _, data, _ = await post(proxy, TEAM_B_HOST, source="127.0.0.2", body=big)
            # (its held bodies are in memory too: its share of either says so first)
            assert status == 429 and b"team-b" in data and b"its share" in data, data
            held_a = asyncio.create_task(post(proxy, body=big))
            await asyncio.sleep(0.3)
            assert not held_a.done(), "team-a's body is held: its own share is untouched"
            view.turn_ready(KEY, upstream)
            view.turn_ready(SECRET, upstream)
            assert [r[0] for r in await asyncio.gather(held_a, *held)] == [200] * 3

    asyncio.run(scenario())


def test_a_namespace_at_its_share_of_streams_gets_429_while_others_stream() -> None:
    async def scenario() -> None:
        view = FakeView()
        limits = Limits(max_streams=4, namespace_shares=(("team-b", 0.5),), namespace_share=1.0)
        slow = {"model": "chat-model", "stream": True, "delay": 0.3}
        async with stack(view, limits) as (upstream, proxy, router):
            view.ready[KEY].append(upstream)
            view.ready[SECRET].append(upstream)
            streams = [
                asyncio.create_task(post(proxy, TEAM_B_HOST, source="127.0.0.2", body=slow)) for _ in range(2)
            ]
            await asyncio.sleep(0.3)
            started = time.monotonic()
            status, headers, data, _ = await post(proxy, TEAM_B_HOST, source="127.0.0.2", body=slow)
            assert status == 429 and "Retry-After" in headers and b"streams" in data, data
            assert time.monotonic() - started < 1
            status, _, _, _ = await post(proxy, body=slow)
            assert status == 200, "team-a streams beside team-b at its share"
            assert [r[0] for r in await asyncio.gather(*streams)] == [200, 200]
            assert router.budgets.streams_of == {}, "every stream given back"

    asyncio.run(scenario())


def test_the_share_of_a_namespace_is_its_own_or_the_default() -> None:
    limits = Limits(namespace_share=0.25, namespace_shares=(("team-b", 0.5),))
    assert namespace_share(limits, "team-b") == 0.5
    assert namespace_share(limits, "team-a") == 0.25


def test_a_namespace_at_its_share_of_buffered_bytes_gets_429_while_others_send_bodies() -> None:
    """Bodies being read count against their caller's namespace too: a tenant's slow 64 KiB bodies take its
    share of the buffered bytes, then its next body is refused at once, and another tenant's is read."""

    async def scenario() -> None:
        view = FakeView()
        limits = Limits(max_body_bytes=64 * 1024, max_buffered_bytes=256 * 1024, namespace_share=0.5)
        async with stack(view, limits) as (upstream, proxy, router):
            view.ready[KEY].append(upstream)
            host, port = proxy.split(":")
            slow = [
                await asyncio.open_connection(host, int(port), local_addr=("127.0.0.2", 0)) for _ in range(3)
            ]
            for _, writer in slow[:2]:
                writer.write(request_head(64 * 1024, TEAM_B_HOST) + b"{")
                await writer.drain()
            await asyncio.sleep(0.3)
            reader, writer = slow[2]
            writer.write(request_head(64 * 1024, TEAM_B_HOST) + b"{")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), 3)
            assert b" 429 " in line, line
            status, _, _, _ = await post(proxy, body={"model": "chat-model", "prompt": "x" * 60_000})
            assert status == 200, "team-a's body is read beside team-b's at its share"
            for _, w in slow:
                w.close()
            deadline = time.monotonic() + 5
            while router.active and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert router.budgets.buffered == 0

    asyncio.run(scenario())
