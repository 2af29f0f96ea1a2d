"""e2e/gpu/run.sh is kept ready without a GPU: its plan (--dry-run) for an NVIDIA machine and for the CPU,
the pinned vLLM, and the model it builds (Llama-3.2-1B's architecture, checked against the simulator's
model shape). The real run on the CPU (`run.sh --cpu`) is what test_sim_vs_vllm does step by step."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from llama_bench.sim.accelerators import MODELS
from llama_operator.catalog.models import model_shape

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _server_module_version() -> str:
    spec = importlib.util.spec_from_file_location("gpu_test_vllm_server", REPO / "e2e" / "vllm" / "server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.VLLM_VERSION)


def _plan(*args: str, path: str | None = None) -> list[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    proc = subprocess.run(
        ["bash", str(HERE / "run.sh"), "--dry-run", *args],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [line.split("] ", 1)[1] for line in proc.stderr.splitlines() if "] " in line]


def test_the_script_parses() -> None:
    subprocess.run(["bash", "-n", str(HERE / "run.sh")], check=True)


def test_the_gpu_plan(tmp_path: Path) -> None:
    # No nvidia-smi on PATH: the plan still prints, naming where the GPU's name will come from.
    plan = _plan("--out", str(tmp_path), path="/usr/bin:/bin")
    steps = [line[2:] for line in plan if line.startswith("+ ")]
    assert f"vllm=={_server_module_version()}" in " ".join(steps), "the CUDA build is the pinned vLLM"
    order = ["pip install", "build_model.py", "vllm.entrypoints.openai.api_server", " profile ", " replay "]
    positions = [next(i for i, step in enumerate(steps) if key in step) for key in order]
    assert positions == sorted(positions), steps
    profile_step = next(step for step in steps if " profile " in step)
    assert "--model-shape llama-3.2-1b" in profile_step
    assert f"--out {tmp_path}/" in profile_step and ".json" in profile_step
    assert "--dtype bfloat16" in next(step for step in steps if "api_server" in step)
    assert not list(tmp_path.iterdir()), "a dry run writes nothing"


def test_the_cpu_plan(tmp_path: Path) -> None:
    plan = _plan("--cpu", "--out", str(tmp_path))
    steps = [line[2:] for line in plan if line.startswith("+ ")]
    server = next(step for step in steps if "api_server" in step)
    assert "--enforce-eager" in server and "VLLM_CPU_KVCACHE_SPACE=1" in server
    assert any("e2e/vllm/install.sh" in step for step in steps)
    assert not any("pip install" in step for step in steps)
    assert any(" replay " in step and "--device" not in step for step in steps)


def test_the_model_has_llama_32_1b_architecture(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(HERE / "build_model.py"), str(tmp_path), "--shape", "llama-3.2-1b", "--config-only"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]) == (
        16,
        2048,
        8192,
    )
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (32, 8, 64)
    assert config["vocab_size"] == 128256 and config["tie_word_embeddings"] is True
    # The simulator's model is the catalog's (what the planner sizes): the same architecture.
    shape = model_shape(MODELS["llama-3.2-1b"])
    assert (config["num_hidden_layers"], config["num_key_value_heads"], config["head_dim"]) == (
        shape.layers,
        shape.kv_heads,
        shape.head_dim,
    )
    # Parameters: embeddings (tied) + 16 layers of attention and MLP + norms = 1.24 B.
    h, f, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    kv_dim = config["num_key_value_heads"] * config["head_dim"]
    per_layer = h * h * 2 + h * kv_dim * 2 + 3 * h * f + 2 * h
    parameters = config["vocab_size"] * h + layers * per_layer + h
    assert abs(parameters / 1e9 - 1.24) < 0.01
    assert abs(parameters - shape.parameters) / shape.parameters < 0.01
