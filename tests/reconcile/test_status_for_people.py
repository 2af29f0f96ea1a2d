"""What `kubectl get` and `kubectl describe` show a person: latencies with units, the SLO as written in
spec, times as RFC 3339 (the policy's state too), and an upgrade from a status that held Unix seconds."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from llama_operator.api.autoscaling import AutoscalerState
from llama_operator.api.crd import PRINTER_COLUMNS
from llama_operator.api.spec import AutoscalingSpec, SLOSpec
from llama_operator.api.times import micro_rfc3339
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.signals import Signals, SignalStatus
from llama_operator.infra.status_writes import StatusWrite, status_write
from llama_operator.reconcile.autoscaling import autoscale_outcome, autoscaler_state, human_seconds, slo_words

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SPEC = AutoscalingSpec(min_replicas=1, max_replicas=4, slo=SLOSpec(ttft_seconds=1, tpot_seconds=0.05))


def observed(*, ttft: float | None = 0.4404761904761905, tpot: float | None = 0.0614) -> Signals:
    return Signals(
        status=SignalStatus.OK,
        ttft_percentile_seconds=ttft,
        tpot_percentile_seconds=tpot,
        queue_waiting_total=0,
        running_total=2,
        kv_cache_usage=0.2,
        request_rate=2,
        prompt_token_rate=2000,
        generation_token_rate=200,
        ready_replicas=2,
        starting_replicas=0,
        current_replicas=2,
    )


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.4404761904761905, "440ms"),
        (0.0614, "61.4ms"),
        (0.00423, "4.23ms"),
        (0.9996, "1s"),
        (1.0, "1s"),
        (1.25, "1.25s"),
        (12.34, "12.3s"),
        (1234.5, "1234s"),
        (0.0, "0ms"),
    ],
)
def test_latencies_have_units_and_three_digits(seconds: float, shown: str) -> None:
    assert human_seconds(seconds) == shown


def test_the_slo_reads_as_written_in_spec() -> None:
    assert slo_words(95, 1, None) == "p95 TTFT <= 1s"
    assert slo_words(99, 0.5, 0.05) == "p99 TTFT <= 500ms, TPOT <= 50ms"


def test_status_carries_the_columns_strings_next_to_the_numbers() -> None:
    sig = observed()
    decision = decide(SPEC, sig, autoscaler_state({"plan": {"prefillTokensPerSecond": 10500}}), 1000.0)
    out = autoscale_outcome(
        None,
        decision,
        sig,
        slo=SLOSpec(ttft_seconds=1, tpot_seconds=0.05, percentile=95),
        prometheus_error=None,
        generation=1,
        now=NOW,
    )
    auto = out.status_patch["autoscaling"]
    assert (auto["ttft"], auto["observedTtftSeconds"]) == ("440ms", 0.4404761904761905)
    assert (auto["tpot"], auto["observedTpotSeconds"]) == ("61.4ms", 0.0614)
    assert auto["slo"] == "p95 TTFT <= 1s, TPOT <= 50ms"
    columns = {c["name"]: c for c in PRINTER_COLUMNS}
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("SLO", "slo")):
        assert columns[name]["jsonPath"] == f".status.autoscaling.{key}"
        assert columns[name]["type"] == "string"


def test_policy_times_are_rfc3339_in_status_and_read_back_exactly() -> None:
    state = AutoscalerState.model_validate(
        {"lastScaleDownTime": 1796232304.4577453, "recommendations": [{"time": 1796232000.25, "replicas": 3}]}
    )
    wire = state.to_wire()
    assert wire["lastScaleDownTime"] == "2026-12-02T17:25:04.457745Z"
    assert wire["recommendations"] == [{"time": "2026-12-02T17:20:00.250000Z", "replicas": 3}]
    again = AutoscalerState.model_validate(wire)
    assert again.to_wire() == wire  # a round trip through status changes nothing
    assert again.last_scale_down_time == pytest.approx(1796232304.4577453, abs=1e-6)
    assert micro_rfc3339(0) == "1970-01-01T00:00:00.000000Z"
    with pytest.raises(ValueError, match="not an RFC 3339 time"):
        AutoscalerState.model_validate({"noDataSince": "yesterday"})


def test_an_upgrade_from_unix_seconds_rewrites_the_state_once() -> None:
    """A status written by a version that kept Unix seconds: read as it is, rewritten as RFC 3339 at the
    next evaluation (with cleared fields as null, so the merge patch removes the old numbers), and then
    not rewritten again for the same decision."""
    old = {
        "plan": {"prefillTokensPerSecond": 10500},
        "autoscaling": {
            "desiredReplicas": 2,
            "slo": "p95 TTFT <= 1s, TPOT <= 50ms",
            "state": {
                "recommendations": [{"time": 999.0, "replicas": 2}],
                "lastScaleDownTime": 900.0,
                "noDataSince": 950.0,
                "capacityTokensPerSecond": 10500.0,
            },
        },
    }
    state = autoscaler_state(old)
    assert state.last_scale_down_time == 900.0 and state.no_data_since == 950.0
    sig = observed()
    decision = decide(SPEC, sig, state, 1000.0)
    out = autoscale_outcome(
        old,
        decision,
        sig,
        slo=SLOSpec(ttft_seconds=1, tpot_seconds=0.05),
        prometheus_error=None,
        generation=1,
        now=NOW,
    )
    written = out.status_patch["autoscaling"]["state"]
    assert written["lastScaleDownTime"] == "1970-01-01T00:15:00.000000Z"
    assert written["noDataSince"] is None  # metrics are back: the old number is removed
    assert status_write(old, out.status_patch, now=NOW, refresh_seconds=60) is StatusWrite.NEWS

    stored = {**old, **out.status_patch}
    stored["autoscaling"] = {
        **out.status_patch["autoscaling"],
        "state": {k: v for k, v in written.items() if v is not None},  # as the API server keeps it
    }
    again = autoscale_outcome(
        stored,
        decide(SPEC, sig, autoscaler_state(stored), 1000.0),
        sig,
        slo=SLOSpec(ttft_seconds=1, tpot_seconds=0.05),
        prometheus_error=None,
        generation=1,
        now=NOW,
    )
    assert status_write(stored, again.status_patch, now=NOW, refresh_seconds=60) is None
