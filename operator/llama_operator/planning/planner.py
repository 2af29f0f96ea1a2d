"""LlamaService spec -> Plan: the accelerator, its placement, and the vLLM flags sized for it.

Pure: the node inventory comes in as an argument, configuration as a frozen dataclass.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from llama_operator.api.plan import MeasuredSteps, NodeSelectorRequirement, NodeSelectorTerm, Plan, Toleration
from llama_operator.api.spec import (
    AcceleratorType,
    DType,
    LlamaServiceSpec,
    LoRAAdapter,
    Quantization,
    SLOSpec,
)
from llama_operator.catalog.accelerators import (
    BUILTIN_CATALOG,
    FP8_MIN_CAPABILITY,
    GIB,
    INT8_W8A8_FIRST_UNSUPPORTED,
    INT8_W8A8_MIN_CAPABILITY,
    Accelerator,
    Catalog,
    MigProfile,
    mig_resource_name,
    mig_slice_product,
)
from llama_operator.catalog.models import ModelShape, UnknownModelError, model_shape
from llama_operator.catalog.performance import CATALOG_FACTORS, Factors, StepModel, step_model
from llama_operator.catalog.vllm import (
    MODEL_CACHE_PATH,
    VLLM_ITL_BUCKETS,
    VLLM_PORT,
    measurable_tpot,
    measurable_tpot_at_least,
)
from llama_operator.planning.adapters import RUNTIME_LORA_ENV, LoraCapacity, check_adapters, lora_capacity
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.extra_args import (
    ExtraArgs,
    check_trust_remote_code,
    flag_contract,
    parse_extra_args,
)
from llama_operator.planning.images import check_engine_image
from llama_operator.planning.inventory import (
    GPU_RESOURCE,
    MIG_CONFIG_STATE_LABEL,
    MIG_STATE_SUCCESS,
    MIXED,
    PRODUCT_LABEL,
    SINGLE,
    Inventory,
    Offer,
)
from llama_operator.planning.sizing import (
    CUDA_GRAPH_BYTES,
    KV_BLOCK_TOKENS,
    MAX_MODEL_LEN_STEP,
    GpuMemorySizing,
    auto_max_num_seqs,
    kv_bytes_per_token,
    kv_tokens_in,
    largest_max_model_len,
    size_gpu_memory,
    weight_bytes,
)

__all__ = [
    "DEFAULT_CPU_IMAGE",
    "DEFAULT_GPU_IMAGE",
    "Candidate",
    "PlanningConfig",
    "PlanningError",
    "catalog_candidate",
    "catalog_candidates",
    "plan_service",
]

# The vLLM whose parser the flag contract was generated from (`make vllm-flags`, from the pinned install
# of e2e/vllm/server.py): one version, checked and deployed.
VLLM_VERSION = f"v{flag_contract().vllm_version}"
# vLLM's CUDA image on Docker Hub (docs: deployment/docker).
DEFAULT_GPU_IMAGE = f"vllm/vllm-openai:{VLLM_VERSION}"
# vLLM's x86 CPU image on Docker Hub (docs: getting_started/installation/cpu, "pre-built images":
# vllm/vllm-openai-cpu:v${VLLM_VERSION}-x86_64).
DEFAULT_CPU_IMAGE = f"vllm/vllm-openai-cpu:{VLLM_VERSION}-x86_64"
DEFAULT_MODEL_CACHE_PATH = MODEL_CACHE_PATH
SERVER_HOST = "0.0.0.0"

# T4 (sm_75) has no FlashAttention-2: vLLM 0.32's FLASH_ATTN backend requires compute capability
# >= 8.0. TRITON_ATTN accepts any compute capability (vllm/v1/attention/backends/triton_attn.py,
# supports_compute_capability -> True) and needs no JIT-compiled kernels. vLLM 0.32 selects it with
# the --attention-backend flag; the VLLM_ATTENTION_BACKEND variable was deprecated (vLLM PR 26315)
# and is no longer read.
PRE_AMPERE_ATTENTION_BACKEND = "TRITON_ATTN"
# vLLM's name for the llm-compressor checkpoint format W8A8 INT8 checkpoints come in.
COMPRESSED_TENSORS = "compressed-tensors"
# Hub ids of 8-bit checkpoints (RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8, ...-int8): planned at
# 16 bits when engine.quantization is none, so the plan says so.
INT8_CHECKPOINT_NAME = re.compile(r"w8a8|int8", re.IGNORECASE)
TRITON_ATTENTION_MIN_HEAD_DIM = 32

GPU_TOLERATION = Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")
# States of the MIG manager in which a pod must not land (it could grab a whole GPU).
MIG_NOT_READY_STATES = ("pending", "rebooting", "failed")

# Host resources of a GPU replica: the API server, tokenizer and weight loading run on the CPU;
# safetensors are read through the page cache, so half the per-replica weights is ample. The CPU
# request must fit the smallest GPU instances (g4dn.xlarge and g5.xlarge allocate ~3.9 of 4 vCPUs),
# so it is a floor for scheduling, not a limit: vLLM may burst above it.
# SLO-driven engine tuning (an autoscaled service's objective shapes its engine):
# - one step that carries a prompt chunk may take at most this share of the TTFT objective: a request
#   arriving as such a step starts waits for it, and the policy plans TTFT at half the objective;
TTFT_CHUNK_SHARE = 0.25
# - with a TPOT objective, a prompt chunk may take at most this share of the step time the objective
#   leaves beyond reading the weights (the rest is the decode batch): every step that carries a chunk is
#   an inter-token interval for every running sequence;
TPOT_CHUNK_SHARE = 0.5
# - chunks below this many tokens spend more time reading the weights than computing the prompt;
#   above MAX_CHUNK_TOKENS a step stops getting more efficient (vLLM's own default is 2048 to 8192);
MIN_CHUNK_TOKENS = 256
# ... but a TPOT objective may leave room for less: below this, prompts prefill too slowly to matter.
MIN_TPOT_CHUNK_TOKENS = 64
# vLLM 0.32's step budget when none is given (online serving on a GPU below 70 GiB).
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
MAX_CHUNK_TOKENS = 8192
# - the CUDA-graph pool is given to the KV cache (--enforce-eager) when it would take more than this
#   share of what is left for the KV cache: a memory-starved replica (3B on a 1g.10gb slice) gains more
#   concurrency from it than it loses in step time;
EAGER_KV_SHARE = 0.15
# - without a TPOT objective, the default max-model-len leaves KV room for this many sequences of that
#   length at once, for every service, autoscaled or with fixed replicas: a shared service needs
#   concurrency, not one 131072-token sequence (a 1g.10gb slice holds 1.24 of those).
DEFAULT_CONTEXT_CONCURRENCY = 16
GPU_REPLICA_BASE_CPUS = 1
GPU_REPLICA_CPUS_PER_GPU = 1
GPU_REPLICA_BASE_MEMORY_BYTES = 4 * GIB
GPU_REPLICA_WEIGHT_MEMORY_SHARE = 0.5
# A CPU replica holds weights and KV space in host memory, plus the Python runtime and buffers.
CPU_REPLICA_RUNTIME_BYTES = 2 * GIB

TENSOR_PARALLEL_COUNTS = (1, 2, 4, 8)

MigStrategy = Literal["mixed", "single"]


@dataclass(frozen=True)
class PlanningConfig:
    """Operator configuration the planner reads."""

    mig_strategy: MigStrategy = "mixed"
    # Relative price per hour overrides, keyed by accelerator type ('t4') or slice ('a100-80gb/1g.10gb').
    price_overrides: Mapping[str, float] = field(default_factory=dict)
    gpu_image: str = DEFAULT_GPU_IMAGE
    cpu_image: str = DEFAULT_CPU_IMAGE
    # KV-cache space of a CPU replica (vLLM's VLLM_CPU_KVCACHE_SPACE, GiB).
    cpu_kv_cache_gib: int = 4
    cpu_replica_cpus: int = 4
    model_cache_path: str = DEFAULT_MODEL_CACHE_PATH
    gpu_memory_utilization: float = 0.90
    # The platform team's image policy for spec.engine.image; empty allows any image.
    allowed_image_prefixes: tuple[str, ...] = ()
    # The platform team's code policy: code-loading vLLM flags extraArgs may use, and trustRemoteCode.
    allowed_code_loading_flags: tuple[str, ...] = ()
    allow_trust_remote_code: bool = False
    # Without spec.engine.maxModelLen, an accelerator fits only if its KV cache holds a sequence this long
    # (or the model's whole context, when shorter).
    min_context_tokens: int = 4096
    # Sequence length that automatic maxNumSeqs assumes for a typical request (prompt + output).
    typical_sequence_tokens: int = 2048
    max_auto_num_seqs: int = 256
    max_auto_num_seqs_cpu: int = 16
    # Whether accelerator.type auto may choose a CPU replica (slow: off unless asked for).
    auto_includes_cpu: bool = False
    max_gpus_per_replica: int = 8
    # The accelerators to choose from: the built-in ones with the platform's config.accelerators.
    catalog: Catalog = BUILTIN_CATALOG

    def price(self, accel: Accelerator, mig: MigProfile | None) -> float:
        """Relative price per hour of one device: a GPU, a MIG slice or a CPU replica."""
        if mig is not None:
            override = self.price_overrides.get(f"{accel.type}/{mig.name}")
            if override is not None:
                return override
        base = self.price_overrides.get(accel.type, accel.price_per_hour)
        return base * mig.gpu_fraction if mig is not None else base


@dataclass(frozen=True)
class Candidate:
    """One way to run a replica: `count` GPUs of a type, one MIG slice, or a CPU replica."""

    accelerator: Accelerator
    mig: MigProfile | None
    count: int  # GPUs per node
    device_memory_bytes: int
    nodes: int = 1  # a replica over several nodes: a LeaderWorkerSet group, pipeline parallel across them

    @property
    def name(self) -> str:
        if self.nodes > 1:
            return f"{self.nodes} nodes of {self.count}x{self.accelerator.type}"
        if self.mig is not None:
            return f"{self.accelerator.type}/{self.mig.name}"
        if self.count > 1:
            return f"{self.count}x{self.accelerator.type}"
        return self.accelerator.type

    def price(self, config: PlanningConfig) -> float:
        return config.price(self.accelerator, self.mig) * self.count * self.nodes


def catalog_candidate(
    accel: Accelerator, mig: MigProfile | None = None, count: int = 1, nodes: int = 1
) -> Candidate:
    memory = mig.memory_bytes if mig is not None else accel.memory_bytes
    return Candidate(accelerator=accel, mig=mig, count=count, device_memory_bytes=memory, nodes=nodes)


# Nodes per replica auto placement tries, a full node of GPUs each, when no single node fits.
MULTI_NODE_COUNTS = (2, 3, 4)


def multi_node_candidates(config: PlanningConfig) -> list[Candidate]:
    """Replicas over several full nodes of one GPU type (the largest tensor-parallel count per node)."""
    per_node = max(n for n in TENSOR_PARALLEL_COUNTS if n <= config.max_gpus_per_replica)
    return [
        catalog_candidate(accel, count=per_node, nodes=nodes)
        for accel in config.catalog.accelerators.values()
        if accel.is_gpu
        for nodes in MULTI_NODE_COUNTS
    ]


def catalog_candidates(config: PlanningConfig, *, include_cpu: bool) -> list[Candidate]:
    """Every GPU (in tensor-parallel counts), every MIG slice, and optionally a CPU replica."""
    candidates: list[Candidate] = []
    for accel in config.catalog.accelerators.values():
        if not accel.is_gpu:
            if include_cpu:
                candidates.append(catalog_candidate(accel))
            continue
        candidates.extend(
            catalog_candidate(accel, count=n)
            for n in TENSOR_PARALLEL_COUNTS
            if n <= config.max_gpus_per_replica
        )
        candidates.extend(catalog_candidate(accel, mig=profile) for profile in accel.mig_profiles)
    return candidates


@dataclass(frozen=True)
class _Request:
    """What the spec asks for, resolved once for every candidate."""

    model_name: str
    shape: ModelShape
    dtype: DType
    quantization: Quantization
    max_model_len: int | None
    max_num_seqs: int | None
    gpu_memory_utilization: float | None
    extra: ExtraArgs
    slo: SLOSpec | None = None  # the autoscaled service's objective; None without autoscaling
    adapters: tuple[LoRAAdapter, ...] = ()
    draft: _Draft | None = None  # speculative decoding (extraArgs' --speculative-config)
    # Efficiency factors measured on the service's replicas (reconcile/engine.py): the step model of the
    # candidate they were measured on uses them; every other candidate keeps the catalog's.
    measured: MeasuredSteps | None = None


# Speculative methods that propose from the request's own tokens: no draft weights or KV cache.
DRAFT_FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})


@dataclass(frozen=True)
class _Draft:
    """Speculative decoding as vLLM will configure it, with the draft model's shape when it has one."""

    method: str
    model: str | None
    shape: ModelShape | None  # None: nothing to plan (n-gram, suffix, or the target's own MTP layers)


def _draft(speculative: Mapping[str, object] | None) -> _Draft | None:
    """The draft model of --speculative-config, sized from the catalog: its weights and KV cache come out
    of the memory budget, so a draft the planner cannot size is refused rather than left out of the plan."""
    if speculative is None:
        return None
    method = speculative.get("method")
    model = speculative.get("model")
    model_name = str(model) if model is not None else None
    if method is None:  # vLLM's inference (SpeculativeConfig.__post_init__)
        method = "ngram" if model_name in ("ngram", "[ngram]") else "draft_model"
    if method in DRAFT_FREE_METHODS or model_name is None:
        return _Draft(method=str(method), model=None, shape=None)
    try:
        shape = model_shape(model_name)
    except UnknownModelError:
        raise PlanningError(
            f"spec.engine.extraArgs --speculative-config: the draft model {model_name!r} is not in the "
            "operator's catalog, so its weights and KV cache cannot be taken from the memory plan; use a "
            "catalog model as the draft (e.g. meta-llama/Llama-3.2-1B-Instruct), or method ngram or suffix "
            "(no draft weights)"
        ) from None
    return _Draft(method=str(method), model=model_name, shape=shape)


@dataclass(frozen=True)
class _Sized:
    """A candidate that can run the request, with its engine settings."""

    candidate: Candidate
    dtype: str
    kv_dtype_bytes: int
    weight_bytes: int
    kv_bytes_per_token: int
    kv_cache_tokens: int
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    gpu: GpuMemorySizing | None
    memory_request_bytes: int
    notes: tuple[str, ...]
    steps: StepModel
    max_num_batched_tokens: int  # 0: vLLM's default (not passed)
    enforce_eager: bool  # planner's choice to pass --enforce-eager
    lora: LoraCapacity | None = None


class _DoesNotFitError(PlanningError):
    """The candidate lacks memory (as opposed to lacking a capability the spec needs)."""


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _dtype_bytes(dtype: str) -> int:
    return 4 if dtype == DType.FLOAT32.value else 2


def _resolve_dtype(request: _Request, accel: Accelerator) -> tuple[str, list[str]]:
    notes: list[str] = []
    if request.dtype == DType.AUTO:
        if request.quantization in (Quantization.AWQ, Quantization.GPTQ):
            notes.append("dtype half: AWQ/GPTQ checkpoints carry fp16 scales")
            return DType.HALF.value, notes
        if not accel.is_gpu:
            notes.append("dtype bfloat16: vLLM's CPU build runs bfloat16 natively")
            return DType.BFLOAT16.value, notes
        if accel.supports_bf16:
            return DType.BFLOAT16.value, notes
        notes.append(f"dtype half: {accel.type} ({accel.compute_capability}) has no bfloat16")
        return DType.HALF.value, notes
    if request.dtype == DType.BFLOAT16 and not accel.supports_bf16:
        raise PlanningError(
            f"engine.dtype bfloat16 is not supported on {accel.type} ({accel.compute_capability}; "
            "bfloat16 "
            "needs compute capability 8.0 or newer): use dtype half or auto"
        )
    return request.dtype.value, notes


def _kv_dtype_bytes(request: _Request, accel: Accelerator, dtype: str) -> int:
    kv_dtype = request.extra.kv_cache_dtype
    if kv_dtype is None or kv_dtype == "auto":
        return _dtype_bytes(dtype)
    if kv_dtype.startswith("fp8"):
        if not accel.supports_fp8:
            where = f"{accel.type} ({accel.compute_capability})" if accel.is_gpu else "cpu"
            raise PlanningError(
                f"--kv-cache-dtype {kv_dtype} needs FP8 support (compute capability "
                f"{FP8_MIN_CAPABILITY.major}."
                f"{FP8_MIN_CAPABILITY.minor} or newer, e.g. l4 or h100-80gb); {where} has none: remove it "
                "from extraArgs or choose an FP8-capable accelerator"
            )
        return 1
    return 4 if kv_dtype in ("float32", "float") else 2


def _check_capabilities(request: _Request, candidate: Candidate) -> None:
    accel = candidate.accelerator
    if request.quantization == Quantization.FP8 and not accel.supports_fp8:
        where = (
            f"{accel.type} is {accel.compute_capability}" if accel.is_gpu else "cpu has no FP8 tensor cores"
        )
        raise PlanningError(
            f"engine.quantization fp8 needs FP8 support (compute capability {FP8_MIN_CAPABILITY.major}."
            f"{FP8_MIN_CAPABILITY.minor} or newer: sm_89 l4, sm_90 h100-80gb); {where}: use quantization "
            "none, awq "
            "or gptq, or accelerator l4 or h100-80gb"
        )
    if request.quantization == Quantization.INT8 and not accel.supports_int8_w8a8:
        raise PlanningError(
            f"engine.quantization int8 (a W8A8 INT8 checkpoint) needs compute capability "
            f"{INT8_W8A8_MIN_CAPABILITY.major}.{INT8_W8A8_MIN_CAPABILITY.minor} to "
            f"{INT8_W8A8_FIRST_UNSUPPORTED.major - 1}.x: vLLM's INT8 kernels stop before Blackwell; "
            f"{accel.type} is {accel.compute_capability}: use quantization fp8 (an FP8 checkpoint, or fp8 "
            "on-the-fly from a 16-bit one) or an int8-capable accelerator (t4 to h200)"
        )
    if not accel.is_gpu and candidate.count != 1:
        raise PlanningError("accelerator.count must be 1 for cpu: a CPU replica runs one vLLM process")
    if candidate.nodes > request.shape.layers:
        raise PlanningError(
            f"accelerator.nodes {candidate.nodes} exceeds the model's {request.shape.layers} layers (pipeline "
            "parallelism gives each node a share of them): use fewer nodes"
        )
    if candidate.nodes > 1 and request.draft is not None:
        raise PlanningError(
            "speculative decoding (--speculative-config) with accelerator.nodes > 1: vLLM does not run a draft "
            "beside pipeline parallelism; remove one of them"
        )
    tp = candidate.count
    kv_heads = request.shape.kv_heads
    if tp > 1 and kv_heads % tp != 0 and tp % kv_heads != 0:
        raise PlanningError(
            f"accelerator.count {tp} does not divide the model's {kv_heads} KV heads (tensor parallelism "
            "splits "
            "them evenly): use a count that divides or is a multiple of it"
        )
    if (
        accel.is_gpu
        and not accel.supports_flash_attention_2
        and request.extra.attention_backend is None
        and request.shape.head_dim < TRITON_ATTENTION_MIN_HEAD_DIM
    ):
        raise PlanningError(
            f"head dimension {request.shape.head_dim} is below {TRITON_ATTENTION_MIN_HEAD_DIM}, the smallest "
            f"vLLM's {PRE_AMPERE_ATTENTION_BACKEND} backend (the one that runs on {accel.type}) "
            "supports"
        )


def _required_len(request: _Request, config: PlanningConfig) -> int:
    if request.max_model_len is not None:
        return request.max_model_len
    return min(config.min_context_tokens, request.shape.max_context)


@dataclass(frozen=True)
class _Memory:
    """Where a replica's KV cache lives and how large it is, as the device (or the CPU) allows."""

    gpu_memory_utilization: float  # 0 on the CPU
    enforce_eager: bool
    gpu: GpuMemorySizing | None
    kv_cache_tokens: int
    kv_bytes_per_token: int
    memory_request_bytes: int
    max_num_seqs_ceiling: int


def _size(request: _Request, candidate: Candidate, config: PlanningConfig) -> _Sized:
    """Size the engine on a candidate, or raise PlanningError (_DoesNotFitError when memory is short)."""
    _check_capabilities(request, candidate)
    accel = candidate.accelerator
    dtype, notes = _resolve_dtype(request, accel)
    kv_dtype_bytes = _kv_dtype_bytes(request, accel, dtype)
    shape = request.shape
    weights = weight_bytes(shape, dtype_bytes=_dtype_bytes(dtype), quantization=request.quantization)
    required = _required_len(request, config)
    lora = lora_capacity(request.adapters, shape, dtype_bytes=_dtype_bytes(dtype))
    memory = (
        _gpu_memory(request, candidate, config, dtype=dtype, weights=weights, kv_dtype_bytes=kv_dtype_bytes, required=required, notes=notes, lora=lora)
        if accel.is_gpu
        else _cpu_memory(request, config, weights=weights + _draft_weight_bytes(request, dtype), kv_dtype_bytes=kv_dtype_bytes, required=required, notes=notes, lora=lora)
    )  # fmt: skip
    kv_tokens = memory.kv_cache_tokens
    override = request.extra.num_gpu_blocks_override
    if override is not None:
        kv_tokens = override * KV_BLOCK_TOKENS
        notes.append(f"KV cache fixed by --num-gpu-blocks-override {override}: {kv_tokens} tokens")
        if request.max_model_len is not None and request.max_model_len > kv_tokens:
            raise PlanningError(
                f"engine.maxModelLen {request.max_model_len} exceeds the {kv_tokens} tokens that "
                f"--num-gpu-blocks-override {override} leaves; the largest maxModelLen that fits is "
                f"{largest_max_model_len(kv_tokens, shape.max_context)}"
            )

    factors = _measured_factors(request, candidate)
    steps = _step_model(
        candidate, weights, memory.kv_bytes_per_token, shape, eager=memory.enforce_eager, factors=factors
    )
    tuning = _tpot_tuning(request, candidate, steps, config)
    max_model_len = _max_model_len(request, candidate, kv_tokens, tuning, required=required, notes=notes)
    max_num_seqs = _max_num_seqs(
        request, config, kv_tokens, max_model_len, tuning, ceiling=memory.max_num_seqs_ceiling, notes=notes
    )
    chunk = 0
    if request.extra.max_num_batched_tokens is not None:
        chunk = request.extra.max_num_batched_tokens
        notes.append(f"maxNumBatchedTokens {chunk} from extraArgs")
    elif request.slo is not None and candidate.accelerator.is_gpu:
        chunk, why = _chunk(request.slo, steps, max_num_seqs, config, tuning)
        notes.append(f"maxNumBatchedTokens {chunk}: {why}")
    return _Sized(
        candidate=candidate,
        dtype=dtype,
        kv_dtype_bytes=kv_dtype_bytes,
        weight_bytes=weights,
        kv_bytes_per_token=memory.kv_bytes_per_token,
        kv_cache_tokens=kv_tokens,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        gpu_memory_utilization=memory.gpu_memory_utilization,
        gpu=memory.gpu,
        memory_request_bytes=memory.memory_request_bytes,
        notes=tuple(notes),
        steps=steps,
        max_num_batched_tokens=chunk,
        enforce_eager=memory.enforce_eager and request.extra.enforce_eager is None,
        lora=lora,
    )


def _draft_weight_bytes(request: _Request, dtype: str) -> int:
    """The draft model's weights: in the target's dtype (its checkpoint's own quantization is not known)."""
    if request.draft is None or request.draft.shape is None:
        return 0
    return weight_bytes(request.draft.shape, dtype_bytes=_dtype_bytes(dtype), quantization=Quantization.NONE)


def _gpu_memory(
    request: _Request,
    candidate: Candidate,
    config: PlanningConfig,
    *,
    dtype: str,
    weights: int,
    kv_dtype_bytes: int,
    required: int,
    notes: list[str],
    lora: LoraCapacity | None = None,
) -> _Memory:
    """The KV cache a GPU replica has left after weights and overheads (CUDA graphs off when their pool
    would starve it); _DoesNotFitError when it cannot hold `required` tokens."""
    shape = request.shape
    util = request.gpu_memory_utilization or config.gpu_memory_utilization

    def sized(*, cuda_graphs: bool) -> GpuMemorySizing:
        return size_gpu_memory(
            shape,
            device_memory_bytes=candidate.device_memory_bytes,
            tensor_parallel=candidate.count,
            gpu_memory_utilization=util,
            weight_bytes=weights,
            kv_dtype_bytes=kv_dtype_bytes,
            cuda_graphs=cuda_graphs,
            lora_bytes_per_device=lora.gpu_bytes_per_device(candidate.count) if lora is not None else 0,
            draft=request.draft.shape if request.draft is not None else None,
            draft_weight_bytes=_draft_weight_bytes(request, dtype),
            pipeline_parallel=candidate.nodes,
        )

    gpu = sized(cuda_graphs=True)
    eager = _choose_eager(request, gpu)
    if eager:
        with_graphs = gpu.kv_cache_tokens
        gpu = sized(cuda_graphs=False)
        if request.extra.enforce_eager is None:
            notes.append(
                f"enforce-eager: the CUDA-graph pool (~{_gib(CUDA_GRAPH_BYTES)}) would take more than "
                f"{EAGER_KV_SHARE:.0%} of the KV cache ({with_graphs} tokens with graphs, "
                f"{gpu.kv_cache_tokens} without); decode steps are slower without graphs"
            )
    kv_tokens = gpu.kv_cache_tokens
    per_token = gpu.kv_bytes_per_token
    per_token_per_device = gpu.kv_bytes_per_token_per_device
    if gpu.kv_budget_bytes_per_device < required * per_token_per_device:
        needed = gpu.needed_bytes_per_device_without_kv + required * per_token_per_device
        if gpu.kv_budget_bytes_per_device > 0 and request.max_model_len is not None:
            largest = largest_max_model_len(kv_tokens, shape.max_context)
            raise _DoesNotFitError(
                f"engine.maxModelLen {request.max_model_len} does not fit on {candidate.name}: its KV "
                "cache "
                f"holds {kv_tokens} tokens ({_gib(gpu.kv_budget_bytes_per_device)} per GPU at "
                f"gpu-memory-utilization {util:.2f}); the largest maxModelLen that fits is {largest}"
            )
        per_gpu = " per GPU" if candidate.count > 1 else ""
        raise _DoesNotFitError(
            f"{request.model_name} does not fit on {candidate.name}: it needs {_gib(needed)}{per_gpu} "
            f"(weights {_gib(gpu.weight_bytes_per_device)} in {dtype}"
            f"{'' if request.quantization == Quantization.NONE else ' ' + request.quantization.value}, "
            f"runtime overhead {_gib(gpu.overhead_bytes_per_device)}, "
            + (f"LoRA slots {_gib(gpu.lora_bytes_per_device)}, " if gpu.lora_bytes_per_device else "")
            + f"KV cache for {required} tokens "
            f"{_gib(required * per_token_per_device)}); {candidate.name} has "
            f"{_gib(candidate.device_memory_bytes)}{per_gpu}, {_gib(gpu.usable_bytes_per_device)} "
            "usable at "
            f"gpu-memory-utilization {util:.2f}"
        )
    return _Memory(
        gpu_memory_utilization=util,
        enforce_eager=eager,
        gpu=gpu,
        kv_cache_tokens=kv_tokens,
        kv_bytes_per_token=per_token,
        # Per pod: a pod of a multi-node replica loads its stage's share of the weights.
        memory_request_bytes=GPU_REPLICA_BASE_MEMORY_BYTES
        + int(weights / candidate.nodes * GPU_REPLICA_WEIGHT_MEMORY_SHARE),
        max_num_seqs_ceiling=config.max_auto_num_seqs,
    )


def _cpu_memory(
    request: _Request,
    config: PlanningConfig,
    *,
    weights: int,
    kv_dtype_bytes: int,
    required: int,
    notes: list[str],
    lora: LoraCapacity | None = None,
) -> _Memory:
    """The configured KV space of a CPU replica; _DoesNotFitError when it cannot hold `required` tokens."""
    shape = request.shape
    draft = request.draft.shape if request.draft is not None else None
    per_token = sum(
        kv_bytes_per_token(model, kv_dtype_bytes=kv_dtype_bytes)
        for model in (shape, *((draft,) if draft else ()))
    )
    kv_space = config.cpu_kv_cache_gib * GIB
    kv_tokens = kv_tokens_in(kv_space, per_token)
    if kv_tokens < required:
        if request.max_model_len is not None:
            largest = largest_max_model_len(kv_tokens, shape.max_context)
            raise _DoesNotFitError(
                f"engine.maxModelLen {request.max_model_len} does not fit in the CPU replica's KV "
                "space of "
                f"{config.cpu_kv_cache_gib} GiB ({kv_tokens} tokens); the largest maxModelLen that "
                "fits is "
                f"{largest}"
            )
        raise _DoesNotFitError(
            f"the CPU replica's KV space of {config.cpu_kv_cache_gib} GiB holds {kv_tokens} tokens of "
            f"{request.model_name}, fewer than {required}: set engine.maxModelLen to at most "
            f"{kv_tokens} or "
            "raise the operator's CPU KV-cache space"
        )
    # The LoRA slots live in host memory beside the weights (the KV space is fixed by the operator's config).
    memory_request = (
        weights + kv_space + CPU_REPLICA_RUNTIME_BYTES + (lora.gpu_bytes if lora is not None else 0)
    )
    notes.append(
        f"cpu: KV cache space {config.cpu_kv_cache_gib} GiB (VLLM_CPU_KVCACHE_SPACE), weights in host memory"
    )
    return _Memory(
        gpu_memory_utilization=0.0,
        enforce_eager=False,
        gpu=None,
        kv_cache_tokens=kv_tokens,
        kv_bytes_per_token=per_token,
        memory_request_bytes=memory_request,
        max_num_seqs_ceiling=config.max_auto_num_seqs_cpu,
    )


def _max_model_len(
    request: _Request,
    candidate: Candidate,
    kv_tokens: int,
    tuning: _TpotTuning | None,
    *,
    required: int,
    notes: list[str],
) -> int:
    """--max-model-len: the spec's, else the longest context that leaves KV room for several sequences of
    that length at once (DEFAULT_CONTEXT_CONCURRENCY, or the TPOT objective's batch), at least the shortest
    context the operator serves."""
    shape = request.shape
    if request.max_model_len is not None:
        return request.max_model_len
    max_model_len = largest_max_model_len(kv_tokens, shape.max_context)
    if max_model_len < 1:
        raise _DoesNotFitError(f"no KV cache is left for {request.model_name} on {candidate.name}")
    concurrency = DEFAULT_CONTEXT_CONCURRENCY if tuning is None or tuning.batch is None else tuning.batch
    shared_len = kv_tokens // max(concurrency, 1)
    shared_len -= shared_len % MAX_MODEL_LEN_STEP
    if shared_len < max_model_len:
        max_model_len = max(shared_len, min(required, max_model_len))
        if tuning is not None and tuning.batch:
            why = "the TPOT objective's batch"
        elif request.slo is not None:
            why = "the default for every service, autoscaled or not"
        else:
            why = "the default for every service, fixed replicas too"
        if shared_len >= max_model_len:
            notes.append(
                f"maxModelLen {max_model_len}: leaves KV room ({kv_tokens} tokens) for {concurrency} "
                f"sequences of that length at once ({why}), not one of the model's {shape.max_context}; "
                "set engine.maxModelLen for longer contexts"
            )
        else:
            notes.append(
                f"maxModelLen {max_model_len}: the shortest context the operator serves; its KV cache "
                f"({kv_tokens} tokens) holds {kv_tokens // max_model_len} sequences that long, fewer than "
                f"the {concurrency} ({why}; shorter ones share it)"
            )
    else:
        capped = "the model's context" if max_model_len == shape.max_context else "what the KV cache holds"
        notes.append(
            f"maxModelLen {max_model_len}: the largest that fits, capped by {capped} (room for "
            f"{kv_tokens // max_model_len} sequences that long)"
        )
    return max_model_len


def _max_num_seqs(
    request: _Request,
    config: PlanningConfig,
    kv_tokens: int,
    max_model_len: int,
    tuning: _TpotTuning | None,
    *,
    ceiling: int,
    notes: list[str],
) -> int:
    """--max-num-seqs: the spec's, else what the KV cache holds of typical sequences, capped by the TPOT
    objective's batch."""
    if request.max_num_seqs is not None:
        max_num_seqs = request.max_num_seqs
        if tuning is not None and tuning.batch is not None and max_num_seqs > tuning.batch:
            notes.append(
                f"maxNumSeqs {max_num_seqs} from the spec: above {tuning.batch} sequences a decode step "
                f"is estimated to exceed the TPOT objective"
            )
    else:
        max_num_seqs = auto_max_num_seqs(
            kv_tokens, max_model_len, typical_tokens=config.typical_sequence_tokens, ceiling=ceiling
        )
        by_kv = (
            f"KV cache of {kv_tokens} tokens / typical sequence of "
            f"{min(max_model_len, config.typical_sequence_tokens)} tokens, power of two, at most {ceiling}"
        )
        if tuning is not None and tuning.batch is not None and tuning.batch < max_num_seqs:
            max_num_seqs = tuning.batch
            notes.append(f"maxNumSeqs {max_num_seqs}: {tuning.why} (the {by_kv} allows more)")
        else:
            notes.append(f"maxNumSeqs {max_num_seqs}: {by_kv}")
    return max_num_seqs


def _choose_eager(request: _Request, gpu: GpuMemorySizing) -> bool:
    """--enforce-eager when the CUDA-graph pool would starve the KV cache (or the user says so)."""
    if request.extra.enforce_eager is not None:
        return request.extra.enforce_eager
    return EAGER_KV_SHARE * max(gpu.kv_budget_bytes_per_device, 0) < CUDA_GRAPH_BYTES


def _measured_factors(request: _Request, candidate: Candidate) -> Factors:
    """The efficiency factors for `candidate`'s step model: those measured on the service's replicas where
    they were measured on this very candidate, else the catalog's."""
    measured = request.measured
    if measured is None or measured.accelerator != candidate.name:
        return CATALOG_FACTORS
    return Factors(
        bandwidth_efficiency=measured.bandwidth_efficiency,
        compute_efficiency=measured.compute_efficiency,
        step_overhead_seconds=measured.step_overhead_seconds,
    )


def _step_model(
    candidate: Candidate,
    weights: int,
    kv_per_token: int,
    shape: ModelShape,
    *,
    eager: bool,
    factors: Factors = CATALOG_FACTORS,
) -> StepModel:
    accel = candidate.accelerator
    if candidate.mig is not None:
        bandwidth, tflops = accel.slice_bandwidth(candidate.mig), accel.slice_tflops(candidate.mig)
    else:
        bandwidth = accel.bandwidth_bytes_per_s * candidate.count
        tflops = accel.fp16_dense_tflops * candidate.count
    link = accel.interconnect
    return step_model(
        bandwidth_bytes_per_s=bandwidth,
        fp16_tflops=tflops,
        weight_bytes=weights,
        kv_bytes_per_token=kv_per_token,
        parameters=shape.parameters,
        eager=eager,
        tensor_parallel=candidate.count if candidate.mig is None else 1,
        layers=shape.layers,
        hidden_size=_hidden_size(shape),
        activation_bytes=ACTIVATION_DTYPE_BYTES,
        link_bytes_per_s=link.link_bytes_per_s,
        all_reduce_latency_seconds=link.all_reduce_latency_seconds,
        bandwidth_efficiency=factors.bandwidth_efficiency,
        compute_efficiency=factors.compute_efficiency,
        step_overhead_seconds=factors.step_overhead_seconds,
    )


# Activations (what the all-reduces move) stay in 16 bits whatever the weights' quantization.
ACTIVATION_DTYPE_BYTES = 2


def _hidden_size(shape: ModelShape) -> int:
    """The residual stream's width; for a user-given architecture without it, from ~12 layers x hidden^2
    parameters in the transformer blocks."""
    if shape.hidden_size is not None:
        return shape.hidden_size
    return max(1, round(math.sqrt(shape.parameters / (12 * shape.layers))))


@dataclass(frozen=True)
class _TpotTuning:
    chunk: int  # the largest prompt chunk the TPOT objective allows
    batch: int  # the decode batch the TPOT objective allows beside such a chunk
    step_seconds: float  # a step with that batch and chunk
    why: str


def _tpot_floor(steps: StepModel, config: PlanningConfig) -> float:
    """The smallest TPOT objective `_tpot_tuning` can plan on a replica: one typical sequence decoding
    beside the smallest prompt chunk it runs (every step that takes a prompt chunk is an inter-token
    interval, so a replica whose steps cannot take even that chunk within the objective never prefills)."""
    return steps.step_seconds(1, float(config.typical_sequence_tokens), MIN_TPOT_CHUNK_TOKENS)


def _tpot_tuning(
    request: _Request, candidate: Candidate, steps: StepModel, config: PlanningConfig
) -> _TpotTuning | None:
    """The prompt chunk and decode batch a TPOT objective allows on a candidate (None without one).

    Every step is an inter-token interval for every running sequence, so a step that carries a prompt
    chunk must stay within the objective too. The chunk gets TPOT_CHUNK_SHARE of what the objective
    leaves beyond one sequence's decode; the batch is what remains, from the step model
    (catalog.performance): B = max {B : t(B, L) + C * t_prefill <= TPOT}, L a whole typical sequence
    (conservative: a decoding sequence averages its prompt plus half its output). Raises PlanningError
    when the objective cannot be met on the candidate at all (auto placement then tries the next)."""
    slo = request.slo
    if slo is None or slo.tpot_seconds is None:
        return None
    # Planned for what the percentile read from vLLM's histogram can show met (catalog/vllm.py).
    tpot = measurable_tpot(slo.tpot_seconds)
    read_at = _read_at(slo.tpot_seconds)
    context = float(config.typical_sequence_tokens)
    one = steps.step_seconds(1, context)
    floor = _tpot_floor(steps, config)
    if tpot < floor:
        raise PlanningError(
            f"autoscaling.slo.tpotSeconds {slo.tpot_seconds:g} cannot be met on {candidate.name}: the "
            "fastest step of "
            f"{request.model_name} that also takes a prompt chunk is estimated at {floor * 1000:.1f} ms (one "
            f"sequence of {config.typical_sequence_tokens} tokens beside a {MIN_TPOT_CHUNK_TOKENS}-token chunk, "
            f"the smallest the engine is given; {one * 1000:.1f} ms without the chunk, reading the weights "
            f"alone {steps.weight_read_seconds * 1000:.1f} ms); raise autoscaling.slo.tpotSeconds to at least "
            f"{measurable_tpot_at_least(floor):g} or use a faster accelerator{read_at}"
        )
    # The chunk and the batch share what the objective leaves: a bigger chunk prefills faster (fewer
    # weight reads per prompt token) but leaves room for fewer decoding sequences.
    chunk = max(
        MIN_TPOT_CHUNK_TOKENS, math.floor(TPOT_CHUNK_SHARE * (tpot - one) / steps.seconds_per_chunk_token)
    )
    chunk = min(chunk - chunk % KV_BLOCK_TOKENS, MAX_CHUNK_TOKENS)
    batch = max(1, steps.tpot_batch(tpot, chunk, context))  # >= 1 at or above the floor
    if batch >= 8:
        batch -= batch % 8  # vLLM captures CUDA graphs for batch sizes in steps of 8
    step = steps.step_seconds(batch, context, chunk)
    why = (
        f"the TPOT objective {slo.tpot_seconds:g}s{read_at}: a step decoding {batch} sequences of "
        f"{config.typical_sequence_tokens} tokens beside a {chunk}-token prompt chunk is estimated at "
        f"{step * 1000:.1f} ms"
    )
    return _TpotTuning(chunk=chunk, batch=batch, step_seconds=step, why=why)


def _read_at(objective: float) -> str:
    """How the objective is read from vLLM's inter-token latency histogram, where that is not as written."""
    if objective < VLLM_ITL_BUCKETS[0]:
        return (
            f" (judged at {VLLM_ITL_BUCKETS[0]:g}s: below the smallest bound of vLLM's inter-token latency "
            "histogram the percentile read from it only says whether the tokens came within that bound; "
            "planned for the objective)"
        )
    # Between two bounds: planned at the lower one.
    lower = measurable_tpot(objective)
    if lower == objective:
        return ""
    upper = min((b for b in VLLM_ITL_BUCKETS if b > objective), default=None)
    beyond = "" if upper is None else f" and {upper * 1000:g} ms"
    return (
        f" (read at {lower:g}s: vLLM's inter-token latency histogram has no bound between {lower * 1000:g}"
        f"{beyond}, and the percentile read from it lies between them by interpolation: steps within "
        f"{lower * 1000:g} ms read as met)"
    )


def _chunk(
    slo: SLOSpec, steps: StepModel, max_num_seqs: int, config: PlanningConfig, tpot: _TpotTuning | None
) -> tuple[int, str]:
    """--max-num-batched-tokens for an autoscaled service, and why.

    A step computing C prompt tokens beside B decoding sequences of mean context L takes
    t(B, L) + C * t_prefill (catalog.performance). C is the largest chunk whose step, at a full batch
    (B = max-num-seqs, L half a typical sequence), stays within TTFT_CHUNK_SHARE of the TTFT objective:
    a short prompt arriving behind a long one waits a fraction of its objective, while long prompts
    still go in few steps, each reading the weights once. With a TPOT objective the chunk is at most
    the one that objective allows. vLLM refuses a budget below max-num-seqs."""
    context = config.typical_sequence_tokens / 2
    by_ttft = steps.chunk_within(TTFT_CHUNK_SHARE * slo.ttft_seconds, max_num_seqs, context)
    chunk = min(max(by_ttft, MIN_CHUNK_TOKENS), MAX_CHUNK_TOKENS)
    chunk -= chunk % KV_BLOCK_TOKENS
    why = (
        f"a step with a {chunk}-token prompt chunk beside {max_num_seqs} decoding sequences is estimated at "
        f"{steps.step_seconds(max_num_seqs, context, chunk) * 1000:.0f} ms, within {TTFT_CHUNK_SHARE:.0%} of "
        f"the TTFT objective {slo.ttft_seconds:g}s"
    )
    if tpot is not None and tpot.chunk < chunk:
        chunk = tpot.chunk
        # At most one chunk per inter-token interval: a prompt prefills at ~chunk / TPOT tokens per second
        # beside a full batch, so longer prompts than this miss the TTFT objective however many replicas.
        longest = math.floor(slo.ttft_seconds * chunk / tpot.step_seconds)
        why = (
            f"a {chunk}-token prompt chunk takes at most {TPOT_CHUNK_SHARE:.0%} of what the TPOT objective "
            f"{slo.tpot_seconds:g}s leaves beyond a decode step (every step carrying a chunk is an inter-token "
            f"interval); beside a full batch, prompts above ~{longest} tokens take longer than the TTFT "
            f"objective {slo.ttft_seconds:g}s to prefill"
        )
    # vLLM's step budget counts every running sequence's decode token too: the budget is the chunk plus a
    # full batch, so a step at max-num-seqs still carries a whole chunk.
    budget = chunk + max_num_seqs
    return budget, (
        f"a {chunk}-token prompt chunk plus {max_num_seqs} decode tokens: {why}; prefill "
        f"~{steps.prefill_tokens_per_second(chunk):.0f} tokens/s"
    )


def _try_size(request: _Request, candidate: Candidate, config: PlanningConfig) -> _Sized | None:
    try:
        return _size(request, candidate, config)
    except PlanningError:
        return None


def _sort_key(candidate: Candidate, config: PlanningConfig) -> tuple[float, int, int, str]:
    # Cheapest first; at equal price more memory (more KV cache), then fewer devices, then by name.
    total_memory = candidate.device_memory_bytes * candidate.count
    return (round(candidate.price(config), 6), -total_memory, candidate.count, candidate.name)


def _smallest_fitting(request: _Request, config: PlanningConfig) -> str:
    """The smallest catalog GPU option (by memory, then price) that runs the request, for error messages."""
    fitting = [
        sized
        for c in catalog_candidates(config, include_cpu=False)
        if (sized := _try_size(request, c, config)) is not None
    ]
    if not fitting:
        return (
            f"no catalog option up to {config.max_gpus_per_replica} GPUs fits it; use quantization or a "
            "smaller model"
        )
    smallest = min(
        fitting,
        key=lambda s: (
            s.candidate.device_memory_bytes * s.candidate.count,
            s.candidate.price(config),
            s.candidate.name,
        ),
    ).candidate
    cheapest = min(fitting, key=lambda s: _sort_key(s.candidate, config)).candidate
    message = (
        f"the smallest catalog option that fits is {smallest.name} "
        f"({_gib(smallest.device_memory_bytes * smallest.count)}, "
        f"{smallest.price(config):.2f}/h relative price)"
    )
    if cheapest != smallest:
        message += f", the cheapest {cheapest.name} ({cheapest.price(config):.2f}/h)"
    return message


# --- placement ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Placement:
    candidate: Candidate
    mig_strategy: str | None
    product: str
    notes: tuple[str, ...]


def _pick_product(offers: tuple[Offer, ...], *, use_parent: bool) -> str:
    totals: dict[str, int] = {}
    for offer in offers:
        product = offer.parent_product if use_parent else offer.product
        totals[product] = totals.get(product, 0) + offer.allocatable
    return min(totals, key=lambda p: (-totals[p], p))


def _with_label_memory(candidate: Candidate, offers: tuple[Offer, ...]) -> Candidate:
    """Size from the memory the nodes label (NVML inside a slice may report the parent GPU's)."""
    labelled = [o.memory_bytes for o in offers if o.memory_bytes is not None]
    if not labelled:
        return candidate
    return Candidate(
        accelerator=candidate.accelerator,
        mig=candidate.mig,
        count=candidate.count,
        device_memory_bytes=min(labelled),
        nodes=candidate.nodes,
    )


def _place(
    candidate: Candidate, config: PlanningConfig, inventory: Inventory | None, mig_strategy: str | None = None
) -> _Placement:
    """Where the candidate runs. `mig_strategy`: the one the spec asks for (accelerator.migStrategy), kept
    even when only nodes of the other strategy offer the slice; else the nodes', else the operator's."""
    accel = candidate.accelerator
    notes: list[str] = []
    if not accel.is_gpu:
        return _Placement(candidate=candidate, mig_strategy=None, product="", notes=())
    if candidate.mig is not None:
        profile = candidate.mig.name
        strategy: str = mig_strategy or config.mig_strategy
        offers: tuple[Offer, ...] = ()
        if inventory is not None:
            offers = inventory.mig_offers(accel.type, profile, strategy)
            if not offers and mig_strategy is None:
                other = SINGLE if strategy == MIXED else MIXED
                other_offers = inventory.mig_offers(accel.type, profile, other)
                if other_offers:
                    notes.append(
                        f"MIG strategy {other}: the nodes offering {profile} use it (operator default "
                        f"{strategy})"
                    )
                    strategy, offers = other, other_offers
            if not offers:
                notes.append(f"no node offers {candidate.name} now; the pod waits until one does")
        if offers:
            product = _pick_product(offers, use_parent=True)
            candidate = _with_label_memory(candidate, offers)
        else:
            product = accel.canonical_product
        if strategy == SINGLE:
            product = mig_slice_product(product, profile)
        return _Placement(candidate=candidate, mig_strategy=strategy, product=product, notes=tuple(notes))

    offers = inventory.gpu_offers(accel.type, min_count=candidate.count) if inventory is not None else ()
    if offers:
        product = _pick_product(offers, use_parent=False)
        candidate = _with_label_memory(candidate, tuple(o for o in offers if o.product == product))
    else:
        product = accel.canonical_product
        if inventory is not None:
            notes.append(
                f"no node has {candidate.count} {accel.type} GPU(s) allocatable now; the pod waits for one"
            )
    return _Placement(candidate=candidate, mig_strategy=None, product=product, notes=tuple(notes))


def _present(candidate: Candidate, inventory: Inventory) -> bool:
    accel = candidate.accelerator
    if not accel.is_gpu:
        return bool(inventory.cpu_offers())
    if candidate.mig is not None:
        return bool(inventory.mig_offers(accel.type, candidate.mig.name))
    return len(inventory.gpu_offers(accel.type, min_count=candidate.count)) >= candidate.nodes


# --- vLLM arguments -------------------------------------------------------------------------------


def _vllm_args(
    spec: LlamaServiceSpec, served_name: str, sized: _Sized, config: PlanningConfig, request: _Request
) -> tuple[list[str], list[str]]:
    notes: list[str] = []
    accel = sized.candidate.accelerator
    args = [
        "--model",
        spec.model.name,
        "--served-model-name",
        served_name,
        "--host",
        SERVER_HOST,
        "--port",
        str(VLLM_PORT),
        "--dtype",
        sized.dtype,
        "--max-model-len",
        str(sized.max_model_len),
        "--max-num-seqs",
        str(sized.max_num_seqs),
    ]
    if accel.is_gpu:
        args += ["--gpu-memory-utilization", f"{sized.gpu_memory_utilization:.2f}"]
    if sized.max_num_batched_tokens and request.extra.max_num_batched_tokens is None:
        args += ["--max-num-batched-tokens", str(sized.max_num_batched_tokens)]
    if sized.enforce_eager:
        args.append("--enforce-eager")
    if sized.candidate.count > 1:
        args += ["--tensor-parallel-size", str(sized.candidate.count)]
    if sized.candidate.nodes > 1:
        # A replica over several nodes: a stage of layers per node, the nodes joined by Ray (vLLM's
        # multi-node backend; the LeaderWorkerSet's leader runs the Ray head and vllm serve).
        args += [
            "--pipeline-parallel-size",
            str(sized.candidate.nodes),
            "--distributed-executor-backend",
            "ray",
        ]
    args.append("--enable-prefix-caching" if spec.engine.prefix_caching else "--no-enable-prefix-caching")
    quantization = request.quantization
    if quantization is Quantization.FP8:
        # In-flight quantization of a 16-bit checkpoint: vLLM must be told.
        args += ["--quantization", quantization.value]
    elif quantization is Quantization.INT8:
        # The checkpoint's quantization_config (compressed-tensors) names the scheme; naming the format
        # here makes vLLM refuse at start a checkpoint that is not one (16-bit, AWQ), which it would
        # otherwise load at another size than the plan's.
        args += ["--quantization", COMPRESSED_TENSORS]
        notes.append(
            "quantization int8: a W8A8 INT8 checkpoint, weights planned at 8 bits; --quantization "
            f"{COMPRESSED_TENSORS} makes vLLM refuse a checkpoint in another format"
        )
    elif quantization in (Quantization.AWQ, Quantization.GPTQ):
        # The checkpoint's quantization_config names the method; naming it here would force vLLM's
        # slower non-Marlin kernel on sm_80+ GPUs.
        notes.append(
            f"quantization {quantization.value}: vLLM reads it from the checkpoint and picks the kernel"
        )
    if spec.model.cache is not None:
        args += ["--download-dir", config.model_cache_path]
    if spec.model.revision:
        args += ["--revision", spec.model.revision]
    if spec.model.trust_remote_code:  # plan_service checked that the platform allows it
        args.append("--trust-remote-code")
    if accel.is_gpu and not accel.supports_flash_attention_2:
        if request.extra.attention_backend is None:
            args += ["--attention-backend", PRE_AMPERE_ATTENTION_BACKEND]
            notes.append(
                f"attention backend {PRE_AMPERE_ATTENTION_BACKEND}: {accel.type} "
                f"({accel.compute_capability}) has no FlashAttention-2"
            )
        else:
            notes.append(f"attention backend {request.extra.attention_backend} from extraArgs")
    if sized.lora is not None:
        args += sized.lora.args()
    args += list(request.extra.args)
    return args, notes


# --- entry point ----------------------------------------------------------------------------------


def _request(spec: LlamaServiceSpec, config: PlanningConfig) -> _Request:
    try:
        shape = model_shape(spec.model.name, spec.model.architecture)
    except UnknownModelError as error:
        raise PlanningError(str(error)) from None
    engine = spec.engine
    extra = parse_extra_args(engine.extra_args, allowed_code_loading=config.allowed_code_loading_flags)
    if engine.max_model_len is not None and engine.max_model_len > shape.max_context:
        raise PlanningError(
            f"engine.maxModelLen {engine.max_model_len} exceeds the context of {spec.model.name} "
            f"({shape.max_context} tokens): set it to at most {shape.max_context}"
        )
    return _Request(
        model_name=spec.model.name,
        shape=shape,
        dtype=engine.dtype,
        quantization=engine.quantization,
        max_model_len=engine.max_model_len,
        max_num_seqs=None if engine.max_num_seqs == "auto" else engine.max_num_seqs,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        extra=extra,
        slo=spec.autoscaling.slo if spec.autoscaling is not None and spec.autoscaling.enabled else None,
        adapters=tuple(spec.adapters),
        draft=_draft(extra.speculative),
    )


UNKNOWN_GPUS_NOTE = "match no accelerator in the catalog, so auto cannot use them"


def unknown_gpus_note(inventory: Inventory) -> str:
    """What auto says of GPU nodes it had to leave out: never a silent skip."""
    listed = ", ".join(
        f"{product} ({nodes} node{'s' if nodes > 1 else ''})" for product, nodes in inventory.unknown_gpus
    )
    return (
        f"GPU nodes labelled {listed} {UNKNOWN_GPUS_NOTE}: add them under the operator's config.accelerators"
    )


def _choose_auto(
    request: _Request, config: PlanningConfig, inventory: Inventory | None
) -> tuple[_Sized, list[str]]:
    candidates = sorted(
        catalog_candidates(config, include_cpu=config.auto_includes_cpu), key=lambda c: _sort_key(c, config)
    )
    notes: list[str] = []
    if inventory is not None:
        present = [c for c in candidates if _present(c, inventory)]
        if inventory.unknown_gpus:
            notes.append(unknown_gpus_note(inventory))
    else:
        present = candidates
        notes.append("no node inventory: chose the cheapest catalog option; it may not exist in the cluster")
    # A replica over several nodes only where no single node present fits (and enough nodes offer one).
    multi = sorted(multi_node_candidates(config), key=lambda c: _sort_key(c, config))
    multi = [c for c in multi if inventory is None or _present(c, inventory)]
    for options in (present, multi):
        for catalog_option in options:
            # Size with the memory the nodes label, when they do.
            candidate = (
                _place(catalog_option, config, inventory).candidate
                if inventory is not None
                else catalog_option
            )
            sized = _try_size(request, candidate, config)
            if sized is not None and (
                unpaid := _tensor_parallel_unpaid(sized, options, request, config, inventory)
            ):
                notes.append(unpaid)
                continue
            if sized is not None:
                where = "present in the cluster " if inventory is not None else ""
                tpot = request.slo.tpot_seconds if request.slo is not None else None
                meets = "" if tpot is None else f" and meets the TPOT objective {tpot:g}s"
                notes.append(
                    f"auto: {candidate.name} is the cheapest option {where}that fits{meets} "
                    f"({candidate.price(config):.2f}/h relative price)"
                )
                return sized, notes
    _raise_if_tpot_unreachable(request, config, [*present, *multi], inventory)
    if inventory is not None:
        unknown = f"; {unknown_gpus_note(inventory)}" if inventory.unknown_gpus else ""
        raise PlanningError(
            f"no accelerator present in the cluster fits {request.model_name} (present: "
            f"{inventory.describe()}); "
            f"{_smallest_fitting(request, config)}{unknown}"
        )
    raise PlanningError(
        f"no accelerator in the catalog fits {request.model_name}: {_smallest_fitting(request, config)}"
    )


def _decode_rate(sized: _Sized, request: _Request, config: PlanningConfig) -> float:
    """Output tokens per second a replica decodes within the TPOT objective (typical sequences)."""
    tuning = _tpot_tuning(request, sized.candidate, sized.steps, config)
    assert tuning is not None  # only called with a TPOT objective
    return min(tuning.batch, sized.max_num_seqs) / tuning.step_seconds


def _tensor_parallel_unpaid(
    sized: _Sized,
    options: list[Candidate],
    request: _Request,
    config: PlanningConfig,
    inventory: Inventory | None,
) -> str | None:
    """Why auto skips a tensor-parallel replica whose GPUs do not pay for themselves; None when they do.

    Under a TPOT objective a replica of several GPUs decodes faster (their bandwidth adds up) but pays the
    all-reduces over its link. Its extra GPUs pay only where it decodes at least as many tokens per second
    per unit of price as the best single-GPU option that meets the objective too; else replicas of that
    GPU serve the same load for less."""
    candidate = sized.candidate
    if request.slo is None or request.slo.tpot_seconds is None or candidate.count == 1 or candidate.nodes > 1:
        return None
    rate = _decode_rate(sized, request, config) / candidate.price(config)
    best: tuple[float, Candidate] | None = None
    for option in options:
        if option.count != 1 or option.nodes != 1:
            continue
        single = _try_size(
            request, _place(option, config, inventory).candidate if inventory is not None else option, config
        )
        if single is None:
            continue
        single_rate = _decode_rate(single, request, config) / single.candidate.price(config)
        if best is None or single_rate > best[0]:
            best = (single_rate, single.candidate)
    if best is None or best[0] < rate:
        return None
    return (
        f"auto: not {candidate.name}: its tensor parallel decodes {rate:.0f} tokens/s per unit of hourly "
        f"price within the TPOT objective, {best[1].name} {best[0]:.0f}; its extra GPUs do not pay"
    )


def _raise_if_tpot_unreachable(
    request: _Request, config: PlanningConfig, options: list[Candidate], inventory: Inventory | None
) -> None:
    """A PlanningError naming the TPOT objective when it, not memory, is why nothing fits."""
    slo = request.slo
    if slo is None or slo.tpot_seconds is None:
        return
    relaxed = replace(request, slo=slo.model_copy(update={"tpot_seconds": None}))
    fastest: tuple[float, Candidate] | None = None
    for option in options:
        candidate = _place(option, config, inventory).candidate if inventory is not None else option
        sized = _try_size(relaxed, candidate, config)
        if sized is None:
            continue
        floor = _tpot_floor(sized.steps, config)
        if fastest is None or floor < fastest[0]:
            fastest = (floor, candidate)
    if fastest is None:
        return  # memory is the reason: the caller says so
    where = (
        "present in the cluster"
        if inventory is not None
        else f"in the catalog (up to {config.max_gpus_per_replica} GPUs)"
    )
    read_at = _read_at(slo.tpot_seconds)
    raise PlanningError(
        f"autoscaling.slo.tpotSeconds {slo.tpot_seconds:g} cannot be met by any accelerator {where}: the "
        f"best achievable TPOT for {request.model_name} is ~{fastest[0] * 1000:.1f} ms per token (one "
        f"sequence of {config.typical_sequence_tokens} tokens beside a {MIN_TPOT_CHUNK_TOKENS}-token prompt "
        f"chunk on {fastest[1].name}, all-reduces included); raise autoscaling.slo.tpotSeconds to at least "
        f"{measurable_tpot_at_least(fastest[0]):g} or make a faster accelerator available{read_at}"
    )


def _explicit_candidate(spec: LlamaServiceSpec, config: PlanningConfig) -> Candidate:
    try:
        accel = config.catalog.get(spec.accelerator.type)
        mig = accel.mig_profile(spec.accelerator.mig) if spec.accelerator.mig is not None else None
    except KeyError as err:  # a type or profile the platform has not defined
        raise PlanningError(f"accelerator: {err.args[0]}") from None
    return catalog_candidate(accel, mig=mig, count=spec.accelerator.count, nodes=spec.accelerator.nodes)


@dataclass(frozen=True)
class _Scheduling:
    """Where a replica may run, in Kubernetes' terms: the extended resources it requests, and the node
    selector, affinity and tolerations that keep it on a node with that accelerator in a usable state."""

    resources: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    node_affinity: list[NodeSelectorTerm] = field(default_factory=list)
    tolerations: list[Toleration] = field(default_factory=list)


def _scheduling(candidate: Candidate, placement: _Placement) -> _Scheduling:
    accel = candidate.accelerator
    if not accel.is_gpu:
        return _Scheduling(node_selector={"kubernetes.io/arch": "amd64"})  # the CPU image is x86_64
    where = _Scheduling(node_selector={PRODUCT_LABEL: placement.product}, tolerations=[GPU_TOLERATION])
    if candidate.mig is not None and placement.mig_strategy == MIXED:
        where.resources[mig_resource_name(candidate.mig.name)] = "1"
    else:
        where.resources[GPU_RESOURCE] = str(candidate.count)
    if candidate.mig is not None:  # a slice: only on a node whose MIG configuration has been applied
        requirement = NodeSelectorRequirement(
            key=MIG_CONFIG_STATE_LABEL, operator="In", values=[MIG_STATE_SUCCESS]
        )
    elif accel.mig_profiles:  # a whole MIG-capable GPU: not on a node being repartitioned
        requirement = NodeSelectorRequirement(
            key=MIG_CONFIG_STATE_LABEL, operator="NotIn", values=list(MIG_NOT_READY_STATES)
        )
    else:
        return where
    where.node_affinity.append(NodeSelectorTerm(match_expressions=[requirement]))
    return where


def _choose_and_size(
    spec: LlamaServiceSpec, request: _Request, config: PlanningConfig, inventory: Inventory | None
) -> tuple[_Sized, _Placement, list[str]]:
    """The accelerator (auto's choice or the spec's), where it is placed, the engine sized on it, and the
    notes of all three."""
    notes: list[str] = []
    if spec.accelerator.type == AcceleratorType.AUTO:
        sized, auto_notes = _choose_auto(request, config, inventory)
        notes += auto_notes
        placement = _place(sized.candidate, config, inventory, spec.accelerator.mig_strategy)
    else:
        candidate = _explicit_candidate(spec, config)
        placement = _place(candidate, config, inventory, spec.accelerator.mig_strategy)
        try:
            sized = _size(request, placement.candidate, config)
        except _DoesNotFitError as error:
            raise PlanningError(f"{error.message}; {_smallest_fitting(request, config)}") from None
    notes += placement.notes + sized.notes
    if request.quantization is Quantization.NONE and INT8_CHECKPOINT_NAME.search(spec.model.name):
        notes.append(
            f"{spec.model.name} looks like an 8-bit checkpoint but engine.quantization is none: its weights are "
            "planned at 16 bits (a smaller KV cache than it gets); set engine.quantization int8 for a W8A8 "
            "INT8 checkpoint"
        )
    candidate, accel = sized.candidate, sized.candidate.accelerator
    if candidate.nodes > 1:
        notes.append(
            f"multi-node: each replica is a LeaderWorkerSet group of {candidate.nodes} pods on {candidate.nodes} "
            f"nodes with {candidate.count} {accel.type} GPUs each (tensor parallel {candidate.count}, pipeline "
            f"parallel {candidate.nodes} over Ray); replicas scale by whole groups"
        )
    return sized, placement, notes


def _engine_runtime(candidate: Candidate, config: PlanningConfig) -> tuple[str, int, dict[str, str]]:
    """The engine's image, CPU request and environment for a GPU replica or a CPU one."""
    if candidate.accelerator.is_gpu:
        return config.gpu_image, GPU_REPLICA_BASE_CPUS + GPU_REPLICA_CPUS_PER_GPU * candidate.count, {}
    return config.cpu_image, config.cpu_replica_cpus, {"VLLM_CPU_KVCACHE_SPACE": str(config.cpu_kv_cache_gib)}


def _plan_lora(spec: LlamaServiceSpec, sized: _Sized, env: dict[str, str], notes: list[str]) -> int:
    """The LoRA slots' bytes per device (0 without adapters), the runtime-loading switch in `env` and a
    note on what the slots take."""
    lora = sized.lora
    if lora is None:
        return 0
    candidate = sized.candidate
    accel = candidate.accelerator
    # The operator loads and unloads adapters on running replicas (reconcile/adapters.py).
    env[RUNTIME_LORA_ENV] = "True"
    adapter_bytes = lora.gpu_bytes_per_device(candidate.count) if accel.is_gpu else lora.gpu_bytes
    notes.append(
        f"LoRA: {len(spec.adapters)} adapter(s); {lora.max_loras} slots of rank {lora.max_lora_rank} take "
        f"{_gib(adapter_bytes)}{' per GPU' if candidate.count > 1 else ''} from the "
        f"{'KV cache' if accel.is_gpu else 'host memory'}; up to {lora.max_cpu_loras} adapters cached in "
        "host memory (adding adapters within these leaves the replicas running)"
    )
    return adapter_bytes


def _plan_draft(request: _Request, sized: _Sized, notes: list[str]) -> tuple[int, int]:
    """A speculative draft model's weight bytes per device and KV bytes per token (0, 0 without one, or for
    a method with no draft model), and a note on what they take."""
    draft = request.draft
    if draft is None:
        return 0, 0
    if draft.shape is None:
        notes.append(
            f"speculative decoding {draft.method}: no draft model weights or KV cache to plan"
            + ("" if draft.method in DRAFT_FREE_METHODS else " (the target's own layers propose)")
        )
        return 0, 0
    candidate = sized.candidate
    total = _draft_weight_bytes(request, sized.dtype)
    draft_bytes = sized.gpu.draft_weight_bytes_per_device if sized.gpu is not None else total
    draft_kv_per_token = kv_bytes_per_token(draft.shape, kv_dtype_bytes=sized.kv_dtype_bytes)
    notes.append(
        f"speculative decoding {draft.method} with {draft.model}: its weights take {_gib(draft_bytes)}"
        f"{' per GPU' if candidate.count > 1 else ''} and its KV cache {draft_kv_per_token} bytes per "
        f"token beside the target's {sized.kv_bytes_per_token - draft_kv_per_token}, out of the "
        f"{'KV cache' if candidate.accelerator.is_gpu else 'host memory'} ({sized.kv_cache_tokens} tokens left)"
    )
    return draft_bytes, draft_kv_per_token


def _check_policy_inputs(spec: LlamaServiceSpec, served_name: str, config: PlanningConfig) -> None:
    """The spec's fields that the platform's policy or the adapters' rules refuse, before any sizing."""
    check_engine_image(spec.engine.image, config.allowed_image_prefixes)
    check_trust_remote_code(spec.model.trust_remote_code, allowed=config.allow_trust_remote_code)
    cache = spec.model.cache
    check_adapters(
        spec.adapters,
        served_name=served_name,
        has_cache_claim=cache is not None and cache.persistent_volume_claim is not None,
        has_api_key=spec.engine.api_key_secret_ref is not None,
    )


def plan_service(
    spec: LlamaServiceSpec,
    *,
    name: str,
    config: PlanningConfig,
    inventory: Inventory | None = None,
    measured: MeasuredSteps | None = None,
) -> Plan:
    """Plan one LlamaService: accelerator, placement, engine sizing and vLLM arguments. `measured`: the
    efficiency factors measured on the service's own replicas, used for the accelerator they were
    measured on (reconcile/engine.py decides when).

    Raises PlanningError with a message the user can act on when the spec cannot work.
    """
    served_name = spec.model.served_name or name
    _check_policy_inputs(spec, served_name, config)
    request = replace(_request(spec, config), measured=measured)
    sized, placement, notes = _choose_and_size(spec, request, config, inventory)
    candidate = sized.candidate
    accel = candidate.accelerator
    args, arg_notes = _vllm_args(spec, served_name, sized, config, request)
    notes += arg_notes

    where = _scheduling(candidate, placement)
    image, cpu_request, env = _engine_runtime(candidate, config)
    lora, draft = sized.lora, request.draft
    adapter_bytes = _plan_lora(spec, sized, env, notes)
    draft_bytes, draft_kv_per_token = _plan_draft(request, sized, notes)
    memory_bytes = (
        candidate.device_memory_bytes * candidate.count * candidate.nodes
        if accel.is_gpu
        else sized.memory_request_bytes
    )
    # The autoscaler's prior for a replica's prefill capacity: full chunks of the planned step budget
    # (vLLM's default 2048 where the planner leaves it), from the same step model the flags come from.
    prefill_tokens_per_second = sized.steps.prefill_tokens_per_second(
        sized.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    )
    return Plan(
        accelerator=accel.type,
        mig=candidate.mig.name if candidate.mig is not None else None,
        mig_strategy=placement.mig_strategy,
        count=candidate.count,
        display_name=candidate.name,
        memory_bytes=memory_bytes,
        price_per_hour=round(candidate.price(config), 4),
        image=spec.engine.image or image,
        resources=where.resources,
        cpu_request=str(cpu_request),
        memory_request=f"{math.ceil(sized.memory_request_bytes / GIB)}Gi",
        node_selector=where.node_selector,
        node_affinity=where.node_affinity,
        tolerations=where.tolerations,
        served_model_name=served_name,
        vllm_args=args,
        vllm_env=env,
        dtype=sized.dtype,
        max_model_len=sized.max_model_len,
        max_num_seqs=sized.max_num_seqs,
        gpu_memory_utilization=sized.gpu_memory_utilization,
        weight_bytes=sized.gpu.weight_bytes_per_device if sized.gpu is not None else sized.weight_bytes,
        kv_bytes_per_token=sized.kv_bytes_per_token,
        kv_cache_tokens=sized.kv_cache_tokens,
        max_concurrency=round(sized.kv_cache_tokens / sized.max_model_len, 2) if sized.max_model_len else 0.0,
        prefill_tokens_per_second=round(prefill_tokens_per_second),
        max_num_batched_tokens=sized.max_num_batched_tokens,
        enforce_eager=sized.enforce_eager or request.extra.enforce_eager is True,
        decode_step_seconds=round(sized.steps.weight_read_seconds, 6),
        decode_seconds_per_context_token=float(f"{sized.steps.seconds_per_context_token:.4g}"),
        prefill_seconds_per_token=float(f"{sized.steps.seconds_per_prefill_token:.4g}"),
        max_loras=lora.max_loras if lora is not None else 0,
        max_lora_rank=lora.max_lora_rank if lora is not None else 0,
        max_cpu_loras=lora.max_cpu_loras if lora is not None else 0,
        adapter_bytes=adapter_bytes,
        speculative_method=draft.method if draft is not None else None,
        nodes=candidate.nodes,
        draft_weight_bytes=draft_bytes,
        draft_kv_bytes_per_token=draft_kv_per_token,
        measured_steps=request.measured
        if request.measured is not None and request.measured.accelerator == candidate.name
        else None,
        notes=notes,
    )
