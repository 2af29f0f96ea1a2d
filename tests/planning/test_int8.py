"""quantization: int8 plans a W8A8 INT8 checkpoint (compressed-tensors) at 8-bit weights where vLLM has
INT8 kernels (sm_75 to sm_90, and the CPU), and refuses it, naming the alternative, where it has none."""

from __future__ import annotations

import pytest

from llama_operator.catalog.accelerators import BUILTIN_CATALOG
from llama_operator.planning import PlanningError
from llama_operator.planning.inventory import inventory_from_nodes
from tests.planning.builders import gpu_node, plan, spec

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
W8A8_8B = "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8"


def test_int8_halves_the_linear_weights_and_the_kv_cache_grows() -> None:
    sixteen = plan(spec({"type": "a10g"}, {"maxModelLen": 8192}, model=LLAMA_8B))
    eight = plan(spec({"type": "a10g"}, {"maxModelLen": 8192, "quantization": "int8"}, model=LLAMA_8B))
    # Linear layers at one byte, embeddings and lm_head (1.05 B of 8.03 B parameters) still at two.
    assert eight.weight_bytes == pytest.approx(sixteen.weight_bytes * (1 + 1.05 / 8.03) / 2, rel=0.01)
    freed = sixteen.weight_bytes - eight.weight_bytes
    # Most of what the weights free goes to the KV cache (the activation estimate shrinks with them).
    assert (eight.kv_cache_tokens - sixteen.kv_cache_tokens) * eight.kv_bytes_per_token == pytest.approx(
        freed, rel=0.05
    )
    assert eight.vllm_args[eight.vllm_args.index("--quantization") + 1] == "compressed-tensors"
    assert any(n.startswith("quantization int8: a W8A8 INT8 checkpoint") for n in eight.notes)


def test_int8_where_vllm_has_kernels_and_a_refusal_naming_fp8_where_not() -> None:
    for accel in BUILTIN_CATALOG.accelerators.values():
        service = spec({"type": accel.type}, {"quantization": "int8", "maxModelLen": 4096})
        cc = accel.compute_capability
        if cc is None or (7, 5) <= (cc.major, cc.minor) < (10, 0):
            assert "--quantization" in plan(service).vllm_args, accel.type
            continue
        with pytest.raises(PlanningError, match=r"engine\.quantization int8.*use quantization fp8") as error:
            plan(service)
        assert f"{accel.type} is {cc}" in str(error.value)
    assert {a.type for a in BUILTIN_CATALOG.accelerators.values() if not a.supports_int8_w8a8} == {"b200"}


def test_auto_skips_gpus_without_int8_kernels() -> None:
    only_b200 = inventory_from_nodes([gpu_node("b", "NVIDIA-B200", 8)])
    with pytest.raises(PlanningError, match="no accelerator present in the cluster fits"):
        plan(spec({"type": "auto"}, {"quantization": "int8"}, model=LLAMA_8B), inventory=only_b200)
    with_h100 = inventory_from_nodes(
        [gpu_node("b", "NVIDIA-B200", 8), gpu_node("h", "NVIDIA-H100-80GB-HBM3", 8)]
    )
    chosen = plan(spec({"type": "auto"}, {"quantization": "int8"}, model=LLAMA_8B), inventory=with_h100)
    assert chosen.accelerator == "h100-80gb"


def test_a_w8a8_checkpoint_is_read_as_int8_by_its_name_and_model_quantization_can_say_otherwise() -> None:
    # Issue 43: the publisher's name says the scheme; engine.quantization int8 is no longer needed for it.
    by_name = plan(spec({"type": "l4"}, model=W8A8_8B))
    said = plan(spec({"type": "l4"}, {"quantization": "int8"}, model=W8A8_8B))
    assert by_name.weight_bytes == said.weight_bytes < 8_030_261_248 * 2 * 0.6
    assert by_name.vllm_args[by_name.vllm_args.index("--quantization") + 1] == "compressed-tensors"
    # A checkpoint whose name misleads: model.quantization none plans 16-bit weights.
    sixteen = plan(spec({"type": "l4"}, model=W8A8_8B, quantization="none"))
    assert sixteen.weight_bytes == 8_030_261_248 * 2
