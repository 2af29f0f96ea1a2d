"""Run by the vLLM venv's python (it has prometheus_client, the library vLLM exports with): read the
metric values as JSON on stdin, register them as vLLM's PrometheusStatLogger does (names, HELP, label
names, buckets), and print prometheus_client's text exposition, `_created` series left out (their
values are timestamps). Also parse the text given in the JSON with prometheus_client's parser and
print what it found, so the caller checks ours is read back the same."""

import json
import sys
from typing import Any

# Only importable in the vLLM venv, which runs this file; the project's venv type-checks it blind.
from prometheus_client import (  # type: ignore[import-not-found,unused-ignore]
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.parser import (  # type: ignore[import-not-found,unused-ignore]
    text_string_to_metric_families,
)

data: dict[str, Any] = json.load(sys.stdin)
labels = {"model_name": data["model_name"], "engine": "0"}
names = ["model_name", "engine"]
registry = CollectorRegistry()


def gauge(name: str, doc: str, value: float) -> None:
    Gauge(name, doc, names, registry=registry).labels(**labels).set(value)


def counter(name: str, doc: str, value: float, extra: dict[str, str] | None = None) -> None:
    c = Counter(name, doc, names + list(extra or {}), registry=registry)
    c.labels(**labels, **(extra or {})).inc(value)


gauge("vllm:num_requests_running", "Number of requests in model execution batches.", data["running"])
gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", data["waiting"])
gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", data["kv"])
counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0)
counter("vllm:prompt_tokens", "Number of prefill tokens processed.", data["prompt_tokens"])
counter("vllm:generation_tokens", "Number of generation tokens processed.", data["generation_tokens"])
success = Counter(
    "vllm:request_success",
    "Count of successfully processed requests.",
    [*names, "finished_reason"],
    registry=registry,
)
for reason in ("stop", "length", "abort", "error", "repetition"):
    success.labels(**labels, finished_reason=reason).inc(data["successes"] if reason == "stop" else 0)
for name, doc, key in (
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "e2e"),
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "prompt"),
):
    h = Histogram(name, doc, names, buckets=data[key]["bounds"], registry=registry)
    for value in data[key]["observations"]:
        h.labels(**labels).observe(value)

text = generate_latest(registry).decode()
kept, skip = [], False
for line in text.splitlines():
    if line.startswith("# HELP "):
        skip = line.split()[2].endswith("_created")
    if not skip and "_created{" not in line:
        kept.append(line)
parsed = [
    {"name": f.name, "type": f.type, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
    for f in text_string_to_metric_families(data["ours"])
]
json.dump({"text": "\n".join(kept) + "\n", "parsed": parsed}, sys.stdout)
