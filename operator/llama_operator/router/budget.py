"""What the router's requests hold of its shared budgets, and the one place that gives it back.

Every reservation a request makes (bytes of its body in memory, its place among the held requests and its
held bytes) goes through its Claim, and the Claim gives all of it back when the request ends, whichever way
it ends: an answer, a refusal, an exception, a client that left. Nothing else changes the counts, so a
failure path cannot leak them (a body nested too deep once left its bytes counted for good)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TypeVar

from llama_operator.router.routing import HoldCounts, ServiceKey

K = TypeVar("K")


@dataclass
class Budgets:
    """What all requests together hold now."""

    buffered: int = 0  # bytes of request bodies in memory
    held_requests: Tally[ServiceKey] = field(default_factory=Tally)
    held_bytes: Tally[ServiceKey] = field(default_factory=Tally)
    held_requests_of: Tally[str] = field(default_factory=Tally)  # by namespace (of the service)
    held_bytes_of: Tally[str] = field(default_factory=Tally)
    streams_of: Tally[str] = field(default_factory=Tally)  # requests forwarded and not finished
    buffered_of: Tally[str] = field(default_factory=Tally)  # by the caller's namespace

    def total_held(self) -> int:
        return sum(self.held_requests.values())

    def total_streams(self) -> int:
        return sum(self.streams_of.values())

    def hold_counts(self, key: ServiceKey) -> HoldCounts:
        return HoldCounts(
            requests=self.total_held(),
            requests_of_namespace=self.held_requests_of[key[0]],
            requests_of_service=self.held_requests[key],
            bytes_of_namespace=self.held_bytes_of[key[0]],
            bytes_of_service=self.held_bytes[key],
        )

    def in_use(self) -> list[str]:
        """What is counted now (empty when nothing is): with no request in progress, a leak."""
        out = []
        if self.buffered:
            out.append(f"{self.buffered} bytes of request bodies")
        if any(self.held_requests.values()):
            out.append(f"{self.total_held()} held requests")
        if any(self.held_bytes.values()):
            out.append(f"{sum(self.held_bytes.values())} held bytes")
        if any(self.streams_of.values()):
            out.append(f"{self.total_streams()} streams")
        return out


def _take(tally: Tally[K], key: K, amount: int) -> None:
    """Less `amount` under `key`; a key at zero leaves the tally (no empty namespace or service stays)."""
    tally[key] -= amount
    if tally[key] <= 0:
        del tally[key]


def _no_gauge(key: ServiceKey, change: int) -> None:
    return None


class Claim:
    """One request's share of the Budgets, taken as the request goes and given back, all of it, when its
    `with` block ends. `on_hold` hears each change of a service's held count (the held gauge)."""

    def __init__(self, budgets: Budgets, on_hold: Callable[[ServiceKey, int], None] = _no_gauge) -> None:
        self.budgets = budgets
        self.on_hold = on_hold
        self.buffered = 0
        self.buffered_for: str | None = None  # the caller's namespace its buffered bytes count against
        self.held: tuple[ServiceKey, int] | None = None  # (service, bytes) while the request is held
        self.streaming: str | None = None  # the namespace whose stream it counts as, while forwarded

    def buffer(self, size: int, namespace: str | None = None) -> None:
        """`size` more bytes of this request's body in memory, counted against `namespace` too (the caller's,
        when it is a pod's: a trusted gateway's requests count only in the total)."""
        if namespace is not None:
            self.buffered_for = namespace
        self.budgets.buffered += size
        self.buffered += size
        if self.buffered_for is not None:
            self.budgets.buffered_of[self.buffered_for] += size

    def unbuffer(self, size: int) -> None:
        size = min(size, self.buffered)
        self.budgets.buffered -= size
        self.buffered -= size
        if self.buffered_for is not None and size:
            _take(self.budgets.buffered_of, self.buffered_for, size)

    def hold(self, key: ServiceKey, size: int) -> None:
        self.unhold()
        self.held = (key, size)
        budgets = self.budgets
        budgets.held_requests[key] += 1
        budgets.held_bytes[key] += size
        budgets.held_requests_of[key[0]] += 1
        budgets.held_bytes_of[key[0]] += size
        self.on_hold(key, 1)

    def unhold(self) -> None:
        if self.held is None:
            return
        key, size = self.held
        self.held = None
        budgets = self.budgets
        _take(budgets.held_requests, key, 1)
        _take(budgets.held_bytes, key, size)
        _take(budgets.held_requests_of, key[0], 1)
        _take(budgets.held_bytes_of, key[0], size)
        self.on_hold(key, -1)

    def stream(self, namespace: str) -> None:
        self.unstream()
        self.streaming = namespace
        self.budgets.streams_of[namespace] += 1

    def unstream(self) -> None:
        if self.streaming is not None:
            _take(self.budgets.streams_of, self.streaming, 1)
            self.streaming = None

    def release(self) -> None:
        self.unhold()
        self.unstream()
        self.unbuffer(self.buffered)

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
