"""Memory arithmetic of a vLLM replica: weights, runtime overhead, KV cache, context, concurrency.

vLLM's own accounting (V1 engine, gpu_worker.determine_available_memory): it may use
`total_memory * gpu_memory_utilization`; from that it subtracts the weights, the peak
activation memory of a profiling forward pass, non-torch memory (CUDA context, cuBLAS and
NCCL workspaces) and the CUDA-graph pool; the rest becomes KV-cache blocks of 16 tokens.
The constants below estimate those terms; they are deliberately on the high side so that a
plan that fits here also fits in vLLM's measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llama_operator.api.spec import Quantization
from llama_operator.catalog.accelerators import MIB
from llama_operator.catalog.models import ModelShape
from llama_operator.catalog.vllm import captured_batch_at_most

# CUDA context (~300-500 MiB per process on Ampere/Hopper), cuBLAS workspace, allocator slack.
NON_TORCH_BYTES = 512 * MIB
# Peak activations of the profiling pass (max_num_batched_tokens tokens: 2048-8192) and the
# sampler's logits; the part that grows with the model's width is approximated from its weights.
ACTIVATION_BASE_BYTES = 512 * MIB
ACTIVATION_FRACTION_OF_WEIGHTS = 0.02
# CUDA graphs captured for decode batch sizes (vLLM 0.32 counts them in its memory profile).
CUDA_GRAPH_BYTES = 256 * MIB
# NCCL buffers and the custom all-reduce workspace on each GPU when tensor parallel > 1.
TENSOR_PARALLEL_BYTES = 256 * MIB
# vLLM's KV-cache block size on CUDA and CPU.
KV_BLOCK_TOKENS = 16
# Automatic max-model-len is rounded down to this many tokens (readable, and a little slack).
MAX_MODEL_LEN_STEP = 256

# Bytes per parameter of quantized linear layers (embeddings and lm_head stay in 16 bits):
# fp8 one byte (per-tensor scales are negligible); W8A8 INT8 one byte (an fp32 scale per output
# channel: 4 B per row of thousands); AWQ/GPTQ 4-bit: half a byte plus an fp16 scale and zero per
# group of 128 (4 B/128 = 0.031).
QUANTIZED_BYTES_PER_PARAMETER: dict[Quantization, float] = {
    Quantization.FP8: 1.0,
    Quantization.INT8: 1.0,
    Quantization.AWQ: 0.5 + 4 / 128,
    Quantization.GPTQ: 0.5 + 4 / 128,
}
# Share of parameters assumed to be embeddings when the architecture does not say (Llama 3 8B: 13 %).
ASSUMED_EMBEDDING_SHARE = 0.15


def weight_bytes(shape: ModelShape, *, dtype_bytes: int, quantization: Quantization) -> int:
    """Bytes of the model's weights in memory."""
    if quantization == Quantization.NONE:
        return shape.parameters * dtype_bytes
    embeddings = shape.embedding_parameters
    if embeddings is None:
        embeddings = int(shape.parameters * ASSUMED_EMBEDDING_SHARE)
    # A vision encoder stays in 16 bits too (the publishers' quantized checkpoints leave it out).
    embeddings = min(embeddings + shape.vision_parameters, shape.parameters)
    linear = shape.parameters - embeddings
    # Unquantized parts are kept in the activation dtype, at most 16 bits for quantized kernels.
    return math.ceil(linear * QUANTIZED_BYTES_PER_PARAMETER[quantization] + embeddings * min(dtype_bytes, 2))


def kv_bytes_per_token(shape: ModelShape, *, kv_dtype_bytes: int) -> int:
    """KV-cache bytes per token of the whole model: K and V, every layer, every KV head."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * kv_dtype_bytes


def kv_heads_per_device(kv_heads: int, tensor_parallel: int) -> int:
    """KV heads each GPU holds: split across GPUs, replicated when there are fewer heads than GPUs."""
    return max(1, math.ceil(kv_heads / tensor_parallel))


def runtime_overhead_bytes(
    weight_bytes_per_device: int, *, tensor_parallel: int, cuda_graphs: bool = True
) -> int:
    """Memory per GPU besides weights and KV cache that vLLM's profile accounts for (without the CUDA-graph
    pool under --enforce-eager)."""
    overhead = (
        NON_TORCH_BYTES
        + ACTIVATION_BASE_BYTES
        + math.ceil(ACTIVATION_FRACTION_OF_WEIGHTS * weight_bytes_per_device)
        + (CUDA_GRAPH_BYTES if cuda_graphs else 0)
    )
    if tensor_parallel > 1:
        overhead += TENSOR_PARALLEL_BYTES
    return overhead


@dataclass(frozen=True)
class GpuMemorySizing:
    """How one replica's GPU memory divides (per GPU, except where the name says otherwise)."""

    device_memory_bytes: int
    tensor_parallel: int
    gpu_memory_utilization: float
    weight_bytes: int  # whole model
    weight_bytes_per_device: int
    overhead_bytes_per_device: int
    usable_bytes_per_device: int  # memory * utilization
    kv_budget_bytes_per_device: int  # may be negative: the model does not fit
    kv_bytes_per_token: int  # whole model
    kv_bytes_per_token_per_device: int
    kv_cache_tokens: int  # tokens the replica's KV cache holds, whole blocks
    lora_bytes_per_device: int = 0  # LoRA adapters' GPU slots (planning/adapters.py)
    # A speculative-decoding draft model's weights (the KV bytes per token above include its layers).
    draft_weight_bytes_per_device: int = 0

    @property
    def needed_bytes_per_device_without_kv(self) -> int:
        return (
            self.weight_bytes_per_device
            + self.overhead_bytes_per_device
            + self.lora_bytes_per_device
            + self.draft_weight_bytes_per_device
        )

    @property
    def used_bytes_per_device(self) -> int:
        """Weights, overhead and KV cache actually allocated on each GPU."""
        return (
            self.weight_bytes_per_device
            + self.overhead_bytes_per_device
            + self.lora_bytes_per_device
            + self.draft_weight_bytes_per_device
            + self.kv_cache_tokens * self.kv_bytes_per_token_per_device
        )


def size_gpu_memory(
    shape: ModelShape,
    *,
    device_memory_bytes: int,
    tensor_parallel: int,
    gpu_memory_utilization: float,
    weight_bytes: int,
    kv_dtype_bytes: int,
    cuda_graphs: bool = True,
    lora_bytes_per_device: int = 0,
    draft: ModelShape | None = None,
    draft_weight_bytes: int = 0,
    pipeline_parallel: int = 1,
) -> GpuMemorySizing:
    """Divide each GPU's memory between weights, runtime overhead and KV cache.

    A speculative-decoding draft runs at the target's tensor parallelism beside it: its weights are split
    the same way, and vLLM's KV blocks hold the draft's layers too (one KV-cache group per attention
    spec), so every token costs the draft's K and V as well as the target's."""
    # Pipeline parallelism (a replica over several nodes) gives each stage its share of the layers: of the
    # weights and of every token's KV cache.
    weights_per_device = math.ceil(weight_bytes / (tensor_parallel * pipeline_parallel))
    draft_per_device = math.ceil(draft_weight_bytes / tensor_parallel)
    overhead = runtime_overhead_bytes(
        weights_per_device, tensor_parallel=tensor_parallel, cuda_graphs=cuda_graphs
    )
    usable = math.floor(device_memory_bytes * gpu_memory_utilization)
    budget = usable - weights_per_device - overhead - lora_bytes_per_device - draft_per_device
    per_token_per_device = sum(
        2
        * math.ceil(model.layers / pipeline_parallel)
        * kv_heads_per_device(model.kv_heads, tensor_parallel)
        * model.head_dim
        * kv_dtype_bytes
        for model in (shape, *((draft,) if draft is not None else ()))
    )
    blocks = max(0, budget) // (per_token_per_device * KV_BLOCK_TOKENS)
    return GpuMemorySizing(
        device_memory_bytes=device_memory_bytes,
        tensor_parallel=tensor_parallel,
        gpu_memory_utilization=gpu_memory_utilization,
        weight_bytes=weight_bytes,
        weight_bytes_per_device=weights_per_device,
        overhead_bytes_per_device=overhead,
        usable_bytes_per_device=usable,
        kv_budget_bytes_per_device=budget,
        kv_bytes_per_token=kv_bytes_per_token(shape, kv_dtype_bytes=kv_dtype_bytes)
        + (kv_bytes_per_token(draft, kv_dtype_bytes=kv_dtype_bytes) if draft is not None else 0),
        kv_bytes_per_token_per_device=per_token_per_device,
        kv_cache_tokens=blocks * KV_BLOCK_TOKENS,
        lora_bytes_per_device=lora_bytes_per_device,
        draft_weight_bytes_per_device=draft_per_device,
    )


def kv_tokens_in(budget_bytes: int, per_token_bytes: int) -> int:
    """Whole KV blocks of tokens a budget holds."""
    return (max(0, budget_bytes) // (per_token_bytes * KV_BLOCK_TOKENS)) * KV_BLOCK_TOKENS


def largest_max_model_len(kv_cache_tokens: int, max_context: int) -> int:
    """The longest context one sequence can have: the KV cache holds it, the model supports it."""
    fitting = kv_cache_tokens
    if fitting >= MAX_MODEL_LEN_STEP:
        fitting -= fitting % MAX_MODEL_LEN_STEP
    return min(fitting, max_context)


def auto_max_num_seqs(kv_cache_tokens: int, max_model_len: int, *, typical_tokens: int, ceiling: int) -> int:
    """Concurrent sequences the KV cache serves at a typical length, in [1, ceiling], rounded down to a batch
    size vLLM captures a CUDA graph for (catalog/vllm.py: every multiple of 8 below 256, of 16 above), so a
    full batch replays its own graph without padding."""
    typical = max(1, min(max_model_len, typical_tokens))
    fitting = max(1, kv_cache_tokens // typical)
    return captured_batch_at_most(min(fitting, ceiling))
