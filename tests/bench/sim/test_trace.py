from __future__ import annotations

import io
from pathlib import Path

import pytest

from llama_bench.sim.trace import load_trace, parse_timestamp, parse_trace

CSV = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:17:05.0000000,300,20
2023-11-16 18:17:03.9799600,4808,10
2023-11-16 18:17:04.0319600,3180,8
"""


def test_seven_fractional_digits() -> None:
    assert parse_timestamp("2023-11-16 18:17:04.0319600") - parse_timestamp(
        "2023-11-16 18:17:03.9799600"
    ) == (pytest.approx(0.052))


def test_parse_sorts_and_starts_at_zero() -> None:
    trace = parse_trace(io.StringIO(CSV), "t")
    assert [r.arrival for r in trace.requests] == pytest.approx([0.0, 0.052, 1.02004])
    assert trace.requests[0].prompt_tokens == 4808
    assert trace.requests[0].output_tokens == 10


def test_rate_and_time_scaling() -> None:
    faster = parse_trace(io.StringIO(CSV), "t", rate_scale=2.0)
    slower = parse_trace(io.StringIO(CSV), "t", time_scale=3.0)
    assert faster.duration == pytest.approx(1.02004 / 2)
    assert slower.duration == pytest.approx(1.02004 * 3)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="expected columns"):
        parse_trace(io.StringIO("a,b\n1,2\n"), "t")
    with pytest.raises(ValueError, match="line 2"):
        parse_trace(io.StringIO("TIMESTAMP,ContextTokens,GeneratedTokens\nnot a time,1,2\n"), "t")
    with pytest.raises(ValueError, match="neither a file"):
        load_trace("/nonexistent/trace.csv")


def test_bundled_traces_load_from_package_data() -> None:
    code = load_trace("code")
    conversation = load_trace("conversation")
    assert len(code.requests) == 8819
    assert len(conversation.requests) == 19366
    assert 3300 < code.duration < 3700


def test_any_csv_file_works(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(CSV)
    assert len(load_trace(str(path)).requests) == 3
