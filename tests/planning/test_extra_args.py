"""extraArgs validation: owned flags name the spec field to use, garbage is rejected."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from llama_operator.api.settings import Settings
from llama_operator.api.spec import MIG_PROFILES_BY_TYPE, AcceleratorType, DType, Quantization
from llama_operator.catalog.vllm_flags import flag_contract
from llama_operator.desired.pod import build_pod_template
from llama_operator.planning import PlanningError
from llama_operator.planning.extra_args import parse_extra_args
from llama_operator.planning.flag_policy import OWNED_FLAGS, PLANNER_DEFAULTS
from llama_operator.reconcile.outcome import plan_llamaservice


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
        (["--compilation-config.level", "3"], "has no such key"),  # vLLM 0.32 renamed it: mode
        (["--compilation-config", '{"level": 3}'], "has a key that is not one of its keys"),
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


# --- the owned set is derived from what the operator emits, not kept by hand ---------------------------


def _specs_over_every_enum() -> Iterator[dict[str, Any]]:
    """Every accelerator family (MIG slices included) x dtype x quantization, and every optional knob the
    planner turns into a flag (prefix caching, cache, revision, counts, engine sizes) on a few of them."""
    model = {"name": "meta-llama/Llama-3.2-1B-Instruct"}
    accelerators: list[dict[str, Any]] = [
        {"type": t.value} for t in AcceleratorType if t is not AcceleratorType.AUTO
    ] + [{"type": t.value, "mig": p} for t, profiles in MIG_PROFILES_BY_TYPE.items() for p in profiles]
    for accelerator, dtype, quantization in itertools.product(accelerators, DType, Quantization):
        yield {
            "model": model,
            "accelerator": accelerator,
            "engine": {"dtype": dtype.value, "quantization": quantization.value},
        }
    knobs = itertools.product(
        [{"type": "t4"}, {"type": "a100-80gb", "count": 2}, {"type": "cpu"}],
        [True, False],
        [None, {"persistentVolumeClaim": "models"}],
        [None, "main"],
        [{}, {"maxModelLen": 2048, "maxNumSeqs": 8, "gpuMemoryUtilization": 0.8}],
    )
    for accelerator, prefix_caching, cache, revision, sizes in knobs:
        model_fields: dict[str, Any] = {**model}
        if cache is not None:
            model_fields["cache"] = cache
        if revision is not None:
            model_fields["revision"] = revision
        yield {
            "model": model_fields,
            "accelerator": accelerator,
            "engine": {"prefixCaching": prefix_caching, **sizes},
        }


def test_every_flag_the_operator_emits_is_owned() -> None:
    """The container's argv (planner and pod builder) over every enum: each flag in it is refused in
    extraArgs (OWNED_FLAGS) or is a default the planner takes from extraArgs (PLANNER_DEFAULTS)."""
    contract = flag_contract()
    settings = Settings()
    emitted: set[str] = set()
    planned = 0
    for index, spec in enumerate(_specs_over_every_enum()):
        body = {"metadata": {"name": f"s{index}", "namespace": "t"}, "spec": spec}
        try:
            svc, plan = plan_llamaservice(body, settings, None)
        except PlanningError:
            continue  # refused with its reason (fp8 below sm_89, ...): no pod
        planned += 1
        template = build_pod_template(svc, plan, settings, pod_monitor=False)
        argv: list[str] = template["spec"]["containers"][0]["args"]
        for token in argv:
            if token.startswith("-") and not token.lstrip("-").replace(".", "").isdigit():
                flag = contract.lookup(token.split("=", 1)[0])
                assert flag is not None, f"{token} is not a flag of the pinned vLLM"
                emitted.add(flag.dest)
    assert planned > 400
    unowned = emitted - set(OWNED_FLAGS) - set(PLANNER_DEFAULTS)
    assert not unowned, f"emitted by the operator but accepted in extraArgs: {sorted(unowned)}"
    # Every alias of an emitted flag is refused too (-tp, --no-enable-prefix-caching, --max_model_len).
    names_by_dest = {flag.dest: flag.names for flag in contract.flags()}
    for dest in emitted & set(OWNED_FLAGS):
        for name in names_by_dest[dest]:
            underscored = "--" + name[2:].replace("-", "_") if name.startswith("--") else name
            for spelling in {name, underscored}:
                with pytest.raises(PlanningError, match="set by the operator"):
                    parse_extra_args([spelling, "1"])


@pytest.mark.parametrize(
    "name", ["--host", "--port", "--uds", "--model", "--served-model-name", "--help", "-h", "--config"]
)
def test_the_owned_set_holds_the_server_identity(name: str) -> None:
    with pytest.raises(PlanningError, match="set by the operator"):
        parse_extra_args([name, "x"])
    with pytest.raises(PlanningError, match="set by the operator"):
        parse_extra_args([f"{name}.x", "1"])  # a dotted sub-key replaces the flag's value


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--block-size", "0"], "more than 0"),  # CacheConfig: block_size > 0
        (["--max-num-batched-tokens", "0"], "at least 1"),
        (["--prefix-cache-retention-interval", "-1"], "at least 0"),
        (["--watermark", "1"], "less than 1"),
        (["--attention-backend", "FLASH_TURBO"], "must be one of"),
        (["--attention-backend", "FLASHINFER", "-ac.backend", "TRITON_ATTN"], "mutually exclusive"),
        (["--attention-backend=FLASHINFER", "--attention-config", '{"backend": "TRITON_ATTN"}'], "exclusive"),
        (["--moe-backend", "warp"], "must be one of"),
        (["--limit-mm-per-prompt", "images"], "a JSON value"),
        (["--override-generation-config", "None"], "a JSON value"),
        (["--kv-transfer-config", '{"kv_conector": "x"}'], "has a key that is not one of its keys"),
        (["--kv-transfer-config.kv_conector", "x"], "did you mean --kv-transfer-config.kv_connector"),
        # LoRA is spec.adapters' (sized, loaded and routed by the operator), never extraArgs'.
        (["--lora-modules", "sql=/adapters/sql"], "set by the operator; list the adapters in spec.adapters"),
        (["--enable-lora"], "set by the operator; list the adapters in spec.adapters"),
        (["--max-loras", "4"], "set by the operator; the planner sizes it from spec.adapters"),
        (["--max-lora-rank", "64"], "set by the operator; set spec.adapters"),
        (["--max-cpu-loras", "8"], "set by the operator; the planner sizes it from spec.adapters"),
        (["--grpc-port", "50051"], "VLLM_USE_RUST_FRONTEND"),
        (["-O", "fast"], "-O takes 0, 1, 2 or 3"),
        (["--cpu-offload-gb", "-0.5"], "give it with = in one item"),  # vLLM reads -0.5 as a dotted flag
        (["--compilation-config."], "has no such key"),
        (["--max-num-batched-tokens", "1.5K"], "whole number such as 8192 or 8k"),
    ],
)
def test_values_are_checked_as_vllm_checks_them(args: list[str], match: str) -> None:
    with pytest.raises(PlanningError, match=match):
        parse_extra_args(args)


@pytest.mark.parametrize(
    "args",
    [
        ["--kv-transfer-config", '{"kv_connector_extra_config": {"api_key": "sk-live-1"}}'],
        ["--kv-transfer-config.kv_connector_extra_config", '{"hf_token": "sk-live-1"}'],
        ["--model-loader-extra-config", '{"secret": "sk-live-1"}'],
        ["--hf-overrides", '{"x": [{"password": "sk-live-1"}]}'],
        ["--kv-transfer-config.kv_connector_extra_config.api_key", "sk-live-1"],
    ],
)
def test_secrets_inside_structured_values_are_refused(args: list[str]) -> None:
    with pytest.raises(PlanningError, match="secret") as error:
        parse_extra_args(args)
    assert "sk-live-1" not in str(error.value)


@pytest.mark.parametrize(
    ("args", "backend"),
    [
        (["-ac.backend", "FLASHINFER"], "FLASHINFER"),
        (["--attention-config.backend=TRITON_ATTN"], "TRITON_ATTN"),
        (["--attention-config", '{"backend": "FLEX_ATTENTION"}'], "FLEX_ATTENTION"),
        (["--attention-backend", "flashinfer"], "flashinfer"),  # vLLM upper-cases it
        (["--enforce-eager"], None),
    ],
)
def test_the_attention_backend_is_read_in_both_spellings(args: list[str], backend: str | None) -> None:
    assert parse_extra_args(args).attention_backend == backend


def test_a_backend_in_attention_config_replaces_the_planners_on_a_t4() -> None:
    """vLLM refuses --attention-backend with attention_config.backend: the planner must not add its own."""
    body = {
        "metadata": {"name": "t", "namespace": "t"},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
            "accelerator": {"type": "t4"},
            "engine": {"extraArgs": ["-ac.backend", "FLEX_ATTENTION"]},
        },
    }
    _, plan = plan_llamaservice(body, Settings(), None)
    assert "--attention-backend" not in plan.vllm_args


@pytest.mark.parametrize(
    "args",
    [
        ["--moe-backend", "Flashinfer-Cutlass"],  # vLLM lower-cases and reads - as _
        ["--compilation-config.cudagraph_capture_sizes+", "1,2,4"],  # append to a list
        ["--cpu-offload-gb=-0"],
        ["--limit-mm-per-prompt", '{"image": 2}'],
        ["--safetensors-load-strategy", "None"],
        ["--max-num-batched-tokens", "2.5k"],
        ["--attention-backend", "auto"],
    ],
)
def test_values_vllm_accepts_pass(args: list[str]) -> None:
    assert parse_extra_args(args).args == tuple(args)


@pytest.mark.parametrize(
    "args",
    [
        ["--hf-token=hf_LEAKED"],
        ["--hf-token hf_LEAKED"],
        ["--api-key", "hf_LEAKED"],
        ["--api_key=hf_LEAKED"],
        ['--kv-transfer-config={"api_key": "hf_LEAKED"}'],
        ["--kv-transfer-config", '{"api_key": hf_LEAKED'],  # not JSON: not echoed either
        ["--model-loader-extra-config", '{"token": "hf_LEAKED"}'],
        ["--speculative-config", '{"draft": {"secret": "hf_LEAKED"}}'],
    ],
)
def test_no_error_shows_a_secret_value(args: list[str]) -> None:
    """Planning errors become status messages, Events and log lines."""
    with pytest.raises(PlanningError) as error:
        parse_extra_args(args)
    assert "LEAKED" not in str(error.value)
