"""The simulator's prefix cache and routers (round robin, least-loaded, the operator's prefix-affine picker)."""

from __future__ import annotations

import random
from dataclasses import replace
from importlib import resources

import pytest

from llama_bench.sim.fleet import FleetConfig, SimulationResult, request_key, simulate
from llama_bench.sim.mooncake import BUNDLED_MOONCAKE, load_mooncake, parse_mooncake
from llama_bench.sim.oracle import FixedReplicas
from llama_bench.sim.prefixgen import ConversationSpec, conversations, prompt_blocks
from llama_bench.sim.replica import PrefixCache
from llama_bench.sim.routingbench import hit_rate
from llama_bench.sim.trace import BLOCK_TOKENS, Trace, TraceRequest

from .conftest import T4

# Multi-turn chats under short system prompts: the router's key (the prompt's first ~256 tokens) reaches
# into the first user message, one key per conversation. Light load: no replica saturates, no spill.
CHATS = ConversationSpec(
    "chats",
    seed=5,
    duration_seconds=240.0,
    conversations_per_second=0.5,
    swing=0.0,
    system_prompts=2,
    system_tokens_mean=100.0,
    turns_mean=5.0,
    think_seconds_mean=5.0,
)


def run(trace: Trace, replicas: int, routing: str = "least-loaded") -> SimulationResult:
    return simulate(trace, FixedReplicas(replicas), FleetConfig(profile=T4, routing=routing))


def test_a_cached_prefix_skips_its_prefill() -> None:
    blocks = prompt_blocks(0, 2000, 1, 2048)  # 128 blocks
    first = TraceRequest(0.0, 2048, 1, blocks)
    again = TraceRequest(10.0, 2048, 1, blocks)
    cold = run(Trace("cold", (first,)), 1).requests[0]
    cached = run(Trace("cached", (first, again)), 1).requests[1]
    assert cold.cached_tokens == 0
    assert cached.cached_tokens == 2047  # all but the last token, which vLLM always computes
    cold_ttft = cold.first_token_time - cold.arrival
    cached_ttft = cached.first_token_time - cached.arrival
    assert cached_ttft < cold_ttft / 3
    # The prefill saved is what the step model says of the skipped tokens.
    assert cold_ttft - cached_ttft == pytest.approx(2047 * T4.steps.seconds_per_prefill_token, rel=0.2)


def test_a_shared_system_prompt_hits_only_its_own_blocks() -> None:
    one = prompt_blocks(3, 1000, 1, 1500)
    other = prompt_blocks(3, 1000, 2, 1500)
    cache = PrefixCache(1000)
    assert cache.admit(one, 1500) == 0
    assert cache.admit(other, 1500) == (1000 // BLOCK_TOKENS) * BLOCK_TOKENS
    assert cache.query_tokens == 3000 and cache.hit_tokens == 992


def test_the_least_recently_used_blocks_are_evicted_beyond_capacity() -> None:
    cache = PrefixCache(10)
    a, b, c = (tuple(range(n * 100, n * 100 + 4)) for n in range(3))
    cache.admit(a, 64)
    cache.admit(b, 64)
    cache.admit(a, 64)  # a is now more recent than b
    cache.admit(c, 64)  # 12 blocks > 10: b's two oldest go
    assert len(cache) == 10
    assert all(block in cache for block in a + c)
    assert b[0] not in cache and b[1] not in cache and b[3] in cache
    assert cache.admit(b, 64) == 0  # its leading block is gone: nothing after it counts


def test_the_cache_is_sized_from_the_plans_kv_tokens() -> None:
    result = run(Trace("one", (TraceRequest(0.0, 100, 1),)), 1)
    assert result.replicas[0].cache.capacity_blocks == T4.kv_capacity_tokens // BLOCK_TOKENS


def test_the_generator_is_deterministic_and_turns_extend_their_history() -> None:
    trace = conversations(CHATS)
    assert trace == conversations(CHATS)
    assert trace != conversations(replace(CHATS, seed=6))
    assert len(trace.requests) > 100
    arrivals = [r.arrival for r in trace.requests]
    assert arrivals == sorted(arrivals)
    # Every later turn's prompt starts with an earlier request's whole prompt (its history).
    firsts = {r.prefix_blocks[:8] for r in trace.requests if len(r.prefix_blocks) >= 8}
    assert len(firsts) < len(trace.requests) / 2
    for request in trace.requests:
        assert len(request.prefix_blocks) == request.prompt_tokens // BLOCK_TOKENS


def two_turn_chats(count: int = 300, seed: int = 3) -> Trace:
    """`count` conversations of exactly two turns, no shared system prompt: the second turn's prompt is
    the first's, its reply and a new message, so its only possible hit is where the first turn ran."""
    rng = random.Random(seed)
    requests = []
    for conversation in range(count):
        start = conversation * 0.8
        first = rng.randint(300, 1500)
        second = first + rng.randint(100, 400)
        requests.append(TraceRequest(start, first, 50, prompt_blocks(0, 0, conversation, first)))
        requests.append(
            TraceRequest(start + rng.uniform(2, 20), second, 50, prompt_blocks(0, 0, conversation, second))
        )
    return Trace("two-turn", tuple(sorted(requests, key=lambda r: r.arrival)))


def test_prefix_affine_routing_hits_more_than_round_robin() -> None:
    for trace in (conversations(CHATS), two_turn_chats()):
        round_robin = hit_rate(run(trace, 3, "round-robin"))
        affine = hit_rate(run(trace, 3, "prefix-affine"))
        assert affine > 1.2 * round_robin, trace.name


def test_round_robins_history_hits_are_about_a_third_of_one_replicas() -> None:
    # The second turn finds the first on the same replica 1 time in 3 under round robin. (With longer
    # conversations round robin does better than 1/R: a turn hits the longest earlier prompt of its
    # conversation that ran on its replica, any turn's.)
    trace = two_turn_chats()
    one = hit_rate(run(trace, 1))
    round_robin = hit_rate(run(trace, 3, "round-robin"))
    assert one > 0.3
    assert round_robin == pytest.approx(one / 3, rel=0.25)


def test_traces_without_prefixes_route_and_time_as_before(small_trace: Trace) -> None:
    # No block hashes: the cache is never consulted, so every figure is the one of a fleet without it.
    result = run(small_trace, 2)
    assert all(r.cached_tokens == 0 for r in result.requests)
    assert all(replica.cache.query_tokens == 0 for replica in result.replicas)
    with_blocks = Trace(
        "distinct",
        tuple(
            replace(r, prefix_blocks=tuple(range(i * 1000, i * 1000 + r.prompt_tokens // BLOCK_TOKENS)))
            for i, r in enumerate(small_trace.requests)
        ),
    )
    # Blocks that never repeat never hit: the same first tokens, to the step.
    same = run(with_blocks, 2)
    assert [r.first_token_time for r in same.requests] == [r.first_token_time for r in result.requests]


def test_an_unknown_router_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown routing 'random'"):
        FleetConfig(profile=T4, routing="random")


def test_mooncake_rows_become_requests_with_16_token_blocks() -> None:
    lines = [
        '{"timestamp": 3000, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]}',
        '{"timestamp": 1000, "input_length": 700, "output_length": 9, "hash_ids": [0, 3]}',
    ]
    trace = parse_mooncake(lines, "sample")
    first, second = trace.requests
    assert (first.arrival, first.prompt_tokens, first.output_tokens) == (0.0, 700, 9)
    assert second.arrival == 2.0
    assert (
        len(first.prefix_blocks) == 700 // BLOCK_TOKENS and len(second.prefix_blocks) == 1100 // BLOCK_TOKENS
    )
    # They share Mooncake's first 512-token block (id 0): 32 of vLLM's blocks, and nothing after.
    shared = sum(1 for a, b in zip(first.prefix_blocks, second.prefix_blocks, strict=False) if a == b)
    assert shared == 32
    with pytest.raises(ValueError, match="sample: line 1"):
        parse_mooncake(['{"timestamp": 0}'], "sample")


def test_the_bundled_mooncake_sample_parses() -> None:
    text = resources.files("llama_bench").joinpath(
        "data", "traces", BUNDLED_MOONCAKE["mooncake-conversation"]
    )
    lines = text.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2000
    trace = parse_mooncake(lines[:100], "head")
    assert all(r.prefix_blocks for r in trace.requests if r.prompt_tokens >= BLOCK_TOKENS)
    with pytest.raises(ValueError, match="neither a file nor one of mooncake-conversation"):
        load_mooncake("no-such-trace")


def long_prompts_in_pairs(pairs: int = 30) -> Trace:
    """Pairs of 8,000-token prompts 50 ms apart, every 3 s, with a short request decoding a long answer
    before each pair: the second of a pair arrives while the first prefills."""
    requests = []
    for i in range(pairs):
        start = 3.0 * i
        requests += [TraceRequest(start, 100, 400), TraceRequest(start + 0.5, 8000, 20)]
        requests.append(TraceRequest(start + 0.55, 8000, 20))
    return Trace("long-pairs", tuple(requests))


def test_the_operators_router_sends_a_new_long_prompt_where_no_prefill_is_pending() -> None:
    # By count, the replica prefilling a long prompt (one request) is no heavier than one decoding a short
    # answer; the operator's router counts the prompt tokens pending an answer. Each request has a key of
    # its own, so by count alone its ring pod is the first one's about a third of the time.
    result = run(long_prompts_in_pairs(), 3, "prefix-affine").requests
    firsts, seconds = result[1::3], result[2::3]
    behind = [b for a, b in zip(firsts, seconds, strict=True) if a.replica == b.replica]
    assert not behind, f"{len(behind)} of {len(seconds)} second long prompts queued behind the first"
    waits = [r.first_token_time - r.arrival for r in seconds]
    assert max(waits) < 1.5 * min(r.first_token_time - r.arrival for r in firsts)


def test_every_request_of_a_blockless_trace_has_its_own_key_and_pending_prefill_drains(
    small_trace: Trace,
) -> None:
    result = run(small_trace, 3, "prefix-affine")
    keys = {request_key(r) for r in result.requests}
    assert len(keys) == len(result.requests)
    assert len({r.replica for r in result.requests}) == 3  # spread, not all on one ring arc
    assert all(replica.pending_prompt_tokens == 0 for replica in result.replicas)  # every one answered
