"""LoRA adapters in the plan: vLLM's LoRA capacity (--max-loras, --max-lora-rank, --max-cpu-loras) sized from
spec.adapters, and the memory those slots take from the KV cache.

vLLM (0.32, LoRAModelManager) preallocates, for each of --max-loras GPU slots, an A (rank x in) and a B (out x
rank) buffer at --max-lora-rank for every module it wraps: on a Llama, every linear layer of every decoder
layer (qkv_proj, o_proj, gate_up_proj, down_proj) and the embeddings and lm_head (embedding_modules). The
buffers are in the LoRA dtype (the model's by default) and are allocated before the KV cache is sized, so they
come out of the KV budget. Adapters beyond the GPU slots wait in host memory (--max-cpu-loras, an LRU cache).

The capacity is sized in steps (4, 8, ... slots), not to the list's exact length: an adapter added within
the step is loaded into the running replicas through the runtime API, with the arguments (and so the pod
template) unchanged; no rollout restarts the replicas.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llama_operator.api.spec import LoRAAdapter
from llama_operator.catalog.models import ModelShape
from llama_operator.catalog.vllm_flags import flag_contract
from llama_operator.planning.errors import PlanningError

# vLLM's default --max-lora-rank: the rank assumed for an adapter whose spec gives none.
DEFAULT_ADAPTER_RANK = 16
# GPU slots (adapters in one batch): at least this many, so that adding adapters does not change the plan;
# at most MAX_GPU_SLOTS, each slot's buffers are taken from the KV cache. More adapters than slots are served
# too: vLLM swaps them in from the host cache between steps.
MIN_GPU_SLOTS = 4
MAX_GPU_SLOTS = 8
MIN_CPU_SLOTS = 4
# The environment variable that opens vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter
# (vllm/envs.py, read by vllm/entrypoints/serve/lora/api_router.py).
RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
# Llama's share of MLP width to residual width, to estimate an architecture the catalog lacks.
ASSUMED_MLP_RATIO = 3.5
ASSUMED_VOCAB = 128_256


def allowed_max_lora_ranks() -> tuple[int, ...]:
    """The values --max-lora-rank takes in the pinned vLLM (its MaxLoRARanks), from the flag contract."""
    flag = flag_contract().lookup("--max-lora-rank")
    if flag is None or flag.choices is None:  # pragma: no cover - the contract is generated with it
        raise PlanningError("the vLLM flag contract has no --max-lora-rank choices")
    return tuple(sorted(int(choice) for choice in flag.choices))


@dataclass(frozen=True)
class LoraCapacity:
    """vLLM's LoRA settings for a list of adapters, and the memory they take."""

    max_loras: int  # GPU slots
    max_cpu_loras: int  # adapters kept in host memory
    max_lora_rank: int
    bytes_per_slot: int  # GPU buffers of one slot, whole model (all tensor-parallel ranks)

    @property
    def gpu_bytes(self) -> int:
        return self.max_loras * self.bytes_per_slot

    def gpu_bytes_per_device(self, tensor_parallel: int) -> int:
        """Per GPU: vLLM shards one of each A/B pair across the tensor-parallel ranks (B of the column-
        parallel layers, A of the row-parallel ones) and keeps the other whole, so about half the bytes divide."""
        if tensor_parallel <= 1:
            return self.gpu_bytes
        return math.ceil(self.gpu_bytes / 2 * (1 + 1 / tensor_parallel))

    def args(self) -> list[str]:
        return [
            "--enable-lora",
            "--max-loras",
            str(self.max_loras),
            "--max-lora-rank",
            str(self.max_lora_rank),
            "--max-cpu-loras",
            str(self.max_cpu_loras),
        ]


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def max_lora_rank_for(adapters: Sequence[LoRAAdapter]) -> int:
    """The smallest --max-lora-rank vLLM takes that holds every adapter's rank."""
    wanted = max((a.rank or DEFAULT_ADAPTER_RANK for a in adapters), default=DEFAULT_ADAPTER_RANK)
    allowed = allowed_max_lora_ranks()
    fitting = [rank for rank in allowed if rank >= wanted]
    if not fitting:
        raise PlanningError(
            f"an adapter's rank {wanted} exceeds the largest --max-lora-rank vLLM takes ({allowed[-1]})"
        )
    return fitting[0]


def lora_bytes_per_slot(shape: ModelShape, *, rank: int, dtype_bytes: int) -> int:
    """GPU bytes of one LoRA slot at `rank`: A and B of every wrapped module, whole model."""
    hidden, intermediate, vocab = _widths(shape)
    q_width = hidden  # heads x head_dim: the residual width on every Llama
    kv_width = shape.kv_heads * shape.head_dim
    # (in + out) of each wrapped linear layer: qkv_proj, o_proj, gate_up_proj, down_proj.
    per_layer = (hidden + q_width + 2 * kv_width) + (q_width + hidden) + (hidden + 2 * intermediate)
    per_layer += intermediate + hidden
    # embed_tokens (A: vocab x rank, B: rank x hidden) and lm_head (A: rank x hidden, B: vocab x rank).
    embeddings = 2 * (vocab + hidden)
    return rank * (shape.layers * per_layer + embeddings) * dtype_bytes


def _widths(shape: ModelShape) -> tuple[int, int, int]:
    """(hidden, intermediate, vocab): the catalog's, else estimated from the parameter count with Llama's
    proportions (per layer ~ 2 h^2 attention + 3 h x 3.5 h MLP = 12.5 h^2)."""
    if shape.hidden_size is not None and shape.intermediate_size is not None and shape.vocab_size is not None:
        return shape.hidden_size, shape.intermediate_size, shape.vocab_size
    per_layer = shape.parameters * 0.85 / shape.layers
    hidden = max(shape.kv_heads * shape.head_dim, math.isqrt(int(per_layer / (2 + 3 * ASSUMED_MLP_RATIO))))
    return hidden, int(hidden * ASSUMED_MLP_RATIO), ASSUMED_VOCAB


def lora_capacity(
    adapters: Sequence[LoRAAdapter], shape: ModelShape, *, dtype_bytes: int
) -> LoraCapacity | None:
    """The LoRA settings for spec.adapters; None without adapters (LoRA stays off)."""
    if not adapters:
        return None
    count = len(adapters)
    max_loras = min(MAX_GPU_SLOTS, _next_power_of_two(max(count, MIN_GPU_SLOTS)))
    max_cpu_loras = _next_power_of_two(max(count, MIN_CPU_SLOTS, max_loras))
    rank = max_lora_rank_for(adapters)
    return LoraCapacity(
        max_loras=max_loras,
        max_cpu_loras=max_cpu_loras,
        max_lora_rank=rank,
        bytes_per_slot=lora_bytes_per_slot(shape, rank=rank, dtype_bytes=dtype_bytes),
    )


def check_adapters(
    adapters: Sequence[LoRAAdapter], *, served_name: str, has_cache_claim: bool, has_api_key: bool = False
) -> None:
    """What the CRD cannot check alone: the served name defaults to metadata.name, a path on the cache
    volume needs a volume that outlives the pod, and the operator loads adapters through an API that vLLM's
    key guards."""
    if adapters and has_api_key:
        raise PlanningError(
            "spec.adapters cannot be loaded into replicas that require an API key (spec.engine.apiKeySecretRef): "
            "the operator loads adapters through vLLM's API and does not read tenants' Secrets; remove one of the "
            "two (put the key check in a gateway in front of the router)"
        )
    for index, adapter in enumerate(adapters):
        if adapter.name == served_name:
            raise PlanningError(
                f"spec.adapters[{index}].name {adapter.name!r} is the base model's served name: rename the "
                "adapter (clients choose the adapter or the base model by name)"
            )
        if adapter.source.startswith("/") and not has_cache_claim:
            raise PlanningError(
                f"spec.adapters[{index}].source is a path on the model cache volume, but spec.model.cache "
                "names no persistentVolumeClaim (the cache is an empty directory): set model.cache."
                "persistentVolumeClaim to the claim holding the adapter, or give a hub id"
            )
