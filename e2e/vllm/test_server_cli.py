"""The vLLM server helper's command line (e2e/vllm/server.py), without starting vLLM."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from support import vllm_server_module

vs = vllm_server_module()


def _namespace(model_dir: Path) -> argparse.Namespace:
    return argparse.Namespace(
        model_dir=model_dir,
        port=8123,
        host="127.0.0.1",
        max_num_seqs=2,
        num_gpu_blocks_override=16,
        max_model_len=512,
        extra=[],
        timeout=5.0,
    )


def test_a_key_in_the_environment_is_the_servers_and_its_probes_never_an_argument(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`server.py start` against a server with VLLM_API_KEY: its own readiness probe must send the key
    (else it sees 401 until its timeout), and the key never reaches the command line."""
    monkeypatch.setenv("VLLM_API_KEY", "sk-test-secret")
    srv = vs._server_from(_namespace(tmp_path))
    assert srv.api_key == "sk-test-secret"
    assert srv.headers() == {"Authorization": "Bearer sk-test-secret"}
    assert srv.environment(tmp_path)["VLLM_API_KEY"] == "sk-test-secret"
    assert not any("sk-test-secret" in arg for arg in srv.argv(Path("/usr/bin/python3")))
    monkeypatch.delenv("VLLM_API_KEY")
    assert vs._server_from(_namespace(tmp_path)).api_key is None
