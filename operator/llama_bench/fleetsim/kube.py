"""The fleet simulator's view of the cluster: LlamaService pods and plans, read from the API server.

Read-only: two list calls per poll (pods by the LlamaService label, LlamaServices), parsed from raw
JSON (the generated models' deserialization would cost more CPU than the whole simulation).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from kubernetes import client, config

from llama_bench.fleetsim.engine import PodInfo, ServiceInfo, ServiceKey
from llama_bench.sim.accelerators import ACCELERATORS, MODELS
from llama_operator.api.spec import GROUP, PLURAL, VERSION
from llama_operator.desired.labels import SERVICE_LABEL

REQUEST_TIMEOUT_SECONDS = 5.0

# Model architectures the simulator has parameters for, recognized in a LlamaService's model name.
_MODEL_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"3\.2-1b", re.IGNORECASE), "llama-3.2-1b"),
    (re.compile(r"3\.2-3b", re.IGNORECASE), "llama-3.2-3b"),
    (re.compile(r"3(\.1)?-8b", re.IGNORECASE), "llama-3.1-8b"),
)


def _is_ready(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _served_model_name(spec: Mapping[str, Any]) -> str | None:
    for container in spec.get("containers") or []:
        args = [str(a) for a in (container.get("args") or [])]
        for i, arg in enumerate(args):
            if arg.startswith("--served-model-name="):
                return arg.split("=", 1)[1]
            if arg == "--served-model-name" and i + 1 < len(args):
                return args[i + 1]
    return None


def pod_info(item: Mapping[str, Any]) -> PodInfo | None:
    """A pod of a LlamaService, or None for anything else (finished pods included)."""
    meta = item.get("metadata") or {}
    status = item.get("status") or {}
    service = (meta.get("labels") or {}).get(SERVICE_LABEL)
    if not service or status.get("phase") in {"Succeeded", "Failed"}:
        return None
    return PodInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"),
        service=str(service),
        ready=status.get("phase") == "Running" and _is_ready(status),
        terminating=meta.get("deletionTimestamp") is not None,
        model_name=_served_model_name(item.get("spec") or {}),
    )


def simulated_accelerator(plan: Mapping[str, Any]) -> str | None:
    """The `sim.accelerators` name of a plan's accelerator (`a100-80gb` + `1g.10gb` ->
    `a100-80gb-1g.10gb`), or None when the simulator has no parameters for it (cpu, ...)."""
    accelerator = plan.get("accelerator")
    if not accelerator:
        return None
    mig = plan.get("mig")
    name = f"{accelerator}-{mig}" if mig else str(accelerator)
    return name if name in ACCELERATORS else None


def simulated_model(model_name: str) -> str | None:
    for pattern, name in _MODEL_PATTERNS:
        if pattern.search(model_name) and name in MODELS:
            return name
    return None


def service_info(item: Mapping[str, Any]) -> tuple[ServiceKey, ServiceInfo]:
    meta = item.get("metadata") or {}
    spec = item.get("spec") or {}
    plan = (item.get("status") or {}).get("plan") or {}
    seqs = plan.get("maxNumSeqs")
    budget = plan.get("maxNumBatchedTokens")
    info = ServiceInfo(
        accelerator=simulated_accelerator(plan),
        model=simulated_model(str((spec.get("model") or {}).get("name", ""))),
        served_model_name=plan.get("servedModelName") or None,
        max_num_seqs=int(seqs) if isinstance(seqs, int) and seqs > 0 else None,
        max_num_batched_tokens=int(budget) if isinstance(budget, int) and budget > 0 else None,
    )
    return (str(meta.get("namespace", "")), str(meta.get("name", ""))), info


class ClusterReader:
    """Lists LlamaService pods and LlamaServices with a kubeconfig's credentials."""

    def __init__(self, kubeconfig: str | None = None) -> None:
        self._api = config.new_client_from_config(config_file=kubeconfig)
        self._core = client.CoreV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)

    def pods(self) -> list[PodInfo]:
        response = self._core.list_pod_for_all_namespaces(
            label_selector=SERVICE_LABEL, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS
        )
        items = json.loads(response.data).get("items") or []
        return [info for info in (pod_info(i) for i in items) if info is not None]

    def services(self) -> dict[ServiceKey, ServiceInfo] | None:
        """Every LlamaService's simulation parameters; None when they cannot be listed (no CRD yet)."""
        try:
            response = self._custom.list_cluster_custom_object(
                GROUP, VERSION, PLURAL, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS
            )
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        items = json.loads(response.data).get("items") or []
        return dict(service_info(i) for i in items)

    def close(self) -> None:
        self._api.close()
