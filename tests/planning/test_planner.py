"""The planner on concrete LlamaServices: accelerators, placement, sizing, arguments, errors."""

from __future__ import annotations

import pytest

from llama_operator.api.plan import Plan
from llama_operator.catalog.accelerators import GIB, MIB
from llama_operator.planning import DEFAULT_CPU_IMAGE, DEFAULT_GPU_IMAGE, PlanningConfig, PlanningError
from llama_operator.planning.inventory import inventory_from_nodes
from llama_operator.planning.sizing import KV_BLOCK_TOKENS
from tests.planning.builders import gpu_node, mig_mixed_node, mig_single_node, node, plan, spec

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _arg(plan_: Plan, flag: str) -> str:
    args = plan_.vllm_args
    return args[args.index(flag) + 1]


# --- T4 -------------------------------------------------------------------------------------------


def test_llama_1b_on_t4() -> None:
    p = plan(spec({"type": "t4"}))
    assert p.accelerator == "t4"
    assert p.dtype == "half"
    assert _arg(p, "--dtype") == "half"  # no bf16 on sm_75
    assert _arg(p, "--attention-backend") == "TRITON_ATTN"  # no FlashAttention-2 on sm_75
    assert p.kv_bytes_per_token == 32 * 1024  # design brief: 32 KiB per token in fp16
    assert p.weight_bytes == 1_235_814_400 * 2
    assert p.resources == {"nvidia.com/gpu": "1"}
    assert p.node_selector == {"nvidia.com/gpu.product": "Tesla-T4"}
    assert [t.to_wire() for t in p.tolerations] == [GPU_TOLERATION]
    assert p.node_affinity == []  # a T4 has no MIG
    assert p.image == DEFAULT_GPU_IMAGE == "vllm/vllm-openai:v0.32.0"


def test_t4_kv_cache_is_near_the_design_estimate() -> None:
    """Design brief: ~330k tokens at utilization 0.9 on a T4.

    The brief's estimate is 16 GB * 0.9 - 2.47 GB weights - ~1.2 GB. This catalog uses the 15360 MiB
    (16.1 GB) the GPU reports, and 1.3 GiB of runtime overhead (non-torch 512 MiB, activations
    512 MiB + 2 % of weights, CUDA graphs 256 MiB): 324k tokens, 2 % below the estimate.
    """
    p = plan(spec({"type": "t4"}))
    assert p.gpu_memory_utilization == 0.9
    assert p.kv_cache_tokens == pytest.approx(330_000, rel=0.03)
    assert p.kv_cache_tokens % KV_BLOCK_TOKENS == 0
    # The model's 131072-token context fits, but the default leaves room for 16 sequences that long.
    assert p.max_model_len == p.kv_cache_tokens // 16 // 256 * 256 < 131_072
    assert p.max_concurrency == pytest.approx(p.kv_cache_tokens / p.max_model_len, abs=0.01)


def test_fp8_on_t4_is_refused_naming_the_compute_capability() -> None:
    with pytest.raises(PlanningError, match=r"fp8.*sm_80 or newer.*W8A8.*sm_89.*t4 is sm_75.*AWQ or GPTQ"):
        plan(spec({"type": "t4"}, {"quantization": "fp8"}))
    with pytest.raises(PlanningError, match=r"kv-cache-dtype fp8.*t4 \(sm_75\)"):
        plan(spec({"type": "t4"}, {"extraArgs": ["--kv-cache-dtype", "fp8"]}))


def test_bfloat16_on_t4_is_refused() -> None:
    with pytest.raises(PlanningError, match=r"bfloat16.*t4.*use dtype half"):
        plan(spec({"type": "t4"}, {"dtype": "bfloat16"}))


def test_user_attention_backend_replaces_the_planners() -> None:
    p = plan(spec({"type": "t4"}, {"extraArgs": ["--attention-backend", "FLASHINFER"]}))
    assert p.vllm_args.count("--attention-backend") == 1
    assert _arg(p, "--attention-backend") == "FLASHINFER"


# --- A10G, L4, H100 -------------------------------------------------------------------------------


def test_a10g_runs_bfloat16_without_attention_override() -> None:
    p = plan(spec({"type": "a10g"}))
    assert p.dtype == "bfloat16"
    assert _arg(p, "--dtype") == "bfloat16"
    assert "--attention-backend" not in p.vllm_args
    assert p.node_selector == {"nvidia.com/gpu.product": "NVIDIA-A10G"}
    assert p.kv_cache_tokens > plan(spec({"type": "t4"})).kv_cache_tokens


def test_fp8_on_l4_and_h100() -> None:
    for accel in ("l4", "h100-80gb"):
        p = plan(spec({"type": accel}, {"quantization": "fp8"}))
        assert _arg(p, "--quantization") == "fp8"
        # Linear layers in one byte, the tied embedding in two.
        assert p.weight_bytes < plan(spec({"type": accel})).weight_bytes * 0.7


def test_awq_uses_the_checkpoints_method_and_half() -> None:
    p = plan(spec({"type": "a10g"}, {"quantization": "awq"}, model="meta-llama/Llama-3.1-8B-Instruct"))
    assert "--quantization" not in p.vllm_args  # would force vLLM's non-Marlin kernel
    assert p.dtype == "half"
    assert p.weight_bytes < 8_030_261_248  # about 0.5 B/param + 16-bit embeddings


def test_tensor_parallel() -> None:
    p = plan(spec({"type": "a10g", "count": 4}, model="meta-llama/Llama-3.1-8B-Instruct"))
    assert p.count == 4
    assert p.display_name == "4xa10g"
    assert p.resources == {"nvidia.com/gpu": "4"}
    assert _arg(p, "--tensor-parallel-size") == "4"
    assert p.memory_bytes == 4 * 23028 * MIB
    single = plan(spec({"type": "a10g"}, model="meta-llama/Llama-3.1-8B-Instruct"))
    assert "--tensor-parallel-size" not in single.vllm_args
    assert p.kv_cache_tokens > 4 * single.kv_cache_tokens  # weights split four ways leave more KV room


def test_tensor_parallel_must_split_kv_heads_evenly() -> None:
    arch = {"layers": 4, "kvHeads": 6, "headDim": 64, "parameters": 100_000_000, "maxContext": 4096}
    with pytest.raises(PlanningError, match="KV heads"):
        plan(spec({"type": "a10g", "count": 4}, model="acme/odd", architecture=arch))


def test_full_gpu_on_mig_capable_type_avoids_nodes_mid_reconfiguration() -> None:
    p = plan(spec({"type": "a100-80gb"}))
    assert p.resources == {"nvidia.com/gpu": "1"}
    [term] = p.node_affinity
    [requirement] = term.match_expressions
    assert requirement.key == "nvidia.com/mig.config.state"
    assert requirement.operator == "NotIn"
    assert set(requirement.values) == {"pending", "rebooting", "failed"}


# --- MIG ------------------------------------------------------------------------------------------


def test_mig_mixed_placement() -> None:
    p = plan(spec({"type": "a100-80gb", "mig": "1g.10gb"}))
    assert p.mig == "1g.10gb"
    assert p.mig_strategy == "mixed"
    assert p.resources == {"nvidia.com/mig-1g.10gb": "1"}
    assert "nvidia.com/gpu" not in p.resources
    assert p.node_selector == {"nvidia.com/gpu.product": "A100-SXM4-80GB"}
    [term] = p.node_affinity
    assert [r.to_wire() for r in term.match_expressions] == [
        {"key": "nvidia.com/mig.config.state", "operator": "In", "values": ["success"]}
    ]
    assert [t.to_wire() for t in p.tolerations] == [GPU_TOLERATION]
    assert "--tensor-parallel-size" not in p.vllm_args
    assert p.memory_bytes == 9728 * MIB
    assert p.price_per_hour == pytest.approx(40.97 / 8 / 7, rel=1e-3)


def test_mig_single_placement() -> None:
    p = plan(spec({"type": "a100-80gb", "mig": "1g.10gb"}), PlanningConfig(mig_strategy="single"))
    assert p.mig_strategy == "single"
    assert p.resources == {"nvidia.com/gpu": "1"}
    assert p.node_selector == {"nvidia.com/gpu.product": "A100-SXM4-80GB-MIG-1g.10gb"}
    [term] = p.node_affinity
    assert term.match_expressions[0].operator == "In"
    assert term.match_expressions[0].values == ["success"]


def test_mig_single_product_comes_from_the_inventory() -> None:
    inventory = inventory_from_nodes([mig_single_node("n1", "A100-SXM4-40GB", "1g.5gb", 7)])
    p = plan(spec({"type": "a100-40gb", "mig": "1g.5gb"}), PlanningConfig(mig_strategy="single"), inventory)
    assert p.node_selector == {"nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb"}


def test_mig_strategy_follows_the_nodes_offering_the_slice() -> None:
    inventory = inventory_from_nodes([mig_single_node("n1", "NVIDIA-H100-80GB-HBM3", "1g.10gb", 7)])
    p = plan(spec({"type": "h100-80gb", "mig": "1g.10gb"}), PlanningConfig(mig_strategy="mixed"), inventory)
    assert p.mig_strategy == "single"
    assert p.resources == {"nvidia.com/gpu": "1"}
    assert p.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}
    assert any("MIG strategy single" in n for n in p.notes)


def test_the_specs_mig_strategy_is_kept_without_nodes_and_against_the_operators_default() -> None:
    single = spec({"type": "h100-80gb", "mig": "1g.10gb", "migStrategy": "single"})
    p = plan(single, PlanningConfig(mig_strategy="mixed"))
    assert p.mig_strategy == "single"
    assert p.resources == {"nvidia.com/gpu": "1"}
    assert p.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}
    # Nodes of the other strategy only: the spec's choice stands, and the plan says no node offers it.
    mixed_only = inventory_from_nodes([mig_mixed_node("n1", "NVIDIA-H100-80GB-HBM3", "1g.10gb", 7)])
    p = plan(single, PlanningConfig(mig_strategy="mixed"), mixed_only)
    assert p.mig_strategy == "single" and any("no node offers" in n for n in p.notes)


def test_mig_strategy_needs_a_slice() -> None:
    with pytest.raises(ValueError, match="migStrategy applies to a MIG slice"):
        spec({"type": "h100-80gb", "migStrategy": "single"})


def test_mig_slice_kv_near_design_estimates() -> None:
    # Design brief (estimates at 0.9): A100-80 1g.10gb ~180k, 2g.20gb ~470k, 3g.40gb ~1.05M tokens.
    for profile, estimate in (("1g.10gb", 180_000), ("2g.20gb", 470_000), ("3g.40gb", 1_050_000)):
        p = plan(spec({"type": "a100-80gb", "mig": profile}))
        assert p.kv_cache_tokens == pytest.approx(estimate, rel=0.15), profile


def test_pending_mig_node_is_never_offered() -> None:
    pending = mig_mixed_node("pending", "A100-SXM4-80GB", "1g.10gb", 7, state="pending")
    inventory = inventory_from_nodes([pending])
    assert inventory.offers == ()
    with pytest.raises(PlanningError, match="no accelerator present"):
        plan(spec(), inventory=inventory)
    # An explicit request still plans (the pod waits), and the affinity keeps it off the pending node.
    p = plan(spec({"type": "a100-80gb", "mig": "1g.10gb"}), inventory=inventory)
    assert p.node_affinity[0].match_expressions[0].values == ["success"]
    assert any("no node offers" in n for n in p.notes)


# --- auto -----------------------------------------------------------------------------------------


def test_auto_picks_the_cheapest_present() -> None:
    inventory = inventory_from_nodes(
        [
            gpu_node("a10g", "NVIDIA-A10G", 1),
            mig_mixed_node("a100", "A100-SXM4-80GB", "1g.10gb", 7),
            gpu_node("h100", "NVIDIA-H100-80GB-HBM3", 8),
        ]
    )
    p = plan(spec(), inventory=inventory)
    assert p.display_name == "a100-80gb/1g.10gb"  # $0.73/h beats the A10G's $1.01/h
    assert p.resources == {"nvidia.com/mig-1g.10gb": "1"}
    assert p.node_selector == {"nvidia.com/gpu.product": "A100-SXM4-80GB"}

    with_t4 = inventory_from_nodes([gpu_node("t4", "Tesla-T4", 1), gpu_node("a10g", "NVIDIA-A10G", 1)])
    assert plan(spec(), inventory=with_t4).accelerator == "t4"


def test_auto_without_inventory_is_the_cheapest_catalog_option() -> None:
    p = plan(spec())
    assert p.accelerator == "t4"
    assert any("no node inventory" in n for n in p.notes)


def test_auto_skips_options_lacking_a_capability() -> None:
    inventory = inventory_from_nodes([gpu_node("t4", "Tesla-T4", 1), gpu_node("l4", "NVIDIA-L4", 1)])
    assert plan(spec(engine={"quantization": "fp8"}), inventory=inventory).accelerator == "l4"


def test_auto_uses_several_gpus_when_one_is_too_small() -> None:
    inventory = inventory_from_nodes([gpu_node("a10g", "NVIDIA-A10G", 4)])
    p = plan(
        spec(model="meta-llama/Llama-3.1-70B-Instruct", engine={"quantization": "awq"}), inventory=inventory
    )
    assert p.display_name == "4xa10g"


def test_auto_deterministic_tie_break() -> None:
    config = PlanningConfig(price_overrides={"t4": 0.1, "a10g": 0.1})  # two cheapest at the same price
    p = plan(spec(), config)
    assert p.accelerator == "a10g"  # same price, more memory
    assert plan(spec(), config) == p


def test_price_overrides() -> None:
    config = PlanningConfig(price_overrides={"a100-80gb/1g.10gb": 0.1, "h100-80gb": 8.0})
    assert plan(spec({"type": "a100-80gb", "mig": "1g.10gb"}), config).price_per_hour == 0.1
    assert plan(spec({"type": "h100-80gb", "mig": "1g.10gb"}), config).price_per_hour == pytest.approx(
        8 / 7, rel=1e-3
    )
    assert plan(spec(), config).display_name == "a100-80gb/1g.10gb"


def test_gpu_memory_from_node_labels() -> None:
    inventory = inventory_from_nodes([gpu_node("t4", "Tesla-T4", 1, memory_mib=15000)])
    p = plan(spec({"type": "t4"}), inventory=inventory)
    assert p.memory_bytes == 15000 * MIB
    assert p.kv_cache_tokens < plan(spec({"type": "t4"})).kv_cache_tokens


def test_product_present_in_the_inventory_is_selected() -> None:
    inventory = inventory_from_nodes([gpu_node("a", "NVIDIA-A100-80GB-PCIe", 2)])
    p = plan(spec({"type": "a100-80gb"}), inventory=inventory)
    assert p.node_selector == {"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe"}


# --- errors ---------------------------------------------------------------------------------------


def test_70b_on_t4_names_needed_available_and_smallest_option() -> None:
    with pytest.raises(PlanningError) as error:
        plan(spec({"type": "t4"}, model="meta-llama/Llama-3.1-70B-Instruct"))
    message = str(error.value)
    assert "does not fit on t4" in message
    assert "needs 13" in message and "GiB" in message  # ~136 GiB
    assert "t4 has 15.0 GiB" in message
    assert "smallest catalog option that fits is 2xh100-pcie" in message


def test_explicit_max_model_len_too_big_states_the_largest() -> None:
    with pytest.raises(
        PlanningError, match=r"maxModelLen 131072 does not fit on a10g.*largest maxModelLen that fits is"
    ):
        plan(spec({"type": "a10g"}, {"maxModelLen": 131_072}, model="meta-llama/Llama-3.1-8B-Instruct"))
    auto = plan(spec({"type": "a10g"}, model="meta-llama/Llama-3.1-8B-Instruct"))
    largest = auto.kv_cache_tokens - auto.kv_cache_tokens % 256  # the default leaves room for 16 shorter ones
    exact = plan(spec({"type": "a10g"}, {"maxModelLen": largest}, model="meta-llama/Llama-3.1-8B"))
    assert exact.max_model_len == largest > auto.max_model_len
    with pytest.raises(PlanningError, match=f"largest maxModelLen that fits is {largest}"):
        plan(
            spec(
                {"type": "a10g"}, {"maxModelLen": auto.kv_cache_tokens + 16}, model="meta-llama/Llama-3.1-8B"
            )
        )


def test_max_model_len_beyond_the_models_context() -> None:
    with pytest.raises(PlanningError, match="exceeds the context"):
        plan(spec({"type": "a100-80gb"}, {"maxModelLen": 8192}, model="TinyLlama/TinyLlama-1.1B-Chat-v1.0"))


def test_unknown_model_error() -> None:
    with pytest.raises(PlanningError, match=r"spec\.model\.architecture"):
        plan(spec(model="acme/secret"))


def test_custom_architecture() -> None:
    arch = {"layers": 2, "kvHeads": 2, "headDim": 32, "parameters": 2_000_000, "maxContext": 2048}
    p = plan(spec({"type": "l4"}, model="/models/tiny", architecture=arch))
    assert p.max_model_len == 2048
    assert _arg(p, "--model") == "/models/tiny"
    assert p.kv_bytes_per_token == 2 * 2 * 2 * 32 * 2


# --- arguments --------------------------------------------------------------------------------------


def test_explicit_engine_settings_and_owned_flags() -> None:
    p = plan(
        spec(
            {"type": "a10g"},
            {
                "maxModelLen": 8192,
                "maxNumSeqs": 7,
                "gpuMemoryUtilization": 0.8,
                "prefixCaching": False,
                "extraArgs": ["--enforce-eager", "--max-num-batched-tokens", "4096"],
            },
            servedName="llama",
            revision="main",
            cache={"persistentVolumeClaim": "models"},
        )
    )
    assert p.vllm_args[:8] == [
        "--model",
        "meta-llama/Llama-3.2-1B-Instruct",
        "--served-model-name",
        "llama",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    assert _arg(p, "--max-model-len") == "8192"
    assert _arg(p, "--max-num-seqs") == "7"
    assert _arg(p, "--gpu-memory-utilization") == "0.80"
    assert "--no-enable-prefix-caching" in p.vllm_args
    assert "--enable-prefix-caching" not in p.vllm_args
    assert _arg(p, "--download-dir") == "/models"
    assert _arg(p, "--revision") == "main"
    assert p.vllm_args[-3:] == ["--enforce-eager", "--max-num-batched-tokens", "4096"]
    assert p.served_model_name == "llama"


def test_defaults_leave_optional_flags_out() -> None:
    p = plan(spec({"type": "a10g"}))
    assert "--enable-prefix-caching" in p.vllm_args
    for flag in ("--download-dir", "--revision", "--quantization", "--tensor-parallel-size"):
        assert flag not in p.vllm_args
    assert p.served_model_name == "chat"  # the LlamaService's name
    assert 1 <= p.max_num_seqs <= 256
    assert p.max_num_seqs % 8 == 0  # a CUDA-graph capture size


def test_num_gpu_blocks_override_sets_the_kv_cache() -> None:
    p = plan(spec({"type": "cpu"}, {"maxNumSeqs": 2, "extraArgs": ["--num-gpu-blocks-override", "16"]}))
    assert p.kv_cache_tokens == 16 * KV_BLOCK_TOKENS
    assert p.max_model_len == 256


# --- CPU ------------------------------------------------------------------------------------------


def test_cpu_plan() -> None:
    p = plan(spec({"type": "cpu"}), PlanningConfig(cpu_kv_cache_gib=2))
    assert p.image == DEFAULT_CPU_IMAGE == "vllm/vllm-openai-cpu:v0.32.0-x86_64"
    assert p.resources == {}
    assert p.tolerations == []
    assert "--gpu-memory-utilization" not in p.vllm_args
    assert p.vllm_env == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    assert p.kv_cache_tokens == 2 * GIB // (32 * 1024)
    assert p.node_selector == {"kubernetes.io/arch": "amd64"}
    # weights 2.3 GiB + KV 2 GiB + runtime 2 GiB
    assert p.memory_request == "7Gi"
    assert p.gpu_memory_utilization == 0.0


def test_cpu_is_not_chosen_by_auto_unless_configured() -> None:
    inventory = inventory_from_nodes([node("cpu-1"), gpu_node("t4", "Tesla-T4", 1)])
    assert plan(spec(), inventory=inventory).accelerator == "t4"
    cpu_only = inventory_from_nodes([node("cpu-1")])
    with pytest.raises(PlanningError, match="no accelerator present"):
        plan(spec(), inventory=cpu_only)
    assert plan(spec(), PlanningConfig(auto_includes_cpu=True), cpu_only).accelerator == "cpu"


def test_cpu_refuses_fp8_and_tensor_parallel() -> None:
    with pytest.raises(PlanningError, match="fp8"):
        plan(spec({"type": "cpu"}, {"quantization": "fp8"}))
    with pytest.raises(PlanningError, match="count must be 1 for cpu"):
        plan(spec({"type": "cpu", "count": 2}))
