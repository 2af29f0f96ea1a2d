"""From a policy decision to status, conditions and Events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from llama_operator.api.spec import AutoscalingSpec, SLOSpec
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.signals import Signals, SignalStatus
from llama_operator.infra.status_writes import (
    StatusWrite,
    last_evaluation_time,
    pick_refreshes,
    refresh_budget,
    status_write,
)
from llama_operator.reconcile.autoscaling import autoscale_outcome, autoscaler_state, condition_transitions

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SPEC = AutoscalingSpec(min_replicas=1, max_replicas=4)


def signals(
    status: SignalStatus, *, waiting: float = 0, ttft: float | None = None, rate: float = 0
) -> Signals:
    return Signals(
        status=status,
        ttft_percentile_seconds=ttft,
        queue_waiting_total=waiting,
        running_total=waiting,
        kv_cache_usage=0.2,
        request_rate=rate,
        prompt_token_rate=rate * 1000,
        generation_token_rate=rate * 100,
        ready_replicas=2,
        starting_replicas=0,
        current_replicas=2,
    )


def conditions(patch: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in patch["conditions"]}


def test_first_evaluation_is_seeded_from_the_plan() -> None:
    state = autoscaler_state({"plan": {"accelerator": "t4", "prefillTokensPerSecond": 10500}})
    assert state.capacity_prior_tokens_per_second == 10500
    assert state.capacity_tokens_per_second == 10500
    learned = state.model_copy(update={"capacity_tokens_per_second": 8000.0})
    again = autoscaler_state(
        {
            "plan": {"accelerator": "t4", "prefillTokensPerSecond": 10500},
            "autoscaling": {"state": learned.to_wire()},
        }
    )
    assert again.capacity_tokens_per_second == 8000.0  # what was learned survives a restart


def test_a_plan_written_by_a_newer_operator_still_seeds() -> None:
    newer = {"accelerator": "t4", "prefillTokensPerSecond": 10500, "fieldOfANewerVersion": {"x": 1}}
    assert autoscaler_state({"plan": newer}).capacity_prior_tokens_per_second == 10500
    unreadable = {"accelerator": "t4", "prefillTokensPerSecond": "fast"}
    assert autoscaler_state({"plan": unreadable}).capacity_prior_tokens_per_second is None


def test_no_data_holds_sets_condition_and_warns_once() -> None:
    sig = signals(SignalStatus.NO_DATA)
    decision = decide(SPEC, sig, autoscaler_state(None), 1000.0)
    out = autoscale_outcome(
        None,
        decision,
        sig,
        slo=SLOSpec(ttft_seconds=0.5),
        prometheus_error="connection refused",
        generation=1,
        now=NOW,
    )
    assert out.replicas is None
    cond = conditions(out.status_patch)["ScalingActive"]
    assert cond["status"] == "False"
    assert "connection refused" in cond["message"]
    assert [e.reason for e in out.events] == ["NoMetrics"]
    assert out.events[0].warning
    again = autoscale_outcome(
        out.status_patch,
        decision,
        sig,
        slo=SLOSpec(ttft_seconds=0.5),
        prometheus_error=None,
        generation=1,
        now=NOW,
    )
    assert again.events == []  # no Event storm while the outage lasts


def test_scale_up_records_decision_and_event() -> None:
    sig = signals(SignalStatus.OK, waiting=40, ttft=3.0, rate=20)
    decision = decide(
        SPEC, sig, autoscaler_state({"plan": {"accelerator": "t4", "prefillTokensPerSecond": 10500}}), 1000.0
    )
    out = autoscale_outcome(
        None, decision, sig, slo=SLOSpec(ttft_seconds=0.5), prometheus_error=None, generation=1, now=NOW
    )
    assert out.replicas is not None and out.replicas > 2
    auto = out.status_patch["autoscaling"]
    assert auto["lastDecision"]["fromReplicas"] == 2
    assert auto["lastDecision"]["toReplicas"] == out.replicas
    assert auto["observedTtftSeconds"] == 3.0
    assert auto["observedQueuePerReplica"] == 20
    assert conditions(out.status_patch)["SLOMet"]["status"] == "False"
    assert any(e.reason == "Scaled" for e in out.events)


def _status(
    *, ttft: float | None, reason: str = "ValidMetrics", when: str = "2026-12-02T12:00:00Z"
) -> dict[str, Any]:
    return {
        "conditions": [
            {"type": "ScalingActive", "status": "True", "reason": reason, "message": f"ttft {ttft}"}
        ],
        "autoscaling": {
            "desiredReplicas": 2,
            "observedTtftSeconds": ttft,
            "lastEvaluationTime": when,
            "state": {"recommendations": [{"time": 1.0, "replicas": 2}], "noDataSince": None},
        },
    }


def test_status_writes_only_on_change_and_observations_at_a_bounded_rate() -> None:
    base = datetime(2026, 12, 2, 12, 0, 10, tzinfo=UTC)
    current = _status(ttft=0.4)
    same = _status(ttft=0.4, when="2026-12-02T12:00:10Z")
    assert status_write(current, same, now=base, refresh_seconds=60) is None  # only the clock moved
    moved = _status(ttft=0.45, when="2026-12-02T12:00:10Z")
    assert status_write(current, moved, now=base, refresh_seconds=60) is None  # an observation, 10 s later
    later = base.replace(minute=1, second=5)
    assert status_write(current, moved, now=later, refresh_seconds=60) is StatusWrite.REFRESH  # after 60 s
    transition = _status(ttft=0.4, reason="NoMetrics")
    assert status_write(current, transition, now=base, refresh_seconds=60) is StatusWrite.NEWS  # a condition
    decided = _status(ttft=0.4)
    decided["autoscaling"]["desiredReplicas"] = 3
    assert status_write(current, decided, now=base, refresh_seconds=60) is StatusWrite.NEWS  # a decision
    state = _status(ttft=0.4)
    state["autoscaling"]["state"]["noDataSince"] = 5.0
    assert status_write(current, state, now=base, refresh_seconds=60) is StatusWrite.NEWS  # policy's memory
    assert status_write(None, same, now=base, refresh_seconds=60) is StatusWrite.NEWS  # first evaluation
    # The error budget's counts move with every request: an observation, refreshed at the bounded rate.
    counted = _status(ttft=0.4, when="2026-12-02T12:00:10Z")
    counted["autoscaling"]["state"]["errorBudget"] = {"requestsLong": 12.0, "sloShare": 0.5, "updated": 9.0}
    assert status_write(current, counted, now=base, refresh_seconds=60) is None
    assert status_write(current, counted, now=later, refresh_seconds=60) is StatusWrite.REFRESH
    # Idle: only the reason's clock moves ("idle for 35s"): never a write.
    idle = _status(ttft=None)
    idle_later = _status(ttft=None, when="2026-12-02T12:05:00Z")
    idle_later["autoscaling"]["lastReason"] = "steady at 1: idle for 300s"
    assert status_write(idle, idle_later, now=base.replace(minute=5), refresh_seconds=60) is None


def test_the_fleet_refresh_budget_serves_the_oldest_observations_first() -> None:
    def at(minute: int) -> datetime:
        return datetime(2026, 12, 2, 12, minute, tzinfo=UTC)

    due = [(at(5), "e"), (at(1), "b"), (None, "never"), (at(3), "d"), (at(0), "a"), (at(2), "c")]
    assert pick_refreshes(due, 3) == ["never", "a", "b"]
    assert pick_refreshes(due, 10) == ["never", "a", "b", "c", "d", "e"]
    assert pick_refreshes(due, 0) == []
    assert refresh_budget(refreshes_per_second=5, cycle_seconds=5) == 25
    assert refresh_budget(refreshes_per_second=0.01, cycle_seconds=5) == 1  # every service, eventually
    assert last_evaluation_time({"autoscaling": {"lastEvaluationTime": "2026-12-02T12:05:00Z"}}) == at(5)
    assert last_evaluation_time({"autoscaling": {"lastEvaluationTime": "yesterday"}}) is None
    assert last_evaluation_time(None) is None


def test_condition_transitions_name_the_move_and_the_reason() -> None:
    before = _status(ttft=0.4)
    after = _status(ttft=None, reason="NoMetrics")
    after["conditions"][0]["status"] = "False"
    assert condition_transitions(before, after) == ["ScalingActive True -> False (NoMetrics): ttft None"]
    assert condition_transitions(before, before) == []
    assert condition_transitions(None, before) == ["ScalingActive unset -> True (ValidMetrics): ttft 0.4"]


PLAN_STEPS = {
    "accelerator": "t4",
    "prefillTokensPerSecond": 6600,
    "decodeStepSeconds": 0.0143,
    "decodeSecondsPerContextToken": 1.365e-7,
    "prefillSecondsPerToken": 7.5e-5,
    "maxNumBatchedTokens": 296,
    "maxNumSeqs": 40,
    "kvCacheTokens": 324464,
}


def test_state_written_by_a_newer_operator_is_read_without_its_unknown_fields() -> None:
    """After a rollback the status holds fields this version lacks: the rest of the state still counts
    (the stabilization window's recommendations, the learned capacity), and autoscaling goes on."""
    stored = {
        "capacityTokensPerSecond": 7000.0,
        "recommendations": [{"time": "2026-12-04T10:00:00Z", "replicas": 3}],
        "someFieldFromTheFuture": {"x": 1},
    }
    state = autoscaler_state({"autoscaling": {"state": stored}})
    assert state.capacity_tokens_per_second == 7000.0
    assert [r.replicas for r in state.recommendations] == [3]


def test_the_plans_step_model_seeds_the_state_and_follows_a_new_plan() -> None:
    state = autoscaler_state({"plan": PLAN_STEPS})
    # The budget counts the batch's decode tokens: the chunk beside a full batch is the rest.
    assert (state.decode_step_seconds, state.chunk_tokens, state.max_num_seqs) == (0.0143, 256, 40)
    assert state.kv_cache_tokens == 324464
    assert state.decode_seconds_per_context_token == 1.365e-7 and state.prefill_seconds_per_token == 7.5e-5
    # Remembered between status writes, yet a new plan (another accelerator) replaces the step model.
    replanned = autoscaler_state({"plan": {**PLAN_STEPS, "decodeStepSeconds": 0.0072}}, state)
    assert replanned.decode_step_seconds == 0.0072
    assert autoscaler_state({"plan": {}}, state).decode_step_seconds is None


def tpot_signals(*, ttft: float, tpot: float | None) -> Signals:
    return Signals(
        status=SignalStatus.OK,
        ttft_percentile_seconds=ttft,
        queue_waiting_total=0,
        running_total=2,
        kv_cache_usage=0.2,
        request_rate=1.0,
        prompt_token_rate=500,
        generation_token_rate=100,
        ready_replicas=2,
        starting_replicas=0,
        current_replicas=2,
        tpot_percentile_seconds=tpot,
    )


def slo_met_outcome(
    tpot_objective: float, ttft: float, tpot: float | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The SLOMet condition and the autoscaling status of one decision, TTFT objective 0.5 s."""
    spec = AutoscalingSpec.model_validate({"slo": {"ttftSeconds": 0.5, "tpotSeconds": tpot_objective}})
    sig = tpot_signals(ttft=ttft, tpot=tpot)
    decision = decide(spec, sig, autoscaler_state({"plan": PLAN_STEPS}), 1000.0)
    out = autoscale_outcome(
        None,
        decision,
        sig,
        slo=SLOSpec(ttft_seconds=0.5, tpot_seconds=tpot_objective),
        prometheus_error=None,
        generation=1,
        now=NOW,
    )
    return conditions(out.status_patch)["SLOMet"], out.status_patch["autoscaling"]


def test_slo_met_names_the_missed_objective_with_observed_and_target() -> None:
    met, auto = slo_met_outcome(0.05, 0.3, 0.031)
    assert met["status"] == "True" and met["message"] == "TTFT 0.300s <= 0.5s, TPOT 0.031s <= 0.05s"
    assert auto["observedTpotSeconds"] == 0.031
    tpot_missed, _ = slo_met_outcome(0.05, 0.3, 0.061)
    assert tpot_missed["status"] == "False" and tpot_missed["reason"] == "SLOBreached"
    assert tpot_missed["message"] == "TPOT above the SLO: TTFT 0.300s <= 0.5s, TPOT 0.061s > 0.05s"
    both, _ = slo_met_outcome(0.05, 0.9, 0.061)
    assert both["message"].startswith("TTFT and TPOT above the SLO: TTFT 0.900s > 0.5s")
    ttft_missed, _ = slo_met_outcome(0.05, 0.9, None)
    assert ttft_missed["message"] == "TTFT above the SLO: TTFT 0.900s > 0.5s, TPOT not observed (SLO 0.05s)"


def test_a_tpot_objective_below_the_histograms_smallest_bound_is_judged_at_it() -> None:
    # Every token within 10 ms reads as 9.5 ms at p95: judged against 6 ms, SLOMet was False for ever.
    met, _ = slo_met_outcome(0.006, 0.3, 0.0095)
    assert met["status"] == "True", met
    assert (
        met["message"]
        == "TTFT 0.300s <= 0.5s, TPOT 0.009s <= 0.006s (judged at 0.01s, the histogram's smallest bound)"
    )
    missed, _ = slo_met_outcome(0.006, 0.3, 0.012)
    assert missed["status"] == "False" and "TPOT 0.012s > 0.006s (judged at 0.01s" in missed["message"]
