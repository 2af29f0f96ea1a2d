"""The policy's reasons (Events, conditions, status.lastReason) cite what the user wrote: the SLO from
spec, not the internal headroom, and the knob that holds a scale-down, with its value."""

from __future__ import annotations

import itertools

from llama_operator.api.autoscaling import AutoscalerState
from llama_operator.api.spec import AutoscalingSpec, SLOSpec
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.signals import Signals
from tests.autoscale.builders import load_signals


def load(rate: float, ready: int, ttft: float = 0.3) -> Signals:
    return load_signals(rate=rate, ready=ready, ttft=ttft, window=30.0)


def spec(*, stabilization: int, interval: int) -> AutoscalingSpec:
    return AutoscalingSpec(
        min_replicas=1,
        max_replicas=8,
        slo=SLOSpec(ttft_seconds=1, percentile=95),
        scale_down_stabilization_seconds=stabilization,
        scale_down_interval_seconds=interval,
    )


def run_down(autoscaling: AutoscalingSpec, until: int) -> list[tuple[float, int, str]]:
    """A burst (scale up), then a trickle every 5 s: (time, desired, reason) at each evaluation."""
    up = decide(autoscaling, load(50.0, 1, ttft=2.0), AutoscalerState(capacity_tokens_per_second=10_000), 0.0)
    state, desired = up.state, up.desired_replicas
    timeline = []
    for now in range(5, until, 5):
        decision = decide(autoscaling, load(1.0, desired), state, float(now))
        state, desired = decision.state, decision.desired_replicas
        timeline.append((float(now), desired, decision.reason))
    return timeline


def test_sizing_cites_the_users_slo_and_names_the_headroom() -> None:
    decision = decide(
        spec(stabilization=60, interval=60),
        load(40.0, 1, ttft=2.5),
        AutoscalerState(capacity_tokens_per_second=10_000),
        1000.0,
    )
    assert "sizing for 0.50s (50% headroom under your 1s p95 TTFT SLO)" in decision.reason
    assert "TTFT <= 0.50s" not in decision.reason


def test_scale_down_holds_name_the_knob_and_its_value() -> None:
    timeline = run_down(spec(stabilization=60, interval=120), until=400)
    downs = [(t, r) for (t, r, _), (_, before, _) in zip(timeline[1:], timeline, strict=False) if r < before]
    assert len(downs) >= 2
    held_by_window = [reason for t, _, reason in timeline if t < downs[0][0] and reason.startswith("holding")]
    assert held_by_window and all(
        "were needed in the last 60s (scaleDownStabilizationSeconds)" in r for r in held_by_window
    )
    held_by_interval = [r for t, _, r in timeline if downs[0][0] < t < downs[1][0] and "last scale-down" in r]
    assert held_by_interval
    assert all(r.endswith("scaleDownIntervalSeconds is 120s") for r in held_by_interval)


def test_scale_down_interval_is_the_users_knob() -> None:
    for interval in (60, 180):
        timeline = run_down(spec(stabilization=30, interval=interval), until=600)
        downs = [t for (t, r, _), (_, before, _) in zip(timeline[1:], timeline, strict=False) if r < before]
        gaps = [later - earlier for earlier, later in itertools.pairwise(downs)]
        assert gaps, f"interval {interval}: scaled down at most once in 600s"
        assert min(gaps) >= interval
        assert min(gaps) < interval + 10  # the next step comes as soon as the interval allows
