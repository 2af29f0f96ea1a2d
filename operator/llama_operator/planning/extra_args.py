"""Validation of `spec.engine.extraArgs`: pass-through vLLM flags, minus those the planner owns."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from llama_operator.planning.errors import PlanningError

# Flags the planner sets itself, with the spec field (or reason) to use instead. vLLM's parser
# treats `_` and `-` alike in flag names, so names are compared after normalising `_` to `-`.
OWNED_FLAGS: dict[str, str] = {
    "--model": "set spec.model.name",
    "--served-model-name": "set spec.model.servedName",
    "--host": "the operator fixes it (0.0.0.0) for the Service and probes",
    "--port": "the operator fixes it (8000) for the Service and probes",
    "--uds": "the operator serves on TCP port 8000 for the Service and probes",
    "--dtype": "set spec.engine.dtype",
    "--max-model-len": "set spec.engine.maxModelLen",
    "--max-num-seqs": "set spec.engine.maxNumSeqs",
    "--gpu-memory-utilization": "set spec.engine.gpuMemoryUtilization",
    "--kv-cache-memory-bytes": "set spec.engine.gpuMemoryUtilization (the planner sizes the KV cache)",
    "--tensor-parallel-size": "set spec.accelerator.count",
    "-tp": "set spec.accelerator.count",
    "--pipeline-parallel-size": "set spec.accelerator.count (the planner sizes tensor parallelism)",
    "-pp": "set spec.accelerator.count (the planner sizes tensor parallelism)",
    "--data-parallel-size": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "-dp": "set spec.replicas or spec.autoscaling (one engine per pod)",
    "--quantization": "set spec.engine.quantization",
    "-q": "set spec.engine.quantization",
    "--enable-prefix-caching": "set spec.engine.prefixCaching",
    "--no-enable-prefix-caching": "set spec.engine.prefixCaching",
    "--download-dir": "set spec.model.cache (mounted at the operator's cache path)",
    "--revision": "set spec.model.revision",
    "--config": "a config file would override flags the operator sizes; pass flags individually",
}

KV_CACHE_DTYPE_FLAG = "--kv-cache-dtype"
ATTENTION_BACKEND_FLAGS = ("--attention-backend", "--attention-config.backend", "-ac.backend")
NUM_GPU_BLOCKS_OVERRIDE_FLAG = "--num-gpu-blocks-override"

_LONG_FLAG = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_SHORT_FLAG = re.compile(r"^-[A-Za-z][A-Za-z0-9_.]*$")
_NUMBER = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


@dataclass(frozen=True)
class ExtraArgs:
    """Validated extra arguments and the settings among them that change the planner's sizing."""

    args: tuple[str, ...] = ()
    kv_cache_dtype: str | None = None
    attention_backend: str | None = None
    num_gpu_blocks_override: int | None = None


def _normalise(flag: str) -> str:
    return flag.replace("_", "-") if flag.startswith("--") else flag


def parse_extra_args(extra_args: Sequence[str]) -> ExtraArgs:
    """Check each item is a flag or a flag's value; reject the flags the planner owns."""
    values: dict[str, str] = {}
    last_flag: str | None = None
    for index, token in enumerate(extra_args):
        where = f"spec.engine.extraArgs[{index}] {token!r}"
        if token == "" or any(c in token for c in "\n\r\0"):
            raise PlanningError(f"{where} is empty or holds a line break; give one flag or value per item")
        is_flag = token.startswith("-") and not _NUMBER.match(token)
        if not is_flag:
            if last_flag is None:
                raise PlanningError(
                    f"{where} is not a flag: extraArgs must start with a vLLM flag such as --enforce-eager"
                )
            values.setdefault(last_flag, token)
            continue
        name, has_value, value = token.partition("=")
        if not (_LONG_FLAG.match(name) or _SHORT_FLAG.match(name)):
            hint = " (put the flag and its value in separate items)" if " " in token else ""
            raise PlanningError(f"{where} is not a valid vLLM flag{hint}")
        flag = _normalise(name)
        owner = OWNED_FLAGS.get(flag)
        if owner is not None:
            raise PlanningError(f"{where}: {flag} is set by the operator; {owner}")
        last_flag = flag
        if has_value:
            values.setdefault(flag, value)

    blocks_text = values.get(NUM_GPU_BLOCKS_OVERRIDE_FLAG)
    blocks: int | None = None
    if blocks_text is not None:
        try:
            blocks = int(blocks_text)
        except ValueError:
            raise PlanningError(
                f"spec.engine.extraArgs: {NUM_GPU_BLOCKS_OVERRIDE_FLAG} needs a whole number, got "
                f"{blocks_text!r}"
            ) from None
        if blocks < 1:
            raise PlanningError(f"spec.engine.extraArgs: {NUM_GPU_BLOCKS_OVERRIDE_FLAG} must be at least 1")
    backend = next((values[f] for f in ATTENTION_BACKEND_FLAGS if f in values), None)
    return ExtraArgs(
        args=tuple(extra_args),
        kv_cache_dtype=values.get(KV_CACHE_DTYPE_FLAG),
        attention_backend=backend,
        num_gpu_blocks_override=blocks,
    )
