"""A keyed work queue, as controller-runtime's: events only add keys; each key is processed by one worker
at a time; a key added again while queued is queued once, and while in flight is processed again after.

Time is read from the event loop's clock, so a delayed key becomes due without a timer per key.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self) -> None:
        self._due: dict[K, float] = {}  # queued keys and when each is due (loop time)
        self._heap: list[tuple[float, int, K]] = []  # (due, sequence, key); stale entries are skipped
        self._sequence = 0
        self._in_flight: set[K] = set()
        self._again: dict[K, float] = {}  # keys added while in flight: when they are due once done
        self._changed = asyncio.Condition()

    def __len__(self) -> int:
        return len(self._due)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _push(self, key: K, due: float) -> None:
        self._due[key] = due
        self._sequence += 1
        heapq.heappush(self._heap, (due, self._sequence, key))

    async def add(self, key: K, delay: float = 0.0) -> None:
        """Queue `key` to be processed after `delay` seconds; an earlier time already queued wins."""
        due = self._now() + max(0.0, delay)
        if key in self._in_flight:
            self._again[key] = min(due, self._again.get(key, due))
            return
        if key in self._due and self._due[key] <= due:
            return
        self._push(key, due)
        async with self._changed:
            self._changed.notify()

    async def get(self) -> K:
        """The next due key, marked in flight until `done`."""
        async with self._changed:
            while True:
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier time, or already taken
                if self._heap:
                    due, _, key = self._heap[0]
                    wait = due - self._now()
                    if wait <= 0:
                        heapq.heappop(self._heap)
                        del self._due[key]
                        self._in_flight.add(key)
                        return key
                else:
                    wait = None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=wait)

    async def done(self, key: K, *, requeue_after: float | None = None) -> None:
        """Finish `key`; queue it again if it was added meanwhile or the worker asks to (a retry)."""
        self._in_flight.discard(key)
        now = self._now()
        dues = [d for d in (self._again.pop(key, None),) if d is not None]
        if requeue_after is not None:
            dues.append(now + requeue_after)
        if dues:
            due = min(dues)
            if key not in self._due or self._due[key] > due:
                self._push(key, due)
        async with self._changed:
            self._changed.notify_all()
