"""The load offered to one LlamaService: Poisson arrivals at a rate, or a slice of a trace replayed.

Prompt and output lengths are fixed, or drawn from a trace's requests (its length distribution without
its timing). A trace replay keeps the trace's timing, compressed by `speedup`, and replays a `sample`
fraction of its requests, so an hour of the conversation trace can become a three-minute demo at a
rate a handful of replicas serve: offered rate = trace rate x speedup x sample.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from typing import Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from llama_bench.sim.trace import Trace, load_trace


class LoadSpec(BaseModel):
    """`PUT /load/<namespace>/<llamaservice>` body, and the `--load-file` entries."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate: Annotated[float, Field(ge=0, le=10_000, description="Poisson arrivals per second")] = 0.0
    prompt_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    output_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 100
    lengths: Annotated[
        str | None, Field(description="trace (bundled name or CSV path) to draw prompt/output lengths from")
    ] = None
    trace: Annotated[str | None, Field(description="trace to replay instead of Poisson arrivals")] = None
    offset: Annotated[float, Field(ge=0, description="trace seconds skipped before the replay")] = 0.0
    duration: Annotated[float | None, Field(gt=0, description="trace seconds replayed (default: all)")] = None
    speedup: Annotated[float, Field(gt=0, le=1000, description="trace time compressed by this factor")] = 1.0
    sample: Annotated[
        float, Field(gt=0, le=100, description="fraction of the trace's requests replayed (>1: copies)")
    ] = 1.0
    loop: Annotated[bool, Field(description="start the replayed slice over when it ends")] = False
    seed: int | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> LoadSpec:
        if self.trace is not None and self.rate > 0:
            raise ValueError("give either rate (Poisson) or trace (replay), not both")
        return self


class Arrivals(Protocol):
    """Arrival times (absolute, seconds on the engine's clock) with their prompt and output lengths."""

    def next(self) -> tuple[float, int, int] | None: ...

    def nominal_rate(self) -> float | None: ...


@functools.lru_cache(maxsize=8)
def cached_trace(source: str) -> Trace:
    # Parsing an hour of trace takes a few hundred ms: once per source per process.
    return load_trace(source)


def _lengths(source: str) -> tuple[tuple[int, int], ...]:
    return tuple((r.prompt_tokens, r.output_tokens) for r in cached_trace(source).requests)


class PoissonArrivals:
    def __init__(
        self,
        start: float,
        rate: float,
        lengths: Sequence[tuple[int, int]],
        rng: random.Random,
    ) -> None:
        self._time = start
        self._rate = rate
        self._lengths = lengths
        self._rng = rng

    def next(self) -> tuple[float, int, int] | None:
        if self._rate <= 0:
            return None
        self._time += self._rng.expovariate(self._rate)
        prompt, output = self._lengths[0] if len(self._lengths) == 1 else self._rng.choice(self._lengths)
        return self._time, prompt, output

    def nominal_rate(self) -> float | None:
        return self._rate


class TraceArrivals:
    def __init__(
        self,
        start: float,
        requests: Sequence[tuple[float, int, int]],  # relative time, prompt, output
        period: float | None,  # loop period, None for one pass
        sample: float,
        rng: random.Random,
    ) -> None:
        self._start = start
        self._requests = requests
        self._period = period
        self._sample = sample
        self._rng = rng
        self._index = 0
        self._pass = 0
        self._copies = 0  # copies of the current request still to emit

    def next(self) -> tuple[float, int, int] | None:
        while True:
            if self._copies > 0:
                self._copies -= 1
                offset, prompt, output = self._requests[self._index - 1]
                base = self._start + self._pass * (self._period or 0.0)
                return base + offset, prompt, output
            if self._index >= len(self._requests):
                if self._period is None or not self._requests:
                    return None
                self._index = 0
                self._pass += 1
            self._index += 1
            # A `sample` of 2.4 replays each request twice, and a third time with probability 0.4.
            whole = math.floor(self._sample)
            self._copies = whole + (1 if self._rng.random() < self._sample - whole else 0)

    def nominal_rate(self) -> float | None:
        return None


def arrivals(spec: LoadSpec, start: float, rng: random.Random) -> Arrivals:
    """The arrival process `spec` describes, starting at `start` on the engine's clock."""
    if spec.trace is not None:
        trace = cached_trace(spec.trace)
        end = math.inf if spec.duration is None else spec.offset + spec.duration
        chosen = [
            ((r.arrival - spec.offset) / spec.speedup, r.prompt_tokens, r.output_tokens)
            for r in trace.requests
            if spec.offset <= r.arrival < end
        ]
        if not chosen:
            raise ValueError(f"trace {spec.trace!r} has no request in [{spec.offset}, {end}) s")
        span = (min(end, trace.duration) - spec.offset) / spec.speedup
        return TraceArrivals(start, chosen, max(span, 1e-3) if spec.loop else None, spec.sample, rng)
    pairs: Sequence[tuple[int, int]] = (
        _lengths(spec.lengths) if spec.lengths is not None else ((spec.prompt_tokens, spec.output_tokens),)
    )
    return PoissonArrivals(start, spec.rate, pairs, rng)


def check(spec: LoadSpec) -> None:
    """Load the traces `spec` names, so a bad name fails the request that set it (ValueError)."""
    for source in (spec.trace, spec.lengths):
        if source is not None:
            cached_trace(source)


# An hour of the conversation trace in three minutes (speedup 20), thinned so the offered rate
# (trace rate x speedup x sample: ~4.5 -> 8.4 -> 4 req/s in the trace) spans about one to two T4
# replicas of Llama 3.2 1B: ~5 -> ~10 -> ~5 req/s of ~1150-token prompts.
DEMO_LOAD = LoadSpec(trace="conversation", speedup=20.0, sample=0.06, seed=1)
