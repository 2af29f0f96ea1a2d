"""Quantized checkpoints by their publishers' names (issue 43): read as the base model plus a scheme, FP8 run
per GPU as vLLM runs it (W8A8 on FP8 tensor cores, W8A16 through Marlin from sm_80, refused below), and FP8
offered in refusals where it would plan."""

from __future__ import annotations

import pytest

from llama_operator.api.spec import LlamaServiceSpec, Quantization
from llama_operator.catalog.checkpoints import read_checkpoint_name
from llama_operator.catalog.models import find_model
from llama_operator.planning import PlanningError
from tests.planning.builders import LLAMA_8B_ARCHITECTURE, plan, spec

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"

# Names as their publishers spell them on the Hugging Face hub, the base model and the scheme they say.
PUBLISHED = [
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "meta-llama/Llama-3.1-8B", Quantization.FP8),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "meta-llama/Llama-3.1-8B", Quantization.FP8),
    ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "meta-llama/Llama-3.1-70B", Quantization.FP8),
    ("neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8", "meta-llama/Llama-3.1-70B", Quantization.FP8),
    ("meta-llama/Llama-3.1-405B-Instruct-FP8", "meta-llama/Llama-3.1-405B", Quantization.FP8),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "meta-llama/Llama-3.1-8B", Quantization.INT8),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", "meta-llama/Llama-3.1-8B", Quantization.GPTQ),
    ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", "meta-llama/Llama-3.1-8B", Quantization.AWQ),
    ("hugging-quants/Meta-Llama-3.1-70B-Instruct-GPTQ-INT4", "meta-llama/Llama-3.1-70B", Quantization.GPTQ),
    ("hugging-quants/Meta-Llama-3.1-405B-Instruct-AWQ-INT4", "meta-llama/Llama-3.1-405B", Quantization.AWQ),
    ("TheBloke/Llama-2-13B-chat-AWQ", "meta-llama/Llama-2-13b", Quantization.AWQ),
    ("TheBloke/Llama-2-7B-Chat-GPTQ", "meta-llama/Llama-2-7b", Quantization.GPTQ),
]


@pytest.mark.parametrize(("name", "base", "scheme"), PUBLISHED)
def test_a_published_checkpoint_name_is_its_base_model_and_scheme(
    name: str, base: str, scheme: Quantization
) -> None:
    assert read_checkpoint_name(name).quantization is scheme
    known, expected = find_model(name), find_model(base)
    assert known is not None and expected is not None
    assert known.shape == expected.shape


@pytest.mark.parametrize(("name", "base", "scheme"), [p for p in PUBLISHED if "405B" not in p[0]])
def test_a_published_checkpoint_plans_like_its_base_model_in_that_scheme(
    name: str, base: str, scheme: Quantization
) -> None:
    accelerator = {"type": "h100-80gb"}
    by_name = plan(spec(accelerator, model=name))
    said = plan(spec(accelerator, {"quantization": scheme.value}, model=base + "-Instruct"))
    assert by_name.weight_bytes == said.weight_bytes
    # vLLM reads a stored scheme from the checkpoint: --quantization fp8 would clash with its method.
    assert ("fp8" in by_name.vllm_args) is False


def test_a_name_that_says_nothing_is_not_guessed() -> None:
    assert read_checkpoint_name("meta-llama/Llama-3.1-8B-Instruct").quantization is None
    assert find_model("acme/Meta-Llama-3.1-8B-Instruct-bnb-4bit") is None
    with pytest.raises(PlanningError, match="not in the operator's built-in catalog"):
        plan(spec({"type": "l4"}, model="acme/Meta-Llama-3.1-8B-Instruct-bnb-4bit"))


def test_model_quantization_says_it_where_the_name_does_not() -> None:
    path = "/models/llama-8b-custom"
    stored = plan(spec({"type": "l4"}, model=path, architecture=LLAMA_8B_ARCHITECTURE, quantization="fp8"))
    sixteen = plan(spec({"type": "l4"}, model=path, architecture=LLAMA_8B_ARCHITECTURE))
    assert stored.weight_bytes < sixteen.weight_bytes * 0.6
    assert "--quantization" not in stored.vllm_args
    assert any(n.startswith("fp8 (from model.quantization): W8A8 on l4") for n in stored.notes)


def test_engine_quantization_may_repeat_the_checkpoints_scheme_not_contradict_it() -> None:
    name = "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"
    plan(spec({"type": "l4"}, {"quantization": "awq"}, model=name))
    with pytest.raises(PlanningError) as refused:
        plan(spec({"type": "l4"}, {"quantization": "fp8"}, model=name))
    assert str(refused.value) == (
        "engine.quantization fp8 contradicts the checkpoint's awq weights (from the name's suffix -AWQ-INT4): "
        "remove engine.quantization (vLLM reads the checkpoint's scheme), or set model.quantization to how the "
        "checkpoint is stored"
    )


@pytest.mark.parametrize("accelerator", ["l4", "l40s", "h100-80gb", "h200", "b200"])
def test_fp8_is_w8a8_where_the_gpu_has_fp8_tensor_cores(accelerator: str) -> None:
    p = plan(spec({"type": accelerator}, model="RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"))
    assert any(n.startswith(f"fp8 (from the name's suffix -FP8): W8A8 on {accelerator}") for n in p.notes)


@pytest.mark.parametrize("accelerator", ["a10g", "a100-40gb", "a100-80gb"])
def test_fp8_is_weight_only_through_marlin_on_ampere(accelerator: str) -> None:
    # Issue 43: refused on A10G and A100, which vLLM runs FP8 checkpoints on (W8A16, Marlin, sm_80+).
    p = plan(spec({"type": accelerator}, model="RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"))
    assert any("weight-only (W8A16) through vLLM's Marlin kernels" in n for n in p.notes), p.notes
    on_the_fly = plan(spec({"type": accelerator}, {"quantization": "fp8"}, model=LLAMA_8B))
    assert on_the_fly.vllm_args[on_the_fly.vllm_args.index("--quantization") + 1] == "fp8"
    assert on_the_fly.weight_bytes == p.weight_bytes


def test_fp8_on_a_t4_is_refused_with_what_runs_there() -> None:
    with pytest.raises(PlanningError) as refused:
        plan(spec({"type": "t4"}, model="RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"))
    message = str(refused.value)
    assert message.startswith("fp8 weights (the name's suffix -FP8) need compute capability sm_80 or newer")
    assert "t4 is sm_75: serve a 4-bit AWQ or GPTQ checkpoint" in message


def test_w8a8_fp8_prefills_on_fp8_tensor_cores_and_marlin_does_not() -> None:
    l4_fp8 = plan(spec({"type": "l4"}, {"quantization": "fp8"}, model=LLAMA_8B))
    l4_16 = plan(spec({"type": "l4"}, model=LLAMA_8B))
    assert l4_fp8.prefill_seconds_per_token == pytest.approx(l4_16.prefill_seconds_per_token / 2, rel=0.01)
    a100_fp8 = plan(spec({"type": "a100-80gb"}, {"quantization": "fp8"}, model=LLAMA_8B))
    a100_16 = plan(spec({"type": "a100-80gb"}, model=LLAMA_8B))
    assert a100_fp8.prefill_seconds_per_token == a100_16.prefill_seconds_per_token


def test_fp8_is_offered_where_16_bit_weights_miss_the_tpot_objective() -> None:
    # Issue 43: a LoRA service on an L4 refused with "use a faster accelerator", never offered FP8.
    def lora_service(quantization: str) -> LlamaServiceSpec:
        return LlamaServiceSpec.model_validate(
            {
                "model": {"name": LLAMA_8B},
                "accelerator": {"type": "l4"},
                "engine": {"quantization": quantization},
                "adapters": [{"name": "sql", "source": "org/sql-lora", "rank": 16}],
                "autoscaling": {"slo": {"ttftSeconds": 1, "tpotSeconds": 0.075}},
            }
        )

    with pytest.raises(PlanningError) as refused:
        plan(lora_service("none"))
    assert str(refused.value).endswith(
        "engine.quantization fp8 plans on l4 (vLLM quantizes the 16-bit weights to 8 bits as it loads them, "
        "W8A8 there)"
    )
    assert plan(lora_service("fp8")).accelerator == "l4"


def test_fp8_is_offered_where_16_bit_weights_do_not_fit() -> None:
    with pytest.raises(PlanningError) as refused:
        plan(spec({"type": "a100-80gb"}, model=LLAMA_70B))
    assert (
        "engine.quantization fp8 plans on a100-80gb (vLLM quantizes the 16-bit weights to 8 bits as it loads "
        "them, W8A16 there)" in str(refused.value)
    )
    plan(spec({"type": "a100-80gb"}, {"quantization": "fp8"}, model=LLAMA_70B))
