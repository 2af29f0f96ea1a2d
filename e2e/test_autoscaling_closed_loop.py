"""The autoscaling loop closed in the local cluster: the fleet simulator runs a simulated vLLM replica
behind each pod kwok runs and serves its metrics, the real Prometheus scrapes them, the operator reads
its signals from Prometheus and scales the real Deployment, whose new pods join the fleet.

One LlamaService on 1g.10gb slices of the MIG node (7 slices: capacity is never the limit), min 1,
max 3, TTFT SLO 1 s at p95, stabilization 30 s; kwok makes each new pod Ready 5 s after it runs (the
cold start). The story, in one test because each step starts from the state the previous one left:

1. load steps up (0.5 -> 17 req/s of 1000-token prompts: ~2.4x what a slice serves) -> replicas rise
   within a bound derived from the scrape interval and two evaluation intervals;
2. load steps down -> replicas hold for the whole stabilization window (stretched, since 1 -> 3 at
   once is a burst to the policy, as the CRD documents);
3. Prometheus is stopped just as that window runs out, before the scale-down the policy has queued
   (its recorded recommendations say when it is due) -> no scale-down through the outage, although it
   came due during it; ScalingActive=False reason NoMetrics and a NoMetrics Event;
4. Prometheus is restarted -> ScalingActive=True, MetricsRestored, and the due scale-down happens;
5. load steps up again -> replicas rise again.

spec.autoscaling.scaleDownIntervalSeconds (default 300 s between two scale-downs) allows one scale-down
in a test of a few minutes; steps 2-4 are built around that single one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from fleet import FleetProcess, Kube, Prometheus, closed_loop_operator, running_fleet
from llama_bench.fleetsim.load import LoadSpec
from llama_operator.api.autoscaling import AutoscalerState
from llama_operator.api.settings import Settings
from llama_operator.autoscale.decision import DEFAULT_TUNING
from llama_operator.reconcile.outcome import plan_llamaservice
from support import Cluster, OperatorProcess, eventually, llamaservice_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

NAME = "closed-loop"
INTERVAL = 2.0  # LLAMA_OPERATOR_AUTOSCALE_INTERVAL_SECONDS
WINDOW = 20.0  # LLAMA_OPERATOR_SIGNAL_WINDOW_SECONDS: four 5 s scrapes
STABILIZATION = 30.0  # spec.autoscaling.scaleDownStabilizationSeconds
COLD_START = "5s"  # kwok's readiness delay of each new pod
SLO_TTFT, QUEUE_TARGET, MAX_REPLICAS = 1.0, 4.0, 3
# The step 1 -> 3 rises by burst_rise or more at once: a burst, after which the policy holds replicas
# for burst_window_factor stabilization windows.
BURST = DEFAULT_TUNING.burst_rise <= MAX_REPLICAS - 1 and DEFAULT_TUNING.burst_count == 1
HOLD = STABILIZATION * (DEFAULT_TUNING.burst_window_factor if BURST else 1.0)
# Slack for what the bounds leave out: the operator's queries and patch, the Deployment controller,
# the poll granularity of this test (0.5 s), a busy 2-core machine.
SLACK = 3.0

MANIFEST = llamaservice_manifest(
    NAME,
    accelerator={"type": "a100-80gb", "mig": "1g.10gb"},
    autoscaling={
        "minReplicas": 1,
        "maxReplicas": MAX_REPLICAS,
        "scaleDownStabilizationSeconds": round(STABILIZATION),
        "slo": {"ttftSeconds": SLO_TTFT, "percentile": 95, "queueDepthPerReplica": round(QUEUE_TARGET)},
    },
)


# The simulated replica is the operator's plan for it (one hardware model): its prefill rate sizes the step.
_, _PLAN = plan_llamaservice(
    {**MANIFEST, "metadata": {"name": NAME, "namespace": "closed-loop"}}, Settings(), None
)
PREFILL_TOKENS_PER_SECOND = float(_PLAN.prefill_tokens_per_second or 0)
PROMPT_TOKENS = 1000
# LOW needs one replica. HIGH overloads one at once, needs MAX_REPLICAS under any capacity estimate the policy
# can learn (at most capacity_band[1] x the plan's, planned at max_utilization), and leaves MAX_REPLICAS 15 %
# headroom to drain the backlog the first replica built while the others started.
HIGH_RATE = 0.85 * MAX_REPLICAS * PREFILL_TOKENS_PER_SECOND / PROMPT_TOKENS
_LEARNABLE = DEFAULT_TUNING.capacity_band[1] * DEFAULT_TUNING.max_utilization * PREFILL_TOKENS_PER_SECOND
assert HIGH_RATE * PROMPT_TOKENS > (MAX_REPLICAS - 1) * _LEARNABLE, "HIGH would not need MAX_REPLICAS"
# 0.5 req/s, not 1: at 1 req/s of 1000-token prompts a 1g.10gb slice sits at the edge of the policy's
# two-replica need (a waiting share of ~1.1 % against its 1 % budget), so the first recommendation could
# be 2, and the step to 3 would then not be the burst the stabilization window below is stretched for.
LOW = LoadSpec(rate=0.5, prompt_tokens=PROMPT_TOKENS, output_tokens=32, seed=11)
HIGH = LoadSpec(rate=round(HIGH_RATE, 1), prompt_tokens=PROMPT_TOKENS, output_tokens=32, seed=12)


class Timeline:
    """What happened when, printed at the end (and on failure, in the assertion's context)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.lines: list[str] = []

    def note(self, what: str) -> float:
        t = time.monotonic() - self.start
        self.lines.append(f"{t:7.1f}s  {what}")
        print(self.lines[-1], flush=True)
        return t

    def __str__(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture(scope="module")
def fleet(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetProcess]:
    with running_fleet(cluster.info, tmp_path_factory.mktemp("fleet")) as proc:
        yield proc


@pytest.fixture(scope="module")
def autoscaling_operator(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    log_dir = tmp_path_factory.mktemp("operator")
    with closed_loop_operator(
        cluster, log_dir, interval=INTERVAL, window=WINDOW, cold_start=COLD_START
    ) as proc:
        yield proc


@pytest.fixture
def prometheus(cluster: Cluster) -> Iterator[Prometheus]:
    prom = Prometheus(cluster.info)
    assert prom.ready(), "Prometheus is not up: run e2e/cluster.sh up"
    yield prom
    if not prom.ready():  # a failure mid-outage must not leave the cluster without Prometheus
        prom.start()


@pytest.fixture
def cleanup(cluster: Cluster, autoscaling_operator: OperatorProcess, namespace: str) -> Iterator[None]:
    """Delete the LlamaService while the operator still runs: its finalizer needs the operator, and
    a namespace deleted later would otherwise hang on it."""
    yield
    cluster.kubectl(
        "delete", "llamaservice", NAME, "-n", namespace, "--wait=true", "--timeout=60s", check=False
    )


def _epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def test_replicas_follow_the_load_and_hold_without_metrics(
    cluster: Cluster,
    fleet: FleetProcess,
    autoscaling_operator: OperatorProcess,
    prometheus: Prometheus,
    namespace: str,
    cleanup: None,
) -> None:
    kube = Kube(cluster.info)
    timeline = Timeline()
    scrape = prometheus.scrape_interval
    selector = f'namespace="{namespace}", llamaservice="{NAME}"'

    def replicas() -> tuple[int | None, int]:
        return kube.replicas(namespace, NAME)

    def active() -> dict[str, Any]:
        return kube.condition(namespace, NAME, "ScalingActive")

    def context() -> str:
        return (
            f"\ntimeline:\n{timeline}\nautoscaling: {kube.autoscaling(namespace, NAME)}"
            f"\nfleet: {fleet.service(namespace, NAME)}\noperator log:\n{autoscaling_operator.tail(30)}"
        )

    def last_decision(kind: str) -> dict[str, Any]:
        """status.autoscaling.lastDecision once it records a `kind` decision: the operator scales the
        Deployment inside its handler and kopf patches the status after it returns."""

        def recorded() -> dict[str, Any] | None:
            decision: dict[str, Any] = kube.autoscaling(namespace, NAME).get("lastDecision") or {}
            return decision if str(decision.get("reason", "")).startswith(kind) else None

        return eventually(f"lastDecision '{kind}'", recorded, timeout=2 * INTERVAL + SLACK)

    def event(reason: str) -> None:
        """An Event with `reason` on the LlamaService (kopf posts them in the background)."""
        eventually(f"a {reason} Event", lambda: reason in kube.event_reasons(namespace, NAME), timeout=10)

    def breach_seen() -> str | None:
        """What the operator's own queries would show as a breach now, if anything."""
        waiting = prometheus.value(f"sum(vllm:num_requests_waiting{{{selector}}})")
        ttft = prometheus.value(
            f"histogram_quantile(0.95, sum by (le) "
            f"(rate(vllm:time_to_first_token_seconds_bucket{{{selector}}}[{WINDOW:.0f}s])))"
        )
        ready = max(1, replicas()[1])
        if waiting is not None and waiting / ready > QUEUE_TARGET:
            return f"{waiting:.0f} waiting on {ready} ready"
        if ttft is not None and not math.isnan(ttft) and ttft > SLO_TTFT:
            return f"TTFT p95 {ttft:.2f}s"
        return None

    def step_up(expected: int, bound_from_step: float) -> tuple[float, float | None]:
        """Offer HIGH; wait until spec.replicas reaches `expected`. (seconds from the step to the
        scale-up, seconds from the breach showing in Prometheus to the scale-up)."""
        before = replicas()[0] or 0
        step = time.monotonic()
        fleet.client.set_load(namespace, NAME, HIGH)
        timeline.note(f"load {LOW.rate:g} -> {HIGH.rate:g} req/s at {before} replicas")
        signal_at: float | None = None
        scaled_at: float | None = None
        while time.monotonic() - step < bound_from_step + 10:
            now = time.monotonic()
            if signal_at is None and (why := breach_seen()) is not None:
                signal_at = now
                timeline.note(f"Prometheus shows the breach: {why}")
            spec, _ = replicas()
            if spec is not None and spec > before:
                scaled_at = time.monotonic()
                timeline.note(f"Deployment scaled {before} -> {spec}")
                break
            time.sleep(0.5)
        assert scaled_at is not None, f"no scale-up within {bound_from_step + 10:.0f}s{context()}"
        eventually(
            f"spec.replicas {expected}",
            lambda: (replicas()[0] or 0) >= expected,
            timeout=INTERVAL * 3 + SLACK,
        )
        return scaled_at - step, None if signal_at is None else scaled_at - signal_at

    # 0. One replica at a low load, with the signals flowing.
    fleet.client.set_load(namespace, NAME, LOW)
    assert cluster.apply(MANIFEST, namespace).returncode == 0
    eventually("the first replica Ready", lambda: replicas()[1] >= 1, timeout=90)
    timeline.note("first replica Ready")

    def valid_metrics() -> bool:
        rate = kube.autoscaling(namespace, NAME).get("observedRequestRate") or 0.0
        return bool(active().get("status") == "True" and rate > 0.2)

    eventually("ScalingActive=True with a request rate", valid_metrics, timeout=WINDOW + 4 * scrape + 30)
    timeline.note(f"signals flowing: {kube.autoscaling(namespace, NAME).get('lastReason')}")
    # Scraped as a real vLLM pod is: vLLM's labels, plus those the relabeling adds.
    series = prometheus.query(f"vllm:num_requests_running{{{selector}}}")
    assert len(series) == 1, series
    labels = series[0]["metric"]
    assert labels["model_name"] == NAME and labels["engine"] == "0", labels
    assert labels["pod"].startswith(f"{NAME}-"), labels
    # TPOT arrives too: vLLM 0.32's inter-token histogram, one observation per token after the first.
    intervals = prometheus.value(f"sum(vllm:inter_token_latency_seconds_count{{{selector}}})")
    assert intervals is not None and intervals > 0, f"no inter-token latency series{context()}"
    assert replicas()[0] == 1, context()

    # 1. Step up. The queue is a gauge: the first scrape after the step shows it, so the Deployment
    # must grow within one scrape interval and two evaluation intervals of the step, and within two
    # evaluation intervals of Prometheus showing the breach.
    bound = scrape + 2 * INTERVAL + SLACK
    from_step, from_signal = step_up(MAX_REPLICAS, bound)
    assert from_signal is not None, f"the breach never showed in Prometheus{context()}"
    timeline.note(f"scale-up latency: {from_step:.1f}s from the step, {from_signal:.1f}s from the signal")
    assert from_step <= bound, f"scale-up took {from_step:.1f}s > {bound:.1f}s{context()}"
    assert from_signal <= 2 * INTERVAL + SLACK, f"{from_signal:.1f}s after the signal{context()}"
    decision = last_decision("scale up")
    assert decision["fromReplicas"] == 1 and decision["toReplicas"] == MAX_REPLICAS, decision
    event("Scaled")
    eventually(f"{MAX_REPLICAS} Ready", lambda: replicas()[1] == MAX_REPLICAS, timeout=30)
    timeline.note(f"{MAX_REPLICAS} replicas Ready")
    # The backlog the first replica built while the others loaded must drain before the step down,
    # or its queue would (rightly) keep the replicas.
    eventually("the backlog drained", lambda: fleet.service(namespace, NAME)["waiting"] == 0, timeout=90)
    timeline.note(f"backlog drained; fleet: {fleet.service(namespace, NAME)['ttft_p95_30s']}s TTFT p95")

    # 2. Step down: replicas hold through the stabilization window.
    fleet.client.set_load(namespace, NAME, LOW)
    down_epoch, down = time.time(), time.monotonic()
    timeline.note(f"load {HIGH.rate:g} -> {LOW.rate:g} req/s")
    while time.monotonic() - down < HOLD:
        assert replicas()[0] == MAX_REPLICAS, f"scaled down within the stabilization window{context()}"
        time.sleep(1.0)
    # Status shows the times as RFC 3339; the model reads them back as Unix seconds.
    state = AutoscalerState.model_validate(kube.autoscaling(namespace, NAME)["state"])
    lower = [r.time for r in state.recommendations if r.time >= down_epoch and r.replicas < MAX_REPLICAS]
    assert lower, f"the policy never recommended fewer replicas after the step down{context()}"
    due = lower[0] + HOLD  # the window is measured from the first lower recommendation
    timeline.note(f"held {HOLD:.0f}s; a scale-down is due {due - time.time():.1f}s from now")

    # 3. Prometheus down across the moment the scale-down comes due: nothing moves.
    prometheus.stop()
    outage = timeline.note("Prometheus stopped")
    assert replicas()[0] == MAX_REPLICAS, f"scaled down before the outage began{context()}"

    def no_metrics_condition() -> dict[str, Any] | None:
        cond = active()
        return cond if cond.get("status") == "False" and cond.get("reason") == "NoMetrics" else None

    no_metrics = eventually("ScalingActive=False NoMetrics", no_metrics_condition, timeout=2 * INTERVAL + 10)
    timeline.note(f"ScalingActive=False: {no_metrics['message']}")
    event("NoMetrics")
    hold_until = max(due + 3 * INTERVAL + SLACK, time.time() + 10)
    while time.time() < hold_until:
        assert replicas()[0] == MAX_REPLICAS, f"scaled down without metrics{context()}"
        time.sleep(1.0)
    timeline.note(
        f"held {MAX_REPLICAS} replicas {time.monotonic() - timeline.start - outage:.0f}s without metrics"
    )

    # 4. Prometheus back: metrics valid again, and the scale-down that came due happens.
    took = prometheus.start()
    timeline.note(f"Prometheus restarted by cluster.sh up in {took:.1f}s")
    eventually(
        "ScalingActive=True again",
        lambda: active().get("status") == "True",
        timeout=WINDOW + 2 * scrape + 4 * INTERVAL + SLACK,
    )
    timeline.note("ScalingActive=True")
    event("MetricsRestored")
    eventually(
        "the scale-down after the outage",
        lambda: (replicas()[0] or MAX_REPLICAS) < MAX_REPLICAS,
        timeout=2 * WINDOW + 4 * INTERVAL + SLACK,
    )
    decision = last_decision("scale down")
    timeline.note(
        f"scaled down: {decision['fromReplicas']} -> {decision['toReplicas']}: {decision['reason']}"
    )
    assert _epoch(decision["time"]) >= due - 1, f"scale-down before it was due{context()}"

    # 5. Scaling up works again.
    current = replicas()[0] or 0
    from_step, _ = step_up(MAX_REPLICAS, WINDOW + scrape + 2 * INTERVAL + SLACK)
    timeline.note(f"second scale-up {current} -> {MAX_REPLICAS}: {from_step:.1f}s from the step")
    fleet.client.clear_load(namespace, NAME)
    kube.close()
    print(f"\ntimeline:\n{timeline}")
