"""`promtool check metrics` is clean on the operator's /metrics and the activator's, with every series
present (observations, holdings, an unknown GPU), and both expose the process_* metrics.

promtool is built by the set-up step (`bash e2e/cluster.sh test-tools`); without it these tests fail."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

from llama_operator.infra import metrics as m
from llama_operator.router.metrics import RouterMetrics
from support import Cluster, OperatorProcess, eventually, free_port, llamaservice_manifest


def check(promtool: Path, exposition: bytes) -> str:
    proc = subprocess.run(
        [str(promtool), "check", "metrics"], input=exposition, capture_output=True, timeout=60, check=False
    )
    problems = (proc.stdout + proc.stderr).decode()
    assert proc.returncode == 0 and not problems.strip(), problems
    return problems


def busy_operator_metrics() -> m.OperatorMetrics:
    metrics = m.OperatorMetrics(version="1.2.3")
    metrics.reconciled("ok", 0.02)
    metrics.wrote("Deployment")
    metrics.api_error("Deployment", 409)
    metrics.plan_refused("NoFittingAccelerator")
    metrics.observe(
        m.ServiceObservation(
            namespace="team-a",
            name="chat",
            desired_replicas=2,
            current_replicas=1,
            ready_replicas=1,
            min_replicas=1,
            max_replicas=4,
            ttft_seconds=0.4,
            slo_ttft_seconds=0.5,
            slo_objective=0.99,
            slo_objective_window_seconds=28 * 86400.0,
            slo_met=True,
            no_data_seconds=0.0,
            slo_tpot_seconds=0.05,
            activation_seconds=12.0,
        )
    )
    metrics.scaled("team-a", "chat", current=1, replicas=2)
    metrics.hold([m.Holding("team-a", "chat", gpus=2, price_per_gpu_hour=1.0)], now=0.0)
    metrics.hold([m.Holding("team-a", "chat", gpus=2, price_per_gpu_hour=1.0)], now=60.0)
    metrics.service_state("team-a", "chat", ready=False, degraded=True)
    metrics.unknown_gpus({"NVIDIA-Future-GPU": 2})
    metrics.cycle_seconds.observe(0.1)
    metrics.prometheus_errors.inc()
    return metrics


def test_the_operators_metrics_endpoint_passes_promtool(promtool: Path) -> None:
    metrics = busy_operator_metrics()
    port = free_port()
    server = m.serve("127.0.0.1", port, metrics, m.Health())
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read()
    finally:
        server.shutdown()
    text = body.decode()
    for name in ("llama_operator_gpu_seconds_total", "llama_operator_slo_objective_ratio"):
        assert name in text
    assert "process_resident_memory_bytes" in text and "process_cpu_seconds_total" in text
    assert "_bucket{" not in text.replace("llama_operator_reconcile_duration_seconds_bucket", "").replace(
        "llama_operator_autoscaler_cycle_duration_seconds_bucket", ""
    ), "only histograms have _bucket series"
    check(promtool, body)


def test_the_activators_metrics_pass_promtool(promtool: Path) -> None:
    router = RouterMetrics()
    router.held.labels(namespace="team-a", llamaservice="chat").set(1)
    router.requests.labels(outcome="held_forwarded").inc()
    router.activation.labels(namespace="team-a", llamaservice="chat").observe(12.0)
    router.hold.observe(3.0)
    body = router_exposition(router)
    assert b"process_resident_memory_bytes" in body
    check(promtool, body)


def router_exposition(router: RouterMetrics) -> bytes:
    from prometheus_client import generate_latest  # noqa: PLC0415

    return generate_latest(router.registry)


def test_the_running_operators_metrics_pass_promtool(
    promtool: Path, cluster: Cluster, operator: OperatorProcess, namespace: str
) -> None:
    """The operator as it runs (against the local cluster, reconciling a LlamaService), not a registry."""
    assert cluster.apply(llamaservice_manifest("lint"), namespace).returncode == 0

    def exposition() -> bytes | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10) as r:
                body: bytes = r.read()
        except OSError:
            return None
        ours = (
            f'llamaservice="lint",namespace="{namespace}"',
            f'namespace="{namespace}",llamaservice="lint"',
        )
        return body if any(labels.encode() in body for labels in ours) else None

    body = eventually("the LlamaService's series on /metrics", exposition, 90)
    assert b"process_resident_memory_bytes" in body and b"llama_operator_llamaservice_ready" in body
    check(promtool, body)
