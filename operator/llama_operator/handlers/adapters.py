"""The adapter loop: every few seconds, on the leader, each LlamaService whose running plan has LoRA on gets
spec.adapters loaded into (and removed ones unloaded from) every replica whose vLLM answers, and status.adapters
says which replica holds which adapter. Such a replica's pod has a readiness gate (desired/pod.py) that this
loop opens once it has loaded the adapters: a new replica is Ready, and gets traffic, only with them. The
decisions are reconcile/adapters.py's, the calls infra/vllm_adapters.py's."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from llama_operator.api.plan import status_plan
from llama_operator.api.resource import InvalidSpecError, service_spec, stored_status
from llama_operator.api.times import rfc3339
from llama_operator.catalog.vllm import MODEL_CACHE_PATH, VLLM_PORT
from llama_operator.desired.labels import ADAPTERS_READINESS_GATE
from llama_operator.handlers.indexes import Indexes
from llama_operator.handlers.memo import OperatorMemo
from llama_operator.handlers.written_status import WrittenStatus
from llama_operator.infra.vllm_adapters import AdapterSync, sync_adapters

log = logging.getLogger(__name__)

# How often the replicas' adapters are compared with the spec: an added adapter is served within this (plus
# its load); a new replica is Ready within this after its server is (its readiness gate waits for the load).
ADAPTER_SYNC_SECONDS = 5.0


def _condition(pod: Mapping[str, Any], kind: str) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def serving_replicas(pods: Iterable[Mapping[str, Any]], port: int = VLLM_PORT) -> dict[str, str]:
    """Pod name -> host:port of the pods whose vLLM answers (ContainersReady: its probes pass; the pod itself
    is Ready only once its adapters are loaded, the readiness gate) and that are not going."""
    out: dict[str, str] = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if _condition(pod, "ContainersReady") and status.get("podIP") and not meta.get("deletionTimestamp"):
            out[str(meta["name"])] = f"{status['podIP']}:{port}"
    return out


def gate_condition(loaded: int, wanted: int, now: datetime) -> dict[str, str]:
    """The readiness gate's condition once a pass over the pod has tried every load (a failed one is
    reported in status.adapters: a bad adapter must not keep every new replica out of service)."""
    return {
        "type": ADAPTERS_READINESS_GATE,
        "status": "True",
        "reason": "AdaptersLoaded",
        "message": f"{loaded} of {wanted} adapters of spec.adapters loaded (status.adapters says where)",
        "lastTransitionTime": rfc3339(now),
    }


def adapter_cycle(
    memo: OperatorMemo,
    indexes: Indexes,
    written: WrittenStatus,
    *,
    vllm_port: int = VLLM_PORT,
    cache_path: str = MODEL_CACHE_PATH,
) -> None:
    """One pass over every LlamaService. `vllm_port` and `cache_path`: where the pods' vLLM listens and sees
    the model cache (the operator's port and mount; a test's local server and directory)."""
    for key, store in list(indexes.llamaservices.items()):
        for body in list(store):
            if body["metadata"].get("deletionTimestamp"):
                continue
            try:
                spec = service_spec(body)
            except InvalidSpecError:
                continue  # the reconciler reports it
            plan = status_plan(stored_status(body))
            adapters: list[dict[str, object]] | None = None
            if plan is not None and plan.max_loras > 0:
                pods = list(indexes.pods.get(key, []))
                replicas = serving_replicas(pods, vllm_port)
                sync = sync_adapters(
                    spec.adapters, replicas, base_models=[plan.served_model_name], cache_path=cache_path
                )
                adapters = [a.to_wire() for a in sync.placement]
                _open_gates(memo, key[0], pods, replicas, sync, wanted=len(spec.adapters))
            with written.writer(key):
                if written.current_adapters(key, body) == adapters:
                    continue
                namespace, name = key
                patch = {"adapters": adapters}  # None removes it (merge patch) once LoRA is off
                written.record(
                    key,
                    body,
                    memo.kube.patch_llamaservice_status(namespace=namespace, name=name, status=patch),
                )


def _open_gates(
    memo: OperatorMemo,
    namespace: str,
    pods: Sequence[Mapping[str, Any]],
    replicas: Mapping[str, str],
    sync: AdapterSync,
    *,
    wanted: int,
) -> None:
    now = datetime.now(UTC)
    for pod in pods:
        name = str((pod.get("metadata") or {}).get("name"))
        if name not in replicas or name in sync.unreachable or _condition(pod, ADAPTERS_READINESS_GATE):
            continue
        loaded = sum(1 for placed in sync.placement if name in placed.replicas)
        memo.kube.set_pod_condition(
            namespace=namespace, name=name, condition=gate_condition(loaded, wanted, now)
        )
        log.info("adapters: %s/%s has %d of %d adapters: ready to serve", namespace, name, loaded, wanted)
