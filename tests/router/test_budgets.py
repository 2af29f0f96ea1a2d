"""Nothing a request does leaks the router's shared budgets: random mixes of requests that fail every way a
request can (bodies too deep, too big, too slow, cut off; clients that leave while held or while streaming;
upstreams that refuse, die mid-stream or answer 500; callers that are no pod, names that do not exist) run
concurrently through the real in-process router, and once they are done every counter is back at zero:
buffered bytes, held requests and bytes, requests in flight and pending prefill per pod, and the gauges."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_operator.router.routing import Limits
from llama_operator.router.server import Router, admin_app
from tests.router.test_proxy import KEY, SECRET, FakeView, free_port, post, serving, stack

LIMITS = Limits(
    max_body_bytes=64 * 1024,
    max_buffered_bytes=256 * 1024,
    max_hold_seconds=0.4,
    body_timeout_seconds=0.4,
)
DEEP = b'{"model": "chat-model", "x": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"


def counters(router: Router) -> dict[str, float]:
    """Every shared count the router keeps; all zero when no request is in progress."""
    return {
        "buffered": router.budgets.buffered,
        "held_requests": router.budgets.total_held(),
        "held_bytes": sum(router.budgets.held_bytes.values()),
        "inflight": sum(router.load.inflight.values()),
        "prefill": sum(router.load.prefill.values()),
        "held_gauge": sum(s.value for m in router.metrics.held.collect() for s in m.samples),
        "inflight_gauge": router.metrics.inflight._value.get(),
        "active": router.active,
    }


async def raw(proxy: str, data: bytes, *, source: str = "127.0.0.1", then_wait: float = 0.0) -> None:
    """Bytes on a socket, then (after `then_wait`) the connection closed: a client that leaves."""
    host, port = proxy.split(":")
    _reader, writer = await asyncio.open_connection(host, int(port), local_addr=(source, 0))
    writer.write(data)
    await writer.drain()
    await asyncio.sleep(then_wait)
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


def request_head(length: int, host: str = "chat.team-a", content_type: str = "application/json") -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def send_bytes(proxy: str, body: bytes, content_type: str = "application/json") -> int:
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.1", 0))) as session,
        session.post(
            f"http://{proxy}/v1/chat/completions",
            data=body,
            headers={"Host": "chat.team-a", "Content-Type": content_type, "Authorization": "Bearer sk-1"},
        ) as response,
    ):
        await response.read()
        return response.status


def dying_upstream_app() -> web.Application:
    """Answers 200, sends one event, then cuts the connection (a pod that crashed mid-stream)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: {}\n\n")
        assert request.transport is not None
        request.transport.close()
        return response

    async def error(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"error": "boom"}, status=500)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    app.router.add_post("/v1/completions", error)
    return app


Action = Callable[[str], Awaitable[Any]]


def actions() -> dict[str, Action]:
    slow_stream = {"model": "chat-model", "stream": True, "delay": 0.2}

    async def client_leaves_mid_stream(proxy: str) -> None:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.1", 0))) as session,
            session.post(
                f"http://{proxy}/v1/chat/completions",
                json=slow_stream,
                headers={"Host": "chat.team-a", "Authorization": "Bearer sk-1"},
            ) as response,
        ):
            await response.content.readany()  # the first event, then the client goes

    return {
        "served": post,
        "deep_json": lambda p: send_bytes(p, DEEP),
        "invalid_json": lambda p: send_bytes(p, b'{"model": "chat-model", '),
        "too_big": lambda p: send_bytes(p, b'{"x": "' + b"y" * (LIMITS.max_body_bytes + 10) + b'"}'),
        "not_json": lambda p: send_bytes(p, b"plain text", "text/plain"),
        "held_until_timeout": lambda p: post(p, "secret.team-b", source="127.0.0.2"),
        "leaves_while_held": lambda p: raw(
            p, request_head(17, "secret.team-b") + b'{"model": "chat"}', source="127.0.0.2", then_wait=0.15
        ),
        "leaves_mid_body": lambda p: raw(p, request_head(4000) + b'{"model": ', then_wait=0.05),
        "slow_body": lambda p: raw(p, request_head(4000) + b'{"model": ', then_wait=0.6),
        "leaves_mid_stream": client_leaves_mid_stream,
        "upstream_dies": lambda p: post(p, "dying.team-a"),
        "upstream_500": lambda p: post(p, "dying.team-a", path="/v1/completions"),
        "upstream_refuses": lambda p: post(p, "refusing.team-a"),
        "no_pod": lambda p: post(p, source="127.0.0.3"),
        "unknown": lambda p: post(p, "nothing.team-a"),
    }


ACTIONS = actions()


async def drive(names: list[str]) -> dict[str, float]:
    view = FakeView()
    dying, refusing = ("team-a", "dying"), ("team-a", "refusing")
    view.services[dying] = view.services[KEY]
    view.services[refusing] = view.services[KEY]
    view.ready[dying], view.ready[refusing] = [], [f"127.0.0.1:{free_port()}"]
    async with stack(view, LIMITS) as (upstream, proxy, router), serving(dying_upstream_app()) as dead:
        router.upstream.connect_retry_seconds = 0.3
        view.ready[KEY].append(upstream)
        view.ready[dying].append(dead)
        assert not view.ready[SECRET], "team-b's service is at zero: its requests are held"
        results = await asyncio.gather(*(ACTIONS[name](proxy) for name in names), return_exceptions=True)
        deadline = time.monotonic() + 10
        while router.active and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)
        assert not [r for r in results if isinstance(r, AssertionError)], results
        return counters(router)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(sorted(ACTIONS)), min_size=1, max_size=6))
def test_every_budget_returns_to_zero_whatever_the_requests_do(names: list[str]) -> None:
    left = asyncio.run(drive(names))
    assert left == dict.fromkeys(left, 0), (names, left)


def test_each_failure_alone_returns_every_budget() -> None:
    for name in sorted(ACTIONS):
        left = asyncio.run(drive([name]))
        assert left == dict.fromkeys(left, 0), (name, left)


def test_a_body_nested_too_deep_answers_400_naming_the_limit() -> None:
    async def scenario() -> None:
        view = FakeView()
        async with stack(view, LIMITS) as (upstream, proxy, router):
            view.ready[KEY].append(upstream)
            async with (
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.1", 0))) as session,
                session.post(
                    f"http://{proxy}/v1/chat/completions",
                    data=DEEP,
                    headers={"Host": "chat.team-a", "Content-Type": "application/json"},
                ) as response,
            ):
                assert response.status == 400
                message = (await response.json())["error"]["message"]
            assert "nest" in message and str(router.limits.max_json_depth) in message, message
            assert router.budgets.buffered == 0

    asyncio.run(scenario())


def test_readiness_fails_while_a_budget_is_stuck() -> None:
    async def scenario() -> None:
        view = FakeView()
        router = Router(view)  # type: ignore[arg-type]
        await router.start()
        async with serving(admin_app(router)) as admin, aiohttp.ClientSession() as session:
            async with session.get(f"http://{admin}/readyz") as response:
                assert response.status == 200
            router.budgets.buffered = 2000  # what the leak left: bytes counted with no request in progress
            async with session.get(f"http://{admin}/readyz") as response:
                assert response.status == 503
                assert "stuck" in await response.text()
        await router.close()

    asyncio.run(scenario())
