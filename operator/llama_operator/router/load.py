"""What the picker weighs of each pod: the router's own count of requests in flight and prompt tokens not
yet answered (pending prefill), and vLLM's own view, scraped every few seconds from the pods picked lately:
its queue, a nearly full KV cache, the LoRA adapters in its batch."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator

import aiohttp

from llama_operator.router.picker import KV_FULL, RecentKeys, vllm_active_adapters, vllm_load

RECENT_SECONDS = 60.0  # a pod not picked for this long is no longer scraped
SCRAPE_TIMEOUT_SECONDS = 1.0


class PodLoad:
    def __init__(self, *, scrape_seconds: float = 0.0, upstream_override: str | None = None) -> None:
        self.inflight: Tally[str] = Tally()  # open upstream requests per endpoint
        # Prompt tokens (estimated) sent per endpoint whose response has not started: its pending prefill.
        self.prefill: Tally[str] = Tally()
        self.recent_keys = RecentKeys()  # prefix keys sent lately: warm ones keep their pod's cache
        self.scrape_seconds = scrape_seconds  # 0: not scraped
        self.upstream_override = upstream_override
        self.queued: dict[str, float] = {}
        self.kv_full: set[str] = set()
        self.active_adapters: dict[str, frozenset[str]] = {}  # endpoint -> adapters in vLLM's batch
        self.recent: dict[str, float] = {}  # endpoint -> when it was last picked (monotonic)
        self.scraper: asyncio.Task[None] | None = None

    def picked(self, endpoint: str, adapter: str | None) -> None:
        self.recent[endpoint] = time.monotonic()
        if adapter is not None and self.scrape_seconds > 0:
            # In vLLM's batch from now on; the next scrape of this pod says for how long.
            self.active_adapters[endpoint] = self.active_adapters.get(endpoint, frozenset()) | {adapter}

    def in_use(self) -> list[str]:
        """What is counted now (empty when nothing is): with no request in progress, a leak."""
        return [f"{n} requests in flight to {ep}" for ep, n in self.inflight.items() if n] + [
            f"pending prefill of {ep}" for ep in self.prefill
        ]

    @contextlib.contextmanager
    def in_flight(self, endpoint: str, prompt_tokens: int = 0) -> Iterator[Callable[[], None]]:
        """The request counts toward its pod's load while it is sent and relayed, and its prompt toward the
        pod's pending prefill until the response starts (the function yielded, called on the first byte of
        the body: vLLM streams it after the first token; a response that is not streamed comes whole at the
        end, so its prompt counts until then)."""
        self.inflight[endpoint] += 1
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

    # --- vLLM's own view ---------------------------------------------------------------------------------
    def start(self, session: aiohttp.ClientSession) -> None:
        if self.scrape_seconds > 0:
            self.scraper = asyncio.create_task(self._scrape_loop(session))

    async def close(self) -> None:
        if self.scraper is not None:
            self.scraper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.scraper

    async def _scrape_loop(self, session: aiohttp.ClientSession) -> None:
        """Every few seconds, vLLM's queue and KV-cache usage of each pod picked in the last minute (a pod
        that does not answer keeps no figure: only the router's own count then weighs it)."""
        while True:
            await asyncio.sleep(self.scrape_seconds)
            now = time.monotonic()
            for endpoint in [ep for ep, at in self.recent.items() if now - at > RECENT_SECONDS]:
                del self.recent[endpoint]
                self._forget(endpoint)
            await asyncio.gather(
                *(self._scrape(session, ep) for ep in list(self.recent)), return_exceptions=True
            )

    def _forget(self, endpoint: str) -> None:
        self.queued.pop(endpoint, None)
        self.kv_full.discard(endpoint)
        self.active_adapters.pop(endpoint, None)

    async def _scrape(self, session: aiohttp.ClientSession, endpoint: str) -> None:
        base = self.upstream_override or f"http://{endpoint}"
        timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_SECONDS)
        try:
            async with session.get(f"{base}/metrics", timeout=timeout) as r:
                text = await r.text() if r.status == 200 else ""
        except (aiohttp.ClientError, TimeoutError):
            text = ""
        if not text:
            self._forget(endpoint)
            return
        waiting, usage = vllm_load(text)
        self.queued[endpoint] = waiting
        self.active_adapters[endpoint] = vllm_active_adapters(text)
        if usage >= KV_FULL:
            self.kv_full.add(endpoint)
        else:
            self.kv_full.discard(endpoint)
