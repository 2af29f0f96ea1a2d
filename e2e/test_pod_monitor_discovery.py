"""`podMonitor: auto` while running: the Prometheus Operator's PodMonitor CRD installed after the operator
(kube-prometheus-stack after llama-operator) gives every existing LlamaService its PodMonitor, with the
labels a Prometheus selects by, without restarting the operator; once it is removed, new LlamaServices are
scraped by annotations again."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import POD_MONITOR_CRD
from support import Cluster, OperatorProcess, eventually, repo_root

pytestmark = pytest.mark.e2e

CRD_NAME = "podmonitors.monitoring.coreos.com"
SELECTED_BY = {"release": "kube-prometheus-stack"}


def _crd_present(cluster: Cluster) -> bool:
    return cluster.kubectl("get", "crd", CRD_NAME, check=False).returncode == 0


def apply_service(cluster: Cluster, namespace: str, name: str) -> None:
    manifest = yaml.safe_load((repo_root() / "examples" / "a10g-chat.yaml").read_text())
    manifest["metadata"]["name"] = name
    assert cluster.apply(manifest, namespace).returncode == 0


def pod_monitor_of(cluster: Cluster, namespace: str, name: str) -> Callable[[], dict[str, Any] | None]:
    return lambda: cluster.get("podmonitor", name, namespace)


def scraped(cluster: Cluster, namespace: str, name: str) -> Callable[[], bool]:
    """Whether the vLLM pod template carries the prometheus.io scrape annotations (no PodMonitor kind)."""

    def check() -> bool:
        deployment = cluster.get("deployment", name, namespace)
        if deployment is None:
            return False
        annotations = deployment["spec"]["template"]["metadata"].get("annotations") or {}
        return bool(annotations.get("prometheus.io/scrape") == "true")

    return check


def test_the_pod_monitor_crd_is_followed_while_running(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    if _crd_present(cluster):
        # Deleting it here would take every PodMonitor with it, under another test's feet.
        pytest.skip(f"{CRD_NAME} is installed: this test starts without it")
    proc = OperatorProcess(
        cluster,
        log_dir=tmp_path,
        extra_args=[f"--namespace={namespace}"],
        extra_env={
            "LLAMA_OPERATOR_POD_MONITOR": "auto",
            "LLAMA_OPERATOR_POD_MONITOR_LABELS": json.dumps(SELECTED_BY),
            "LLAMA_OPERATOR_LEADER_ELECTION_LEASE": f"pm-discovery-{uuid.uuid4().hex[:6]}",
        },
    )
    proc.start()
    try:
        apply_service(cluster, namespace, "before")
        eventually(
            "the Deployment, scraped by annotations (no PodMonitor kind)",
            scraped(cluster, namespace, "before"),
        )

        cluster.kubectl("apply", "-f", "-", input_text=json.dumps(POD_MONITOR_CRD))
        cluster.wait_crd_established(CRD_NAME)
        for name in ("before", "during"):
            if name == "during":
                apply_service(cluster, namespace, name)
            created = eventually(
                f"a PodMonitor for LlamaService {name}", pod_monitor_of(cluster, namespace, name), timeout=90
            )
            labels = created["metadata"]["labels"]
            assert labels["release"] == "kube-prometheus-stack", labels
            assert labels["llama-operator.dev/llamaservice"] == name, labels
        # One made while the kind is served is scraped by its PodMonitor only (no annotations).
        assert not scraped(cluster, namespace, "during")()

        cluster.kubectl("delete", "crd", CRD_NAME, "--timeout=60s")
        apply_service(cluster, namespace, "after")
        eventually(
            "scrape annotations once the kind is gone", scraped(cluster, namespace, "after"), timeout=90
        )

        assert proc.starts == 1 and proc.proc is not None and proc.proc.poll() is None, proc.tail()
    finally:
        proc.stop()
        if _crd_present(cluster):
            cluster.kubectl("delete", "crd", CRD_NAME, "--timeout=60s", check=False)
