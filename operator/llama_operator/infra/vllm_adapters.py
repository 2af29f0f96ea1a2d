"""The executor of reconcile/adapters.py: reads each replica's adapters from vLLM's GET /v1/models and calls
its runtime adapter API (POST /v1/load_lora_adapter {lora_name, lora_path}, POST /v1/unload_lora_adapter
{lora_name}; open when the pod has VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, which the planner sets).

A replica that does not answer is left out of this pass (it may be starting or going); the next pass tries
again. Blocking calls with short timeouts: it runs in the operator's worker thread, never on the event loop.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_operator.api.spec import LoRAAdapter
from llama_operator.api.status import AdapterStatus
from llama_operator.catalog.vllm import MODEL_CACHE_PATH
from llama_operator.reconcile.adapters import (
    AdapterAction,
    adapter_actions,
    adapter_placement,
    after,
    loaded_adapters,
)

log = logging.getLogger(__name__)

# Listing is cheap; a load reads the adapter from disk (or downloads it) and hands it to the engine.
LIST_TIMEOUT_SECONDS = 3.0
LOAD_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class AdapterSync:
    """One pass over a service's replicas: what was done, what failed, and where the adapters now are."""

    done: tuple[AdapterAction, ...] = ()
    failed: tuple[tuple[AdapterAction, str], ...] = ()
    unreachable: tuple[str, ...] = ()
    placement: list[AdapterStatus] = field(default_factory=list)


def _call(
    url: str, body: Mapping[str, Any] | None, *, timeout: float, api_key: str | None
) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode(errors="replace")


def _error_text(text: str) -> str:
    try:
        answer = json.loads(text)
    except json.JSONDecodeError:
        return text[:300]
    inner = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(inner, dict) and isinstance(inner.get("message"), str):
        return str(inner["message"])[:300]
    if isinstance(answer, dict) and isinstance(answer.get("message"), str):
        return str(answer["message"])[:300]
    return text[:300]


def list_adapters(
    address: str, *, base_models: Sequence[str] = (), api_key: str | None = None
) -> dict[str, str]:
    """The adapters the vLLM at `address` (host:port) lists; OSError when it does not answer."""
    status, text = _call(f"http://{address}/v1/models", None, timeout=LIST_TIMEOUT_SECONDS, api_key=api_key)
    if status != 200:
        raise OSError(f"GET /v1/models answered {status}")
    return loaded_adapters(json.loads(text), base_models)


def apply_action(address: str, action: AdapterAction, *, api_key: str | None = None) -> str | None:
    """Do one action on the vLLM at `address`; None when it took effect, else vLLM's reason."""
    if action.kind == "load":
        path, body = "/v1/load_lora_adapter", {"lora_name": action.name, "lora_path": action.source}
    else:
        path, body = "/v1/unload_lora_adapter", {"lora_name": action.name}
    try:
        status, text = _call(f"http://{address}{path}", body, timeout=LOAD_TIMEOUT_SECONDS, api_key=api_key)
    except OSError as err:
        return f"{path} did not answer: {err}"
    if status == 200:
        return None
    if status == 404 and action.kind == "unload":
        return None  # already gone: what was wanted
    if status == 404 and "load_lora_adapter" in path and "adapter" not in text.lower():
        return f"{path} is not served: the pod lacks VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (an older plan?)"
    return f"{status}: {_error_text(text)}"


def sync_adapters(
    wanted: Sequence[LoRAAdapter],
    replicas: Mapping[str, str],
    *,
    base_models: Sequence[str] = (),
    api_key: str | None = None,
    cache_path: str = MODEL_CACHE_PATH,
) -> AdapterSync:
    """Bring every replica (pod name -> host:port) to hold exactly `wanted`: list, diff, load and unload.
    `cache_path`: where the replicas' vLLM sees the model cache volume that a source under /models/ names
    (the pod mounts it at /models; a test's local server reads its own directory)."""
    if cache_path != MODEL_CACHE_PATH:
        wanted = [
            a.model_copy(update={"source": cache_path + a.source.removeprefix(MODEL_CACHE_PATH)})
            if a.source.startswith(MODEL_CACHE_PATH + "/")
            else a
            for a in wanted
        ]
    loaded: dict[str, dict[str, str]] = {}
    unreachable: list[str] = []
    for replica, address in sorted(replicas.items()):
        try:
            loaded[replica] = list_adapters(address, base_models=base_models, api_key=api_key)
        except (OSError, ValueError) as err:
            log.debug("adapters: %s (%s) did not list its models: %s", replica, address, err)
            unreachable.append(replica)
    done: list[AdapterAction] = []
    failed: list[tuple[AdapterAction, str]] = []
    for action in adapter_actions(wanted, loaded):
        reason = apply_action(replicas[action.replica], action, api_key=api_key)
        if reason is None:
            done.append(action)
        else:
            log.warning("adapters: %s %s on %s failed: %s", action.kind, action.name, action.replica, reason)
            failed.append((action, reason))
    failures = {a.name: f"{a.kind} on {a.replica}: {reason}" for a, reason in failed}
    return AdapterSync(
        done=tuple(done),
        failed=tuple(failed),
        unreachable=tuple(unreachable),
        placement=adapter_placement(wanted, after(loaded, done), failures),
    )
