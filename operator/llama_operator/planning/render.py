"""The plan written out: the vLLM arguments for the sized engine, its image, CPU request and environment,
and the notes on LoRA slots and a speculative draft.
"""

from __future__ import annotations

import json
import math

from llama_operator.api.plan import Plan
from llama_operator.api.spec import (
    LlamaServiceSpec,
    Quantization,
)
from llama_operator.catalog.accelerators import GIB, Accelerator
from llama_operator.catalog.vllm import VLLM_PORT
from llama_operator.planning.adapters import RUNTIME_LORA_ENV
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.engine import PRE_AMPERE_ATTENTION_BACKEND, draft_weight_bytes
from llama_operator.planning.model import DRAFT_FREE_METHODS, Candidate, Request, Sized, gib
from llama_operator.planning.placement import Placement, scheduling_of
from llama_operator.planning.sizing import kv_bytes_per_token
from llama_operator.planning.tuning import DEFAULT_MAX_NUM_BATCHED_TOKENS

SERVER_HOST = "0.0.0.0"
# vLLM's name for the llm-compressor checkpoint format W8A8 INT8 checkpoints come in.
COMPRESSED_TENSORS = "compressed-tensors"
# Host resources of a GPU replica: the API server, tokenizer and weight loading run on the CPU. The CPU
# request must fit the smallest GPU instances (g4dn.xlarge and g5.xlarge allocate ~3.9 of 4 vCPUs),
# so it is a floor for scheduling, not a limit: vLLM may burst above it.
GPU_REPLICA_BASE_CPUS = 1
GPU_REPLICA_CPUS_PER_GPU = 1


# --- vLLM arguments -------------------------------------------------------------------------------


def vllm_args(
    spec: LlamaServiceSpec, served_name: str, sized: Sized, config: PlanningConfig, request: Request
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
    args += _quantization_args(request, notes)
    args += _offload_args(request, notes)
    args += _model_kind_args(request, sized.candidate.count, notes)
    if spec.model.cache is not None:
        args += ["--download-dir", config.model_cache_path]
    if spec.model.revision:
        args += ["--revision", spec.model.revision]
    if spec.model.trust_remote_code:  # plan_service checked that the platform allows it
        args.append("--trust-remote-code")
    args += _attention_args(accel, request.extra.attention_backend, notes)
    if sized.lora is not None:
        args += sized.lora.args()
    args += list(request.extra.args)
    return args, notes


def _quantization_args(request: Request, notes: list[str]) -> list[str]:
    """--quantization where vLLM must be told (and a note on what the plan assumed of the checkpoint)."""
    quantization = request.quantization
    if quantization is Quantization.FP8 and request.quantization_in_flight:
        # In-flight quantization of a 16-bit checkpoint: vLLM must be told. An FP8 checkpoint's own
        # quantization_config names its method (fp8, compressed-tensors, fbgemm_fp8): naming another here
        # would make vLLM refuse it.
        return ["--quantization", quantization.value]
    if quantization is Quantization.INT8:
        # The checkpoint's quantization_config (compressed-tensors) names the scheme; naming the format
        # here makes vLLM refuse at start a checkpoint that is not one (16-bit, AWQ), which it would
        # otherwise load at another size than the plan's.
        notes.append(
            "quantization int8: a W8A8 INT8 checkpoint, weights planned at 8 bits; --quantization "
            f"{COMPRESSED_TENSORS} makes vLLM refuse a checkpoint in another format"
        )
        return ["--quantization", COMPRESSED_TENSORS]
    if quantization in (Quantization.AWQ, Quantization.GPTQ):
        # The checkpoint's quantization_config names the method; naming it here would force vLLM's
        # slower non-Marlin kernel on sm_80+ GPUs.
        notes.append(
            f"quantization {quantization.value}: vLLM reads it from the checkpoint and picks the kernel"
        )
    return []


def _offload_args(request: Request, notes: list[str]) -> list[str]:
    """Host memory the replica offloads to: the KV blocks evicted from the GPU, and weights extraArgs keeps there."""
    args: list[str] = []
    if request.kv_offload_bytes:
        size_gib = request.kv_offload_bytes / GIB
        args += ["--kv-offloading-size", f"{size_gib:g}", "--kv-offloading-backend", "native"]
        notes.append(
            f"KV offload: {size_gib:g} GiB of host memory for KV blocks evicted from the GPU (vLLM's native "
            "offloading, over all the replica's GPUs), in the pod's memory request and limit"
        )
    if request.extra.cpu_offload_gib:
        notes.append(
            f"--cpu-offload-gb {request.extra.cpu_offload_gib:g}: that many GiB of each GPU's weights stay in host "
            "memory (in the pod's memory request and limit) and cross PCIe every step: decode slows accordingly"
        )
    return args


def _model_kind_args(request: Request, tensor_parallel: int, notes: list[str]) -> list[str]:
    """The flags a vision model or a mixture of experts takes, with notes on what the plan assumed."""
    args: list[str] = []
    shape = request.shape
    if shape.image_tokens:
        # The images a request may carry: vLLM's encoder cache and its profile are sized for them.
        args += ["--limit-mm-per-prompt", json.dumps({"image": request.images_per_prompt})]
        notes.append(
            f"vision: up to {request.images_per_prompt} image(s) per request (--limit-mm-per-prompt), each up to "
            f"{shape.image_tokens} tokens of its context and KV cache; encoder weights "
            f"{shape.vision_parameters / 1e9:.2f} B parameters, kept in 16 bits"
        )
    if shape.is_moe:
        experts = shape.experts or 0
        active = shape.compute_parameters / 1e9
        note = (
            f"mixture of experts: {experts} experts, {shape.experts_per_token} per token; every expert's weights "
            f"in memory ({shape.parameters / 1e9:.1f} B parameters), a prompt token computed through "
            f"{active:.1f} B; a decode step is planned reading every expert (a batch of n touches "
            f"1 - (1 - {shape.experts_per_token}/{experts})^n of them)"
        )
        if (
            tensor_parallel > 1
            and experts % tensor_parallel == 0
            and request.extra.enable_expert_parallel is None
        ):
            # Whole experts per GPU instead of a slice of each: the experts' matrix multiplies stay large.
            args.append("--enable-expert-parallel")
            note += f"; expert parallel: {experts // tensor_parallel} whole experts per GPU (--enable-expert-parallel)"
        notes.append(note)
    if shape.caveat is not None:
        notes.append(shape.caveat)
    return args


def _attention_args(accel: Accelerator, from_extra_args: str | None, notes: list[str]) -> list[str]:
    """The attention backend of a GPU without FlashAttention-2, unless extraArgs chose one."""
    if not accel.is_gpu or accel.supports_flash_attention_2:
        return []
    if from_extra_args is not None:
        notes.append(f"attention backend {from_extra_args} from extraArgs")
        return []
    notes.append(
        f"attention backend {PRE_AMPERE_ATTENTION_BACKEND}: {accel.type} "
        f"({accel.compute_capability}) has no FlashAttention-2"
    )
    return ["--attention-backend", PRE_AMPERE_ATTENTION_BACKEND]


def engine_runtime(candidate: Candidate, config: PlanningConfig) -> tuple[str, int, dict[str, str]]:
    """The engine's image, CPU request and environment for a GPU replica or a CPU one."""
    if candidate.accelerator.is_gpu:
        return config.gpu_image, GPU_REPLICA_BASE_CPUS + GPU_REPLICA_CPUS_PER_GPU * candidate.count, {}
    return config.cpu_image, config.cpu_replica_cpus, {"VLLM_CPU_KVCACHE_SPACE": str(config.cpu_kv_cache_gib)}


def plan_lora(spec: LlamaServiceSpec, sized: Sized, env: dict[str, str], notes: list[str]) -> int:
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
        f"{gib(adapter_bytes)}{' per GPU' if candidate.count > 1 else ''} from the "
        f"{'KV cache' if accel.is_gpu else 'host memory'}; up to {lora.max_cpu_loras} adapters cached in "
        "host memory (adding adapters within these leaves the replicas running)"
    )
    return adapter_bytes


def plan_draft(request: Request, sized: Sized, notes: list[str]) -> tuple[int, int]:
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
    total = draft_weight_bytes(request, sized.dtype)
    draft_bytes = sized.gpu.draft_weight_bytes_per_device if sized.gpu is not None else total
    draft_kv_per_token = kv_bytes_per_token(draft.shape, kv_dtype_bytes=sized.kv_dtype_bytes)
    notes.append(
        f"speculative decoding {draft.method} with {draft.model}: its weights take {gib(draft_bytes)}"
        f"{' per GPU' if candidate.count > 1 else ''} and its KV cache {draft_kv_per_token} bytes per "
        f"token beside the target's {sized.kv_bytes_per_token - draft_kv_per_token}, out of the "
        f"{'KV cache' if candidate.accelerator.is_gpu else 'host memory'} ({sized.kv_cache_tokens} tokens left)"
    )
    return draft_bytes, draft_kv_per_token


def render_plan(
    spec: LlamaServiceSpec,
    request: Request,
    sized: Sized,
    *,
    served_name: str,
    placement: Placement,
    notes: list[str],
    config: PlanningConfig,
    unknown_gpus: str | None = None,
) -> Plan:
    """The Plan of the engine sized on its placement: the vLLM arguments and environment, the pod's
    scheduling and resources, the engine's figures and the notes of every decision."""
    candidate = sized.candidate
    args, arg_notes = vllm_args(spec, served_name, sized, config, request)
    notes += arg_notes
    image, cpu_request, env = engine_runtime(candidate, config)
    lora, draft = sized.lora, request.draft
    adapter_bytes = plan_lora(spec, sized, env, notes)
    draft_bytes, draft_kv_per_token = plan_draft(request, sized, notes)
    return Plan(
        **_placement_fields(sized, placement, config),
        image=spec.engine.image or image,
        cpu_request=str(cpu_request),
        memory_request=f"{math.ceil(sized.memory_request_bytes / GIB)}Gi",
        served_model_name=served_name,
        vllm_args=args,
        vllm_env=env,
        **_engine_fields(sized, request),
        max_loras=lora.max_loras if lora is not None else 0,
        max_lora_rank=lora.max_lora_rank if lora is not None else 0,
        max_cpu_loras=lora.max_cpu_loras if lora is not None else 0,
        adapter_bytes=adapter_bytes,
        speculative_method=draft.method if draft is not None else None,
        draft_weight_bytes=draft_bytes,
        draft_kv_bytes_per_token=draft_kv_per_token,
        measured_steps=request.measured
        if request.measured is not None and request.measured.accelerator == candidate.name
        else None,
        notes=notes,
        unknown_gpus=unknown_gpus,
    )


def _placement_fields(sized: Sized, placement: Placement, config: PlanningConfig) -> dict[str, object]:
    """The Plan's accelerator and where its pods run: what they request and where they may be scheduled."""
    candidate = sized.candidate
    accel = candidate.accelerator
    where = scheduling_of(candidate, placement)
    memory_bytes = (
        candidate.device_memory_bytes * candidate.count * candidate.nodes
        if accel.is_gpu
        else sized.memory_request_bytes
    )
    return {
        "accelerator": accel.type,
        "mig": candidate.mig.name if candidate.mig is not None else None,
        "mig_strategy": placement.mig_strategy,
        "count": candidate.count,
        "nodes": candidate.nodes,
        "display_name": candidate.name,
        "memory_bytes": memory_bytes,
        "price_per_hour": round(candidate.price(config), 4),
        "resources": where.resources,
        "node_selector": where.node_selector,
        "node_affinity": where.node_affinity,
        "tolerations": where.tolerations,
    }


def _engine_fields(sized: Sized, request: Request) -> dict[str, object]:
    """The Plan's engine figures: its flags' values, its memory, and the step model it was sized with."""
    steps = sized.steps
    # The autoscaler's prior for a replica's prefill capacity: full chunks of the planned step budget
    # (vLLM's default 2048 where the planner leaves it), from the same step model the flags come from.
    prefill_tokens_per_second = steps.prefill_tokens_per_second(
        sized.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    )
    return {
        "dtype": sized.dtype,
        "max_model_len": sized.max_model_len,
        "max_num_seqs": sized.max_num_seqs,
        "gpu_memory_utilization": sized.gpu_memory_utilization,
        "weight_bytes": sized.gpu.weight_bytes_per_device if sized.gpu is not None else sized.weight_bytes,
        "kv_bytes_per_token": sized.kv_bytes_per_token,
        "kv_cache_tokens": sized.kv_cache_tokens,
        "max_concurrency": round(sized.kv_cache_tokens / sized.max_model_len, 2)
        if sized.max_model_len
        else 0.0,
        "prefill_tokens_per_second": round(prefill_tokens_per_second),
        "max_num_batched_tokens": sized.max_num_batched_tokens,
        "enforce_eager": sized.enforce_eager or request.extra.enforce_eager is True,
        "decode_step_seconds": round(steps.weight_read_seconds, 6),
        "decode_seconds_per_context_token": float(f"{steps.seconds_per_context_token:.4g}"),
        "prefill_seconds_per_token": float(f"{steps.seconds_per_prefill_token:.4g}"),
        "seconds_per_step_token": float(f"{steps.seconds_per_step_token:.4g}"),
    }
