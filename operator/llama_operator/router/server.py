"""The router's HTTP side (aiohttp: already in the operator's dependencies through kopf, and measured in
docs/bench/activator-http.md). One OpenAI-compatible endpoint for every LlamaService of the caller's
namespace: `/v1/models` lists them, and any other request goes to the service that `model` (or Host, or
X-LlamaService) names: forwarded at once when it has a ready pod (upstream.py), else held until one is
(hold.py). Limits on held requests, held and buffered bytes, body size and read times keep one tenant from
exhausting the router for all; every reservation a request makes is given back when it ends (budget.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from llama_operator.router.budget import Budgets, Claim
from llama_operator.router.cluster import ClusterView
from llama_operator.router.ext_proc import EndpointPicker, ServingTls, start_ext_proc, stop_ext_proc
from llama_operator.router.hold import Holding
from llama_operator.router.intake import RejectedError, caller_of, error, read_body, source_address
from llama_operator.router.load import PodLoad
from llama_operator.router.metrics import RouterMetrics
from llama_operator.router.picker import prefix_key, prompt_prefix
from llama_operator.router.routing import (
    FORBIDDEN,
    NAMESPACE_HEADER,
    SERVICE_HEADER,
    Caller,
    Limits,
    ServiceKey,
    admit_stream,
    resolve,
    served_models,
)
from llama_operator.router.upstream import Request, Upstream

log = logging.getLogger(__name__)


class Router:
    def __init__(
        self,
        view: ClusterView,
        *,
        upstream_override: str | None = None,
        demand_interval_seconds: float = 2.0,
        limits: Limits | None = None,
        trusted_namespaces: frozenset[str] = frozenset(),
        trusted_sources: frozenset[str] = frozenset(),
        metrics: RouterMetrics | None = None,
        load_scrape_seconds: float = 0.0,
    ) -> None:
        self.view = view
        override = upstream_override.rstrip("/") if upstream_override else None
        self.limits = limits or Limits()
        self.trusted_namespaces = trusted_namespaces
        self.trusted_sources = trusted_sources  # addresses trusted like a trusted namespace's pods
        self.metrics = metrics or RouterMetrics()
        self.budgets = Budgets()  # what requests hold now; only a request's Claim changes it
        self.load = PodLoad(scrape_seconds=load_scrape_seconds, upstream_override=override)
        self.holding = Holding(
            view, self.metrics, self.limits, demand_interval_seconds=demand_interval_seconds
        )
        self.upstream = Upstream(
            view,
            self.load,
            self.metrics,
            upstream_override=override,
            first_token=self.holding.first_token,
            limits=self.limits,
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.active = 0  # requests being handled now (held or forwarded)
        self.idle = asyncio.Event()

    @property
    def draining_until(self) -> float | None:
        return self.holding.draining_until

    # Called from the watch threads.
    def notify(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.holding.changed)

    async def start(self) -> None:
        self.loop = self.holding.loop = asyncio.get_running_loop()
        await self.upstream.start()
        assert self.upstream.session is not None
        self.load.start(self.upstream.session)

    async def close(self) -> None:
        await self.load.close()
        await self.upstream.close()

    def drain(self, seconds: float) -> None:
        """SIGTERM: requests held past `seconds` from now get a 503; the listener is closed by the caller."""
        self.holding.drain(seconds)

    def stuck(self) -> list[str]:
        """What the budgets count while no request is in progress (a leak; empty when none)."""
        if self.active:
            return []
        return [*self.budgets.in_use(), *self.load.in_use()]

    def endpoint_picker(self) -> EndpointPicker:
        """The same picker, budgets and holds, served to gateways over the endpoint-picker protocol."""
        return EndpointPicker(
            view=self.view,
            holding=self.holding,
            upstream=self.upstream,
            load=self.load,
            budgets=self.budgets,
            limits=self.limits,
            metrics=self.metrics,
            trusted_namespaces=self.trusted_namespaces,
            trusted_sources=self.trusted_sources,
            counted=self._counted,
            on_hold=self._held_gauge,
        )

    def caller(self, request: web.Request) -> Caller:
        return caller_of(
            source_address(request),
            self.view.namespace_of,
            trusted_sources=self.trusted_sources,
            trusted_namespaces=self.trusted_namespaces,
        )

    # --- the request ---------------------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        with self._counted(), Claim(self.budgets, self._held_gauge) as claim:
            response = await self._route(request, claim)
        if self.draining_until is not None:
            response.force_close()  # a draining replica keeps no connection alive
        return response

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        """The request counts as active (the drain waits for it) until it ends, whichever way."""
        self.active += 1
        self.idle.clear()
        try:
            yield
        finally:
            self.active -= 1
            if self.active == 0:
                self.idle.set()

    def _held_gauge(self, key: ServiceKey, change: int) -> None:
        self.metrics.held.labels(namespace=key[0], llamaservice=key[1]).inc(change)

    async def _route(self, request: web.Request, claim: Claim) -> web.StreamResponse:
        received = time.monotonic()
        try:
            caller = self.caller(request)
            if caller.namespace is None and not caller.trusted:  # refused before a byte of its body is read
                self.metrics.requests.labels(outcome="forbidden").inc()
                return error(403, FORBIDDEN)
            body = await read_body(request, self.limits, self.budgets, claim, caller.namespace)
            model = body.parsed.get("model") if body.parsed else None
            namespace_header = request.headers.get(NAMESPACE_HEADER)
            listing = request.path.rstrip("/") == "/v1/models" and request.method == "GET"
            resolution = resolve(
                caller,
                host=request.host,
                explicit=request.headers.get(SERVICE_HEADER),
                model=model if isinstance(model, str) and not listing else None,
                namespace_header=namespace_header,
                services=self.view.known(),
            )
            if resolution.key is None and listing:
                return self._models(caller, namespace_header)
            if resolution.key is None:
                outcome = "forbidden" if resolution.status == 403 else "unknown"
                self.metrics.requests.labels(outcome=outcome).inc()
                return error(resolution.status, resolution.message)
            key = resolution.key
            affinity = (
                prefix_key(str(model or ""), prompt_prefix(body.parsed)) if body.parsed is not None else None
            )
            req = Request(request, body, key, affinity, self._count_model(key, model), None, received)
            return await self._deliver(req, claim)
        except RejectedError as rejected:
            self.metrics.rejected.labels(limit=rejected.limit).inc()
            self.metrics.requests.labels(
                outcome="draining" if rejected.limit == "draining" else "rejected"
            ).inc()
            return error(rejected.status, rejected.message, retry_after=rejected.retry_after)

    async def _deliver(self, req: Request, claim: Claim) -> web.StreamResponse:
        """Forward at once when the service has a ready pod, else hold until it has; again if its pods go
        away before one is picked."""
        while True:
            if not self.view.endpoints(req.key):
                held_at = req.received if req.received is not None else time.monotonic()
                answer = await self.holding.wait(req.key, claim, size=req.body.size, received=held_at)
                if answer is not None:
                    return answer
                req.held_since, req.received = held_at, None
            response = await self._stream(req, claim)
            if response is not None:
                return response

    async def _stream(self, req: Request, claim: Claim) -> web.StreamResponse | None:
        """Forwarded within the router's streams and the namespace's share of them."""
        namespace = req.key[0]
        budgets = self.budgets
        refusal = admit_stream(self.limits, budgets.total_streams(), budgets.streams_of[namespace], namespace)
        if refusal is not None:
            raise RejectedError(refusal.status, refusal.limit, f"{refusal.message}; retry", retry_after=1)
        claim.stream(namespace)
        try:
            return await self.upstream.forward(req)
        finally:
            claim.unstream()

    def _count_model(self, key: ServiceKey, model: Any) -> str | None:
        """Count the request by the model it names (a label only for the service's own names: the label set
        stays bounded); the adapter's name when it names one of the service's LoRA adapters."""
        service = self.view.service(key)
        named = model if isinstance(model, str) and service is not None and service.serves(model) else ""
        adapter = named if service is not None and named in service.adapters else None
        self.metrics.model_requests.labels(
            namespace=key[0], llamaservice=key[1], model=named, kind="adapter" if adapter else "base"
        ).inc()
        return adapter

    def _models(self, caller: Caller, namespace_header: str | None) -> web.Response:
        self.metrics.requests.labels(outcome="models").inc()
        known = self.view.known()
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": f"{key[0]}/{key[1]}"}
            | ({"parent": known[key].models[0]} if model in known[key].adapters and known[key].models else {})
            for key, model in served_models(caller, namespace_header, known)
        ]
        return web.json_response({"object": "list", "data": data})


def proxy_app(router: Router) -> web.Application:
    # The body limit is the router's own (Limits.max_body_bytes, checked as it reads); aiohttp's only
    # applies to request.read()/post(), which the router never calls.
    app = web.Application(client_max_size=router.limits.max_body_bytes)
    app.router.add_route("*", "/{tail:.*}", router.handle)
    return app


def proxy_runner(router: Router) -> web.AppRunner:
    """The proxy app as the router serves it. A client that leaves cancels its request's handler (its hold,
    its stream: what it held goes back at once, not at the hold's end). keepalive_timeout doubles as the
    header timeout: aiohttp closes a connection that has not completed a request's headers within it,
    counted from the connection's start or its last response."""
    return web.AppRunner(
        proxy_app(router),
        access_log=None,
        keepalive_timeout=router.limits.header_timeout_seconds,
        shutdown_timeout=2.0,
        handler_cancellation=True,
    )


def admin_app(router: Router) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(router.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        # A budget counted with no request in progress never comes back: a restart is what frees it.
        stuck = router.stuck()
        if stuck:
            return web.Response(text="\n".join(["budgets stuck:", *stuck]), status=503)
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if router.draining_until is not None:
            return web.Response(text="draining", status=503)
        stuck = router.stuck()
        if stuck:
            return web.Response(text="\n".join(["not ready: budgets stuck:", *stuck]), status=503)
        if router.view.ready:
            return web.Response(text="ok")
        return web.Response(text="\n".join(["not ready:", *router.view.problems()]), status=503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


@contextlib.asynccontextmanager
async def listening(
    router: Router, address: str, port: int, admin_port: int, *, drain_seconds: float
) -> AsyncIterator[web.TCPSite]:
    """Both listeners; on exit, the proxy's listener closes first (no new connection), held and streaming
    requests get `drain_seconds` to finish (held ones past it: 503 + Retry-After), then the rest is cut."""
    proxy = proxy_runner(router)
    admin = web.AppRunner(admin_app(router), access_log=None)
    await proxy.setup()
    await admin.setup()
    site = web.TCPSite(proxy, address, port)
    await site.start()
    await web.TCPSite(admin, address, admin_port).start()
    try:
        yield site
    finally:
        router.drain(drain_seconds)
        await site.stop()  # no new connections from here on
        if router.active:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(router.idle.wait(), drain_seconds + 1.0)
        if router.active:  # their clients see a cut stream: said here, not left to be guessed
            log.warning(
                "router: drained for %.0fs; cutting the %d requests still in progress",
                drain_seconds,
                router.active,
            )
        await proxy.cleanup()
        await admin.cleanup()


async def serve(
    *,
    namespaces: list[str] | None,
    address: str,
    port: int,
    admin_port: int,
    upstream_override: str | None = None,
    demand_interval_seconds: float = 2.0,
    limits: Limits | None = None,
    own_namespace: str = "default",
    identity: str = "router",
    trusted_namespaces: frozenset[str] = frozenset(),
    trusted_sources: frozenset[str] = frozenset(),
    drain_seconds: float = 45.0,
    load_scrape_seconds: float = 2.0,
    ext_proc_port: int = 0,
    ext_proc_tls: ServingTls | None = None,
) -> None:
    """Run until SIGTERM or SIGINT, then drain. `ext_proc_port`: where gateways reach it as their endpoint
    picker (0: not served)."""
    view = ClusterView(
        namespaces, own_namespace=own_namespace, identity=identity, trusted_namespaces=trusted_namespaces
    )
    router = Router(
        view,
        upstream_override=upstream_override,
        demand_interval_seconds=demand_interval_seconds,
        limits=limits,
        trusted_namespaces=trusted_namespaces,
        trusted_sources=trusted_sources,
        load_scrape_seconds=load_scrape_seconds,
    )
    view.changed = router.notify
    await router.start()
    view.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    picker = None
    if ext_proc_port:
        picker = await start_ext_proc(
            router.endpoint_picker(),
            address,
            ext_proc_port,
            lambda: router.view.ready and router.draining_until is None,
            ext_proc_tls,
        )
        log.info(
            "router: endpoint picker (ext_proc, %s) on %s:%d",
            "TLS" if ext_proc_tls else "plaintext",
            address,
            picker[1],
        )
    try:
        async with listening(router, address, port, admin_port, drain_seconds=drain_seconds):
            log.info("router: proxy on %s:%d, metrics and probes on :%d", address, port, admin_port)
            await stop.wait()
            # SIGTERM (after the pod's preStop, when it is out of every EndpointSlice): stop accepting, let
            # held and streaming requests finish within the drain time.
            log.info("router: stopping; draining %d requests for up to %.0fs", router.active, drain_seconds)
    finally:
        if picker is not None:
            await stop_ext_proc(picker[0], picker[2], drain_seconds)
        view.stop()
        await router.close()
