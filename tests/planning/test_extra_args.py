"""extraArgs validation: owned flags name the spec field to use, garbage is rejected."""

from __future__ import annotations

import pytest

from llama_operator.planning import PlanningError
from llama_operator.planning.extra_args import OWNED_FLAGS, parse_extra_args


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--model", "x"], "spec.model.name"),
        (["--served-model-name", "x"], "spec.model.servedName"),
        (["--port", "9000"], "8000"),
        (["--host=127.0.0.1"], "0.0.0.0"),
        (["--dtype", "float16"], "spec.engine.dtype"),
        (["--max-model-len", "4096"], "spec.engine.maxModelLen"),
        (["--max_model_len", "4096"], "spec.engine.maxModelLen"),  # vLLM treats _ and - alike
        (["--tensor-parallel-size", "2"], "spec.accelerator.count"),
        (["-tp", "2"], "spec.accelerator.count"),
        (["--gpu-memory-utilization", "0.5"], "spec.engine.gpuMemoryUtilization"),
        (["--max-num-seqs", "4"], "spec.engine.maxNumSeqs"),
        (["--quantization", "awq"], "spec.engine.quantization"),
        (["--no-enable-prefix-caching"], "spec.engine.prefixCaching"),
        (["--enforce-eager", "--download-dir", "/tmp"], "spec.model.cache"),
        (["--revision", "main"], "spec.model.revision"),
    ],
)
def test_owned_flags_name_the_spec_field(args: list[str], field: str) -> None:
    with pytest.raises(PlanningError, match="set by the operator") as error:
        parse_extra_args(args)
    assert field in str(error.value)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["enforce-eager"], "is not a flag"),
        (["--max-loras 4"], "separate items"),
        (["---x"], "not a valid vLLM flag"),
        (["--ok", ""], "empty"),
        (["--chat-template", "a\nb"], "line break"),
        (["--num-gpu-blocks-override", "many"], "whole number"),
        (["--num-gpu-blocks-override", "0"], "at least 1"),
    ],
)
def test_garbage_is_rejected(args: list[str], match: str) -> None:
    with pytest.raises(PlanningError, match=match):
        parse_extra_args(args)


def test_pass_through_flags_and_interpreted_settings() -> None:
    args = [
        "--enforce-eager",
        "--kv-cache-dtype=fp8_e4m3",
        "--attention-backend",
        "FLASHINFER",
        "--num-gpu-blocks-override",
        "32",
        "--seed",
        "-1",
        "-O3",
    ]
    parsed = parse_extra_args(args)
    assert parsed.args == tuple(args)
    assert parsed.kv_cache_dtype == "fp8_e4m3"
    assert parsed.attention_backend == "FLASHINFER"
    assert parsed.num_gpu_blocks_override == 32


def test_owned_flag_list_covers_the_planners_own_flags() -> None:
    for flag in (
        "--model",
        "--host",
        "--port",
        "--dtype",
        "--max-model-len",
        "--tensor-parallel-size",
        "--served-model-name",
        "--gpu-memory-utilization",
        "--max-num-seqs",
        "--quantization",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--download-dir",
        "--revision",
    ):
        assert flag in OWNED_FLAGS
