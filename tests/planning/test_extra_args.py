"""extraArgs validation: owned flags name the spec field to use, garbage is rejected."""

from __future__ import annotations

import pytest

from llama_operator.planning import PlanningError
from llama_operator.planning.extra_args import OWNED_FLAGS, flag_contract, parse_extra_args


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
        (["--enforce-eager", ""], "empty"),
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
    contract = flag_contract()
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
        known = contract.lookup(flag)
        assert known is not None and known.dest in OWNED_FLAGS, flag


# Measured in the issue: every one of these was accepted, and vLLM then listened on another port, served
# another model, exited at once, or crashed on its value.
@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--por", "9000"], "abbreviations are not accepted.*--port"),
        (["--hos", "127.0.0.1"], "abbreviations are not accepted.*--host"),
        (["--ser", "x"], "abbreviations are not accepted"),
        (["--max-m", "4096"], "abbreviations are not accepted"),
        (["--gp", "0.5"], "abbreviations are not accepted"),
        (["--te", "2"], "abbreviations are not accepted"),
        (["--do", "/tmp"], "abbreviations are not accepted"),
        (["--model.x", "1"], "set by the operator; set spec.model.name"),
        (["--model_x", "1"], "not a flag of vLLM"),
        (["--help"], "set by the operator"),
        (["-h"], "set by the operator"),
        (["--version"], "prints and exits"),
        (["--speculative-model", "x", "--num-speculative-tokens", "banana"], "not a flag of vLLM"),
        (["--max-num-batched-tokens", "lots"], "needs a whole number such as 8192 or 8k"),
        (["--kv-cache-dtype", "int3"], "must be one of"),
        (["--seed", "1.5"], "needs a whole number"),
        (["--enforce-eager=yes"], "takes no value"),
        (["--seed"], "needs a value in the next item"),
        (["--no-such-flag"], "not a flag of vLLM"),
        (["--enforce-eagre"], "did you mean --enforce-eager"),
        (["--compilation-config", "not json"], "JSON object"),
        (["--seed.x", "1"], "takes no sub-keys"),
        (["--compilation-config.level", "3"], "has no key 'level'"),  # vLLM 0.32 renamed it: mode
        (["--compilation-config", '{"level": 3}'], "has no key 'level'"),
        (["-tp", "2"], "set spec.accelerator.count"),
        (["--shutdown-timeout", "0"], "termination grace period"),
        (["-O", "3", "--port=1"], "set by the operator"),
    ],
)
def test_the_flag_contract_refuses(args: list[str], match: str) -> None:
    with pytest.raises(PlanningError, match=match):
        parse_extra_args(args)


@pytest.mark.parametrize(
    "args",
    [
        ["--hf-token", "hf_secret"],
        ["--hf_token=hf_secret"],
        ["--api-key", "sk-1"],
        ["--ssl-keyfile.api_key", "x"],
    ],
)
def test_secret_flags_are_refused_pointing_at_secret_refs(args: list[str]) -> None:
    with pytest.raises(PlanningError, match="carries a secret") as err:
        parse_extra_args(args)
    assert "SecretRef" in str(err.value) or "Secret" in str(err.value)
    assert "hf_secret" not in str(err.value).split("carries")[1]


@pytest.mark.parametrize(
    "args",
    [
        ["--enforce-eager"],
        ["--max-num-batched-tokens", "8k"],
        ["--max-num-batched-tokens=8192"],
        ["--long-prefill-token-threshold", "512"],  # says "token" but carries none
        ["--compilation-config", '{"mode": 3}'],
        ["--compilation-config.mode", "3"],
        ["-O3"],
        ["-O", "2"],
        ["--no-enable-chunked-prefill"],
        ["--seed", "42", "--chat-template", "{{ messages }}"],
    ],
)
def test_valid_flags_pass(args: list[str]) -> None:
    assert parse_extra_args(args).args == tuple(args)


def test_the_contract_is_the_pinned_vllms() -> None:
    contract = flag_contract()
    assert contract.vllm_version == "0.32.0"
    assert len({f.dest for f in contract.by_name.values()}) > 250
