"""Which ready pod of a LlamaService takes a request, for time to first token. Pure.

vLLM's prefix cache skips the prefill of the KV blocks a pod already holds, so requests that share a
prompt's leading blocks (a system prompt, a conversation's history) should land on the pod that served
them before. The picker hashes the prompt's leading blocks and walks a consistent-hash ring from there
(consistent hashing with bounded loads, as KubeAI's proxy does): the first pod whose in-flight requests
stay within `load_factor` times the mean (or under a few, MIN_AFFINE_LOAD, whatever the mean) takes it
("affinity"), else the next one on the ring ("spill"),
so a skewed prefix never piles onto one pod. A pod at `saturated_at` in-flight requests takes no affine
request: the least-loaded pod does ("saturated"). Requests without a prompt go to the least-loaded pod.
Adding or removing a pod moves only the keys of its own arcs.

A pod's load is the router's own in-flight requests to it (known at once) plus the requests vLLM reports
waiting in its queue (`vllm:num_requests_waiting`: other router replicas' and direct clients' too, scraped
every few seconds); a pod whose KV cache vLLM reports nearly full (`vllm:kv_cache_usage_perc`) takes no
affine request, as a saturated one.

A request's time to first token is the prefill queued ahead of it on its pod plus its own, so the router
also counts each pod's pending prefill: the prompt tokens of the requests it sent there that have not
answered yet. The least-loaded choice ranks pods by it first. A request whose key the router has not sent
lately (`warm` false: no pod holds its prefix, so affinity saves nothing yet) takes its affine pod only
while that pod's pending prefill stays within the same bounded load in tokens (or under one engine step's
worth, MIN_AFFINE_PREFILL_TOKENS); a warm key keeps the count bound alone, its prefix being cached there
(the pending tokens, counted whole, overstate what a cache hit leaves to prefill). A count alone treats a
pod prefilling one 8,000-token prompt as lighter than one decoding three short answers: in the simulator
that put new long prompts behind long prompts while other pods sat idle (docs/bench/routing.md)."""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_operator.catalog.vllm import KV_CACHE_METRICS, VLLM_LORA_INFO, VLLM_WAITING

# The affine pod takes at least this many requests at once whatever the mean: vLLM batches them into the
# same steps, so a few more on it cost little, while a spill costs the whole prefill its cache would have
# skipped (with 3 pods and one request in flight, the bounded-load bound alone is 1: a light load spilled
# a sixth of its requests in the simulator).
MIN_AFFINE_LOAD = 4
VIRTUAL_NODES = 64  # points per pod on the ring: keys spread within a few % of even with 3+ pods
BLOCK_CHARS = 64  # ~16 tokens (vLLM's default block) at ~4 characters a token
PREFIX_CHARS = 1024  # the leading blocks of each message (or of a prompt) that pick the pod (~256 tokens)
KEY_MESSAGES = 8  # a chat's messages up to its first user message, at most this many, make the key
# Pending prefill an affine pod may hold whatever the mean: vLLM's default --max-num-batched-tokens, one
# engine step's prefill (a few hundred ms on the smallest GPUs), which a cache hit usually saves.
MIN_AFFINE_PREFILL_TOKENS = 2048
CHARS_PER_TOKEN = 4  # Llama's tokenizers average about 4 characters of English text a token


@dataclass(frozen=True, slots=True)
class Pick:
    endpoint: str
    reason: str  # affinity | spill | saturated | least_loaded


def _hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _text(content: Any) -> str:
    """A message's content: a string, or the text of its parts (images and audio count as their URLs)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            json.dumps(part, sort_keys=True) if not isinstance(part, str) else part for part in content
        )
    return "" if content is None else json.dumps(content, sort_keys=True)


def _leading(text: str) -> str:
    """A text's leading whole blocks, at most PREFIX_CHARS (a text shorter than one block: all of it)."""
    whole = min(len(text), PREFIX_CHARS) // BLOCK_CHARS * BLOCK_CHARS
    return text[: whole or len(text)]


def prompt_prefix(body: Mapping[str, Any]) -> str | None:
    """The text that picks the pod: for chat, the leading blocks of each message up to and including the
    first user message (the same for every turn of a conversation, and another for each conversation,
    however long a system prompt they share: keyed on the system prompt alone, every conversation under one
    would share a pod and lose its own history's cache once bounded load spreads them); for completions,
    the prompt's leading blocks. None when the body has neither."""
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        parts = []
        for message in messages[:KEY_MESSAGES]:
            if not isinstance(message, Mapping):
                continue
            parts.append(f"<{message.get('role')}>{_leading(_text(message.get('content')))}")
            if message.get("role") == "user":
                break
        return "".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, list):  # a batch, or token ids: the first item
        prompt = prompt[0] if prompt else None
        if isinstance(prompt, list):
            prompt = ",".join(str(t) for t in prompt[: PREFIX_CHARS // 4])
    if isinstance(prompt, str) and prompt:
        return _leading(prompt)
    if isinstance(body.get("input"), str):  # embeddings
        return _leading(str(body["input"]))
    return None


def prompt_tokens_estimate(body: Mapping[str, Any]) -> int:
    """The prompt's length in tokens, estimated from its characters (token ids: their count): what the
    request will cost its pod's prefill. 0 for a body without a prompt."""
    messages = body.get("messages")
    if isinstance(messages, list):
        chars = sum(len(_text(m.get("content"))) for m in messages if isinstance(m, Mapping))
        return math.ceil(chars / CHARS_PER_TOKEN)
    prompt = body.get("prompt", body.get("input"))
    if isinstance(prompt, list):  # a batch of prompts, token ids, or a batch of token-id lists
        if all(isinstance(item, int) for item in prompt):
            return len(prompt)
        return sum(
            len(item) if isinstance(item, list) else math.ceil(len(str(item)) / CHARS_PER_TOKEN)
            for item in prompt
        )
    if isinstance(prompt, str):
        return math.ceil(len(prompt) / CHARS_PER_TOKEN)
    return 0


class RecentKeys:
    """The prefix keys a router sent lately, at most `capacity` (the least recently sent forgotten first):
    a key found here is warm, its prefix likely in a pod's cache."""

    def __init__(self, capacity: int = 65536) -> None:
        self.capacity = capacity
        self._keys: dict[int, None] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def seen(self, key: int | None) -> bool:
        """Whether `key` was sent lately; remembers it as sent now (None: never warm, not remembered)."""
        if key is None:
            return False
        warm = key in self._keys
        self._keys.pop(key, None)
        self._keys[key] = None
        if len(self._keys) > self.capacity:
            del self._keys[next(iter(self._keys))]
        return warm


def prefix_key(model: str, prefix: str | None) -> int | None:
    """The hash of a prompt_prefix, with the model; None without a prefix."""
    if not prefix:
        return None
    return _hash(f"{model}\0{prefix}".encode())


@functools.lru_cache(maxsize=256)
def _ring(endpoints: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    points = sorted((_hash(f"{ep}#{i}".encode()), ep) for ep in endpoints for i in range(VIRTUAL_NODES))
    return tuple(p for p, _ in points), tuple(ep for _, ep in points)


def least_loaded(
    endpoints: Sequence[str],
    load: Mapping[str, float],
    tiebreak: int,
    prefill: Mapping[str, float] | None = None,
) -> str:
    """The pod with the least pending prefill (when known), then the fewest requests; `tiebreak` spreads
    exact ties."""
    prefill = prefill or {}

    def rank(ep: str) -> tuple[float, float]:
        return (prefill.get(ep, 0.0), load.get(ep, 0))

    low = min(rank(ep) for ep in endpoints)
    lows = [ep for ep in endpoints if rank(ep) == low]
    return lows[tiebreak % len(lows)]


def pick(
    endpoints: Sequence[str],
    inflight: Mapping[str, int],
    key: int | None,
    *,
    load_factor: float = 1.25,
    saturated_at: int = 0,
    tiebreak: int = 0,
    queued: Mapping[str, float] | None = None,
    kv_full: frozenset[str] = frozenset(),
    prefill: Mapping[str, float] | None = None,
    prompt_tokens: float = 0.0,
    warm: bool = True,
) -> Pick | None:
    """The pod for one request (None without any). `inflight`: requests this router has open per pod;
    `saturated_at`: in-flight requests at which a pod takes no more affine requests (0: no such limit);
    `tiebreak`: any number, spreading ties among least-loaded pods; `queued`: requests vLLM reports waiting
    per pod; `kv_full`: pods whose KV cache vLLM reports nearly full; `prefill`: prompt tokens this router
    sent per pod that have not answered yet (None: counts only), and `prompt_tokens` this request's;
    `warm`: the router sent this key lately (false: the affine pod must also be within the token bound)."""
    candidates = tuple(sorted(set(endpoints)))
    if not candidates:
        return None
    if len(candidates) == 1:
        return Pick(candidates[0], "affinity" if key is not None else "least_loaded")
    queued = queued or {}
    load = {ep: inflight.get(ep, 0) + queued.get(ep, 0.0) for ep in candidates}
    if key is None:
        return Pick(least_loaded(candidates, load, tiebreak, prefill), "least_loaded")
    total = sum(load.values())
    bound = max(math.ceil(load_factor * (total + 1) / len(candidates)), MIN_AFFINE_LOAD)
    # A cold key's bound in pending prefill tokens (None: a warm key, or no prefill figures, counts only).
    pending = prefill or {}
    prefill_bound = None
    if prefill is not None and not warm:
        total_prefill = sum(pending.get(ep, 0.0) for ep in candidates)
        prefill_bound = max(
            load_factor * (total_prefill + prompt_tokens) / len(candidates), MIN_AFFINE_PREFILL_TOKENS
        )
    points, owners = _ring(candidates)
    start = bisect.bisect_left(points, key)
    seen: list[str] = []
    for i in range(len(points)):
        owner = owners[(start + i) % len(points)]
        if owner in seen:
            continue
        seen.append(owner)
        full = owner in kv_full or bool(saturated_at and load[owner] >= saturated_at)
        within = prefill_bound is None or pending.get(owner, 0.0) <= prefill_bound
        if load[owner] + 1 <= bound and within and not full:
            return Pick(owner, "affinity" if len(seen) == 1 else "spill")
        if len(seen) == len(candidates):
            break
    return Pick(least_loaded(candidates, load, tiebreak, prefill), "saturated")


KV_FULL = 0.95  # vLLM's KV-cache usage at which a pod preempts soon: no affine requests to it


def vllm_load(metrics_text: str) -> tuple[float, float]:
    """(requests waiting, KV-cache usage 0..1) from a vLLM /metrics page: waiting summed over its models,
    usage the highest; (0, 0) for what it does not report."""
    waiting = usage = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(VLLM_WAITING):
            waiting += _sample_value(line)
        elif line.startswith(KV_CACHE_METRICS):  # the current name, or the one an older vLLM exports
            usage = max(usage, _sample_value(line))
    return waiting, usage


def _sample_value(line: str) -> float:
    try:
        value = float(line.rsplit(" ", 1)[1])
    except (IndexError, ValueError):
        return 0.0
    return value if math.isfinite(value) else 0.0


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def vllm_active_adapters(metrics_text: str) -> frozenset[str]:
    """The adapters a vLLM has in its running or waiting batch (so in a GPU slot, or about to be), from its
    `vllm:lora_requests_info` gauge: one sample per label set it ever had, valued with the time it was set;
    the newest is the current one."""
    newest, adapters = -1.0, frozenset[str]()
    for line in metrics_text.splitlines():
        if not line.startswith(VLLM_LORA_INFO + "{"):
            continue
        labels = dict(_LABEL.findall(line[len(VLLM_LORA_INFO) : line.rfind("}") + 1]))
        value = _sample_value(line)
        if value >= newest:
            newest = value
            names = f"{labels.get('running_lora_adapters', '')},{labels.get('waiting_lora_adapters', '')}"
            adapters = frozenset(name for name in names.split(",") if name)
    return adapters


def adapter_endpoints(
    endpoints: Sequence[str],
    *,
    pod_of: Mapping[str, str],
    holders: Collection[str],
    active: Mapping[str, frozenset[str]],
    adapter: str,
    busy: Collection[str] = (),
) -> tuple[list[str], str]:
    """The pods a request for `adapter` may go to, and why: those where vLLM has it active in its batch and
    that are not `busy` (at their bound, KV cache nearly full) ("loaded": no swap from host memory), else
    every pod that holds it ("held": the load spreads), else, while the operator has not placed it on any
    ready pod yet, every pod ("unplaced": vLLM answers 404 for it until then)."""
    holding = [ep for ep in endpoints if pod_of.get(ep) in holders]
    if not holding:
        return list(endpoints), "unplaced"
    loaded = [ep for ep in holding if adapter in active.get(ep, frozenset()) and ep not in busy]
    return (loaded, "loaded") if loaded else (holding, "held")
