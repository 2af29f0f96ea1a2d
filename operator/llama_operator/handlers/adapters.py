"""The adapter loop: every few seconds, on the leader, each LlamaService whose running plan has LoRA on gets
spec.adapters loaded into (and removed ones unloaded from) every ready replica, and status.adapters says which
replica holds which adapter. The decisions are reconcile/adapters.py's, the calls infra/vllm_adapters.py's."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from llama_operator.api.plan import status_plan
from llama_operator.api.resource import InvalidSpecError, parse_spec
from llama_operator.api.status import AdapterStatus
from llama_operator.catalog.vllm import VLLM_PORT
from llama_operator.handlers.memo import OperatorMemo
from llama_operator.handlers.reconciler import Indexes
from llama_operator.handlers.written_status import WrittenStatus
from llama_operator.infra.vllm_adapters import sync_adapters

log = logging.getLogger(__name__)

# How often the replicas' adapters are compared with the spec: an added adapter is served within this (plus
# its load), a new replica gets them this long after it is ready.
ADAPTER_SYNC_SECONDS = 5.0
API_KEY_MESSAGE = (
    "not loaded: the replicas require an API key (engine.apiKeySecretRef), which the operator does not read; "
    "adapters are loaded into services without one"
)


def ready_replicas(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Pod name -> host:port of the pods that are Ready and not going."""
    out: dict[str, str] = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        if ready and status.get("podIP") and not meta.get("deletionTimestamp"):
            out[str(meta["name"])] = f"{status['podIP']}:{VLLM_PORT}"
    return out


def adapter_cycle(memo: OperatorMemo, indexes: Indexes, written: WrittenStatus) -> None:
    for key, store in list(indexes.llamaservices.items()):
        for body in list(store):
            if body["metadata"].get("deletionTimestamp"):
                continue
            try:
                spec = parse_spec(body.get("spec"))
            except InvalidSpecError:
                continue  # the reconciler reports it
            plan = status_plan(body.get("status"))
            adapters: list[dict[str, object]] | None = None
            if plan is not None and plan.max_loras > 0 and spec.engine.api_key_secret_ref is not None:
                # The operator does not read tenants' Secrets: it cannot call an API that wants the key.
                adapters = [
                    AdapterStatus(name=a.name, message=API_KEY_MESSAGE).to_wire() for a in spec.adapters
                ]
            elif plan is not None and plan.max_loras > 0:
                replicas = ready_replicas(indexes.pods.get(key, []))
                sync = sync_adapters(spec.adapters, replicas, base_models=[plan.served_model_name])
                adapters = [a.to_wire() for a in sync.placement]
            with written.writer(key):
                if written.current(key, body).get("adapters") == adapters:
                    continue
                namespace, name = key
                patch = {"adapters": adapters}  # None removes it (merge patch) once LoRA is off
                written.record(
                    key,
                    body,
                    memo.kube.patch_llamaservice_status(namespace=namespace, name=name, status=patch),
                )
