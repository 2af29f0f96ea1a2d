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

from llama_operator.router.routing import ServiceKey


@dataclass
class Budgets:
    """What all requests together hold now."""

    buffered: int = 0  # bytes of request bodies in memory
    held_requests: Tally[ServiceKey] = field(default_factory=Tally)
    held_bytes: Tally[ServiceKey] = field(default_factory=Tally)

    def total_held(self) -> int:
        return sum(self.held_requests.values())

    def in_use(self) -> list[str]:
        """What is counted now (empty when nothing is): with no request in progress, a leak."""
        out = []
        if self.buffered:
            out.append(f"{self.buffered} bytes of request bodies")
        if any(self.held_requests.values()):
            out.append(f"{self.total_held()} held requests")
        if any(self.held_bytes.values()):
            out.append(f"{sum(self.held_bytes.values())} held bytes")
        return out


def _no_gauge(key: ServiceKey, change: int) -> None:
    return None


class Claim:
    """One request's share of the Budgets, taken as the request goes and given back, all of it, when its
    `with` block ends. `on_hold` hears each change of a service's held count (the held gauge)."""

    def __init__(self, budgets: Budgets, on_hold: Callable[[ServiceKey, int], None] = _no_gauge) -> None:
        self.budgets = budgets
        self.on_hold = on_hold
        self.buffered = 0
        self.held: tuple[ServiceKey, int] | None = None  # (service, bytes) while the request is held

    def buffer(self, size: int) -> None:
        self.budgets.buffered += size
        self.buffered += size

    def unbuffer(self, size: int) -> None:
        size = min(size, self.buffered)
        self.budgets.buffered -= size
        self.buffered -= size

    def hold(self, key: ServiceKey, size: int) -> None:
        self.unhold()
        self.held = (key, size)
        self.budgets.held_requests[key] += 1
        self.budgets.held_bytes[key] += size
        self.on_hold(key, 1)

    def unhold(self) -> None:
        if self.held is None:
            return
        key, size = self.held
        self.held = None
        for tally, amount in ((self.budgets.held_requests, 1), (self.budgets.held_bytes, size)):
            tally[key] -= amount
            if tally[key] <= 0:
                del tally[key]
        self.on_hold(key, -1)

    def release(self) -> None:
        self.unhold()
        self.unbuffer(self.buffered)

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
