"""The endpoint picker: prefix affinity with bounded load, least-loaded otherwise. Pure."""

from __future__ import annotations

import random
from collections import Counter

from llama_operator.router.picker import (
    BLOCK_CHARS,
    MIN_AFFINE_PREFILL_TOKENS,
    RecentKeys,
    least_loaded,
    pick,
    prefix_key,
    prompt_prefix,
    prompt_tokens_estimate,
    vllm_load,
)

PODS = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]


def chat(system: str, *turns: str) -> dict[str, object]:
    messages = [{"role": "system", "content": system}]
    for i, turn in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": turn})
    return {"model": "m", "messages": messages}


def key_of(body: dict[str, object]) -> int | None:
    return prefix_key("m", prompt_prefix(body))


def test_every_turn_of_a_conversation_goes_to_the_same_pod() -> None:
    first = key_of(chat("You are helpful.", "Tell me about cats."))
    later = key_of(
        chat("You are helpful.", "Tell me about cats.", "Cats are...", "And dogs?", "Dogs...", "Fish?")
    )
    assert first is not None and first == later
    assert pick(PODS, {}, first) == pick(PODS, {}, later)
    assert pick(PODS, {}, first).reason == "affinity"  # type: ignore[union-attr]


def test_different_conversations_spread_over_the_pods() -> None:
    picks = Counter(pick(PODS, {}, key_of(chat("sys", f"question {i}"))).endpoint for i in range(600))  # type: ignore[union-attr]
    assert set(picks) == set(PODS)
    assert max(picks.values()) < 2 * min(picks.values()), picks


def test_completions_hash_the_leading_whole_blocks_only() -> None:
    base = "x" * (BLOCK_CHARS * 20)
    assert key_of({"prompt": base + "tail one"}) == key_of({"prompt": base + "tail two"})
    assert key_of({"prompt": "short a"}) != key_of({"prompt": "short b"})
    assert prefix_key("m", "same") != prefix_key("other-model", "same")
    assert prompt_prefix({"prompt": ["first", "second"]}) == "first"
    assert prompt_prefix({"prompt": [[1, 2, 3]]}) == "1,2,3"
    assert prompt_prefix({"model": "m"}) is None


def test_conversations_under_one_long_system_prompt_each_keep_their_own_key() -> None:
    """A system prompt longer than the leading blocks a message contributes: each conversation still has
    its key (its first user message), the same at every turn; keyed on the system prompt alone, every
    conversation under it would share one (the simulator found it on Mooncake's trace, whose requests all
    open with the same 512 tokens)."""
    system = "You are the support assistant of a large company. " * 60  # ~3,000 characters
    first = key_of(chat(system, "My order 1 is late."))
    second = key_of(chat(system, "My order 2 is late."))
    assert first != second
    later = key_of(chat(system, "My order 1 is late.", "Sorry to hear...", "It was due Monday."))
    assert later == first
    picks = Counter(pick(PODS, {}, key_of(chat(system, f"question {i}"))).endpoint for i in range(300))  # type: ignore[union-attr]
    assert set(picks) == set(PODS)


def test_a_light_load_keeps_its_affinity() -> None:
    """One or two requests in flight: the affine pod takes the next one of its conversation (vLLM batches
    them), rather than the bounded-load bound of 1 spilling it to a pod without its cache."""
    key = key_of(chat("sys", "my question"))
    home = pick(PODS, {}, key)
    assert home is not None
    for busy in (1, 2, 3):
        again = pick(PODS, {home.endpoint: busy}, key)
        assert again is not None and again.endpoint == home.endpoint and again.reason == "affinity"


def test_a_skewed_prefix_never_piles_onto_one_pod() -> None:
    """Everyone shares one system prompt and one question: bounded load spills to the next pods."""
    key = key_of(chat("the same long system prompt " * 50, "hi"))
    inflight: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for _ in range(90):
        chosen = pick(PODS, inflight, key, load_factor=1.25)
        assert chosen is not None
        inflight[chosen.endpoint] += 1
        reasons[chosen.reason] += 1
    assert max(inflight.values()) <= 1.25 * (90 / 3) + 1, inflight
    assert reasons["affinity"] >= 30 and reasons["spill"] > 0


def test_a_saturated_affine_pod_sends_the_request_to_the_least_loaded() -> None:
    key = key_of(chat("s", "q"))
    home = pick(PODS, {}, key).endpoint  # type: ignore[union-attr]
    others = [p for p in PODS if p != home]
    inflight = {home: 4, others[0]: 4, others[1]: 1}
    chosen = pick(PODS, inflight, key, saturated_at=4)
    assert chosen is not None and chosen.endpoint == others[1]


def test_every_pod_at_its_bound_goes_least_loaded() -> None:
    chosen = pick(PODS, {PODS[0]: 5, PODS[1]: 3, PODS[2]: 5}, 12345, saturated_at=3)
    assert chosen is not None and chosen.endpoint == PODS[1] and chosen.reason == "saturated"


def test_without_a_prompt_the_least_loaded_pod_takes_it() -> None:
    chosen = pick(PODS, {PODS[0]: 2, PODS[1]: 0, PODS[2]: 1}, None)
    assert chosen is not None and chosen.endpoint == PODS[1] and chosen.reason == "least_loaded"
    ties = {pick(PODS, {}, None, tiebreak=i).endpoint for i in range(3)}  # type: ignore[union-attr]
    assert ties == set(PODS)


def test_adding_a_pod_moves_only_the_keys_it_takes() -> None:
    rng = random.Random(7)
    keys = [rng.getrandbits(64) for _ in range(2000)]
    before = {k: pick(PODS, {}, k).endpoint for k in keys}  # type: ignore[union-attr]
    after = {k: pick([*PODS, "10.0.0.4:8000"], {}, k).endpoint for k in keys}  # type: ignore[union-attr]
    moved = [k for k in keys if before[k] != after[k]]
    assert all(after[k] == "10.0.0.4:8000" for k in moved)
    assert 0.1 < len(moved) / len(keys) < 0.45


def test_no_pod_no_pick() -> None:
    assert pick([], {}, 1) is None
    assert pick(["a:1"], {"a:1": 100}, 1, saturated_at=1) is not None


def test_vllms_own_queue_counts_as_load_and_a_full_kv_cache_takes_no_affine_request() -> None:
    key = key_of(chat("s", "q"))
    home = pick(PODS, {}, key).endpoint  # type: ignore[union-attr]
    others = [p for p in PODS if p != home]
    # Other clients queued 6 requests on the affine pod: this router's zero in flight does not hide them.
    chosen = pick(PODS, {}, key, queued={home: 6.0})
    assert chosen is not None and chosen.endpoint != home and chosen.reason == "spill"
    chosen = pick(PODS, {}, None, queued={home: 1.0, others[0]: 2.0})
    assert chosen is not None and chosen.endpoint == others[1]
    chosen = pick(PODS, {}, key, kv_full=frozenset({home}))
    assert chosen is not None and chosen.endpoint != home


def test_vllm_load_is_read_from_its_metrics_page() -> None:
    page = "\n".join(
        [
            "# HELP vllm:num_requests_waiting Number of requests waiting.",
            'vllm:num_requests_waiting{engine="0",model_name="a"} 3.0',
            'vllm:num_requests_waiting{engine="0",model_name="b"} 1.0',
            'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.97',
            "vllm:num_requests_running 5.0",
        ]
    )
    assert vllm_load(page) == (4.0, 0.97)
    assert vllm_load("") == (0.0, 0.0)
    assert vllm_load("vllm:num_requests_waiting NaN") == (0.0, 0.0)


def test_a_pod_prefilling_a_long_prompt_is_not_the_least_loaded_one() -> None:
    # One pod prefills one 8,000-token prompt, another decodes three short answers: by count the first is
    # the lighter, by what a new request waits for (the prefill queued ahead of it) it is the heavier.
    inflight = {PODS[0]: 1, PODS[1]: 3, PODS[2]: 3}
    prefill = {PODS[0]: 8000.0, PODS[1]: 0.0, PODS[2]: 200.0}
    assert least_loaded(PODS, inflight, 0) == PODS[0]  # by count alone
    assert least_loaded(PODS, inflight, 0, prefill) == PODS[1]
    chosen = pick(PODS, inflight, None, prefill=prefill, prompt_tokens=4000)
    assert chosen is not None and chosen.endpoint == PODS[1] and chosen.reason == "least_loaded"


def test_an_affine_pod_with_a_long_prefill_queue_spills() -> None:
    key = key_of(chat("sys", "a long document to summarise"))
    assert key is not None
    affine = pick(PODS, {}, key)
    assert affine is not None
    others = [pod for pod in PODS if pod != affine.endpoint]
    # Within one engine step's worth of pending prefill, the cache wins: the affine pod keeps it.
    light = {affine.endpoint: float(MIN_AFFINE_PREFILL_TOKENS), others[0]: 0.0, others[1]: 0.0}
    kept = pick(PODS, {affine.endpoint: 1}, key, prefill=light, prompt_tokens=6000)
    assert kept is not None and kept.endpoint == affine.endpoint and kept.reason == "affinity"
    # Far over the bounded load in tokens (1.25 x the mean), a new key goes elsewhere, whatever the counts.
    heavy = {affine.endpoint: 30000.0, others[0]: 0.0, others[1]: 500.0}
    moved = pick(PODS, {affine.endpoint: 1}, key, prefill=heavy, prompt_tokens=6000, warm=False)
    assert moved is not None and moved.endpoint != affine.endpoint and moved.reason in ("spill", "saturated")
    # A warm key (sent lately: its prefix is in that pod's cache, and the pending tokens counted whole
    # overstate what is left to prefill) keeps the count bound alone.
    kept = pick(PODS, {affine.endpoint: 1}, key, prefill=heavy, prompt_tokens=6000, warm=True)
    assert kept is not None and kept.endpoint == affine.endpoint and kept.reason == "affinity"
    # Every pod over the bound: the least pending prefill takes it.
    everywhere = {PODS[0]: 30000.0, PODS[1]: 20000.0, PODS[2]: 40000.0}
    saturated = pick(PODS, {}, key, prefill=everywhere, prompt_tokens=6000, load_factor=0.5, warm=False)
    assert saturated is not None and saturated.endpoint == PODS[1] and saturated.reason == "saturated"


def test_without_prefill_figures_the_pick_is_by_counts_as_before() -> None:
    key = key_of(chat("sys", "hello"))
    for inflight in ({}, {PODS[0]: 5}, {PODS[1]: 2, PODS[2]: 7}):
        assert pick(PODS, inflight, key) == pick(PODS, inflight, key, prefill={}, prompt_tokens=0)
        assert pick(PODS, inflight, None) == pick(PODS, inflight, None, prefill=None)


def test_the_prompt_length_is_estimated_from_its_characters_or_token_ids() -> None:
    assert prompt_tokens_estimate(chat("x" * 400, "y" * 400)) == 200
    assert prompt_tokens_estimate({"prompt": "z" * 1001}) == 251
    assert prompt_tokens_estimate({"prompt": [1, 2, 3, 4, 5]}) == 5
    assert prompt_tokens_estimate({"prompt": [[1, 2], [3, 4, 5]]}) == 5
    assert prompt_tokens_estimate({"prompt": ["a" * 8, "b" * 8]}) == 4
    assert prompt_tokens_estimate({"input": "w" * 40}) == 10
    assert prompt_tokens_estimate({"model": "m"}) == 0
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "q" * 100}]}]}
    assert prompt_tokens_estimate(parts) >= 25


def test_recent_keys_are_warm_and_bounded() -> None:
    recent = RecentKeys(capacity=3)
    assert recent.seen(None) is False and len(recent) == 0
    assert [recent.seen(k) for k in (1, 2, 3)] == [False, False, False]
    assert recent.seen(1) is True  # and 1 is now the most recent
    assert recent.seen(4) is False  # over capacity: 2, the least recently sent, is forgotten
    assert len(recent) == 3
    assert recent.seen(2) is False
    assert recent.seen(1) is True
