"""One reconcile of a LlamaService against a real API server (tests/component/conftest.py): the objects it
applies, the status it writes, and that a second reconcile of the unchanged service writes nothing. Below
the end-to-end tests (no operator process, no kopf, no scheduler): the reconciler as the controller calls
it, with its indexes filled by the index functions from what the API server lists."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, cast

import kopf
import pytest
import yaml
from kubernetes import client

from llama_operator.api.settings import Settings
from llama_operator.api.spec import GROUP, PLURAL, VERSION
from llama_operator.catalog.vllm import VLLM_PORT
from llama_operator.desired.labels import SERVICE_LABEL
from llama_operator.handlers.indexes import (
    Indexes,
    daemon_set_index,
    deployment_index,
    endpoint_slice_index,
    llamaservice_index,
    node_index,
    pdb_index,
    pod_index,
    service_index,
)
from llama_operator.handlers.reconciler import ReconcileResult, reconcile_llamaservice
from llama_operator.handlers.written_status import WrittenStatus
from llama_operator.infra.kube import Kube
from llama_operator.infra.metrics import OperatorMetrics

from .conftest import REPO, ApiServer

CRD_FILE = REPO / "crds" / "llamaservices.serving.llama-operator.dev.yaml"
IndexFunction = Callable[..., object]  # kopf.index functions, typed by kopf as returning object


def wait_until(what: str, condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def api(apiserver: ApiServer) -> client.ApiClient:
    """The API server with the CRD established."""
    extensions = client.ApiextensionsV1Api(apiserver.api_client)
    crd = yaml.safe_load(CRD_FILE.read_text())
    extensions.create_custom_resource_definition(crd)

    def established() -> bool:
        conditions = extensions.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions
        return any(c.type == "Established" and c.status == "True" for c in conditions or [])

    wait_until("the CRD established", established)
    return apiserver.api_client


def index(
    api_client: client.ApiClient,
    items: Iterable[Any],
    kind: str,
    api_version: str,
    function: IndexFunction,
    memo: kopf.Memo,
) -> kopf.Index[Any, dict[str, Any]]:
    """What kopf's index holds for these objects: the index function applied to each, as kopf does."""
    content: dict[Any, list[dict[str, Any]]] = {}
    for item in items:
        raw = item if isinstance(item, dict) else api_client.sanitize_for_serialization(item)
        raw = {**raw, "apiVersion": api_version, "kind": kind}  # list items come without them
        meta = raw["metadata"]
        body = kopf.Body(cast("kopf.RawBody", raw))
        found = function(
            body=body,
            namespace=meta.get("namespace"),
            name=meta["name"],
            labels=body.metadata.labels,
            memo=memo,
        )
        for key, value in cast("dict[Any, dict[str, Any]]", found).items():
            content.setdefault(key, []).append(value)
    return cast("kopf.Index[Any, dict[str, Any]]", content)


def read_indexes(api_client: client.ApiClient, memo: kopf.Memo) -> Indexes:
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    policy, discovery = client.PolicyV1Api(api_client), client.DiscoveryV1Api(api_client)
    services = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    return Indexes(
        llamaservices=index(
            api_client, services, "LlamaService", f"{GROUP}/{VERSION}", llamaservice_index, memo
        ),
        nodes=index(api_client, core.list_node().items, "Node", "v1", node_index, memo),
        pods=index(api_client, core.list_pod_for_all_namespaces().items, "Pod", "v1", pod_index, memo),
        deployments=index(
            api_client,
            apps.list_deployment_for_all_namespaces().items,
            "Deployment",
            "apps/v1",
            deployment_index,
            memo,
        ),
        services=index(
            api_client, core.list_service_for_all_namespaces().items, "Service", "v1", service_index, memo
        ),
        pdbs=index(
            api_client,
            policy.list_pod_disruption_budget_for_all_namespaces().items,
            "PodDisruptionBudget",
            "policy/v1",
            pdb_index,
            memo,
        ),
        pod_monitors=index(api_client, [], "PodMonitor", "monitoring.coreos.com/v1", pdb_index, memo),
        endpoint_slices=index(
            api_client,
            discovery.list_endpoint_slice_for_all_namespaces().items,
            "EndpointSlice",
            "discovery.k8s.io/v1",
            endpoint_slice_index,
            memo,
        ),
        daemon_sets=index(
            api_client,
            apps.list_daemon_set_for_all_namespaces().items,
            "DaemonSet",
            "apps/v1",
            daemon_set_index,
            memo,
        ),
    )


def reconcile_once(
    api_client: client.ApiClient, memo: kopf.Memo, key: tuple[str, str], written: WrittenStatus
) -> ReconcileResult:
    return reconcile_llamaservice(
        key, memo=memo, indexes=read_indexes(api_client, memo), written=written, attempt=0
    )


def operator_memo(api: client.ApiClient) -> kopf.Memo:
    memo = kopf.Memo()
    memo.settings = Settings()
    memo.kube = Kube(api)
    memo.metrics = OperatorMetrics()
    memo.pod_monitor = False
    memo.inference_pool = None
    return memo


def create_service(api: client.ApiClient, namespace: str, name: str, model: dict[str, Any]) -> dict[str, Any]:
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    created: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "LlamaService",
            "metadata": {"name": name},
            "spec": {"model": model, "accelerator": {"type": "t4"}},
        },
    )
    return created


def test_one_reconcile_applies_the_objects_and_writes_status_then_nothing(api: client.ApiClient) -> None:
    namespace, name = f"component-{uuid.uuid4().hex[:6]}", "chat"
    created = create_service(api, namespace, name, {"name": "meta-llama/Llama-3.2-1B-Instruct"})
    custom = client.CustomObjectsApi(api)
    memo = operator_memo(api)
    written = WrittenStatus()

    first = reconcile_once(api, memo, (namespace, name), written)

    assert first.writes >= 2 and first.status_written and first.requeue_after is None
    deployment = client.AppsV1Api(api).read_namespaced_deployment(name, namespace)
    assert [(o.kind, o.uid, o.controller) for o in deployment.metadata.owner_references] == [
        ("LlamaService", created["metadata"]["uid"], True)
    ]
    container = deployment.spec.template.spec.containers[0]
    assert container.args[container.args.index("--port") + 1] == str(VLLM_PORT)
    assert deployment.spec.replicas == 1  # spec.replicas' default: no autoscaling
    service = client.CoreV1Api(api).read_namespaced_service(name, namespace)
    assert [p.port for p in service.spec.ports] == [VLLM_PORT]
    status = custom.get_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name)["status"]
    assert status["plan"]["accelerator"] == "t4"
    assert {c["type"] for c in status["conditions"]} >= {"Ready", "Degraded"}

    # The first reconcile judged the rollout from indexes read before it applied anything; the Deployment's
    # watch event brings a second, which sees it: no object to apply, the rollout in status.
    second = reconcile_once(api, memo, (namespace, name), written)
    assert second.writes == 0
    status = custom.get_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name)["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReplicasNotReady")  # no controller-manager here

    # Level-triggered and idempotent: the same service, read again, needs no write at all.
    third = reconcile_once(api, memo, (namespace, name), written)
    assert (third.writes, third.status_written) == (0, False)


def test_the_stage_daemonset_follows_node_local_and_a_converged_one_needs_no_write(
    api: client.ApiClient,
) -> None:
    namespace, name = f"component-{uuid.uuid4().hex[:6]}", "chat"
    model = {"name": "meta-llama/Llama-3.2-1B-Instruct", "cache": {"nodeLocal": True}}
    created = create_service(api, namespace, name, model)
    memo, written, apps = operator_memo(api), WrittenStatus(), client.AppsV1Api(api)

    first = reconcile_once(api, memo, (namespace, name), written)
    assert first.requeue_after is None
    stage = apps.read_namespaced_daemon_set(f"{name}-stage", namespace)
    assert [(o.kind, o.uid, o.controller) for o in stage.metadata.owner_references] == [
        ("LlamaService", created["metadata"]["uid"], True)
    ]
    assert SERVICE_LABEL not in stage.spec.template.metadata.labels
    # Indexed and judged converged: the API server's defaults are no drift, nothing is written again.
    reconcile_once(api, memo, (namespace, name), written)
    assert reconcile_once(api, memo, (namespace, name), written).writes == 0

    # nodeLocal off: the stage goes (by uid), the replicas stay.
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"spec": {"model": {"cache": {"nodeLocal": False}}}}
    )
    removed = reconcile_once(api, memo, (namespace, name), written)
    assert removed.writes >= 1
    assert not apps.list_namespaced_daemon_set(namespace).items
    assert apps.read_namespaced_deployment(name, namespace).metadata.name == name
    # The replicas' volume follows too: the fields the first create wrote are the operator's applied ones,
    # so an apply without hostPath removes it (a create's own fields, kept apart, would stay and make the
    # volume both hostPath and emptyDir, which the API server refuses).
    volumes = apps.read_namespaced_deployment(name, namespace).spec.template.spec.volumes
    cache = next(v for v in volumes if v.name == "model-cache")
    assert cache.host_path is None and cache.empty_dir is not None
    status = client.CustomObjectsApi(api).get_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name
    )["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False", degraded
