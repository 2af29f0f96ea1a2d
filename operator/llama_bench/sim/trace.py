"""Request traces in the Azure LLM inference format: `TIMESTAMP,ContextTokens,GeneratedTokens`.

Any CSV in that format can be replayed; the two Azure 2023 traces ship as package data under the
names `code` and `conversation`."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path

BLOCK_TOKENS = 16  # vLLM's default KV block size: the unit of its prefix cache

BUNDLED_TRACES: dict[str, str] = {
    "code": "AzureLLMInferenceTrace_code_2023.csv",
    "conversation": "AzureLLMInferenceTrace_conv_2023.csv",
}


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request: arrival in seconds from the trace start, prompt and output lengths in tokens, and the
    identity of its prompt's whole KV blocks (`BLOCK_TOKENS` tokens each), one hash per block, each naming
    the prompt up to that block's end (as vLLM's chained block hashes do): two requests share a cached block
    exactly when they share the hash. Empty: the trace says nothing of prefixes, and no replica's prefix
    cache is used for it (the Azure traces)."""

    arrival: float
    prompt_tokens: int
    output_tokens: int
    prefix_blocks: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    requests: tuple[TraceRequest, ...]

    @property
    def duration(self) -> float:
        return self.requests[-1].arrival if self.requests else 0.0


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch of `2023-11-16 18:17:03.9799600` (any number of fractional digits)."""
    text = text.strip()
    whole, _, fraction = text.partition(".")
    base = datetime.fromisoformat(whole).timestamp()
    return base + (float(f"0.{fraction}") if fraction else 0.0)


def parse_trace(lines: Iterable[str], name: str, rate_scale: float = 1.0, time_scale: float = 1.0) -> Trace:
    """Parse CSV lines into a trace starting at 0, sorted by arrival.

    `time_scale` stretches the time axis (2.0 replays the hour in two hours, halving the rate);
    `rate_scale` multiplies the request rate by compressing arrivals (2.0 = twice the requests per
    second, so the trace lasts half as long): arrival = t * time_scale / rate_scale."""
    if rate_scale <= 0 or time_scale <= 0:
        raise ValueError("rate_scale and time_scale must be positive")
    reader = csv.DictReader(lines)
    expected = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
    if reader.fieldnames is None or not expected <= {f.strip() for f in reader.fieldnames}:
        raise ValueError(f"{name}: expected columns {', '.join(sorted(expected))}, got {reader.fieldnames}")
    rows: list[tuple[float, int, int]] = []
    for number, row in enumerate(reader, start=2):
        try:
            rows.append(
                (
                    parse_timestamp(row["TIMESTAMP"]),
                    max(1, int(row["ContextTokens"])),
                    max(1, int(row["GeneratedTokens"])),
                )
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{name}: line {number}: {error}") from error
    if not rows:
        raise ValueError(f"{name}: no requests")
    rows.sort()
    start = rows[0][0]
    factor = time_scale / rate_scale
    return Trace(
        name=name,
        requests=tuple(TraceRequest((t - start) * factor, p, g) for t, p, g in rows),
    )


def load_trace(source: str, rate_scale: float = 1.0, time_scale: float = 1.0) -> Trace:
    """A bundled trace by name (`code`, `conversation`) or a CSV file path."""
    if source in BUNDLED_TRACES:
        resource = resources.files("llama_bench").joinpath("data", "traces", BUNDLED_TRACES[source])
        text = resource.read_text(encoding="utf-8")
        return parse_trace(io.StringIO(text), source, rate_scale, time_scale)
    path = Path(source)
    if not path.is_file():
        raise ValueError(f"trace {source!r} is neither a file nor one of {', '.join(BUNDLED_TRACES)}")
    with path.open(encoding="utf-8", newline="") as handle:
        return parse_trace(handle, path.stem, rate_scale, time_scale)
