"""The Kube edge shared by the reconcile workers' threads, against the real API server.

The dynamic client's discovery is not thread-safe: a first lookup from several threads at once used to
read its cache while another thread was replacing it (KeyError: 'resources' in a CI run)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

from kubernetes import config

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
