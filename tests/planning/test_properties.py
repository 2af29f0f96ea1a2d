"""Property tests of the planner: never over memory, monotone in memory, sane engine settings."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from llama_operator.api.plan import Plan
from llama_operator.api.spec import AcceleratorType, Quantization
from llama_operator.catalog.accelerators import ACCELERATORS, MIB
from llama_operator.catalog.models import ModelShape
from llama_operator.catalog.vllm import captured_batch_at_most
from llama_operator.planning import PlanningConfig, PlanningError
from llama_operator.planning.engine import EAGER_KV_SHARE
from llama_operator.planning.inventory import inventory_from_nodes
from llama_operator.planning.sizing import (
    auto_max_num_seqs,
    kv_heads_per_device,
    largest_max_model_len,
    runtime_overhead_bytes,
    size_gpu_memory,
)
from tests.planning.builders import gpu_node, plan, spec

architectures = st.fixed_dictionaries(
    {
        "layers": st.integers(1, 128),
        "kvHeads": st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
        "headDim": st.sampled_from([32, 64, 80, 96, 128, 256]),
        "parameters": st.integers(1_000_000, 200_000_000_000),
        "maxContext": st.integers(128, 1_000_000),
    }
)

# Every GPU option of the catalog: whole GPUs in tensor-parallel counts and every MIG slice.
gpu_options = st.sampled_from(
    [{"type": str(a.type), "count": n} for a in ACCELERATORS.values() if a.is_gpu for n in (1, 2, 4, 8)]
    + [{"type": str(a.type), "mig": p.name} for a in ACCELERATORS.values() for p in a.mig_profiles]
)
engines = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["auto", "half", "float32"]),
        "quantization": st.sampled_from([q.value for q in Quantization]),
        "gpuMemoryUtilization": st.one_of(st.just("auto"), st.floats(0.5, 0.98)),
    },
    optional={"maxModelLen": st.integers(128, 200_000)},
)


def _try_plan(
    accelerator: dict[str, Any], engine: dict[str, Any], arch: dict[str, Any], **kw: Any
) -> Plan | None:
    try:
        return plan(spec(accelerator, engine, model="acme/model", architecture=arch), **kw)
    except PlanningError:
        return None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch=architectures, accelerator=gpu_options, engine=engines)
def test_never_over_memory(arch: dict[str, Any], accelerator: dict[str, Any], engine: dict[str, Any]) -> None:
    p = _try_plan(accelerator, engine, arch)
    assume(p is not None)
    assert p is not None
    tp = p.count
    kv_per_token_per_device = (
        p.kv_bytes_per_token * kv_heads_per_device(arch["kvHeads"], tp) // arch["kvHeads"]
    )
    device_memory = p.memory_bytes // tp
    # Without CUDA graphs (--enforce-eager) their pool is not reserved.
    used = p.weight_bytes + runtime_overhead_bytes(
        p.weight_bytes, tensor_parallel=tp, cuda_graphs=not p.enforce_eager
    )
    used += p.kv_cache_tokens * kv_per_token_per_device
    assert used <= device_memory * p.gpu_memory_utilization
    # Engine settings vLLM accepts and that the KV cache backs.
    assert p.max_num_seqs >= 1
    assert 1 <= p.max_model_len <= arch["maxContext"]
    assert p.max_model_len <= p.kv_cache_tokens  # at least one full sequence fits
    assert p.max_concurrency >= 1


@settings(max_examples=300, deadline=None)
@given(
    arch=architectures,
    engine=engines,
    memories=st.lists(st.integers(4_000, 200_000), min_size=2, max_size=2).map(sorted),
    product=st.sampled_from(["Tesla-T4", "NVIDIA-A10G", "NVIDIA-L4", "NVIDIA-H100-80GB-HBM3"]),
)
def test_monotone_in_memory(
    arch: dict[str, Any], engine: dict[str, Any], memories: list[int], product: str
) -> None:
    """More memory (as a node labels it) never plans fewer KV tokens or a shorter context, nor fails."""
    smaller, larger = (inventory_from_nodes([gpu_node("n", product, 1, memory_mib=m)]) for m in memories)
    accel_type = next(str(a.type) for a in ACCELERATORS.values() if product in a.product_labels)
    small = _try_plan({"type": accel_type}, engine, arch, inventory=smaller)
    large = _try_plan({"type": accel_type}, engine, arch, inventory=larger)
    if small is None:
        return
    assert large is not None
    if small.enforce_eager and not large.enforce_eager:
        # Where the smaller gave the CUDA-graph pool to the KV cache (--enforce-eager: the pool was over
        # EAGER_KV_SHARE of it), the larger may keep the graphs (faster steps) for at most that share.
        assert large.kv_cache_tokens * (1 + EAGER_KV_SHARE) >= small.kv_cache_tokens
    else:
        assert large.kv_cache_tokens >= small.kv_cache_tokens
    assert large.max_model_len >= small.max_model_len
    if engine.get("maxNumSeqs") is None:
        assert large.max_num_seqs >= small.max_num_seqs


@settings(max_examples=500, deadline=None)
@given(
    layers=st.integers(1, 128),
    kv_heads=st.sampled_from([1, 2, 4, 8, 16, 32]),
    head_dim=st.sampled_from([32, 64, 128]),
    parameters=st.integers(1_000_000, 400_000_000_000),
    tp=st.sampled_from([1, 2, 4, 8]),
    memories=st.lists(st.integers(1, 200_000), min_size=2, max_size=2).map(sorted),
    util=st.floats(0.5, 0.98),
    kv_dtype_bytes=st.sampled_from([1, 2, 4]),
    context=st.integers(128, 1_000_000),
)
def test_sizing_is_bounded_and_monotone(
    layers: int,
    kv_heads: int,
    head_dim: int,
    parameters: int,
    tp: int,
    memories: list[int],
    util: float,
    kv_dtype_bytes: int,
    context: int,
) -> None:
    shape = ModelShape(
        layers=layers, kv_heads=kv_heads, head_dim=head_dim, parameters=parameters, max_context=context
    )
    sizings = [
        size_gpu_memory(
            shape,
            device_memory_bytes=m * MIB,
            tensor_parallel=tp,
            gpu_memory_utilization=util,
            weight_bytes=parameters * 2,
            kv_dtype_bytes=kv_dtype_bytes,
        )
        for m in memories
    ]
    for sizing in sizings:
        assert sizing.kv_cache_tokens >= 0
        if sizing.kv_cache_tokens > 0:
            assert sizing.used_bytes_per_device <= sizing.device_memory_bytes * util
    small, large = sizings
    assert large.kv_cache_tokens >= small.kv_cache_tokens
    assert largest_max_model_len(large.kv_cache_tokens, context) >= largest_max_model_len(
        small.kv_cache_tokens, context
    )
    assert largest_max_model_len(large.kv_cache_tokens, context) <= context


@given(
    kv_tokens=st.integers(0, 10_000_000),
    more=st.integers(0, 10_000_000),
    max_model_len=st.integers(1, 1_000_000),
    ceiling=st.integers(1, 1024),
)
def test_auto_max_num_seqs(kv_tokens: int, more: int, max_model_len: int, ceiling: int) -> None:
    seqs = auto_max_num_seqs(kv_tokens, max_model_len, typical_tokens=2048, ceiling=ceiling)
    assert 1 <= seqs <= ceiling
    assert seqs == captured_batch_at_most(seqs)  # a CUDA-graph capture size
    assert auto_max_num_seqs(kv_tokens + more, max_model_len, typical_tokens=2048, ceiling=ceiling) >= seqs


def test_auto_plan_is_never_pricier_than_any_fitting_catalog_option() -> None:
    """`auto` (no inventory) costs no more than any explicit option that plans."""
    config = PlanningConfig()
    for model in ("meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B"):
        chosen = plan(spec(model=model), config)
        for accel in ACCELERATORS.values():
            if accel.type == AcceleratorType.CPU:
                continue
            options: list[dict[str, Any]] = [{"type": str(accel.type), "count": n} for n in (1, 2, 4, 8)]
            options += [{"type": str(accel.type), "mig": p.name} for p in accel.mig_profiles]
            for option in options:
                try:
                    other = plan(spec(option, model=model), config)
                except PlanningError:
                    continue
                assert chosen.price_per_hour <= other.price_per_hour + 1e-9, (model, option)
