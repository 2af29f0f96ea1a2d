"""One simulated vLLM replica: continuous batching with chunked prefill, a per-step time model,
KV-cache admission and max_num_seqs.

Each engine step first gives every decoding sequence one token, then fills the rest of the token
budget with prompt chunks, oldest first (vLLM V1's scheduler order). Runs of pure decode steps are
simulated as one segment (their total time has a closed form), cut short at the next step boundary
when a request arrives, which keeps a one-hour trace to a few hundred thousand events.

KV admission reserves a sequence's full length (prompt + output), a conservative stand-in for vLLM's
block allocation plus preemption, which is not modelled.

Prefix caching (vLLM's `--enable-prefix-caching`, which the operator sets): each replica keeps the hashes
of the KV blocks it computed, as many as its KV cache holds (the plan's KV tokens over the block size),
evicting the least recently used. A request whose trace names its prompt's blocks (`prefix_blocks`) skips
the prefill of its leading cached blocks when the replica admits it: only the uncached tokens cost prefill
time (at least one token is always computed, as vLLM recomputes the last one). The cache shares no space
with running sequences here (vLLM keeps cached blocks in its free pool, evicted as sequences need them),
an optimistic stand-in for a replica under KV pressure. Requests without block hashes bypass the cache, so
traces without prefixes give the figures they gave before it existed.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from enum import Enum

from llama_bench.sim.accelerators import ReplicaProfile
from llama_bench.sim.trace import BLOCK_TOKENS


class Phase(Enum):
    STARTING = "starting"  # holds its GPU, loading the model
    READY = "ready"  # receives requests
    DRAINING = "draining"  # removed from the endpoints, finishing what it holds
    GONE = "gone"


@dataclass(slots=True, eq=False)
class SimRequest:
    """A request in flight, and what happened to it."""

    index: int
    arrival: float
    prompt_tokens: int
    output_tokens: int
    prefill_left: int
    first_token_time: float = math.nan
    finish_time: float = math.nan
    # Scale to zero: when the activator forwarded it to the first ready replica, after holding it (vLLM's
    # own TTFT counts from there), or gave up on it (503 after activationTimeoutSeconds); NaN otherwise.
    forwarded_time: float = math.nan
    dropped_time: float = math.nan
    # The hashes of the prompt's whole KV blocks (empty: no prefix identity, the cache is not consulted),
    # and the prompt tokens the replica that took it found in its prefix cache.
    prefix_blocks: tuple[int, ...] = ()
    cached_tokens: int = 0
    replica: int = -1  # the replica that took it (-1: none yet)


class PrefixCache:
    """A replica's prefix cache: the hashes of the blocks it holds, least recently used first."""

    __slots__ = ("_blocks", "capacity_blocks", "hit_tokens", "query_tokens")

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = max(1, capacity_blocks)
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.query_tokens = 0  # vllm:prefix_cache_queries: prompt tokens looked up
        self.hit_tokens = 0  # vllm:prefix_cache_hits: of them, found cached

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: int) -> bool:
        return block in self._blocks

    def admit(self, blocks: tuple[int, ...], prompt_tokens: int) -> int:
        """Look up a prompt's blocks and keep them all (the cached leading ones refreshed, the rest added,
        the least recently used evicted beyond capacity): the prompt tokens found cached."""
        cached = self._blocks
        hits = 0
        for block in blocks:
            if block not in cached:
                break
            hits += 1
        for block in blocks:
            if block in cached:
                cached.move_to_end(block)
            else:
                cached[block] = None
        while len(cached) > self.capacity_blocks:
            cached.popitem(last=False)
        # vLLM computes at least the prompt's last token, so a fully cached prompt still prefills one.
        hit_tokens = min(hits * BLOCK_TOKENS, prompt_tokens - 1)
        self.query_tokens += prompt_tokens
        self.hit_tokens += hit_tokens
        return hit_tokens


@dataclass(slots=True, eq=False)
class StepResult:
    """What a finished step or segment produced, for the fleet's counters."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    first_tokens: list[SimRequest] = field(default_factory=list)
    finished: list[SimRequest] = field(default_factory=list)
    # Inter-token intervals the step gave the sequences already decoding: `inter_token_count` tokens,
    # each `inter_token_seconds` after its predecessor (a decode segment's steps at their mean length).
    inter_token_seconds: float = 0.0
    inter_token_count: int = 0


_MIXED = 0
_DECODE = 1


class Replica:
    """The engine of one replica; the fleet drives it by step-end events."""

    __slots__ = (
        "_chunks",
        "_context_tokens",
        "_decoding",
        "_kind",
        "_kv_reserved",
        "_prefill_tokens",
        "_prefilling",
        "_segment_start",
        "_segment_steps",
        "_steps",
        "busy_until",
        "cache",
        "created",
        "ident",
        "pending_prompt_tokens",
        "phase",
        "profile",
        "ready_at",
        "removed",
        "version",
        "waiting",
    )

    def __init__(self, ident: int, profile: ReplicaProfile, created: float, ready_at: float) -> None:
        self.ident = ident
        self.profile = profile
        self.created = created
        self.ready_at = ready_at
        self.removed = math.nan
        self.phase = Phase.STARTING if ready_at > created else Phase.READY
        self.waiting: deque[SimRequest] = deque()
        self._prefilling: list[SimRequest] = []
        # Prompt tokens of the requests routed here without a first token yet: what the operator's router
        # counts as the pod's pending prefill (it sees a request answer, not vLLM's progress).
        self.pending_prompt_tokens = 0
        self._decoding: list[tuple[int, int, SimRequest]] = []  # (finish step, index, request) heap
        self._context_tokens = 0  # tokens of context of the decoding sequences
        self._kv_reserved = 0
        self._steps = 0
        self.busy_until: float | None = None
        self.version = 0  # bumps when a scheduled step end is superseded
        self._kind = _MIXED
        self._segment_start = 0.0
        self._segment_steps = 0
        self._chunks: list[tuple[SimRequest, int]] = []
        self._prefill_tokens = 0
        self.cache = PrefixCache(profile.kv_capacity_tokens // BLOCK_TOKENS)

    # -- gauges, as vLLM exports them ------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self._decoding) + len(self._prefilling)

    @property
    def load(self) -> int:
        """In-flight requests, what a least-loaded router compares."""
        return len(self.waiting) + len(self._decoding) + len(self._prefilling)

    @property
    def kv_usage(self) -> float:
        used = self._context_tokens + sum(r.prompt_tokens - r.prefill_left for r in self._prefilling)
        return min(1.0, used / self.profile.kv_capacity_tokens)

    @property
    def idle(self) -> bool:
        return self.busy_until is None and not self.waiting

    # -- the engine ------------------------------------------------------------------------------
    def enqueue(self, request: SimRequest) -> None:
        """A request routed here: it waits, and its prompt counts toward the pending prefill until its
        first token."""
        self.waiting.append(request)
        self.pending_prompt_tokens += request.prompt_tokens

    def start_next(self, now: float) -> float | None:
        """Schedule the next step (or decode segment) at `now`; its end time, or None when idle."""
        profile = self.profile
        batch = len(self._decoding)
        budget = profile.max_num_batched_tokens - batch
        chunks: list[tuple[SimRequest, int]] = []
        prefill_tokens = 0
        for request in self._prefilling:
            if budget <= 0:
                break
            chunk = min(request.prefill_left, budget)
            chunks.append((request, chunk))
            budget -= chunk
            prefill_tokens += chunk
        waiting = self.waiting
        while budget > 0 and waiting and batch + len(self._prefilling) < profile.max_num_seqs:
            request = waiting[0]
            need = request.prompt_tokens + request.output_tokens
            if self._kv_reserved + need > profile.kv_capacity_tokens and self._kv_reserved > 0:
                break
            waiting.popleft()
            self._kv_reserved += need
            if request.prefix_blocks:
                request.cached_tokens = self.cache.admit(request.prefix_blocks, request.prompt_tokens)
                request.prefill_left = request.prompt_tokens - request.cached_tokens
            self._prefilling.append(request)
            chunk = min(request.prefill_left, budget)
            chunks.append((request, chunk))
            budget -= chunk
            prefill_tokens += chunk
        self._segment_start = now
        if chunks:
            self._kind = _MIXED
            self._chunks = chunks
            self._prefill_tokens = prefill_tokens
            self._segment_steps = 1
            duration = profile.step_seconds(batch, self._context_tokens, prefill_tokens)
        elif batch:
            self._kind = _DECODE
            self._segment_steps = self._decoding[0][0] - self._steps
            duration = self._decode_duration(self._segment_steps)
        else:
            self.busy_until = None
            return None
        self.busy_until = now + duration
        return self.busy_until

    def _decode_duration(self, steps: int) -> float:
        return self.profile.steps.decode_run_seconds(steps, len(self._decoding), self._context_tokens)

    def interrupt(self, now: float) -> float | None:
        """A request arrived during a decode segment: end the segment at the next step boundary so
        the next step can take it. The new end time, or None when the schedule stands."""
        if self._kind != _DECODE or self.busy_until is None or self._segment_steps <= 1:
            return None
        elapsed = now - self._segment_start
        steps = self.profile.steps.decode_steps_within(elapsed, len(self._decoding), self._context_tokens)
        if steps >= self._segment_steps:
            return None
        self._segment_steps = steps
        self.busy_until = self._segment_start + self._decode_duration(steps)
        self.version += 1
        return self.busy_until

    def finish_step(self, now: float) -> StepResult:
        """Apply the step or segment that ends at `now`."""
        result = StepResult()
        batch = len(self._decoding)
        if batch:
            # One token per decoding sequence per step: a step that carries a prompt chunk is a longer
            # interval for all of them, which is how TPOT rises with prefill load and batch size.
            steps = 1 if self._kind == _MIXED else self._segment_steps
            result.inter_token_seconds = (now - self._segment_start) / steps
            result.inter_token_count = steps * batch
        if self._kind == _MIXED:
            self._steps += 1
            self._context_tokens += batch
            result.generation_tokens += batch
            result.prompt_tokens += self._prefill_tokens
            for request, chunk in self._chunks:
                request.prefill_left -= chunk
                if request.prefill_left > 0:
                    continue
                self._prefilling.remove(request)
                self.pending_prompt_tokens -= request.prompt_tokens
                request.first_token_time = now + self.profile.request_overhead_seconds
                result.first_tokens.append(request)
                result.generation_tokens += 1
                if request.output_tokens <= 1:
                    self._complete(request, now, result)
                else:
                    heapq.heappush(
                        self._decoding, (self._steps + request.output_tokens - 1, request.index, request)
                    )
                    self._context_tokens += request.prompt_tokens + 1
            self._chunks = []
        else:
            steps = self._segment_steps
            self._steps += steps
            self._context_tokens += steps * batch
            result.generation_tokens += steps * batch
        decoding = self._decoding
        while decoding and decoding[0][0] <= self._steps:
            request = heapq.heappop(decoding)[2]
            self._context_tokens -= request.prompt_tokens + request.output_tokens
            self._complete(request, now, result)
        self.busy_until = None
        return result

    def _complete(self, request: SimRequest, now: float, result: StepResult) -> None:
        request.finish_time = now + self.profile.request_overhead_seconds
        self._kv_reserved -= request.prompt_tokens + request.output_tokens
        result.finished.append(request)
