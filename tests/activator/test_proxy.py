"""The activator's HTTP behaviour over real sockets: an aiohttp upstream streaming server-sent events, the
activator's proxy app in front of it, and a cluster view whose endpoints the test turns ready (what the
EndpointSlice watch does in a cluster; e2e/test_scale_to_zero.py runs it against the API server and vLLM)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web

from llama_operator.activator.proxy import Activator, proxy_app
from llama_operator.activator.routing import HeldService, ServiceKey

KEY = ("team-a", "chat")
CHUNKS = [f'data: {{"i": {i}}}\n\n'.encode() for i in range(5)] + [b"data: [DONE]\n\n"]


class FakeView:
    """The cluster as the watches would show it; records the annotations the activator writes."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.services = {KEY: HeldService(uid="uid-1", activation_timeout_seconds=timeout)}
        self.ready: list[str] = []
        self.demands: list[tuple[ServiceKey, str, float]] = []
        self.activations: list[tuple[ServiceKey, float]] = []
        self.changed: Callable[[], None] = lambda: None

    def endpoints(self, key: ServiceKey) -> list[str]:
        return list(self.ready) if key == KEY else []

    def service(self, key: ServiceKey) -> HeldService | None:
        return self.services.get(key)

    def known(self) -> dict[ServiceKey, HeldService]:
        return dict(self.services)

    def request_activation(self, key: ServiceKey, uid: str, at: float) -> None:
        self.demands.append((key, uid, at))

    def record_activation(self, key: ServiceKey, uid: str, seconds: float, at: float) -> None:
        self.activations.append((key, seconds))

    def turn_ready(self, endpoint: str) -> None:
        self.ready.append(endpoint)
        self.changed()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def upstream_handler(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Upstream": "vllm"})
    await response.prepare(request)
    for chunk in CHUNKS:
        await response.write(chunk)
        await asyncio.sleep(0.01)
    assert body["model"] == "chat"
    assert request.headers["Authorization"] == "Bearer sk-1"
    await response.write_eof()
    return response


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def stack(view: FakeView) -> AsyncIterator[tuple[str, str, Activator]]:
    upstream_app = web.Application()
    upstream_app.router.add_post("/v1/chat/completions", upstream_handler)
    activator = Activator(view, demand_interval_seconds=0.2)  # type: ignore[arg-type]
    view.changed = activator.notify
    await activator.start()
    async with serving(upstream_app) as upstream, serving(proxy_app(activator)) as proxy:
        try:
            yield upstream, proxy, activator
        finally:
            await activator.close()


async def post(proxy: str, host: str = "chat.team-a:8000") -> tuple[int, dict[str, str], list[bytes], float]:
    started = time.monotonic()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://{proxy}/v1/chat/completions",
            json={"model": "chat", "stream": True},
            headers={"Host": host, "Authorization": "Bearer sk-1"},
        ) as response,
    ):
        chunks = [chunk async for chunk in response.content.iter_any()]
        return response.status, dict(response.headers), chunks, time.monotonic() - started


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_with_a_ready_pod_the_request_is_forwarded_at_once_and_streamed_untouched() -> None:
    async def scenario() -> None:
        view = FakeView()
        async with stack(view) as (upstream, proxy, _activator):
            view.ready.append(upstream)
            status, headers, chunks, _ = await post(proxy)
            assert status == 200 and headers["X-Upstream"] == "vllm"
            assert b"".join(chunks) == b"".join(CHUNKS)
            assert view.demands == [], "nothing held, nothing reported"
            assert view.activations == []

    run(scenario())


def test_a_held_request_reports_demand_until_a_pod_is_ready_then_is_served() -> None:
    async def scenario() -> None:
        view = FakeView()
        async with stack(view) as (upstream, proxy, _activator):
            request = asyncio.create_task(post(proxy))
            await asyncio.sleep(0.7)
            assert not request.done(), "held while no pod is ready"
            assert len(view.demands) >= 2, "demand reported, and repeated while held"
            assert {(k, uid) for k, uid, _ in view.demands} == {(KEY, "uid-1")}
            view.turn_ready(upstream)
            status, _, chunks, seconds = await request
            assert status == 200 and b"".join(chunks) == b"".join(CHUNKS)
            assert seconds >= 0.7
            await asyncio.sleep(0.1)  # the activation record runs in a thread
            assert len(view.activations) == 1 and view.activations[0][1] >= 0.7

    run(scenario())


def test_a_request_held_past_the_timeout_gets_503_with_retry_after() -> None:
    async def scenario() -> None:
        view = FakeView(timeout=0.5)
        async with stack(view) as (_upstream, proxy, activator):
            status, headers, chunks, seconds = await post(proxy)
            assert status == 503 and int(headers["Retry-After"]) >= 1
            assert b"activationTimeoutSeconds" in b"".join(chunks)
            assert 0.5 <= seconds < 3
            assert activator.waking == {}, "a request that gave up does not date the next wake"

    run(scenario())


def test_an_unknown_service_is_refused_with_how_to_address_one() -> None:
    async def scenario() -> None:
        async with stack(FakeView()) as (_upstream, proxy, _activator):
            status, _, chunks, _ = await post(proxy, host="other.team-b:8000")
            assert status == 404 and b"other" in b"".join(chunks)

    run(scenario())
