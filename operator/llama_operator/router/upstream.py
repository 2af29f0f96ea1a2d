"""Forwarding: the request to the pod the picker chooses (prefix affinity blended with load; for a LoRA
adapter, a pod that holds it, preferably one with it in vLLM's batch), the response streamed back untouched.
A refused connection (nothing sent yet) tries another pod, then the same ones again for a few seconds (a
pod that just turned ready may not accept yet); never after a byte of the request went out."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from llama_operator.router.cluster import ClusterView
from llama_operator.router.intake import Body, StreamedBody, error
from llama_operator.router.load import PodLoad
from llama_operator.router.metrics import RouterMetrics
from llama_operator.router.picker import adapter_endpoints, pick, prompt_tokens_estimate
from llama_operator.router.routing import HOP_BY_HOP, Limits, ServiceInfo, ServiceKey, forwarded_headers

CONNECT_TIMEOUT_SECONDS = 5.0
CONNECT_RETRY_SECONDS = 10.0  # a pod that just turned ready may refuse connections for a moment
REFUSED_PAUSE_SECONDS = 0.2  # every pod refused: a pause before trying them again

log = logging.getLogger(__name__)


@dataclass
class Request:
    """What forwarding needs of one routed request."""

    http: web.Request
    body: Body
    key: ServiceKey
    affinity: int | None
    adapter: str | None
    held_since: float | None  # when it was first held (None: forwarded at once)
    received: float | None  # when it arrived, to time the router's overhead (None: it was held)


class Picking(Protocol):
    """What the picker needs of a request (a routed HTTP request, or one an endpoint-picker stream asks
    about)."""

    @property
    def key(self) -> ServiceKey: ...
    @property
    def affinity(self) -> int | None: ...
    @property
    def adapter(self) -> str | None: ...


@dataclass
class Tries:
    """The pods that refused this request's connection, until the retry window ends."""

    deadline: float
    refused: set[str] = field(default_factory=set)

    @property
    def retry(self) -> bool:
        return bool(self.refused)


class Upstream:
    def __init__(
        self,
        view: ClusterView,
        load: PodLoad,
        metrics: RouterMetrics,
        *,
        upstream_override: str | None,
        first_token: Callable[[ServiceKey, float | None], None],
        limits: Limits,
    ) -> None:
        self.view = view
        self.limits = limits
        self.load = load
        self.metrics = metrics
        self.upstream_override = upstream_override
        self.first_token = first_token  # the wake's end, for a request that was held
        self.session: aiohttp.ClientSession | None = None
        self.connect_retry_seconds = CONNECT_RETRY_SECONDS
        self.sequence = 0  # the picker's tiebreak

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(
            # Every upstream call has a deadline: the connection within seconds, then each byte of the
            # response (its headers included) within the idle limit.
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=CONNECT_TIMEOUT_SECONDS, sock_read=self.limits.upstream_idle_seconds
            ),
            connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True),
            auto_decompress=False,
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def forward(self, req: Request) -> web.StreamResponse | None:
        """The response relayed (or a 502 once no pod accepts within the retry window); None when the
        service has no ready pod any more (its pods went away meanwhile): the caller holds it again."""
        service = self.view.service(req.key)
        tries = Tries(time.monotonic() + self.connect_retry_seconds)
        prompt_tokens = prompt_tokens_estimate(req.body.parsed) if req.body.parsed is not None else 0
        while True:
            endpoint = self.choose(req, service, tries, prompt_tokens)
            if endpoint is None:
                return None
            answer = await self._send(req, endpoint, prompt_tokens)
            if isinstance(answer, web.StreamResponse):
                return answer
            streamed = req.body.data is None and req.body.stream is not None  # may be half read
            tries.refused.add(endpoint)
            if streamed or time.monotonic() > tries.deadline:
                self.metrics.requests.labels(outcome="upstream_error").inc()
                return error(502, f"upstream {endpoint}: {answer}")
            if tries.refused >= set(self.view.endpoints(req.key)):
                tries.refused.clear()
                await asyncio.sleep(REFUSED_PAUSE_SECONDS)

    def choose(
        self,
        req: Picking,
        service: ServiceInfo | None,
        tries: Tries,
        prompt_tokens: int,
        within: Collection[str] | None = None,
    ) -> str | None:
        """The pod for one request among the service's ready ones (only those `within`, when given: the
        endpoint picker's subset); None when there is none."""
        ready = [ep for ep in self.view.endpoints(req.key) if within is None or ep in within]
        if not ready:
            return None
        endpoints = [ep for ep in ready if ep not in tries.refused] or ready
        if req.adapter is not None and service is not None:
            endpoints = self._adapter_candidates(
                req.key, service, endpoints, req.adapter, count=not tries.retry
            )
        self.sequence += 1
        load = self.load
        chosen = pick(
            endpoints,
            load.inflight,
            req.affinity,
            saturated_at=service.max_num_seqs if service is not None else 0,
            tiebreak=self.sequence,
            queued=load.queued,
            kv_full=frozenset(load.kv_full),
            prefill=load.prefill,
            prompt_tokens=prompt_tokens,
            warm=load.recent_keys.seen(req.affinity),
        )
        if chosen is None:
            return None
        self.metrics.picks.labels(reason="retry" if tries.retry else chosen.reason).inc()
        load.picked(chosen.endpoint, req.adapter)
        return chosen.endpoint

    def _adapter_candidates(
        self, key: ServiceKey, service: ServiceInfo, endpoints: list[str], adapter: str, *, count: bool
    ) -> list[str]:
        """The pods that hold a LoRA adapter, those with it in vLLM's batch first while below their bound;
        `count`: the pick's reason goes to the metrics (not again for a retry)."""
        saturated_at = service.max_num_seqs
        load = self.load
        busy = {
            ep
            for ep in endpoints
            if ep in load.kv_full
            or (saturated_at and load.inflight[ep] + load.queued.get(ep, 0.0) >= saturated_at)
        }
        candidates, why = adapter_endpoints(
            endpoints,
            pod_of=self.view.endpoint_pods(key),
            holders=service.holders(adapter),
            active=load.active_adapters,
            adapter=adapter,
            busy=busy,
        )
        if count:
            self.metrics.adapter_picks.labels(reason=why).inc()
        return candidates

    async def _send(self, req: Request, endpoint: str, prompt_tokens: int) -> web.StreamResponse | str:
        """One try: the relayed response, or why the connection was refused (nothing was sent)."""
        assert self.session is not None
        base = self.upstream_override or f"http://{endpoint}"
        streamed = None
        if req.body.data is None and req.body.stream is not None:
            streamed = StreamedBody(req.body.stream, self.limits.body_timeout_seconds)
        with (
            self.load.in_flight(endpoint, prompt_tokens) as answered,
            self.metrics.inflight.track_inprogress(),
        ):
            data: Any = req.body.data if streamed is None else streamed.chunks()
            upstream_cm = self.session.request(
                req.http.method,
                f"{base}{req.http.rel_url}",
                headers=forwarded_headers(dict(req.http.headers)),
                data=data or None,
                allow_redirects=False,
            )
            if req.received is not None:
                self.metrics.overhead.observe(time.monotonic() - req.received)
            try:
                upstream = await upstream_cm.__aenter__()
            except aiohttp.ClientConnectorError as err:
                return str(err)
            except (aiohttp.ClientError, TimeoutError) as err:  # sent (perhaps in part): never tried again
                return self._failed(endpoint, err, streamed)
            try:
                return await self._relay(req, upstream, answered)
            finally:
                await upstream_cm.__aexit__(None, None, None)

    def _failed(self, endpoint: str, err: Exception, streamed: StreamedBody | None) -> web.Response:
        """The answer when the upstream call failed before its response started."""
        if streamed is not None and streamed.expired:
            self.metrics.requests.labels(outcome="rejected").inc()
            self.metrics.rejected.labels(limit="body_timeout").inc()
            return error(408, f"the request body took over {self.limits.body_timeout_seconds:g}s")
        self.metrics.requests.labels(outcome="upstream_error").inc()
        if isinstance(err, TimeoutError):
            return error(504, f"upstream {endpoint} sent nothing for {self.limits.upstream_idle_seconds:g}s")
        return error(502, f"upstream {endpoint}: {err or type(err).__name__}")

    async def _relay(
        self, req: Request, upstream: aiohttp.ClientResponse, answered: Callable[[], None]
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for name, value in upstream.headers.items():
            if name.lower() not in HOP_BY_HOP:
                response.headers.add(name, value)
        await response.prepare(req.http)
        first = True
        try:
            async for chunk in upstream.content.iter_any():
                if first:
                    first = False
                    answered()
                    self.first_token(req.key, req.held_since)
                await response.write(chunk)
        except ConnectionResetError:  # the client left mid-stream
            self.metrics.requests.labels(outcome="client_gone").inc()
            return response
        except (aiohttp.ClientError, TimeoutError) as err:  # the pod died or went silent mid-stream
            log.info("upstream %s/%s: the stream ended early: %s", *req.key, err or type(err).__name__)
            self.metrics.requests.labels(outcome="upstream_error").inc()
            if req.http.transport is not None:
                req.http.transport.abort()  # the client sees a cut stream, never a clean end
            return response
        if first:
            self.first_token(req.key, req.held_since)
        await response.write_eof()
        outcome = "forwarded" if req.held_since is None else "held_forwarded"
        self.metrics.requests.labels(outcome=outcome).inc()
        return response
