"""Holding: a request for a service with no ready pod (scaled to zero, or waking) waits here, within the
hold limits, while the demand is reported (a Lease the operator reads; again every few seconds while held),
until a pod is ready, its hold time runs out (503 with Retry-After), or this replica drains. Each wake is
timed from its first held request to its first token, and the operator told."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiohttp import web

from llama_operator.router.budget import Claim
from llama_operator.router.cluster import ClusterView
from llama_operator.router.intake import RejectedError, error
from llama_operator.router.metrics import RouterMetrics
from llama_operator.router.routing import (
    Limits,
    ServiceKey,
    admit_hold,
    hold_seconds,
    retry_after_seconds,
)

log = logging.getLogger(__name__)

DRAIN_RETRY_AFTER = 1  # a draining replica's 503: the other replica (or this one's successor) answers now
UNKNOWN_SERVICE_HOLD_SECONDS = 300.0


def draining_refusal() -> RejectedError:
    """A replica that is stopping takes no new hold: the client retries on another."""
    return RejectedError(
        503, "draining", "this router replica is stopping; retry", retry_after=DRAIN_RETRY_AFTER
    )


class Holding:
    def __init__(
        self, view: ClusterView, metrics: RouterMetrics, limits: Limits, *, demand_interval_seconds: float
    ) -> None:
        self.view = view
        self.metrics = metrics
        self.limits = limits
        self.demand_interval = demand_interval_seconds
        self.change = asyncio.Event()  # replaced at each change of the cluster view
        self.last_demand: dict[ServiceKey, float] = {}
        self.waking: dict[ServiceKey, float] = {}  # first held request of the wake in progress (monotonic)
        self.draining_until: float | None = None  # monotonic deadline once SIGTERM came
        self.loop: asyncio.AbstractEventLoop | None = None

    def changed(self) -> None:
        """The cluster view changed (in the event loop): every held request looks again."""
        self.change.set()
        self.change = asyncio.Event()

    def drain(self, seconds: float) -> None:
        """SIGTERM: requests held past `seconds` from now get a 503."""
        self.draining_until = time.monotonic() + seconds
        self.changed()

    async def wait(
        self, key: ServiceKey, claim: Claim, *, size: int, received: float
    ) -> web.StreamResponse | None:
        """Hold until the service has a ready pod (None: forward now), or the answer when the hold ends
        another way (503 after the hold time). Raises RejectedError for a limit or a draining replica."""
        service = self.view.service(key)
        timeout = hold_seconds(
            service.activation_timeout_seconds if service is not None else UNKNOWN_SERVICE_HOLD_SECONDS,
            self.limits,
        )
        if self.draining_until is not None:
            raise draining_refusal()
        refusal = admit_hold(self.limits, claim.budgets.hold_counts(key), key[0], size)
        if refusal is not None:
            raise RejectedError(
                refusal.status,
                refusal.limit,
                f"{refusal.message}; retry",
                retry_after=retry_after_seconds(timeout),
            )
        self.waking.setdefault(key, received)
        claim.hold(key, size)
        try:
            return await self._until_ready(key, received, timeout)
        except asyncio.CancelledError:
            self.end_wake(key, received)
            self.metrics.requests.labels(outcome="client_gone").inc()
            raise
        finally:
            claim.unhold()

    async def _until_ready(
        self, key: ServiceKey, received: float, timeout: float
    ) -> web.StreamResponse | None:
        while True:
            change = self.change  # taken before looking, so no change is missed
            if self.view.endpoints(key):
                self.metrics.hold.observe(time.monotonic() - received)
                return None
            now = time.monotonic()
            remaining = received + timeout - now
            if self.draining_until is not None and now >= self.draining_until:
                self.end_wake(key, received)
                raise draining_refusal()
            if remaining <= 0:
                self.end_wake(key, received)
                return self._timed_out(key, timeout)
            current = self.view.service(key)
            if current is not None:
                await self._report_demand(key, current.uid)
            wait = min(remaining, self.demand_interval)
            if self.draining_until is not None:
                wait = min(wait, max(0.0, self.draining_until - now))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(change.wait(), wait)

    async def _report_demand(self, key: ServiceKey, uid: str) -> None:
        now = time.monotonic()
        if now - self.last_demand.get(key, -1e9) < self.demand_interval:
            return
        self.last_demand[key] = now
        self.metrics.demand_reports.inc()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.view.request_activation, key, uid, time.time())

    def _timed_out(self, key: ServiceKey, timeout: float) -> web.Response:
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

    def end_wake(self, key: ServiceKey, started: float) -> None:
        """A held request that gives up (timeout, client gone) no longer dates the wake: a later one does."""
        if self.waking.get(key) == started:
            del self.waking[key]

    def first_token(self, key: ServiceKey, held_since: float | None) -> None:
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
