"""The router's HTTP side (aiohttp: already in the operator's dependencies through kopf, and measured in
docs/bench/activator-http.md). One OpenAI-compatible endpoint for every LlamaService of the caller's
namespace: `/v1/models` lists them, and any other request goes to the service that `model` (or Host, or
X-LlamaService) names, to the pod the picker chooses (prefix affinity blended with load), streaming
untouched. A service with no ready pod (scaled to zero, or waking) holds the request: the demand is
reported (a Lease the operator reads; again every few seconds while held), and the request goes to the first
pod that becomes ready, or gets a 503 with Retry-After when the hold time runs out. Limits on held requests,
held and buffered bytes, body size and read times keep one tenant from exhausting the router for all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import Counter as Tally
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from llama_operator.activator.budget import Budgets, Claim
from llama_operator.activator.cluster import ClusterView
from llama_operator.activator.intake import TooDeepError, json_object
from llama_operator.activator.picker import (
    KV_FULL,
    RecentKeys,
    adapter_endpoints,
    pick,
    prefix_key,
    prompt_prefix,
    prompt_tokens_estimate,
    vllm_active_adapters,
    vllm_load,
)
from llama_operator.activator.routing import (
    HOP_BY_HOP,
    NAMESPACE_HEADER,
    SERVICE_HEADER,
    Caller,
    HoldCounts,
    Limits,
    ServiceInfo,
    ServiceKey,
    admit_hold,
    forwarded_headers,
    hold_seconds,
    resolve,
    retry_after_seconds,
    served_models,
)
from llama_operator.observability import names as n

log = logging.getLogger(__name__)

LABELS = ("namespace", "llamaservice")
WAKE_BUCKETS = (1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600)
OVERHEAD_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5)
CONNECT_RETRY_SECONDS = 10.0  # a pod that just turned ready may refuse connections for a moment
DRAIN_RETRY_AFTER = 1  # a draining replica's 503: the other replica (or this one's successor) answers now


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=r)  # process_*: what every exporter has (memory, CPU, open files)
        PlatformCollector(registry=r)
        self.held = Gauge(n.ROUTER_HELD, "Requests held now, waiting for a replica.", LABELS, registry=r)
        self.inflight = Gauge(n.ROUTER_INFLIGHT, "Requests forwarded and not finished.", registry=r)
        self.requests = Counter(
            n.ROUTER_REQUESTS,
            "Requests by outcome: forwarded (a pod was ready), held_forwarded (held, then served), timed_out "
            "(503 after the hold time), rejected (a limit: 503, or 413 for a body too big), draining (503: "
            "this replica is stopping), unknown (no such LlamaService for this caller), forbidden (a source "
            "that is no pod of a served namespace), upstream_error (no pod accepted the connection), "
            "client_gone (the client left while held), models (/v1/models answered here).",
            ["outcome"],
            registry=r,
        )
        self.picks = Counter(
            n.ROUTER_PICKS,
            "Pods picked, by reason: affinity (the prompt's prefix pod), spill (its next pod on the ring: the "
            "affine one was above its bounded load), saturated (least-loaded: every pod at its bound), "
            "least_loaded (no prompt), retry (another pod after a refused connection).",
            ["reason"],
            registry=r,
        )
        self.rejected = Counter(
            n.ROUTER_REJECTED, "Requests refused by a limit, by limit.", ["limit"], registry=r
        )
        self.overhead = Histogram(
            n.ROUTER_ADDED_LATENCY,
            "Time the router adds before the upstream request: reading the body, resolving, picking, "
            "connecting (not holding).",
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.activation = Histogram(
            n.ROUTER_ACTIVATION_SECONDS,
            "A wake from zero: first request held to its first token.",
            LABELS,
            buckets=WAKE_BUCKETS,
            registry=r,
        )
        self.hold = Histogram(
            n.ROUTER_HOLD_SECONDS,
            "How long each held request waited for a ready replica.",
            buckets=WAKE_BUCKETS,
            registry=r,
        )
        self.model_requests = Counter(
            n.ROUTER_MODEL_REQUESTS,
            "Requests routed to a LlamaService, by the model they named: its served name (kind base) or one of "
            "its LoRA adapters (kind adapter); an empty model when the request named the service another way.",
            [*LABELS, "model", "kind"],
            registry=r,
        )
        self.adapter_picks = Counter(
            n.ROUTER_ADAPTER_PICKS,
            "Requests for a LoRA adapter, by the pods they could go to: loaded (pods with the adapter in vLLM's "
            "batch), held (every pod that has it loaded), unplaced (no ready pod has it yet: every pod).",
            ["reason"],
            registry=r,
        )
        self.demand_reports = Counter(
            n.ROUTER_DEMAND_REPORTS,
            "Demand reports written (one per held service every few seconds, on the service's Lease).",
            registry=r,
        )


ActivatorMetrics = RouterMetrics


class RejectedError(Exception):
    def __init__(self, status: int, limit: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.limit, self.message, self.retry_after = status, limit, message, retry_after


def draining_refusal() -> RejectedError:
    """A replica that is stopping takes no new hold: the client retries on another."""
    return RejectedError(
        503, "draining", "this router replica is stopping; retry", retry_after=DRAIN_RETRY_AFTER
    )


@dataclass
class Body:
    """A request body: read into memory (`data`) when routing needs it (JSON: `model` and the prompt),
    else left in the socket and streamed to the upstream (`stream`)."""

    data: bytes | None
    parsed: dict[str, Any] | None
    stream: aiohttp.StreamReader | None

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else 0


def error(status: int, message: str, *, retry_after: int | None = None, kind: str = "router") -> web.Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return web.json_response(
        {"error": {"message": message, "type": kind, "code": status}}, status=status, headers=headers
    )


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
        self.upstream_override = upstream_override.rstrip("/") if upstream_override else None
        self.demand_interval = demand_interval_seconds
        self.limits = limits or Limits()
        self.trusted_namespaces = trusted_namespaces
        self.trusted_sources = trusted_sources  # addresses trusted like a trusted namespace's pods
        self.metrics = metrics or RouterMetrics()
        self.change = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.last_demand: dict[ServiceKey, float] = {}
        self.waking: dict[ServiceKey, float] = {}  # first held request of the wake in progress (monotonic)
        self.session: aiohttp.ClientSession | None = None
        self.inflight: Tally[str] = Tally()  # open upstream requests per endpoint (the picker's load)
        # Prompt tokens (estimated) sent per endpoint whose response has not started: its pending prefill.
        self.prefill: Tally[str] = Tally()
        self.recent_keys = RecentKeys()  # prefix keys sent lately: warm ones keep their pod's cache
        self.budgets = Budgets()  # what requests hold now; only a request's Claim changes it
        self.active = 0  # requests being handled now (held or forwarded)
        self.connect_retry_seconds = CONNECT_RETRY_SECONDS
        self.draining_until: float | None = None  # monotonic deadline once SIGTERM came
        self.idle = asyncio.Event()
        self.sequence = 0
        # vLLM's own view of each pod the router sent to lately: its queue, a nearly full KV cache.
        self.load_scrape_seconds = load_scrape_seconds  # 0: not scraped
        self.queued: dict[str, float] = {}
        self.kv_full: set[str] = set()
        self.active_adapters: dict[str, frozenset[str]] = {}  # endpoint -> adapters in vLLM's batch
        self.recent: dict[str, float] = {}  # endpoint -> when it was last picked (monotonic)
        self.scraper: asyncio.Task[None] | None = None

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
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True),
            auto_decompress=False,
        )
        if self.load_scrape_seconds > 0:
            self.scraper = asyncio.create_task(self._scrape_loop())

    async def close(self) -> None:
        if self.scraper is not None:
            self.scraper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.scraper
        if self.session is not None:
            await self.session.close()

    async def _scrape_loop(self) -> None:
        """Every few seconds, vLLM's queue and KV-cache usage of each pod picked in the last minute (a pod
        that does not answer keeps no figure: only the router's own count then weighs it)."""
        while True:
            await asyncio.sleep(self.load_scrape_seconds)
            now = time.monotonic()
            for endpoint in [ep for ep, at in self.recent.items() if now - at > 60]:
                del self.recent[endpoint]
                self.queued.pop(endpoint, None)
                self.kv_full.discard(endpoint)
                self.active_adapters.pop(endpoint, None)
            await asyncio.gather(*(self._scrape(ep) for ep in list(self.recent)), return_exceptions=True)

    async def _scrape(self, endpoint: str) -> None:
        assert self.session is not None
        base = self.upstream_override or f"http://{endpoint}"
        try:
            async with self.session.get(f"{base}/metrics", timeout=aiohttp.ClientTimeout(total=1.0)) as r:
                text = await r.text() if r.status == 200 else ""
        except (aiohttp.ClientError, TimeoutError):
            text = ""
        if not text:
            self.queued.pop(endpoint, None)
            self.kv_full.discard(endpoint)
            self.active_adapters.pop(endpoint, None)
            return
        waiting, usage = vllm_load(text)
        self.queued[endpoint] = waiting
        self.active_adapters[endpoint] = vllm_active_adapters(text)
        if usage >= KV_FULL:
            self.kv_full.add(endpoint)
        else:
            self.kv_full.discard(endpoint)

    def drain(self, seconds: float) -> None:
        """SIGTERM: requests held past `seconds` from now get a 503; the listener is closed by the caller."""
        self.draining_until = time.monotonic() + seconds
        self._changed()

    # --- who calls ---------------------------------------------------------------------------------------
    def caller(self, request: web.Request) -> Caller:
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        address = str(peer[0]) if peer else ""
        if address.startswith("::ffff:"):
            address = address[7:]
        if address in self.trusted_sources:
            return Caller(None, trusted=True)
        namespace = self.view.namespace_of(address)
        return Caller(namespace, trusted=namespace is not None and namespace in self.trusted_namespaces)

    # --- the request ---------------------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        response = await self._handle(request)
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

    def stuck(self) -> list[str]:
        """What the budgets count while no request is in progress (a leak; empty when none)."""
        if self.active:
            return []
        loads = [f"{n} requests in flight to {ep}" for ep, n in self.inflight.items() if n]
        return [*self.budgets.in_use(), *loads, *(f"pending prefill of {ep}" for ep in self.prefill)]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        with self._counted(), Claim(self.budgets, self._held_gauge) as claim:
            return await self._route(request, claim)

    async def _route(self, request: web.Request, claim: Claim) -> web.StreamResponse:
        received = time.monotonic()
        try:
            caller = self.caller(request)
            body = await self._body(request, claim)
            model = body.parsed.get("model") if body.parsed else None
            namespace_header = request.headers.get(NAMESPACE_HEADER)
            if request.path.rstrip("/") == "/v1/models" and request.method == "GET":
                resolution = resolve(
                    caller,
                    host=request.host,
                    explicit=request.headers.get(SERVICE_HEADER),
                    model=None,
                    namespace_header=namespace_header,
                    services=self.view.known(),
                )
                if resolution.key is None:
                    return self._models(caller, namespace_header)
            else:
                resolution = resolve(
                    caller,
                    host=request.host,
                    explicit=request.headers.get(SERVICE_HEADER),
                    model=model if isinstance(model, str) else None,
                    namespace_header=namespace_header,
                    services=self.view.known(),
                )
            if resolution.key is None:
                outcome = "forbidden" if resolution.status == 403 else "unknown"
                self.metrics.requests.labels(outcome=outcome).inc()
                return error(resolution.status, resolution.message)
            key = resolution.key
            affinity = None
            if body.parsed is not None:
                affinity = prefix_key(str(model or ""), prompt_prefix(body.parsed))
            adapter = self._count_model(key, model)
            if self.view.endpoints(key):
                return await self._forward(
                    request, body, key, affinity, claim, held_since=None, received=received, adapter=adapter
                )
            return await self._hold(
                request, body, key, affinity, received=received, claim=claim, adapter=adapter
            )
        except RejectedError as rejected:
            self.metrics.rejected.labels(limit=rejected.limit).inc()
            self.metrics.requests.labels(
                outcome="draining" if rejected.limit == "draining" else "rejected"
            ).inc()
            return error(rejected.status, rejected.message, retry_after=rejected.retry_after)

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
        if caller.namespace is None and not caller.trusted:
            self.metrics.requests.labels(outcome="forbidden").inc()
            return error(403, "requests are accepted from pods of the namespaces this router serves")
        known = self.view.known()
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": f"{key[0]}/{key[1]}"}
            | ({"parent": known[key].models[0]} if model in known[key].adapters and known[key].models else {})
            for key, model in served_models(caller, namespace_header, known)
        ]
        return web.json_response({"object": "list", "data": data})

    async def _body(self, request: web.Request, claim: Claim) -> Body:
        """Read a JSON body (the OpenAI endpoints: `model` and the prompt route it) within the size, time and
        nesting limits and the router's budget of buffered bytes (counted on the request's claim); any other
        body is streamed, never held in memory."""
        if not request.body_exists:
            return Body(b"", None, None)
        if request.content_type != "application/json":
            return Body(None, None, request.content)
        limits = self.limits
        length = request.content_length
        if length is not None and length > limits.max_body_bytes:
            raise RejectedError(
                413, "body_size", f"the request body is {length} bytes; the limit is {limits.max_body_bytes}"
            )
        reserve = length if length is not None else limits.max_body_bytes
        if self.budgets.buffered + reserve > limits.max_buffered_bytes:
            raise RejectedError(
                503, "buffered_bytes", "this router holds too many request bodies now; retry", retry_after=1
            )
        claim.buffer(reserve)
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(limits.body_timeout_seconds):
                async for chunk in request.content.iter_any():
                    size += len(chunk)
                    if size > limits.max_body_bytes:
                        raise RejectedError(
                            413,
                            "body_size",
                            f"the request body is over the limit of {limits.max_body_bytes} bytes",
                        )
                    chunks.append(chunk)
        except TimeoutError:
            raise RejectedError(
                408, "body_timeout", f"the request body took over {limits.body_timeout_seconds:g}s"
            ) from None
        data = b"".join(chunks)
        claim.unbuffer(reserve - len(data))  # what it really holds, until the request ends
        try:
            parsed = json_object(data, limits.max_json_depth)
        except TooDeepError as err:
            raise RejectedError(400, "json_depth", str(err)) from None
        return Body(data, parsed, None)

    # --- holding ---------------------------------------------------------------------------------------
    async def _report_demand(self, key: ServiceKey, uid: str) -> None:
        now = time.monotonic()
        if now - self.last_demand.get(key, -1e9) < self.demand_interval:
            return
        self.last_demand[key] = now
        self.metrics.demand_reports.inc()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.view.request_activation, key, uid, time.time())

    async def _hold(
        self,
        request: web.Request,
        body: Body,
        key: ServiceKey,
        affinity: int | None,
        *,
        received: float,
        claim: Claim,
        adapter: str | None = None,
    ) -> web.StreamResponse:
        service = self.view.service(key)
        timeout = hold_seconds(
            service.activation_timeout_seconds if service is not None else 300.0, self.limits
        )
        if self.draining_until is not None:
            raise draining_refusal()
        budgets = self.budgets
        counts = HoldCounts(budgets.total_held(), budgets.held_requests[key], budgets.held_bytes[key])
        refusal = admit_hold(self.limits, counts, body.size)
        if refusal is not None:
            raise RejectedError(503, "held", f"{refusal}; retry", retry_after=retry_after_seconds(timeout))
        self.waking.setdefault(key, received)
        claim.hold(key, body.size)
        try:
            while True:
                change = self.change  # taken before looking, so no change is missed
                if self.view.endpoints(key):
                    self.metrics.hold.observe(time.monotonic() - received)
                    claim.unhold()
                    return await self._forward(
                        request,
                        body,
                        key,
                        affinity,
                        claim,
                        held_since=received,
                        received=None,
                        adapter=adapter,
                    )
                now = time.monotonic()
                remaining = received + timeout - now
                if self.draining_until is not None and now >= self.draining_until:
                    self._end_wake(key, received)
                    raise draining_refusal()
                if remaining <= 0:
                    self._end_wake(key, received)
                    return self._hold_timed_out(key, timeout)
                current = self.view.service(key)
                if current is not None:
                    await self._report_demand(key, current.uid)
                wait = min(remaining, self.demand_interval)
                if self.draining_until is not None:
                    wait = min(wait, max(0.0, self.draining_until - now))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(change.wait(), wait)
        except asyncio.CancelledError:
            self._end_wake(key, received)
            self.metrics.requests.labels(outcome="client_gone").inc()
            raise
        finally:
            claim.unhold()

    def _hold_timed_out(self, key: ServiceKey, timeout: float) -> web.Response:
        """503 with Retry-After for a request held past its service's hold time."""
        self.metrics.requests.labels(outcome="timed_out").inc()
        retry = retry_after_seconds(timeout)
        return error(
            503,
            f"LlamaService {key[0]}/{key[1]} has no ready replica after {timeout:g}s "
            f"(spec.autoscaling.activationTimeoutSeconds, capped by the platform); it is starting: "
            f"retry in {retry}s",
            retry_after=retry,
        )

    # --- forwarding ------------------------------------------------------------------------------------
    def _adapter_candidates(
        self, key: ServiceKey, service: ServiceInfo, endpoints: list[str], adapter: str, *, count: bool
    ) -> list[str]:
        """The pods that hold a LoRA adapter, those with it in vLLM's batch first while below their bound;
        `count`: the pick's reason goes to the metrics (not again for a retry)."""
        saturated_at = service.max_num_seqs
        busy = {
            ep
            for ep in endpoints
            if ep in self.kv_full
            or (saturated_at and self.inflight[ep] + self.queued.get(ep, 0.0) >= saturated_at)
        }
        candidates, why = adapter_endpoints(
            endpoints,
            pod_of=self.view.endpoint_pods(key),
            holders=service.holders(adapter),
            active=self.active_adapters,
            adapter=adapter,
            busy=busy,
        )
        if count:
            self.metrics.adapter_picks.labels(reason=why).inc()
        return candidates

    async def _forward(
        self,
        request: web.Request,
        body: Body,
        key: ServiceKey,
        affinity: int | None,
        claim: Claim,
        *,
        held_since: float | None,
        received: float | None,
        adapter: str | None = None,
    ) -> web.StreamResponse:
        """Send to the picked pod (for a LoRA adapter, one that holds it, preferably one with it loaded); a
        refused connection (nothing sent yet) tries another pod, then the same ones again for a few seconds
        (a pod that just turned ready may not accept yet). Never after a byte of the request went out."""
        assert self.session is not None
        service = self.view.service(key)
        saturated_at = service.max_num_seqs if service is not None else 0
        deadline = time.monotonic() + self.connect_retry_seconds
        refused: set[str] = set()
        retry = False
        prompt_tokens = prompt_tokens_estimate(body.parsed) if body.parsed is not None else 0
        warm = self.recent_keys.seen(affinity)
        while True:
            endpoints = [ep for ep in self.view.endpoints(key) if ep not in refused] or self.view.endpoints(
                key
            )
            if adapter is not None and service is not None:
                endpoints = self._adapter_candidates(key, service, endpoints, adapter, count=not retry)
            self.sequence += 1
            chosen = pick(
                endpoints,
                self.inflight,
                affinity,
                saturated_at=saturated_at,
                tiebreak=self.sequence,
                queued=self.queued,
                kv_full=frozenset(self.kv_full),
                prefill=self.prefill,
                prompt_tokens=prompt_tokens,
                warm=warm,
            )
            if chosen is None:  # its pods went away meanwhile: hold again
                return await self._hold(
                    request, body, key, affinity, received=time.monotonic(), claim=claim, adapter=adapter
                )
            self.metrics.picks.labels(reason="retry" if retry else chosen.reason).inc()
            endpoint = chosen.endpoint
            self.recent[endpoint] = time.monotonic()
            if adapter is not None and self.load_scrape_seconds > 0:
                # In vLLM's batch from now on; the next scrape of this pod says for how long.
                self.active_adapters[endpoint] = self.active_adapters.get(endpoint, frozenset()) | {adapter}
            base = self.upstream_override or f"http://{endpoint}"
            with self._in_flight(endpoint, prompt_tokens) as answered:
                data: Any = body.data if body.data is not None else body.stream
                upstream_cm = self.session.request(
                    request.method,
                    f"{base}{request.rel_url}",
                    headers=forwarded_headers(dict(request.headers)),
                    data=data or None,
                    allow_redirects=False,
                )
                if received is not None:
                    self.metrics.overhead.observe(time.monotonic() - received)
                try:
                    upstream = await upstream_cm.__aenter__()
                except aiohttp.ClientConnectorError as err:
                    if body.data is None and body.stream is not None:  # a streamed body may be half read
                        self.metrics.requests.labels(outcome="upstream_error").inc()
                        return error(502, f"upstream {endpoint}: {err}")
                    refused.add(endpoint)
                    retry = True
                    if time.monotonic() > deadline:
                        self.metrics.requests.labels(outcome="upstream_error").inc()
                        return error(502, f"upstream {endpoint}: {err}")
                    if refused >= set(self.view.endpoints(key)):
                        refused.clear()
                        await asyncio.sleep(0.2)
                    continue
                try:
                    return await self._relay(request, upstream, key, held_since, answered)
                finally:
                    await upstream_cm.__aexit__(None, None, None)

    @contextlib.contextmanager
    def _in_flight(self, endpoint: str, prompt_tokens: int = 0) -> Iterator[Callable[[], None]]:
        """The request counts toward its pod's load (the picker's) while it is sent and relayed, and its
        prompt toward the pod's pending prefill until the response starts (the function yielded, called
        on the first byte of the body: vLLM streams it after the first token; a response that is not
        streamed comes whole at the end, so its prompt counts until then)."""
        self.inflight[endpoint] += 1
        self.metrics.inflight.inc()
        pending = [prompt_tokens]
        if prompt_tokens > 0:
            self.prefill[endpoint] += prompt_tokens

        def answered() -> None:
            if pending[0] > 0:
                self.prefill[endpoint] -= pending[0]
                if self.prefill[endpoint] <= 0:
                    del self.prefill[endpoint]
                pending[0] = 0

        try:
            yield answered
        finally:
            answered()
            self.inflight[endpoint] -= 1
            if self.inflight[endpoint] <= 0:
                del self.inflight[endpoint]
            self.metrics.inflight.dec()

    async def _relay(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        key: ServiceKey,
        held_since: float | None,
        answered: Callable[[], None],
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for name, value in upstream.headers.items():
            if name.lower() not in HOP_BY_HOP:
                response.headers.add(name, value)
        await response.prepare(request)
        first = True
        async for chunk in upstream.content.iter_any():
            if first:
                first = False
                answered()
                self._first_token(key, held_since)
            await response.write(chunk)
        if first:
            self._first_token(key, held_since)
        await response.write_eof()
        self.metrics.requests.labels(outcome="forwarded" if held_since is None else "held_forwarded").inc()
        return response

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


Activator = Router


def proxy_app(router: Router) -> web.Application:
    # The body limit is the router's own (Limits.max_body_bytes, checked as it reads); aiohttp's only
    # applies to request.read()/post(), which the router never calls.
    app = web.Application(client_max_size=router.limits.max_body_bytes)
    app.router.add_route("*", "/{tail:.*}", router.handle)
    return app


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
    # keepalive_timeout doubles as the header timeout: aiohttp closes a connection that has not completed a
    # request's headers within it, counted from the connection's start or its last response.
    proxy = web.AppRunner(
        proxy_app(router),
        access_log=None,
        keepalive_timeout=router.limits.header_timeout_seconds,
        shutdown_timeout=2.0,
    )
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
) -> None:
    """Run until SIGTERM or SIGINT, then drain."""
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
    try:
        async with listening(router, address, port, admin_port, drain_seconds=drain_seconds):
            log.info("router: proxy on %s:%d, metrics and probes on :%d", address, port, admin_port)
            await stop.wait()
            # SIGTERM (after the pod's preStop, when it is out of every EndpointSlice): stop accepting, let
            # held and streaming requests finish within the drain time.
            log.info("router: stopping; draining %d requests for up to %.0fs", router.active, drain_seconds)
    finally:
        view.stop()
        await router.close()
