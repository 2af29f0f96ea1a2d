"""The router as the Gateway API Inference Extension's endpoint picker: the same picker that routes the
router's own traffic (prefix affinity, pending prefill, the namespace's fair share of streams, holding a
service at zero until it wakes), served to gateways over the endpoint-picker protocol (Envoy ext_proc on
gRPC, ext_proc_wire.py). A gateway sends a request's headers and body; the picker answers with the pod
(`x-gateway-destination-endpoint`), or refuses it (ImmediateResponse), and the gateway sends the request
there itself. The stream lasts as long as the request, so the pod's in-flight count and pending prefill last
as long too, as for a request the router forwards.

Tenancy: only a trusted gateway may ask (a pod of router.trustedNamespaces, or a trusted source address),
and the pool decides the service, never the client. A gateway that names the endpoint subset (the pool's
pods) gets a pod of that subset only: its LlamaService is the one whose ready pods the subset lists (one
service, or 503), and no header of the request changes it. A gateway that names no subset is trusted to
name the service itself, as on the router's HTTP path: `X-LlamaService: namespace/name` (set by the route,
an HTTPRoute's RequestHeaderModifier `set` replaces what a client sent), else Host, else
X-LlamaService-Namespace with `model`. Only then can a request wait for a service at zero: a subset of a
service at zero is empty, so it names nothing to wake."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import grpc
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from llama_operator.router.budget import Budgets, Claim
from llama_operator.router.cluster import ClusterView
from llama_operator.router.ext_proc_wire import (
    SERVICE_NAME,
    Message,
    Reply,
    add_processor,
    body_chunks,
    immediate,
    response_headers_through,
    route_to,
)
from llama_operator.router.hold import Holding
from llama_operator.router.intake import RejectedError, TooDeepError, caller_of, error, json_object
from llama_operator.router.load import PodLoad
from llama_operator.router.metrics import RouterMetrics
from llama_operator.router.picker import prefix_key, prompt_prefix, prompt_tokens_estimate
from llama_operator.router.routing import (
    NAMESPACE_HEADER,
    SERVICE_HEADER,
    Limits,
    ServiceKey,
    admit_stream,
    resolve,
    share_of,
)
from llama_operator.router.upstream import Tries, Upstream

log = logging.getLogger(__name__)

NOT_A_GATEWAY = (
    "the endpoint picker answers trusted gateways only (router.trustedNamespaces, or a trusted source "
    "address); this caller is neither"
)
HEALTH_SECONDS = 1.0  # how often the gRPC health statuses follow the router's readiness


@dataclass(frozen=True, slots=True)
class Asked:
    """What the picker weighs of one request asked about."""

    key: ServiceKey
    affinity: int | None
    adapter: str | None


def refusal(response: web.Response) -> Reply:
    """The router's error answer (status, JSON body, Retry-After) as an ImmediateResponse."""
    headers = {"content-type": "application/json"}
    if "Retry-After" in response.headers:
        headers["retry-after"] = response.headers["Retry-After"]
    body = response.body if isinstance(response.body, bytes) else b""
    return immediate(response.status, body, headers)


class EndpointPicker:
    """The ext_proc service over the router's parts (its cluster view, holding, picker, budgets)."""

    def __init__(
        self,
        *,
        view: ClusterView,
        holding: Holding,
        upstream: Upstream,
        load: PodLoad,
        budgets: Budgets,
        limits: Limits,
        metrics: RouterMetrics,
        trusted_namespaces: frozenset[str],
        trusted_sources: frozenset[str],
        counted: Callable[[], AbstractContextManager[None]],
        on_hold: Callable[[ServiceKey, int], None],
    ) -> None:
        self.view = view
        self.holding = holding
        self.upstream = upstream
        self.load = load
        self.budgets = budgets
        self.limits = limits
        self.metrics = metrics
        self.trusted_namespaces = trusted_namespaces
        self.trusted_sources = trusted_sources
        self.counted = counted  # the router's count of requests in progress (the drain waits for them)
        self.on_hold = on_hold

    async def process(self, messages: AsyncIterator[Message], peer: str) -> AsyncIterator[Reply]:
        """One ext_proc stream (one HTTP request through the gateway): its replies, in order."""
        with self.counted(), Claim(self.budgets, self.on_hold) as claim, contextlib.ExitStack() as stack:
            request = _Stream(self, claim, stack, peer)
            async for message in messages:
                replies = await request.take(message)
                for reply in replies:
                    yield reply
                if request.done:
                    return

    async def decide(
        self, peer: str, headers: Mapping[str, str], subset: tuple[str, ...] | None, data: bytes, claim: Claim
    ) -> tuple[str, Asked, int, float | None] | Reply:
        """The pod for a request (with what was asked, its prompt tokens and when it was first held), or the
        refusal to answer the gateway with."""
        caller = caller_of(
            peer,
            self.view.namespace_of,
            trusted_sources=self.trusted_sources,
            trusted_namespaces=self.trusted_namespaces,
        )
        if not caller.trusted:
            self.metrics.requests.labels(outcome="forbidden").inc()
            return refusal(error(403, NOT_A_GATEWAY))
        try:
            parsed = json_object(data, self.limits.max_json_depth) if data else None
        except TooDeepError as err:
            raise RejectedError(400, "json_depth", str(err)) from None
        model = parsed.get("model") if parsed is not None else None
        model = model if isinstance(model, str) else None
        if subset is not None:
            keys = {self.view.service_of_endpoint(endpoint) for endpoint in subset}
            if len(keys) != 1 or None in keys:
                self.metrics.requests.labels(outcome="unknown").inc()
                return refusal(
                    error(503, "the endpoint subset is not the ready pods of one LlamaService", retry_after=1)
                )
            key = next(k for k in keys if k is not None)
        else:
            resolution = resolve(
                caller,
                host=headers.get(":authority") or headers.get("host"),
                explicit=headers.get(SERVICE_HEADER.lower()),
                model=model,
                namespace_header=headers.get(NAMESPACE_HEADER.lower()),
                services=self.view.known(),
            )
            if resolution.key is None:
                self.metrics.requests.labels(outcome="unknown").inc()
                return refusal(error(resolution.status, resolution.message))
            key = resolution.key
        service = self.view.service(key)
        affinity = prefix_key(model or "", prompt_prefix(parsed)) if parsed is not None else None
        adapter = model if service is not None and model in service.adapters else None
        held_since = None
        while not self.view.endpoints(key) and subset is None:  # at zero: hold until a pod is ready
            held_since = time.monotonic() if held_since is None else held_since
            answer = await self.holding.wait(key, claim, size=len(data), received=held_since)
            if answer is not None:
                return refusal(answer) if isinstance(answer, web.Response) else refusal(error(503, "no pod"))
        limit = admit_stream(
            self.limits, self.budgets.total_streams(), self.budgets.streams_of[key[0]], key[0]
        )
        if limit is not None:
            raise RejectedError(limit.status, limit.limit, f"{limit.message}; retry", retry_after=1)
        asked = Asked(key, affinity, adapter)
        prompt_tokens = prompt_tokens_estimate(parsed) if parsed is not None else 0
        endpoint = self.upstream.choose(asked, service, Tries(0.0), prompt_tokens, within=subset)
        if endpoint is None:
            self.metrics.requests.labels(outcome="unknown").inc()
            return refusal(error(503, "no endpoint of the subset is ready", retry_after=1))
        claim.stream(key[0])
        return endpoint, asked, prompt_tokens, held_since


class _Stream:
    """One request's ext_proc stream, phase by phase."""

    def __init__(self, picker: EndpointPicker, claim: Claim, stack: contextlib.ExitStack, peer: str) -> None:
        self.picker = picker
        self.claim = claim
        self.stack = stack
        self.peer = peer
        self.headers: Mapping[str, str] = {}
        self.subset: tuple[str, ...] | None = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.picked: tuple[str, Asked, Callable[[], None], float | None] | None = None
        self.pool_namespace: str | None = None
        self.answered = False
        self.done = False

    async def take(self, message: Message) -> list[Reply]:
        try:
            return await self._take(message)
        except RejectedError as rejected:
            self.picker.metrics.rejected.labels(limit=rejected.limit).inc()
            self.picker.metrics.requests.labels(outcome="rejected").inc()
            self.done = True
            return [refusal(error(rejected.status, rejected.message, retry_after=rejected.retry_after))]

    async def _take(self, message: Message) -> list[Reply]:
        limits = self.picker.limits
        if message.kind == "request_headers":
            self.headers, self.subset = message.headers, message.subset
            self.pool_namespace = self._pool_namespace()
            return await self._pick(b"", []) if message.end_of_stream else []
        if message.kind == "request_body":
            self.size += len(message.body)
            if self.size > limits.max_body_bytes:
                raise RejectedError(
                    413, "body_size", f"the request body is over the limit of {limits.max_body_bytes} bytes"
                )
            if self.picker.budgets.buffered + len(message.body) > limits.max_buffered_bytes:
                raise RejectedError(
                    503,
                    "buffered_bytes",
                    "this router holds too many request bodies now; retry",
                    retry_after=1,
                )
            namespace = self.pool_namespace
            if namespace is not None:  # a pool's bodies, read at once by the gateway, within its share
                share = share_of(limits, namespace, limits.max_buffered_bytes)
                if self.picker.budgets.buffered_of[namespace] + len(message.body) > share:
                    message_text = (
                        f"namespace {namespace!r} has request bodies up to its share of this router"
                    )
                    raise RejectedError(
                        429,
                        "namespace_buffered_bytes",
                        f"{message_text} ({share} bytes); retry",
                        retry_after=1,
                    )
            self.claim.buffer(len(message.body), namespace)
            self.chunks.append(message.body)
            if not message.end_of_stream:
                return []
            data = b"".join(self.chunks)
            self.chunks = []
            return await self._pick(data, body_chunks("request_body", data, True))
        if message.kind == "response_headers":
            return [response_headers_through()]
        if message.kind == "response_body":
            self._first_byte()
            return body_chunks("response_body", message.body, message.end_of_stream)
        return []

    def _pool_namespace(self) -> str | None:
        """The namespace of the pool the gateway named by its subset (its bodies count against that
        namespace's share while they are read); None without a subset (they count in the total only, as a
        trusted gateway's on the HTTP path)."""
        view = self.picker.view
        keys = {view.service_of_endpoint(endpoint) for endpoint in self.subset or ()}
        namespaces = {key[0] for key in keys if key is not None}
        return namespaces.pop() if len(namespaces) == 1 else None

    async def _pick(self, data: bytes, then: list[Reply]) -> list[Reply]:
        picker = self.picker
        decided = await picker.decide(self.peer, self.headers, self.subset, data, self.claim)
        self.claim.unbuffer(self.claim.buffered)  # the body goes back to the gateway with the answer
        if isinstance(decided, Reply):
            self.done = True
            return [decided]
        endpoint, asked, prompt_tokens, held_since = decided
        answered = self.stack.enter_context(picker.load.in_flight(endpoint, prompt_tokens))
        self.stack.enter_context(picker.metrics.inflight.track_inprogress())
        self.picked = (endpoint, asked, answered, held_since)
        outcome = "forwarded" if held_since is None else "held_forwarded"
        picker.metrics.requests.labels(outcome=outcome).inc()
        return [route_to(endpoint), *then]

    def _first_byte(self) -> None:
        """The response's first byte: the pod's pending prefill for it ends; a wake ends with it."""
        if self.answered or self.picked is None:
            return
        self.answered = True
        _, asked, answered, held_since = self.picked
        answered()
        self.picker.holding.first_token(asked.key, held_since)


@dataclass(frozen=True, slots=True)
class ServingTls:
    """The picker's certificate and key (PEM): gateways dial their endpoint picker with TLS, mostly without
    verifying it (the inference extension's own picker serves a self-signed certificate by default)."""

    certificate: bytes
    key: bytes


async def start_ext_proc(
    picker: EndpointPicker,
    address: str,
    port: int,
    ready: Callable[[], bool],
    tls: ServingTls | None = None,
) -> tuple[grpc.aio.Server, int, asyncio.Task[None]]:
    """The gRPC server (TLS when `tls` is given, else plaintext): the ExternalProcessor and the gRPC health
    service the protocol asks for (liveness, readiness, and the ext_proc service's own name, the last two
    following `ready`). Returns the server, its port (a free one when `port` is 0) and the task that keeps
    the health statuses current."""
    server = grpc.aio.server()
    add_processor(server, picker.process)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    if tls is not None:
        credentials = grpc.ssl_server_credentials([(tls.key, tls.certificate)])
        bound = server.add_secure_port(f"{address}:{port}", credentials)
    else:
        bound = server.add_insecure_port(f"{address}:{port}")
    await server.start()

    async def follow() -> None:
        serving, not_serving = (
            health_pb2.HealthCheckResponse.SERVING,
            health_pb2.HealthCheckResponse.NOT_SERVING,
        )
        await health.set("liveness", serving)
        while True:
            status = serving if ready() else not_serving
            for name in ("", "readiness", SERVICE_NAME):
                await health.set(name, status)
            await asyncio.sleep(HEALTH_SECONDS)

    return server, bound, asyncio.create_task(follow())


async def stop_ext_proc(server: grpc.aio.Server, health: asyncio.Task[Any], grace: float) -> None:
    health.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await health
    await server.stop(grace)
