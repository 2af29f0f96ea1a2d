"""The router as an InferencePool's endpoint picker (issue 45): a real gRPC client speaks Envoy ext_proc to
the router's picker in-process, as a gateway does (FULL_DUPLEX_STREAMED: headers, then the body, then the
answer; the response passed through), and gets the pod that holds the prompt's prefix, within the subset
the gateway names, never another namespace's pod whatever the request's headers; a service at zero is held
until it wakes; a namespace at its share is refused with 429; every budget comes back."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc

from llama_operator.router import ext_proc_wire as wire
from llama_operator.router.ext_proc import ServingTls, start_ext_proc, stop_ext_proc
from llama_operator.router.routing import Limits, ServiceKey
from llama_operator.router.server import Router
from tests.router.test_proxy import KEY, SECRET, FakeView

PODS_A = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]
PODS_B = ["10.0.1.1:8000"]


class PoolView(FakeView):
    """Team-a's service with three ready pods, team-b's with one."""

    def __init__(self, timeout: float = 30.0) -> None:
        super().__init__(timeout)
        self.ready[KEY] = list(PODS_A)
        self.ready[SECRET] = list(PODS_B)

    def service_of_endpoint(self, endpoint: str) -> ServiceKey | None:
        return next((key for key, eps in self.ready.items() if endpoint in eps), None)


@asynccontextmanager
async def picker(
    view: FakeView,
    limits: Limits | None = None,
    trusted: frozenset[str] = frozenset({"127.0.0.1"}),
    tls: ServingTls | None = None,
) -> AsyncIterator[tuple[grpc.aio.Channel, Router]]:
    router = Router(view, demand_interval_seconds=0.2, limits=limits, trusted_sources=trusted)  # type: ignore[arg-type]
    view.changed = router.notify
    await router.start()
    server, port, health = await start_ext_proc(router.endpoint_picker(), "127.0.0.1", 0, lambda: True, tls)
    target = f"127.0.0.1:{port}"
    try:
        if tls is None:
            channel = grpc.aio.insecure_channel(target)
        else:  # as a gateway that trusts this certificate (most skip verifying it)
            credentials = grpc.ssl_channel_credentials(root_certificates=tls.certificate)
            channel = grpc.aio.secure_channel(
                target, credentials, options=[("grpc.ssl_target_name_override", "picker.test")]
            )
        async with channel:
            yield channel, router
    finally:
        await stop_ext_proc(server, health, 0)
        await router.close()


def chat(conversation: str, model: str = "chat-model") -> bytes:
    system = "You are a helpful assistant. " * 20
    return json.dumps(
        {
            "model": model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": conversation}],
        }
    ).encode()


ask = wire.ask_picker


def destination(answers: list[wire.Answer]) -> str:
    chosen = wire.destination(answers)
    assert chosen is not None, answers
    return chosen


def test_requests_land_on_the_pod_of_their_prefix_and_the_body_and_response_pass_unchanged() -> None:
    async def scenario() -> None:
        async with picker(PoolView()) as (channel, router):
            body = chat("conversation one: tell me about ext_proc")
            answers = await ask(channel, body, subset=PODS_A)
            assert b"".join(a.body for a in answers if a.phase == "request_body") == body
            assert [a.phase for a in answers] == [
                "request_headers",
                "request_body",
                "response_headers",
                "response_body",
            ]
            assert answers[-1].body.startswith(b"data:") and answers[-1].end_of_stream
            pods = {destination(await ask(channel, body, subset=PODS_A)) for _ in range(6)}
            assert pods == {destination(answers)}, "the same prefix, the same pod"
            spread = {
                destination(await ask(channel, chat(f"conversation {i}"), subset=PODS_A)) for i in range(24)
            }
            assert len(spread) >= 2, "other conversations spread over the pool"
            assert router.stuck() == [], "every budget and in-flight count given back"

    asyncio.run(scenario())


def test_a_pool_never_gets_another_namespaces_pod_whatever_its_headers() -> None:
    async def scenario() -> None:
        async with picker(PoolView()) as (channel, _router):
            hostile = [
                {"x-llamaservice": "team-b/secret"},
                {"host": "secret.team-b", ":authority": "secret.team-b.svc.cluster.local"},
                {"x-llamaservice-namespace": "team-b"},
                {"x-gateway-destination-endpoint": PODS_B[0]},
            ]
            for headers in hostile:
                for i in range(5):
                    answers = await ask(channel, chat(f"c{i}"), headers=headers, subset=PODS_A)
                    assert destination(answers) in PODS_A, (headers, answers[0])
            # A subset across two namespaces' services, or of addresses that are no pod: 503, no pod.
            for subset in ([PODS_A[0], PODS_B[0]], ["10.9.9.9:8000"], []):
                (answer,) = await ask(channel, chat("x"), subset=subset)
                assert answer.phase == "immediate_response" and answer.status == 503, answer
            # Without a subset the trusted gateway names the service: team-b's own pool goes to team-b.
            answers = await ask(channel, chat("x"), headers={"x-llamaservice": "team-b/secret"})
            assert destination(answers) in PODS_B

    asyncio.run(scenario())


def test_only_a_trusted_gateway_may_ask() -> None:
    async def scenario() -> None:
        async with picker(PoolView(), trusted=frozenset()) as (channel, router):
            (answer,) = await ask(channel, chat("x"), subset=PODS_A)  # 127.0.0.1: a team-a pod, not a gateway
            assert answer.phase == "immediate_response" and answer.status == 403, answer
            assert router.stuck() == []

    asyncio.run(scenario())


def test_a_service_at_zero_is_held_until_it_wakes_then_picked() -> None:
    async def scenario() -> None:
        view = PoolView()
        view.ready[KEY] = []
        async with picker(view) as (channel, router):
            asked = asyncio.create_task(ask(channel, chat("wake"), headers={"x-llamaservice": "team-a/chat"}))
            for _ in range(100):  # held, and its demand reported (in an executor thread): within seconds
                if router.budgets.total_held() == 1 and view.demands:
                    break
                await asyncio.sleep(0.05)
            assert not asked.done() and router.budgets.total_held() == 1
            assert view.demands and view.demands[0][0] == KEY, "the demand reported: the operator wakes it"
            view.turn_ready(KEY, PODS_A[1])
            assert destination(await asked) == PODS_A[1]
            assert router.stuck() == []

    asyncio.run(scenario())


def test_refusals_answer_the_gateway_and_give_every_budget_back() -> None:
    async def scenario() -> None:
        limits = Limits(max_body_bytes=4096, max_json_depth=8, max_streams=4, namespace_share=0.5)
        async with picker(PoolView(), limits) as (channel, router):
            (answer,) = await ask(channel, b"[" * 20 + b"]" * 20, subset=PODS_A)
            assert answer.status == 400 and b"8 levels" in answer.body, answer
            (answer,) = await ask(channel, chat("x" * 5000), subset=PODS_A)
            assert answer.status == 413, answer
            # Team-a at its share of streams (2 of 4): the third open stream is refused with 429.
            slow: list[asyncio.Task[list[wire.Answer]]] = []
            release = asyncio.Event()

            async def held_open() -> list[wire.Answer]:
                sent: asyncio.Queue[Any] = asyncio.Queue()
                for message in (
                    wire.request_headers({}, end=False, subset=PODS_A),
                    wire.request_body(chat("y"), end=True),
                ):
                    sent.put_nowait(message)

                async def requests() -> AsyncIterator[Any]:
                    while (message := await sent.get()) is not None:
                        yield message

                answers = []
                async for raw in wire.process_stream(channel)(requests()):
                    answers.append(wire.read_answer(raw))
                    if answers[-1].phase == "request_body":
                        await release.wait()
                        sent.put_nowait(None)
                return answers

            slow = [asyncio.create_task(held_open()) for _ in range(2)]
            await asyncio.sleep(0.5)
            (answer,) = await ask(channel, chat("z"), subset=PODS_A)
            assert answer.status == 429 and answer.headers.get("retry-after"), answer
            answers = await ask(channel, chat("z"), subset=PODS_B)
            assert destination(answers) in PODS_B, "team-b is served beside team-a at its share"
            release.set()
            await asyncio.gather(*slow)
            await asyncio.sleep(0.1)
            assert router.stuck() == [], router.stuck()

    asyncio.run(scenario())


def test_the_peer_address_of_a_grpc_caller() -> None:
    assert wire.peer_address("ipv4:10.1.2.3:5000") == "10.1.2.3"
    assert wire.peer_address("ipv6:[::1]:5000") == "::1"
    assert wire.peer_address("ipv6:[::ffff:10.1.2.3]:5000") == "10.1.2.3"
    assert wire.peer_address("unix:/tmp/socket") == ""


def test_the_picker_serves_tls_with_its_certificate(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    command = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=picker.test"
    names = ["-addext", "subjectAltName=DNS:picker.test", "-keyout", str(key), "-out", str(cert)]
    subprocess.run([*command.split(), *names], check=True, capture_output=True)
    tls = ServingTls(cert.read_bytes(), key.read_bytes())

    async def scenario() -> None:
        async with picker(PoolView(), tls=tls) as (channel, _router):
            assert destination(await ask(channel, chat("over tls"), subset=PODS_A)) in PODS_A

    asyncio.run(scenario())


def test_a_pools_bodies_count_against_its_namespaces_share_while_read() -> None:
    """A gateway reads a body to the picker as it comes: a pool's slow bodies take at most its namespace's
    share of the router's buffered bytes (429 beyond), and another namespace's pool is served meanwhile."""

    async def scenario() -> None:
        limits = Limits(max_buffered_bytes=100_000, namespace_share=0.5)
        async with picker(PoolView(), limits) as (channel, router):
            sent: asyncio.Queue[Any] = asyncio.Queue()
            sent.put_nowait(wire.request_headers({}, end=False, subset=PODS_A))
            sent.put_nowait(wire.request_body(b"x" * 40_000, end=False))  # and the rest never comes

            async def requests() -> AsyncIterator[Any]:
                while (message := await sent.get()) is not None:
                    yield message

            slow = asyncio.create_task(_drain(wire.process_stream(channel)(requests())))
            for _ in range(100):
                if router.budgets.buffered_of.get("team-a") == 40_000:
                    break
                await asyncio.sleep(0.05)
            assert router.budgets.buffered_of["team-a"] == 40_000
            (answer,) = await ask(channel, chat("y" * 20_000), subset=PODS_A)
            assert answer.status == 429 and b"team-a" in answer.body, answer
            assert destination(await ask(channel, chat("y" * 20_000), subset=PODS_B)) in PODS_B
            sent.put_nowait(None)  # the slow client leaves: its bytes go back
            await slow
            await asyncio.sleep(0.1)
            assert router.stuck() == [], router.stuck()

    asyncio.run(scenario())


async def _drain(call: AsyncIterator[Any]) -> None:
    async for _ in call:
        pass
