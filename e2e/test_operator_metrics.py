"""The operator's /metrics, scraped by the local cluster's real Prometheus as a ServiceMonitor would
(honorLabels), and its readiness probe."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import Cluster, OperatorProcess, eventually, http_get, llamaservice_manifest

pytestmark = pytest.mark.e2e


def prom_query(cluster: Cluster, promql: str) -> list[dict[str, Any]]:
    url = f"{cluster.info.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=10) as response:
        result: list[dict[str, Any]] = json.loads(response.read())["data"]["result"]
    return result


@pytest.fixture
def scraped(cluster: Cluster, operator: OperatorProcess) -> Iterator[str]:
    """The operator registered as a Prometheus target; yields the target's instance label."""
    marker = uuid.uuid4().hex[:8]
    path = Path(cluster.info.prometheus_targets_dir) / f"operator-{marker}.yaml"
    instance = f"127.0.0.1:{operator.metrics_port}"
    path.write_text(yaml.safe_dump([{"targets": [instance], "labels": {"marker": marker}}]))
    yield marker
    path.unlink(missing_ok=True)


def test_the_operator_is_ready_once_its_watches_are_synced(operator: OperatorProcess) -> None:
    _, body = eventually(
        "the operator ready",
        lambda: r if (r := http_get(f"http://127.0.0.1:{operator.health_port}/readyz"))[0] == 200 else None,
        60,
    )
    assert body == "ok\n"
    assert http_get(f"http://127.0.0.1:{operator.health_port}/healthz") == (200, "ok\n")


def test_prometheus_scrapes_the_operator_and_its_per_service_series(
    cluster: Cluster, operator: OperatorProcess, namespace: str, scraped: str
) -> None:
    body = llamaservice_manifest(  # on the local cluster's (kwok) A10G nodes
        "chat",
        autoscaling={"minReplicas": 1, "maxReplicas": 3, "slo": {"ttftSeconds": 0.6, "percentile": 95}},
    )
    assert cluster.apply(body, namespace).returncode == 0
    info = eventually(
        "llama_operator_info in Prometheus",
        lambda: prom_query(cluster, f'llama_operator_info{{job="llama-operator",marker="{scraped}"}}'),
        90,
    )
    assert info[0]["value"][1] == "1"
    # honorLabels: the series names the LlamaService's namespace, not the operator's target.
    selector = f'namespace="{namespace}",llamaservice="chat",marker="{scraped}"'
    slo = eventually(
        "the LlamaService's SLO series",
        lambda: prom_query(cluster, f"llama_operator_slo_ttft_seconds{{{selector}}}"),
        120,
    )
    assert float(slo[0]["value"][1]) == 0.6
    bucket = eventually(
        "the SLO's vLLM bucket",
        lambda: prom_query(cluster, f"llama_operator_slo_ttft_bound_info{{{selector}}}"),
        30,
    )
    assert bucket[0]["metric"]["bound"] == "0.5"  # the largest vLLM TTFT bound within 0.6 s
    ratio = prom_query(cluster, f"llama_operator_slo_objective_ratio{{{selector}}}")
    assert 0 < float(ratio[0]["value"][1]) < 1  # a ratio (0.95), not a percentage
    assert prom_query(cluster, f"llama_operator_desired_replicas{{{selector}}}")
    writes = prom_query(
        cluster, f'llama_operator_object_writes_total{{kind="Deployment",marker="{scraped}"}}'
    )
    assert writes and float(writes[0]["value"][1]) >= 1
    # GPUs held and their price follow the plan in status and the Deployment's replicas.
    plan = eventually(
        "status.plan",
        lambda: ((cluster.get("llamaservice", "chat", namespace) or {}).get("status") or {}).get("plan"),
    )

    # The gauge is the operator's view of the Deployment at its last cycle, as Prometheus scraped it: a
    # scrape taken before the operator saw the Deployment's replicas reads an earlier count (CI once read
    # 0 against 1), so the two are compared until they agree.
    def gpus_and_held() -> tuple[float, int] | None:
        deployment = cluster.get("deployment", "chat", namespace)
        series = prom_query(cluster, f"llama_operator_gpus{{{selector}}}")
        if deployment is None or not series:
            return None
        gpus, held = (
            float(series[0]["value"][1]),
            int(deployment["spec"].get("replicas") or 0) * plan["count"],
        )
        return (gpus, held) if gpus == held else None

    gpus, held = eventually(
        "llama_operator_gpus at the Deployment's replicas x GPUs per replica", gpus_and_held, 60
    )
    assert gpus == held >= 1
    price = prom_query(cluster, f"llama_operator_gpu_price_per_hour{{{selector}}}")
    assert float(price[0]["value"][1]) == pytest.approx(plan["pricePerHour"] / plan["count"])
    assert prom_query(cluster, f"llama_operator_gpu_seconds_total{{{selector}}}")
    # Gone with the LlamaService.
    cluster.kubectl("delete", "llamaservice", "chat", "-n", namespace)
    series = f'namespace="{namespace}",llamaservice="chat"'
    eventually(
        "the series dropped",
        lambda: series not in http_get(f"http://127.0.0.1:{operator.metrics_port}/metrics")[1] or None,
        60,
    )
