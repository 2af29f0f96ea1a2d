"""The Kube edge shared by the reconcile workers' threads, against the real API server.

The dynamic client's discovery is not thread-safe: a first lookup from several threads at once used to
read its cache while another thread was replacing it (KeyError: 'resources' in a CI run)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from threading import Barrier

from kubernetes import client, config

from llama_operator.desired.labels import ADAPTERS_READINESS_GATE
from llama_operator.handlers.adapters import gate_condition
from llama_operator.infra.kube import Kube
from support import Cluster

KINDS = [
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("apps/v1", "Deployment"),
    ("policy/v1", "PodDisruptionBudget"),
    ("serving.llama-operator.dev/v1alpha1", "LlamaService"),
    ("discovery.k8s.io/v1", "EndpointSlice"),
]
THREADS = 12
ROUNDS = 4


def test_first_lookups_from_many_threads_at_once(cluster: Cluster, namespace: str) -> None:
    failures: list[str] = []
    for _ in range(ROUNDS):  # a fresh Kube each round: the race is in its first discovery
        kube = Kube(config.new_client_from_config(config_file=str(cluster.info.kubeconfig)))
        start = Barrier(THREADS)

        def lookup(index: int, kube: Kube = kube, start: Barrier = start) -> None:
            api_version, kind = KINDS[index % len(KINDS)]
            start.wait()
            try:
                kube.list(api_version, kind, namespace=namespace)
                assert kube.has_kind(api_version, kind)
            except Exception as err:  # every failure is reported below, by thread
                failures.append(f"{kind}: {type(err).__name__}: {err}")

        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(lookup, range(THREADS)))
    assert not failures, failures
    assert not Kube(config.new_client_from_config(config_file=str(cluster.info.kubeconfig))).has_kind(
        "example.invalid/v1", "Nothing"
    )


def test_a_readiness_gate_condition_is_merged_into_the_pods_status(cluster: Cluster, namespace: str) -> None:
    """The LoRA adapters' readiness gate (handlers/adapters.py): a strategic merge by condition type, so the
    conditions the kubelet and the scheduler own stay as they are."""
    api_client = config.new_client_from_config(config_file=str(cluster.info.kubeconfig))
    core = client.CoreV1Api(api_client)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gated"},
        "spec": {
            "readinessGates": [{"conditionType": ADAPTERS_READINESS_GATE}],
            # No node has this label: the pod stays Pending, with the scheduler's condition in its status.
            "nodeSelector": {"example.invalid/none": "x"},
            "containers": [{"name": "c", "image": "registry.invalid/none:1"}],
        },
    }
    core.create_namespaced_pod(namespace, pod)
    deadline = time.monotonic() + 20
    while not (core.read_namespaced_pod("gated", namespace).status.conditions or []):
        assert time.monotonic() < deadline, "the scheduler never wrote PodScheduled"
        time.sleep(0.2)
    Kube(api_client).set_pod_condition(
        namespace=namespace, name="gated", condition=gate_condition(1, 1, datetime.now(UTC))
    )
    conditions = {c.type: c.status for c in core.read_namespaced_pod("gated", namespace).status.conditions}
    assert conditions[ADAPTERS_READINESS_GATE] == "True"
    assert conditions["PodScheduled"] == "False", "the scheduler's condition is kept"
    Kube(api_client).set_pod_condition(
        namespace=namespace, name="gone", condition=gate_condition(0, 1, datetime.now(UTC))
    )
