"""Traces whose requests share prompt prefixes: multi-turn conversations under a few shared system prompts.

A conversation starts at a Poisson arrival, picks one of `system_prompts` system prompts (the first ones
more often: Zipf), and runs `turns` turns (geometric, mean `turns_mean`); each turn's prompt is the system
prompt, the history (every earlier user message and reply) and the new user message, so it extends the
previous turn's prompt, as a chat client resends it. Turns are `think_seconds` apart (exponential) and stop
before the prompt outgrows `max_prompt_tokens`.

Each request names its prompt's whole blocks (`TraceRequest.prefix_blocks`, BLOCK_TOKENS tokens each) by
hashes that stand for the prompt up to the block's end: a block inside the system prompt is the same for
every conversation under that prompt, a later one belongs to its conversation alone. Deterministic from the
seed (hashes of int tuples do not depend on PYTHONHASHSEED)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from llama_bench.sim.trace import BLOCK_TOKENS, Trace, TraceRequest


@dataclass(frozen=True, slots=True)
class ConversationSpec:
    name: str
    seed: int
    duration_seconds: float = 1800.0
    conversations_per_second: float = 0.5  # new conversations, at the mean of the day's swing
    swing: float = 0.5  # the rate follows 1 + swing * sin over the duration (one cycle): the autoscaler works
    system_prompts: int = 4
    system_tokens_mean: float = 1200.0
    zipf: float = 1.0
    turns_mean: float = 4.0
    user_tokens_mean: float = 150.0
    output_tokens_mean: float = 200.0
    think_seconds_mean: float = 20.0
    max_prompt_tokens: int = 8000


def _lognormal(rng: random.Random, mean: float, sigma: float = 0.6) -> int:
    return max(1, round(rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)))


def prompt_blocks(system: int, system_tokens: int, conversation: int, prompt_tokens: int) -> tuple[int, ...]:
    """The block hashes of a prompt of `prompt_tokens` tokens: the system prompt's whole blocks first (shared
    by its conversations), then the conversation's own."""
    shared = system_tokens // BLOCK_TOKENS
    return tuple(
        hash((system, -1, i)) if i < shared else hash((system, conversation, i))
        for i in range(prompt_tokens // BLOCK_TOKENS)
    )


def conversations(spec: ConversationSpec) -> Trace:
    """The trace of `spec` (sorted by arrival, starting at 0)."""
    rng = random.Random(spec.seed)
    systems = [_lognormal(rng, spec.system_tokens_mean, 0.5) for _ in range(spec.system_prompts)]
    weights = [1.0 / (rank + 1) ** spec.zipf for rank in range(spec.system_prompts)]
    peak = spec.conversations_per_second * (1 + abs(spec.swing))
    requests: list[TraceRequest] = []
    start = 0.0
    conversation = 0
    while True:
        start += rng.expovariate(peak)  # thinning: a Poisson process at the swinging rate
        if start >= spec.duration_seconds:
            break
        rate = spec.conversations_per_second * (
            1 + spec.swing * math.sin(2 * math.pi * start / spec.duration_seconds)
        )
        if rng.random() * peak > rate:
            continue
        conversation += 1
        system = rng.choices(range(spec.system_prompts), weights)[0]
        history = systems[system]
        turns = 1 + math.floor(math.log(1 - rng.random()) / math.log(1 - 1 / spec.turns_mean))
        t = start
        for _ in range(turns):
            prompt = history + _lognormal(rng, spec.user_tokens_mean)
            output = _lognormal(rng, spec.output_tokens_mean)
            if prompt > spec.max_prompt_tokens or t >= spec.duration_seconds:
                break
            blocks = prompt_blocks(system, systems[system], conversation, prompt)
            requests.append(TraceRequest(t, prompt, output, blocks))
            history = prompt + output
            t += rng.expovariate(1 / spec.think_seconds_mean)
    requests.sort(key=lambda r: r.arrival)
    return Trace(spec.name, tuple(requests))


# The routing benchmark's traces. multi-turn: chats under short system prompts (the router's key, the
# prompt's first ~256 tokens, then takes in the first user message: one key per conversation);
# long-system: chats under a few long system prompts (the key is the system prompt alone: every
# conversation under it shares its key, and the ring spreads them only by bounded load).
PREFIX_TRACES: dict[str, ConversationSpec] = {
    "multi-turn": ConversationSpec(
        "multi-turn", seed=23, conversations_per_second=3.0, system_tokens_mean=150.0
    ),
    "long-system": ConversationSpec(
        "long-system", seed=24, conversations_per_second=2.0, system_prompts=8, system_tokens_mean=2500.0
    ),
}
