"""What a hostile or careless client could do to the router's shared pools, over real sockets (issue 45):
callers that are no pod reserve nothing, a client that leaves frees its hold at once, a pod that never
answers and a body that never ends both meet a deadline, and another tenant's service is answered exactly
as a service that does not exist."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from llama_operator.router.routing import Limits
from tests.router.test_budgets import counters, raw, request_head
from tests.router.test_proxy import KEY, SECRET, FakeView, post, serving, stack

LIMITS = Limits(
    max_body_bytes=64 * 1024,
    max_buffered_bytes=256 * 1024,
    body_timeout_seconds=0.6,
    upstream_idle_seconds=0.6,
)


async def settle(router: Any) -> dict[str, float]:
    deadline = time.monotonic() + 5
    while router.active and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return counters(router)


def test_a_caller_that_is_no_pod_is_refused_before_its_body_is_read() -> None:
    """Four connections from an address that is no pod declare 64 KiB JSON bodies and send one byte: they
    reserve nothing, so a tenant's request is still served, and each is answered 403 at once."""

    async def scenario() -> None:
        view = FakeView()
        async with stack(view, LIMITS) as (upstream, proxy, router):
            view.ready[KEY].append(upstream)
            host, port = proxy.split(":")
            conns = [
                await asyncio.open_connection(host, int(port), local_addr=("127.0.0.3", 0)) for _ in range(4)
            ]
            started = time.monotonic()
            for _, writer in conns:
                writer.write(request_head(LIMITS.max_body_bytes) + b"{")
                await writer.drain()
            answers = [await asyncio.wait_for(reader.readline(), 5) for reader, _ in conns]
            assert all(b" 403 " in line for line in answers), answers
            assert time.monotonic() - started < LIMITS.body_timeout_seconds, "not after waiting for the body"
            status, _, _, _ = await post(proxy, body={"model": "chat-model", "prompt": "x" * 60_000})
            assert status == 200
            for _, writer in conns:
                writer.close()
            assert (await settle(router))["buffered"] == 0

    asyncio.run(scenario())


def test_a_client_that_leaves_releases_its_hold_at_once() -> None:
    async def scenario() -> None:
        view = FakeView(timeout=30)
        async with stack(view, LIMITS) as (_upstream, proxy, router):
            leaving = asyncio.create_task(
                raw(
                    proxy,
                    request_head(17, "secret.team-b") + b'{"model": "chat"}',
                    source="127.0.0.2",
                    then_wait=0.3,
                )
            )
            await asyncio.sleep(0.2)
            assert router.budgets.total_held() == 1, "held while the client is there"
            await leaving
            deadline = time.monotonic() + 1.0
            while router.budgets.total_held() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert router.budgets.total_held() == 0, "the hold is released once the client left"
            assert router.metrics.requests.labels(outcome="client_gone")._value.get() == 1
            assert not view.ready[SECRET]

    asyncio.run(scenario())


def silent_upstream_app(released: asyncio.Event) -> web.Application:
    """Accepts the request and answers nothing until `released` (a pod stuck in its engine)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        await released.wait()
        return web.Response(status=500)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    return app


def test_an_upstream_that_never_answers_meets_a_deadline() -> None:
    async def scenario() -> None:
        view = FakeView()
        released = asyncio.Event()
        async with (
            stack(view, LIMITS) as (_u, proxy, router),
            serving(silent_upstream_app(released)) as silent,
        ):
            view.ready[KEY].append(silent)
            started = time.monotonic()
            status, _, data, _ = await asyncio.wait_for(post(proxy), 10)
            assert status == 504 and b"upstream" in data, (status, data)
            assert time.monotonic() - started < 3
            assert await settle(router) == dict.fromkeys(counters(router), 0)
            released.set()

    asyncio.run(scenario())


def test_a_slow_body_that_is_not_json_meets_the_body_deadline() -> None:
    """One byte every 0.2 s of a 4,000-byte text body: 408 at the body deadline, as for JSON."""

    async def scenario() -> None:
        view = FakeView()
        async with stack(view, LIMITS) as (upstream, proxy, router):
            view.ready[KEY].append(upstream)
            host, port = proxy.split(":")
            reader, writer = await asyncio.open_connection(host, int(port), local_addr=("127.0.0.1", 0))
            writer.write(request_head(4000, content_type="text/plain"))
            started = time.monotonic()

            async def dribble() -> None:
                for _ in range(100):
                    writer.write(b"x")
                    await writer.drain()
                    await asyncio.sleep(0.2)

            dribbling = asyncio.create_task(dribble())
            try:
                line = await asyncio.wait_for(reader.readline(), 5)
            finally:
                dribbling.cancel()
                writer.close()
            assert b" 408 " in line, line
            assert time.monotonic() - started < LIMITS.body_timeout_seconds + 2
            assert (await settle(router))["active"] == 0

    asyncio.run(scenario())


async def answer(proxy: str, host: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    status, _, data, _ = await post(proxy, host, body={"model": "x"}, headers=headers)
    return status, data


def test_another_tenants_service_is_answered_as_one_that_does_not_exist() -> None:
    """Byte for byte, in every form a request can name a service."""

    async def scenario() -> None:
        view = FakeView()
        async with stack(view) as (_u, proxy, _router):
            pairs = [
                (("secret.team-b:8000", None), ("nothing.team-b:8000", None)),
                (("secret.team-b.svc.cluster.local", None), ("nothing.team-b.svc.cluster.local", None)),
                (
                    ("llama-router", {"X-LlamaService": "team-b/secret"}),
                    ("llama-router", {"X-LlamaService": "team-b/nothing"}),
                ),
                (
                    ("llama-router", {"X-LlamaService": "team-b/secret"}),
                    ("llama-router", {"X-LlamaService": "nothing"}),
                ),
            ]
            for (foreign_host, foreign_headers), (absent_host, absent_headers) in pairs:
                foreign = await answer(proxy, foreign_host, foreign_headers)
                absent = await answer(proxy, absent_host, absent_headers)
                assert foreign == absent, (foreign_host, foreign_headers, foreign, absent)
                assert foreign[0] == 404 and b"secret" not in foreign[1]

    asyncio.run(scenario())
