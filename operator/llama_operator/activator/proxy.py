"""The activator's HTTP side (aiohttp: already in the operator's dependencies through kopf, and measured in
docs/bench/activator-http.md). Each request is resolved to its LlamaService; with a ready vLLM endpoint it
is forwarded at once, else it is held: the demand is reported on the LlamaService (again every few seconds
while held, so a report the operator missed is repeated), and the request goes to the first endpoint that
becomes ready, or gets a 503 with Retry-After when activationTimeoutSeconds runs out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from llama_operator.activator.cluster import ClusterView
from llama_operator.activator.routing import (
    HOP_BY_HOP,
    SERVICE_HEADER,
    ServiceKey,
    forwarded_headers,
    resolve,
    retry_after_seconds,
)

log = logging.getLogger(__name__)

LABELS = ("namespace", "llamaservice")
WAKE_BUCKETS = (1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600)


class ActivatorMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.held = Gauge(
            "llama_activator_held_requests", "Requests held now, waiting for a replica.", LABELS, registry=r
        )
        self.requests = Counter(
            "llama_activator_requests",
            "Requests by outcome: forwarded (a replica was ready), held_forwarded (held, then served), "
            "timed_out (503 after activationTimeoutSeconds), unknown (no such LlamaService), upstream_error, "
            "client_gone (the client left while held).",
            ["outcome"],
            registry=r,
        )
        self.activation = Histogram(
            "llama_activator_activation_seconds",
            "A wake from zero: first request held to its first token.",
            LABELS,
            buckets=WAKE_BUCKETS,
            registry=r,
        )
        self.hold = Histogram(
            "llama_activator_hold_seconds",
            "How long each held request waited for a ready replica.",
            buckets=WAKE_BUCKETS,
            registry=r,
        )
        self.demand_reports = Counter(
            "llama_activator_demand_reports",
            "Demand annotations written on LlamaServices (one per held service every few seconds).",
            registry=r,
        )


class Activator:
    def __init__(
        self,
        view: ClusterView,
        *,
        upstream_override: str | None = None,
        demand_interval_seconds: float = 2.0,
        metrics: ActivatorMetrics | None = None,
    ) -> None:
        self.view = view
        self.upstream_override = upstream_override.rstrip("/") if upstream_override else None
        self.demand_interval = demand_interval_seconds
        self.metrics = metrics or ActivatorMetrics()
        self.change = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.last_demand: dict[ServiceKey, float] = {}
        self.waking: dict[ServiceKey, float] = {}  # first held request of the wake in progress (monotonic)
        self.session: aiohttp.ClientSession | None = None

    # Called from the watch threads.
    def notify(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._changed)

    def _changed(self) -> None:
        self.change.set()
        self.change = asyncio.Event()

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            connector=aiohttp.TCPConnector(limit=0),
            auto_decompress=False,
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def _report_demand(self, key: ServiceKey, uid: str) -> None:
        now = time.monotonic()
        if now - self.last_demand.get(key, -1e9) < self.demand_interval:
            return
        self.last_demand[key] = now
        self.metrics.demand_reports.inc()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.view.request_activation, key, uid, time.time())

    async def handle(self, request: web.Request) -> web.StreamResponse:
        resolution = resolve(request.host, request.headers.get(SERVICE_HEADER), self.view.known())
        if resolution.key is None:
            self.metrics.requests.labels(outcome="unknown").inc()
            return web.json_response(
                {"error": {"message": resolution.message, "type": "activator"}}, status=resolution.status
            )
        key = resolution.key
        body = await request.read()
        started = time.monotonic()
        endpoint = self._pick(key)
        if endpoint is not None:
            return await self._forward(request, body, key, endpoint, held_since=None)
        return await self._hold(request, body, key, started)

    def _pick(self, key: ServiceKey) -> str | None:
        endpoints = self.view.endpoints(key)
        if not endpoints:
            return None
        # Spread held requests over the endpoints that are ready; kube-proxy balances the rest.
        return endpoints[int(time.monotonic() * 1000) % len(endpoints)]

    async def _hold(
        self, request: web.Request, body: bytes, key: ServiceKey, started: float
    ) -> web.StreamResponse:
        service = self.view.service(key)
        timeout = service.activation_timeout_seconds if service is not None else 300.0
        gauge: Gauge | None = self.metrics.held.labels(namespace=key[0], llamaservice=key[1])
        self.waking.setdefault(key, started)
        assert gauge is not None
        gauge.inc()
        try:
            while True:
                change = self.change  # taken before looking, so no change is missed
                endpoint = self._pick(key)
                if endpoint is not None:
                    self.metrics.hold.observe(time.monotonic() - started)
                    if gauge is not None:
                        gauge.dec()
                    gauge = None
                    return await self._forward(request, body, key, endpoint, held_since=started)
                remaining = started + timeout - time.monotonic()
                if remaining <= 0:
                    self._end_wake(key, started)
                    self.metrics.requests.labels(outcome="timed_out").inc()
                    retry = retry_after_seconds(timeout)
                    return web.json_response(
                        {
                            "error": {
                                "message": f"LlamaService {key[0]}/{key[1]} has no ready replica after "
                                f"{timeout:g}s (spec.autoscaling.activationTimeoutSeconds); it is starting: "
                                f"retry in {retry}s",
                                "type": "activator",
                            }
                        },
                        status=503,
                        headers={"Retry-After": str(retry)},
                    )
                current = self.view.service(key)
                if current is not None:
                    await self._report_demand(key, current.uid)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(change.wait(), min(remaining, self.demand_interval))
        except asyncio.CancelledError:
            self._end_wake(key, started)
            self.metrics.requests.labels(outcome="client_gone").inc()
            raise
        finally:
            if gauge is not None:
                gauge.dec()

    async def _forward(
        self, request: web.Request, body: bytes, key: ServiceKey, endpoint: str, *, held_since: float | None
    ) -> web.StreamResponse:
        assert self.session is not None
        base = self.upstream_override or f"http://{endpoint}"
        deadline = time.monotonic() + 10.0
        while True:
            try:
                upstream_cm = self.session.request(
                    request.method,
                    f"{base}{request.rel_url}",
                    headers=forwarded_headers(dict(request.headers)),
                    data=body or None,
                    allow_redirects=False,
                )
                upstream = await upstream_cm.__aenter__()
                break
            except aiohttp.ClientConnectorError as err:
                # A pod that just turned ready may not accept yet: a few quick retries, then a 502.
                if time.monotonic() > deadline:
                    self.metrics.requests.labels(outcome="upstream_error").inc()
                    return web.json_response(
                        {"error": {"message": f"upstream {endpoint}: {err}", "type": "activator"}}, status=502
                    )
                await asyncio.sleep(0.2)
        try:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    response.headers.add(name, value)
            await response.prepare(request)
            first = True
            async for chunk in upstream.content.iter_any():
                if first:
                    first = False
                    self._first_token(key, held_since)
                await response.write(chunk)
            if first:
                self._first_token(key, held_since)
            await response.write_eof()
            self.metrics.requests.labels(
                outcome="forwarded" if held_since is None else "held_forwarded"
            ).inc()
            return response
        finally:
            await upstream_cm.__aexit__(None, None, None)

    def _end_wake(self, key: ServiceKey, started: float) -> None:
        """A held request that gives up (timeout, client gone) no longer dates the wake: a later one does."""
        if self.waking.get(key) == started:
            del self.waking[key]

    def _first_token(self, key: ServiceKey, held_since: float | None) -> None:
        """The first token of a held request ends the wake it belongs to: time it from the wake's first held
        request, and tell the operator (status.autoscaling.lastActivationSeconds)."""
        if held_since is None:
            return
        wake_started = self.waking.pop(key, None)
        if wake_started is None:
            return
        seconds = time.monotonic() - wake_started
        self.metrics.activation.labels(namespace=key[0], llamaservice=key[1]).observe(seconds)
        service = self.view.service(key)
        log.info("woke %s/%s: first token %.1fs after the first held request", *key, seconds)
        if service is not None and self.loop is not None:
            self.loop.run_in_executor(
                None, self.view.record_activation, key, service.uid, seconds, time.time()
            )


def proxy_app(activator: Activator) -> web.Application:
    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_route("*", "/{tail:.*}", activator.handle)
    return app


def admin_app(activator: Activator) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(activator.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if activator.view.ready:
            return web.Response(text="ok")
        return web.Response(text="watches not synced yet", status=503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def serve(
    *,
    namespaces: list[str] | None,
    address: str,
    port: int,
    admin_port: int,
    upstream_override: str | None = None,
    demand_interval_seconds: float = 2.0,
) -> None:
    """Run until cancelled."""
    view = ClusterView(namespaces)
    activator = Activator(
        view, upstream_override=upstream_override, demand_interval_seconds=demand_interval_seconds
    )
    view.changed = activator.notify
    await activator.start()
    view.start()
    runners = []
    for app, listen_port in ((proxy_app(activator), port), (admin_app(activator), admin_port)):
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=30.0)
        await runner.setup()
        await web.TCPSite(runner, address, listen_port).start()
        runners.append(runner)
    log.info("activator: proxy on %s:%d, metrics and probes on :%d", address, port, admin_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        # SIGTERM (after the pod's preStop, when it is out of every EndpointSlice): stop accepting, let
        # held and streaming requests finish within the runner's shutdown timeout.
        log.info("activator: stopping; waiting for requests in flight")
    finally:
        for runner in runners:
            await runner.cleanup()
        await activator.close()
