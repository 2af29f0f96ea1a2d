"""Mooncake's public traces (kvcache-ai/Mooncake, FAST'25, Apache-2.0): JSON lines of `timestamp` (ms),
`input_length`, `output_length` and `hash_ids`, one id per 512-token block of the prompt, remapped so
that two requests share an id exactly when they share the prompt up to that block's end.

The simulator's blocks are vLLM's 16 tokens: each Mooncake block stands for 32 of them, hashed from its id
and their position in it (so sharing stays prefix sharing). A 2,000-request head of the conversation trace
ships as package data (`mooncake-conversation`, see data/traces/README.md)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from llama_bench.sim.trace import BLOCK_TOKENS, Trace, TraceRequest

MOONCAKE_BLOCK_TOKENS = 512
_SUBBLOCKS = MOONCAKE_BLOCK_TOKENS // BLOCK_TOKENS
BUNDLED_MOONCAKE: dict[str, str] = {
    "mooncake-conversation": "mooncake_conversation_trace_head2000.jsonl",
}


def parse_mooncake(lines: Iterable[str], name: str) -> Trace:
    """A trace from Mooncake JSON lines, starting at 0 and sorted by arrival."""
    requests = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompt = max(1, int(row["input_length"]))
            output = max(1, int(row["output_length"]))
            ids = [int(h) for h in row["hash_ids"]]
            arrival = float(row["timestamp"]) / 1000.0
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{name}: line {number}: {error}") from error
        whole = min(prompt // BLOCK_TOKENS, len(ids) * _SUBBLOCKS)
        blocks = tuple(hash((ids[i // _SUBBLOCKS], i % _SUBBLOCKS)) for i in range(whole))
        requests.append(TraceRequest(arrival, prompt, output, blocks))
    if not requests:
        raise ValueError(f"{name}: no requests")
    requests.sort(key=lambda r: r.arrival)
    start = requests[0].arrival
    return Trace(
        name,
        tuple(
            TraceRequest(r.arrival - start, r.prompt_tokens, r.output_tokens, r.prefix_blocks)
            for r in requests
        ),
    )


def load_mooncake(source: str) -> Trace:
    """A bundled Mooncake trace by name, or a JSON-lines file in Mooncake's format."""
    if source in BUNDLED_MOONCAKE:
        resource = resources.files("llama_bench").joinpath("data", "traces", BUNDLED_MOONCAKE[source])
        return parse_mooncake(io.StringIO(resource.read_text(encoding="utf-8")), source)
    path = Path(source)
    if not path.is_file():
        raise ValueError(f"trace {source!r} is neither a file nor one of {', '.join(BUNDLED_MOONCAKE)}")
    with path.open(encoding="utf-8") as handle:
        return parse_mooncake(handle, path.stem)
