"""Measured profiles: the fit recovers the step-time model it was generated from, the loader refuses bad
files naming the field, and the simulator's replica, `simulate --profile` and the replay comparison use
the measured numbers."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from llama_bench.cli import main
from llama_bench.sim.agreement import (
    Latencies,
    LevelComparison,
    at_rate,
    capacity_rps,
    comparison_table,
    simulated_latencies,
    trace_slice,
)
from llama_bench.sim.profile import (
    PROFILE_FORMAT,
    DecodePoint,
    MeasuredProfile,
    PrefillPoint,
    StepFit,
    load_profile,
    profile_from_json,
)
from llama_bench.sim.trace import Trace, TraceRequest, load_trace

TRUE = StepFit(
    base=0.004, per_sequence=0.0002, per_context_token=2e-8, per_prefill_token=3e-5, request_overhead=0.006
)
CHUNK = 512


def measured(truth: StepFit = TRUE, max_num_seqs: int = 8) -> MeasuredProfile:
    decode = tuple(DecodePoint(b, c, truth.decode_step(b, c)) for c in (40.0, 1000.0) for b in (1, 2, 4, 8))
    prefill = tuple(PrefillPoint(n, truth.ttft_alone(n, CHUNK)) for n in (16, 64, 256, 512, 1024, 2000))
    return MeasuredProfile(
        name="test-device",
        device="cpu",
        model="tiny",
        measured_at="2026-01-01T00:00:00+00:00",
        max_num_seqs=max_num_seqs,
        max_num_seqs_source="measured",
        max_num_batched_tokens=CHUNK,
        kv_capacity_tokens=100_000,
        prefill=prefill,
        decode=decode,
        price_per_hour=0.5,
    )


def test_the_fit_recovers_the_model_the_points_come_from() -> None:
    fitted = measured().fit()
    for name in ("base", "per_sequence", "per_context_token", "per_prefill_token", "request_overhead"):
        assert getattr(fitted, name) == pytest.approx(getattr(TRUE, name), rel=1e-6), name


def test_the_fit_never_goes_negative() -> None:
    # Decode time falling with batch (noise) must not give a negative per-sequence cost.
    profile = measured()
    noisy = tuple(DecodePoint(d.batch, d.context_tokens, 0.005 - 0.0001 * d.batch) for d in profile.decode)
    fitted = dataclasses.replace(profile, decode=noisy).fit()
    assert fitted.per_sequence >= 0 and fitted.per_context_token >= 0 and fitted.base > 0


def test_round_trip_and_the_replica_it_gives(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(measured().to_json()))
    loaded = load_profile(path)
    assert loaded == measured()
    replica = loaded.replica_profile()
    assert replica.max_num_seqs == 8 and replica.max_num_batched_tokens == CHUNK
    assert replica.kv_capacity_tokens == 100_000
    assert replica.price_per_hour == 0.5
    assert replica.step_seconds(4, 4000, 100) == pytest.approx(
        TRUE.base + 4 * TRUE.per_sequence + 4000 * TRUE.per_context_token + 100 * TRUE.per_prefill_token
    )
    assert replica.request_overhead_seconds == pytest.approx(TRUE.request_overhead)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"format": "v0"}, "field 'format'"),
        ({"maxNumSeqs": "8"}, "field 'maxNumSeqs' must be int"),
        ({"prefill": [{"promptTokens": 16, "ttftSeconds": 0.01}]}, "two prompt lengths"),
        ({"decode": [{"batch": 0, "contextTokens": 1, "stepSeconds": 0.01}]}, "decode[0]"),
        ({"decode": [{"batch": 1, "contextTokens": 1}]}, "missing field 'stepSeconds'"),
        ({"modelShape": "gpt-9"}, "modelShape"),
    ],
)
def test_bad_profiles_are_refused_naming_the_field(edit: dict[str, object], message: str) -> None:
    document = {**measured().to_json(), **edit}
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        profile_from_json(document)


def test_a_single_request_sees_prefill_plus_its_latency() -> None:
    replica = measured().replica_profile()
    for prompt in (100, 1500):
        latencies = simulated_latencies(replica, [TraceRequest(0.0, prompt, 1)])
        assert latencies.ttft[0] == pytest.approx(TRUE.ttft_alone(prompt, CHUNK), rel=1e-9)


def test_decode_in_the_simulator_runs_at_the_measured_step() -> None:
    replica = measured().replica_profile()
    # Four equal requests at once: after their prefill, steps at batch 4 with growing context.
    requests = [TraceRequest(0.0, 40, 101) for _ in range(4)]
    tpot = simulated_latencies(replica, requests).tpot
    expected = TRUE.decode_step(4, 40 + 50)
    assert all(t == pytest.approx(expected, rel=0.02) for t in tpot)


def test_queueing_past_capacity() -> None:
    replica = measured(max_num_seqs=2).replica_profile()
    requests = trace_slice(load_trace("conversation"), 120, 1024, 64)
    capacity = capacity_rps(replica, requests)
    low = simulated_latencies(replica, at_rate(requests, 0.3 * capacity)).figures()
    high = simulated_latencies(replica, at_rate(requests, 1.5 * capacity)).figures()
    assert high["ttft_p95"] > 5 * low["ttft_p95"]
    assert at_rate(requests, 10.0)[-1].arrival == pytest.approx(119 / 10.0)


def test_the_table_says_which_level_disagrees() -> None:
    real = {"ttft_p50": 0.1, "ttft_p95": 0.2, "tpot_p50": 0.01, "tpot_p95": 0.02}
    rows = [
        LevelComparison(0.5, 5.0, 100, real, {**real, "ttft_p95": 0.22}),
        LevelComparison(1.5, 15.0, 100, real, {**real, "tpot_p95": 0.03}),
    ]
    table = comparison_table(rows, 0.25)
    assert "| 0.50x | 5.0 | 100 |" in table and "200.0 / 220.0 ms (+10%)" in table
    assert table.splitlines()[2].endswith("| yes |")
    assert "no (worst tpot_p95)" in table
    assert Latencies((1.0, 2.0, 3.0), (0.5,)).figures()["ttft_p50"] == 2.0


def test_simulate_takes_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(measured().to_json()))
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:00:{i:02d}.0,200,20\n" for i in range(30))
    )
    assert (
        main(["simulate", "--trace", str(trace), "--policy", "static", "--profile", str(path), "--json"]) == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["ttft_p50"] == pytest.approx(TRUE.ttft_alone(200, CHUNK), rel=1e-6)
    assert math.isclose(result["cost"], result["gpu_hours"] * 0.5)
    (tmp_path / "bad.json").write_text(json.dumps({"format": PROFILE_FORMAT}))
    assert (
        main(
            ["simulate", "--trace", str(trace), "--policy", "static", "--profile", str(tmp_path / "bad.json")]
        )
        == 2
    )
    assert "missing field" in capsys.readouterr().err
    assert Trace("x", ()).duration == 0.0
