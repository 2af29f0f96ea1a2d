"""The engine sized on one candidate: dtype, capabilities, memory (KV cache, CUDA graphs), max-model-len,
max-num-seqs, the step model and the step budget; or a PlanningError saying why the candidate cannot run it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llama_operator.api.spec import (
    DType,
    Quantization,
)
from llama_operator.catalog.accelerators import (
    FP8_MIN_CAPABILITY,
    GIB,
    INT8_W8A8_FIRST_UNSUPPORTED,
    INT8_W8A8_MIN_CAPABILITY,
    Accelerator,
    ComputeCapability,
)
from llama_operator.catalog.models import ModelShape
from llama_operator.catalog.performance import CATALOG_FACTORS, Factors, StepModel, step_model
from llama_operator.planning.adapters import LoraCapacity, lora_capacity
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.model import Candidate, DoesNotFitError, Request, Sized, dtype_bytes, gib
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
from llama_operator.planning.tuning import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    TpotTuning,
    chunk_budget,
    longest_prompt_note,
    tpot_tuning,
)

# T4 (sm_75) has no FlashAttention-2: vLLM 0.32's FLASH_ATTN backend requires compute capability
# >= 8.0. TRITON_ATTN accepts any compute capability (vllm/v1/attention/backends/triton_attn.py,
# supports_compute_capability -> True) and needs no JIT-compiled kernels. vLLM 0.32 selects it with
# the --attention-backend flag; the VLLM_ATTENTION_BACKEND variable was deprecated (vLLM PR 26315)
# and is no longer read.
PRE_AMPERE_ATTENTION_BACKEND = "TRITON_ATTN"
TRITON_ATTENTION_MIN_HEAD_DIM = 32
# - the CUDA-graph pool is given to the KV cache (--enforce-eager) when it would take more than this
#   share of what is left for the KV cache: a memory-starved replica (3B on a 1g.10gb slice) gains more
#   concurrency from it than it loses in step time;
EAGER_KV_SHARE = 0.15
# - without a TPOT objective, the default max-model-len leaves KV room for this many sequences of that
#   length at once, for every service, autoscaled or with fixed replicas: a shared service needs
#   concurrency, not one 131072-token sequence (a 1g.10gb slice holds 1.24 of those).
DEFAULT_CONTEXT_CONCURRENCY = 16
# Host memory of a GPU replica: safetensors are read through the page cache, so half the per-replica
# weights is ample.
GPU_REPLICA_BASE_MEMORY_BYTES = 4 * GIB
GPU_REPLICA_WEIGHT_MEMORY_SHARE = 0.5
# A CPU replica holds weights and KV space in host memory, plus the Python runtime and buffers.
CPU_REPLICA_RUNTIME_BYTES = 2 * GIB


def _resolve_dtype(request: Request, accel: Accelerator) -> tuple[str, list[str]]:
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


def _kv_dtype_bytes(request: Request, accel: Accelerator, dtype: str) -> int:
    kv_dtype = request.extra.kv_cache_dtype
    if kv_dtype is None or kv_dtype == "auto":
        return dtype_bytes(dtype)
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


# FP8 weights as vLLM runs them: W8A8 on FP8 tensor cores (compute capability 8.9 and up: L4, L40S, H100,
# H200, B200); weight-only W8A16 through the Marlin kernels from 8.0 (A10G, A100: weights at 8 bits, the
# matrix math in 16), as vLLM's fp8 and compressed-tensors methods fall back to on GPUs without FP8 cores.
FP8_MARLIN_MIN_CAPABILITY = ComputeCapability(8, 0)
FP8_TENSOR_CORE_SPEEDUP = 2.0


def fp8_kernel(accel: Accelerator) -> str | None:
    """How vLLM runs FP8 weights on `accel`: 'W8A8', 'W8A16' (Marlin), or None where it cannot."""
    if accel.supports_fp8:
        return "W8A8"
    cc = accel.compute_capability
    if cc is not None and cc.at_least(FP8_MARLIN_MIN_CAPABILITY.major, FP8_MARLIN_MIN_CAPABILITY.minor):
        return "W8A16"
    return None


def _fp8_note(request: Request, accel: Accelerator) -> str:
    where = (
        f"from {request.quantization_read_from}" if request.quantization_read_from else "engine.quantization"
    )
    loaded = (
        "quantized by vLLM as it loads the 16-bit checkpoint" if request.quantization_in_flight else where
    )
    if fp8_kernel(accel) == "W8A8":
        return f"fp8 ({loaded}): W8A8 on {accel.type}'s FP8 tensor cores, weights at 8 bits"
    return (
        f"fp8 ({loaded}): weight-only (W8A16) through vLLM's Marlin kernels, {accel.type} "
        f"({accel.compute_capability}) has no FP8 tensor cores: weights at 8 bits, the matrix math in 16"
    )


def _check_capabilities(request: Request, candidate: Candidate) -> None:
    accel = candidate.accelerator
    if request.quantization == Quantization.FP8 and fp8_kernel(accel) is None:
        where = f"{accel.type} is {accel.compute_capability}" if accel.is_gpu else "vLLM's CPU build has none"
        field = request.quantization_read_from or "engine.quantization"
        raise PlanningError(
            f"fp8 weights ({field}) need compute capability {FP8_MARLIN_MIN_CAPABILITY} or newer (weight-only "
            f"W8A16 through vLLM's Marlin kernels; W8A8 on FP8 tensor cores from {FP8_MIN_CAPABILITY}); "
            f"{where}: serve a 4-bit AWQ or GPTQ checkpoint or a W8A8 INT8 one (...-quantized.w8a8) there, or "
            "choose an accelerator from a10g (W8A16) or l4 (W8A8) up"
        )
    if request.quantization == Quantization.INT8 and not accel.supports_int8_w8a8:
        raise PlanningError(
            f"engine.quantization int8 (a W8A8 INT8 checkpoint) needs compute capability "
            f"{INT8_W8A8_MIN_CAPABILITY.major}.{INT8_W8A8_MIN_CAPABILITY.minor} to "
            f"{INT8_W8A8_FIRST_UNSUPPORTED.major - 1}.x: vLLM's INT8 kernels stop before Blackwell; "
            f"{accel.type} is {accel.compute_capability}: use quantization fp8 (an FP8 checkpoint, or fp8 "
            "on-the-fly from a 16-bit one) or an int8-capable accelerator (t4 to h200)"
        )
    if not accel.is_gpu and (request.kv_offload_bytes or request.extra.cpu_offload_gib):
        raise PlanningError(
            "engine.kvOffload and --cpu-offload-gb move GPU memory to the host: a CPU replica has its KV cache and "
            "weights there already; remove them"
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


def _required_len(request: Request, config: PlanningConfig) -> int:
    if request.max_model_len is not None:
        return request.max_model_len
    # A request's images take context like its prompt: room for them and the shortest context besides.
    images = request.images_per_prompt * request.shape.image_tokens
    return min(config.min_context_tokens + images, request.shape.max_context)


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


def size_engine(request: Request, candidate: Candidate, config: PlanningConfig) -> Sized:
    """Size the engine on a candidate, or raise PlanningError (DoesNotFitError when memory is short)."""
    _check_capabilities(request, candidate)
    accel = candidate.accelerator
    dtype, notes = _resolve_dtype(request, accel)
    if request.quantization is Quantization.FP8:
        notes.append(_fp8_note(request, accel))
    kv_dtype_bytes = _kv_dtype_bytes(request, accel, dtype)
    shape = request.shape
    weights = weight_bytes(shape, dtype_bytes=dtype_bytes(dtype), quantization=request.quantization)
    required = _required_len(request, config)
    lora = lora_capacity(request.adapters, shape, dtype_bytes=dtype_bytes(dtype))
    memory = (
        _gpu_memory(request, candidate, config, dtype=dtype, weights=weights, kv_dtype_bytes=kv_dtype_bytes, required=required, notes=notes, lora=lora)
        if accel.is_gpu
        else _cpu_memory(request, config, weights=weights + draft_weight_bytes(request, dtype), kv_dtype_bytes=kv_dtype_bytes, required=required, notes=notes, lora=lora)
    )  # fmt: skip
    kv_tokens = _kv_tokens(request, memory, notes)
    steps = _planned_steps(request, candidate, weights, memory)
    tuning = tpot_tuning(request, candidate, steps, config)
    max_model_len = _max_model_len(request, candidate, kv_tokens, tuning, required=required, notes=notes)
    max_num_seqs = _max_num_seqs(
        request, config, kv_tokens, max_model_len, tuning, ceiling=memory.max_num_seqs_ceiling, notes=notes
    )
    chunk = _step_budget(
        request, candidate, steps, max_num_seqs=max_num_seqs, config=config, tuning=tuning, notes=notes
    )
    if request.slo is not None and candidate.accelerator.is_gpu:
        budget = chunk or DEFAULT_MAX_NUM_BATCHED_TOKENS
        notes.append(longest_prompt_note(steps, budget, request.slo.ttft_seconds, max_model_len))
    return Sized(
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


def _kv_tokens(request: Request, memory: _Memory, notes: list[str]) -> int:
    """The KV cache's tokens: the memory's, unless --num-gpu-blocks-override fixes them."""
    override = request.extra.num_gpu_blocks_override
    if override is None:
        return memory.kv_cache_tokens
    kv_tokens = override * KV_BLOCK_TOKENS
    notes.append(f"KV cache fixed by --num-gpu-blocks-override {override}: {kv_tokens} tokens")
    if request.max_model_len is not None and request.max_model_len > kv_tokens:
        raise PlanningError(
            f"engine.maxModelLen {request.max_model_len} exceeds the {kv_tokens} tokens that "
            f"--num-gpu-blocks-override {override} leaves; the largest maxModelLen that fits is "
            f"{largest_max_model_len(kv_tokens, request.shape.max_context)}"
        )
    return kv_tokens


def _planned_steps(request: Request, candidate: Candidate, weights: int, memory: _Memory) -> StepModel:
    """The step model the engine is sized with: the candidate's hardware, the measured factors where they
    were measured on it."""
    # W8A8 FP8 runs the prompt's matrix math on FP8 tensor cores: twice the dense FP16 rate on Ada, Hopper
    # and Blackwell (NVIDIA's data sheets: L4 242 against 121 TFLOPS, H100 SXM 1979 against 989).
    fp8_cores = request.quantization is Quantization.FP8 and fp8_kernel(candidate.accelerator) == "W8A8"
    return _step_model(
        candidate,
        weights,
        memory.kv_bytes_per_token,
        request.shape,
        eager=memory.enforce_eager,
        factors=_measured_factors(request, candidate),
        compute_speedup=FP8_TENSOR_CORE_SPEEDUP if fp8_cores else 1.0,
    )


def _step_budget(
    request: Request,
    candidate: Candidate,
    steps: StepModel,
    *,
    max_num_seqs: int,
    config: PlanningConfig,
    tuning: TpotTuning | None,
    notes: list[str],
) -> int:
    """--max-num-batched-tokens: extraArgs', else the SLO's on a GPU, else 0 (vLLM's default)."""
    if request.extra.max_num_batched_tokens is not None:
        chunk = request.extra.max_num_batched_tokens
        notes.append(f"maxNumBatchedTokens {chunk} from extraArgs")
        return chunk
    if request.slo is not None and candidate.accelerator.is_gpu:
        per_decode = request.draft.tokens_per_decode if request.draft is not None else 1
        chunk, why = chunk_budget(
            request.slo, steps, max_num_seqs, config, tuning, tokens_per_decode=per_decode
        )
        notes.append(f"maxNumBatchedTokens {chunk}: {why}")
        return chunk
    return 0


def draft_weight_bytes(request: Request, dtype: str) -> int:
    """The draft model's weights: in the target's dtype (its checkpoint's own quantization is not known)."""
    if request.draft is None or request.draft.shape is None:
        return 0
    return weight_bytes(request.draft.shape, dtype_bytes=dtype_bytes(dtype), quantization=Quantization.NONE)


def _gpu_memory(
    request: Request,
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
    would starve it); DoesNotFitError when it cannot hold `required` tokens."""
    shape = request.shape
    util = request.gpu_memory_utilization or config.gpu_memory_utilization

    # --cpu-offload-gb keeps that many GiB of each GPU's weights in host memory.
    offloaded = math.floor(request.extra.cpu_offload_gib * GIB) * candidate.count * candidate.nodes
    gpu_weights = max(0, weights - offloaded)

    def sized(*, cuda_graphs: bool) -> GpuMemorySizing:
        return size_gpu_memory(
            shape,
            device_memory_bytes=candidate.device_memory_bytes,
            tensor_parallel=candidate.count,
            gpu_memory_utilization=util,
            weight_bytes=gpu_weights,
            kv_dtype_bytes=kv_dtype_bytes,
            cuda_graphs=cuda_graphs,
            lora_bytes_per_device=lora.gpu_bytes_per_device(candidate.count) if lora is not None else 0,
            draft=request.draft.shape if request.draft is not None else None,
            draft_weight_bytes=draft_weight_bytes(request, dtype),
            pipeline_parallel=candidate.nodes,
        )

    gpu = sized(cuda_graphs=True)
    eager = _choose_eager(request, gpu)
    if eager:
        with_graphs, gpu = gpu, sized(cuda_graphs=False)
        if request.extra.enforce_eager is None:
            notes.append(_eager_note(with_graphs, gpu))
    if gpu.kv_budget_bytes_per_device < required * gpu.kv_bytes_per_token_per_device:
        raise _does_not_fit(request, candidate, gpu, dtype=dtype, required=required, util=util)
    return _Memory(
        gpu_memory_utilization=util,
        enforce_eager=eager,
        gpu=gpu,
        kv_cache_tokens=gpu.kv_cache_tokens,
        kv_bytes_per_token=gpu.kv_bytes_per_token,
        # Per pod: a pod of a multi-node replica loads its stage's share of the weights; host memory that holds
        # offloaded weights (--cpu-offload-gb, per GPU) or KV blocks (engine.kvOffload) comes on top.
        memory_request_bytes=GPU_REPLICA_BASE_MEMORY_BYTES
        + int(weights / candidate.nodes * GPU_REPLICA_WEIGHT_MEMORY_SHARE)
        + offloaded // candidate.nodes
        + request.kv_offload_bytes // candidate.nodes,
        max_num_seqs_ceiling=config.max_auto_num_seqs,
    )


def _eager_note(with_graphs: GpuMemorySizing, without: GpuMemorySizing) -> str:
    return (
        f"enforce-eager: the CUDA-graph pool (~{gib(CUDA_GRAPH_BYTES)}) would take more than "
        f"{EAGER_KV_SHARE:.0%} of the KV cache ({with_graphs.kv_cache_tokens} tokens with graphs, "
        f"{without.kv_cache_tokens} without); decode steps are slower without graphs"
    )


def _does_not_fit(
    request: Request, candidate: Candidate, gpu: GpuMemorySizing, *, dtype: str, required: int, util: float
) -> DoesNotFitError:
    """Why a GPU replica's KV cache cannot hold `required` tokens: the maxModelLen asked for, or the model."""
    kv_tokens = gpu.kv_cache_tokens
    per_token_per_device = gpu.kv_bytes_per_token_per_device
    needed = gpu.needed_bytes_per_device_without_kv + required * per_token_per_device
    if gpu.kv_budget_bytes_per_device > 0 and request.max_model_len is not None:
        largest = largest_max_model_len(kv_tokens, request.shape.max_context)
        return DoesNotFitError(
            f"engine.maxModelLen {request.max_model_len} does not fit on {candidate.name}: its KV "
            "cache "
            f"holds {kv_tokens} tokens ({gib(gpu.kv_budget_bytes_per_device)} per GPU at "
            f"gpu-memory-utilization {util:.2f}); the largest maxModelLen that fits is {largest}"
        )
    per_gpu = " per GPU" if candidate.count > 1 else ""
    return DoesNotFitError(
        f"{request.model_name} does not fit on {candidate.name}: it needs {gib(needed)}{per_gpu} "
        f"(weights {gib(gpu.weight_bytes_per_device)} in {dtype}"
        f"{'' if request.quantization == Quantization.NONE else ' ' + request.quantization.value}, "
        f"runtime overhead {gib(gpu.overhead_bytes_per_device)}, "
        + (f"LoRA slots {gib(gpu.lora_bytes_per_device)}, " if gpu.lora_bytes_per_device else "")
        + f"KV cache for {required} tokens "
        f"{gib(required * per_token_per_device)}); {candidate.name} has "
        f"{gib(candidate.device_memory_bytes)}{per_gpu}, {gib(gpu.usable_bytes_per_device)} "
        "usable at "
        f"gpu-memory-utilization {util:.2f}"
    )


def _cpu_memory(
    request: Request,
    config: PlanningConfig,
    *,
    weights: int,
    kv_dtype_bytes: int,
    required: int,
    notes: list[str],
    lora: LoraCapacity | None = None,
) -> _Memory:
    """The configured KV space of a CPU replica; DoesNotFitError when it cannot hold `required` tokens."""
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
            raise DoesNotFitError(
                f"engine.maxModelLen {request.max_model_len} does not fit in the CPU replica's KV "
                "space of "
                f"{config.cpu_kv_cache_gib} GiB ({kv_tokens} tokens); the largest maxModelLen that "
                "fits is "
                f"{largest}"
            )
        raise DoesNotFitError(
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
    request: Request,
    candidate: Candidate,
    kv_tokens: int,
    tuning: TpotTuning | None,
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
        raise DoesNotFitError(f"no KV cache is left for {request.model_name} on {candidate.name}")
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
                f"maxModelLen {max_model_len}: the shortest context the operator serves, not the model's "
                f"{shape.max_context}; its KV cache ({kv_tokens} tokens) holds {kv_tokens // max_model_len} "
                f"sequences that long, fewer than the {concurrency} ({why}; shorter ones share it); longer "
                "prompts are refused: set engine.maxModelLen, on an accelerator with more memory, for them"
            )
    else:
        capped = (
            "the model's context"
            if max_model_len == shape.max_context
            else f"what the KV cache holds, not the model's {shape.max_context}"
        )
        notes.append(
            f"maxModelLen {max_model_len}: the largest that fits, capped by {capped} (room for "
            f"{kv_tokens // max_model_len} sequences that long)"
        )
    return max_model_len


def _max_num_seqs(
    request: Request,
    config: PlanningConfig,
    kv_tokens: int,
    max_model_len: int,
    tuning: TpotTuning | None,
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
            f"{min(max_model_len, config.typical_sequence_tokens)} tokens, rounded down to a CUDA-graph capture size, at most {ceiling}"
        )
        if tuning is not None and tuning.batch is not None and tuning.batch < max_num_seqs:
            max_num_seqs = tuning.batch
            notes.append(f"maxNumSeqs {max_num_seqs}: {tuning.why} (the {by_kv} allows more)")
        else:
            notes.append(f"maxNumSeqs {max_num_seqs}: {by_kv}")
    return max_num_seqs


def _choose_eager(request: Request, gpu: GpuMemorySizing) -> bool:
    """--enforce-eager when the CUDA-graph pool would starve the KV cache (or the user says so)."""
    if request.extra.enforce_eager is not None:
        return request.extra.enforce_eager
    return EAGER_KV_SHARE * max(gpu.kv_budget_bytes_per_device, 0) < CUDA_GRAPH_BYTES


def _measured_factors(request: Request, candidate: Candidate) -> Factors:
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
    compute_speedup: float = 1.0,
) -> StepModel:
    accel = candidate.accelerator
    if candidate.mig is not None:
        bandwidth, tflops = accel.slice_bandwidth(candidate.mig), accel.slice_tflops(candidate.mig)
    else:
        bandwidth = accel.bandwidth_bytes_per_s * candidate.count
        tflops = accel.fp16_dense_tflops * candidate.count
    tflops *= compute_speedup
    link = accel.interconnect
    return step_model(
        bandwidth_bytes_per_s=bandwidth,
        fp16_tflops=tflops,
        weight_bytes=weights,
        kv_bytes_per_token=kv_per_token,
        parameters=shape.compute_parameters,  # a mixture of experts computes a token through its active ones
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


def try_size_engine(request: Request, candidate: Candidate, config: PlanningConfig) -> Sized | None:
    try:
        return size_engine(request, candidate, config)
    except PlanningError:
        return None
