"""The operator's metrics follow what the controller and the autoscaler did; the probes say why."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from llama_operator.infra.metrics import (
    METRIC_NAMES,
    Health,
    Holding,
    OperatorMetrics,
    ServiceObservation,
    serve,
    slo_bucket_bound,
)


def samples(metrics: OperatorMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, frozenset(labels.items())))


def seen(**changes: object) -> ServiceObservation:
    base: dict[str, object] = {
        "namespace": "team-a",
        "name": "chat",
        "desired_replicas": 3,
        "current_replicas": 2,
        "ready_replicas": 2,
        "min_replicas": 1,
        "max_replicas": 5,
        "ttft_seconds": 0.42,
        "slo_ttft_seconds": 1.0,
        "slo_objective": 0.99,
        "slo_objective_window_seconds": 28 * 86400.0,
        "slo_met": True,
        "no_data_seconds": 0.0,
    }
    base.update(changes)
    return ServiceObservation(**base)  # type: ignore[arg-type]


CHAT = {"namespace": "team-a", "llamaservice": "chat"}


def test_every_listed_name_is_exposed_and_nothing_else() -> None:
    metrics = OperatorMetrics(version="1.2.3")
    metrics.observe(seen(slo_tpot_seconds=0.05))
    metrics.service_state("team-a", "chat", ready=True, degraded=False)
    metrics.unknown_gpus({"NVIDIA-Future": 1})
    metrics.hold([Holding("team-a", "chat", 2, 0.526)], now=0.0)
    metrics.reconciled("success", 0.01)
    metrics.wrote("Deployment")
    metrics.api_error("Service", 422)
    metrics.plan_refused("PlanningFailed")
    metrics.scaled("team-a", "chat", current=2, replicas=3)
    metrics.prometheus_errors.inc()
    metrics.cycle_seconds.observe(0.2)
    exposed = {family.name for family in text_string_to_metric_families(metrics.exposition().decode())}
    # The parser drops _total from counter family names.
    listed = {name.removesuffix("_total") for name in METRIC_NAMES}
    # Besides its own: the process and platform collectors' (process_*, python_info), as every exporter.
    assert {n for n in exposed if not n.startswith(("process_", "python_"))} == listed
    assert {"process_resident_memory_bytes", "process_cpu_seconds", "python_info"} <= exposed


def test_the_slo_bucket_is_the_largest_vllm_bound_within_the_slo() -> None:
    assert slo_bucket_bound(1.0) == "1.0"
    assert slo_bucket_bound(0.6) == "0.5"
    assert slo_bucket_bound(2.5) == "2.5"
    assert slo_bucket_bound(0.0005) == "0.001"  # below every bound: the smallest, the strictest there is


def test_a_cycle_sets_the_service_series_and_a_changed_slo_moves_its_bucket() -> None:
    metrics = OperatorMetrics()
    metrics.observe(seen())
    assert value(metrics, "llama_operator_desired_replicas", **CHAT) == 3
    assert value(metrics, "llama_operator_ttft_observed_seconds", **CHAT) == 0.42
    assert value(metrics, "llama_operator_slo_met", **CHAT) == 1
    assert value(metrics, "llama_operator_slo_ttft_bound_info", **CHAT, bound="1.0") == 1
    # The objective (spec.autoscaling.slo.objective) as a ratio, as Prometheus conventions want (not 99).
    assert value(metrics, "llama_operator_slo_objective_ratio", **CHAT) == 0.99
    assert value(metrics, "llama_operator_slo_objective_window_seconds", **CHAT) == 28 * 86400
    assert value(metrics, "llama_operator_slo_tpot_bound_info", **CHAT, bound="0.05") is None
    metrics.observe(seen(slo_ttft_seconds=0.5, ttft_seconds=None, slo_met=None, slo_tpot_seconds=0.06))
    assert value(metrics, "llama_operator_slo_ttft_bound_info", **CHAT, bound="1.0") is None
    assert value(metrics, "llama_operator_slo_ttft_bound_info", **CHAT, bound="0.5") == 1
    assert value(metrics, "llama_operator_slo_tpot_seconds", **CHAT) == 0.06
    assert value(metrics, "llama_operator_slo_tpot_bound_info", **CHAT, bound="0.05") == 1
    metrics.observe(seen(slo_ttft_seconds=0.5, ttft_seconds=None, slo_met=None))
    assert value(metrics, "llama_operator_slo_tpot_bound_info", **CHAT, bound="0.05") is None
    assert value(metrics, "llama_operator_slo_tpot_seconds", **CHAT) is None
    # No observation: the series is absent, not a stale value.
    assert value(metrics, "llama_operator_ttft_observed_seconds", **CHAT) is None
    assert value(metrics, "llama_operator_slo_met", **CHAT) is None


def test_a_cycle_that_moves_only_the_no_data_clock_updates_it_and_a_forgotten_service_comes_back() -> None:
    metrics = OperatorMetrics()
    metrics.observe(seen(ttft_seconds=None, slo_met=None, no_data_seconds=5.0))
    metrics.observe(seen(ttft_seconds=None, slo_met=None, no_data_seconds=10.0))  # only the clock
    assert value(metrics, "llama_operator_signal_no_data_seconds", **CHAT) == 10.0
    assert value(metrics, "llama_operator_desired_replicas", **CHAT) == 3
    metrics.observe(seen(ttft_seconds=None, slo_met=None, no_data_seconds=15.0, desired_replicas=4))
    assert value(metrics, "llama_operator_desired_replicas", **CHAT) == 4
    metrics.forget([])
    assert value(metrics, "llama_operator_desired_replicas", **CHAT) is None
    # The same observation again after the series were dropped: every series is set again.
    metrics.observe(seen(ttft_seconds=None, slo_met=None, no_data_seconds=15.0, desired_replicas=4))
    assert value(metrics, "llama_operator_desired_replicas", **CHAT) == 4
    assert value(metrics, "llama_operator_signal_no_data_seconds", **CHAT) == 15.0


def test_gpu_seconds_integrate_what_is_held_and_go_with_the_service() -> None:
    metrics = OperatorMetrics()
    metrics.hold([Holding("team-a", "chat", 2, 0.526)], now=1000.0)
    assert value(metrics, "llama_operator_gpu_seconds_total", **CHAT) == 0
    metrics.hold([Holding("team-a", "chat", 2, 0.526)], now=1000.0 + 1800)
    assert value(metrics, "llama_operator_gpu_seconds_total", **CHAT) == 3600.0  # one GPU-hour
    assert value(metrics, "llama_operator_gpus", **CHAT) == 2
    assert value(metrics, "llama_operator_gpu_price_per_hour", **CHAT) == 0.526
    metrics.hold([], now=4000.0)
    assert value(metrics, "llama_operator_gpus", **CHAT) is None
    assert value(metrics, "llama_operator_gpu_seconds_total", **CHAT) is None


def test_forget_drops_the_series_of_services_no_longer_autoscaled() -> None:
    metrics = OperatorMetrics()
    metrics.observe(seen())
    metrics.observe(seen(name="code"))
    metrics.scaled("team-a", "chat", current=2, replicas=1)
    metrics.forget([("team-a", "code")])
    assert value(metrics, "llama_operator_desired_replicas", **CHAT) is None
    assert value(metrics, "llama_operator_slo_ttft_bound_info", **CHAT, bound="1.0") is None
    assert value(metrics, "llama_operator_autoscaler_decisions_total", **CHAT, direction="down") is None
    assert value(metrics, "llama_operator_desired_replicas", namespace="team-a", llamaservice="code") == 3


def test_decisions_count_changes_by_direction() -> None:
    metrics = OperatorMetrics()
    metrics.scaled("team-a", "chat", current=2, replicas=4)
    metrics.scaled("team-a", "chat", current=4, replicas=4)
    metrics.scaled("team-a", "chat", current=4, replicas=3)
    assert value(metrics, "llama_operator_autoscaler_decisions_total", **CHAT, direction="up") == 1
    assert value(metrics, "llama_operator_autoscaler_decisions_total", **CHAT, direction="down") == 1


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_liveness_fails_only_when_the_event_loop_stalls() -> None:
    clock = Clock()
    health = Health(stall_seconds=60, clock=clock)
    assert health.alive() == (True, "starting")  # start-up retrying is not a reason to be killed
    health.beat()
    clock.now += 59
    assert health.alive()[0]
    clock.now += 2
    ok, why = health.alive()
    assert not ok and "stalled for 61s" in why


def test_readiness_waits_for_the_controller_and_the_watches() -> None:
    health = Health(clock=Clock())
    assert health.ready() == (False, "starting: the controller is not running yet")
    health.controller_started = True
    assert health.ready() == (False, "starting: waiting for the watches to list every object")
    health.synced = True
    assert health.ready()[0]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_the_endpoints_over_http() -> None:
    metrics, health = OperatorMetrics(version="9.9.9"), Health()
    server = serve("127.0.0.1", 0, metrics, health)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        status, body = get(f"{base}/metrics")
        assert status == 200 and 'llama_operator_info{version="9.9.9"} 1.0' in body
        assert get(f"{base}/healthz") == (200, "starting\n")
        status, body = get(f"{base}/readyz")
        assert status == 503 and "controller is not running" in body
        health.controller_started = health.synced = True
        assert get(f"{base}/readyz")[0] == 200
        assert get(f"{base}/nope")[0] == 404
    finally:
        server.shutdown()


def test_service_states_and_unknown_gpus_come_and_go() -> None:
    metrics = OperatorMetrics()
    metrics.service_state("team-a", "chat", ready=False, degraded=True)
    assert value(metrics, "llama_operator_llamaservice_ready", **CHAT) == 0
    assert value(metrics, "llama_operator_llamaservice_degraded", **CHAT) == 1
    metrics.forget_state("team-a", "chat")
    assert value(metrics, "llama_operator_llamaservice_ready", **CHAT) is None
    metrics.service_state("team-a", "chat", ready=True, degraded=False)
    metrics.forget_states()  # a standby reports none
    assert value(metrics, "llama_operator_llamaservice_degraded", **CHAT) is None
    metrics.unknown_gpus({"NVIDIA-B300": 2, "NVIDIA-X": 1})
    assert value(metrics, "llama_operator_unknown_gpu_nodes", product="NVIDIA-B300") == 2
    metrics.unknown_gpus({"NVIDIA-X": 1})
    assert value(metrics, "llama_operator_unknown_gpu_nodes", product="NVIDIA-B300") is None


def test_the_status_as_written_sets_ready_and_degraded() -> None:
    metrics = OperatorMetrics()
    metrics.service_status(
        "team-a",
        "chat",
        {
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ReplicasNotReady"},
                {"type": "Degraded", "status": "True", "reason": "PlanningFailed"},
            ]
        },
    )
    assert value(metrics, "llama_operator_llamaservice_ready", **CHAT) == 0
    assert value(metrics, "llama_operator_llamaservice_degraded", **CHAT) == 1
    # At zero on purpose: Ready is False by design, and nothing is wrong.
    metrics.service_status(
        "team-a", "chat", {"conditions": [{"type": "Ready", "status": "False", "reason": "ScaledToZero"}]}
    )
    assert value(metrics, "llama_operator_llamaservice_ready", **CHAT) == 1
    assert value(metrics, "llama_operator_llamaservice_degraded", **CHAT) == 0
