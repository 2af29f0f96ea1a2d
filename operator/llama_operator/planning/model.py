"""What the planner decides over: the request a spec makes (resolved once), the candidates that may run a
replica, and a candidate sized to run it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from llama_operator.api.plan import MeasuredSteps
from llama_operator.api.spec import (
    DType,
    LlamaServiceSpec,
    LoRAAdapter,
    Quantization,
    SLOSpec,
)
from llama_operator.catalog.accelerators import (
    GIB,
    Accelerator,
    MigProfile,
)
from llama_operator.catalog.checkpoints import read_checkpoint_name
from llama_operator.catalog.models import ModelShape, UnknownModelError, model_shape
from llama_operator.catalog.performance import StepModel
from llama_operator.planning.adapters import LoraCapacity
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.extra_args import ExtraArgs, parse_extra_args
from llama_operator.planning.sizing import GpuMemorySizing

TENSOR_PARALLEL_COUNTS = (1, 2, 4, 8)


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
class Request:
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
    # fp8 from a 16-bit checkpoint, quantized by vLLM as it loads (--quantization fp8); False for a checkpoint
    # stored quantized, whose quantization_config vLLM reads.
    quantization_in_flight: bool = False
    images_per_prompt: int = 0  # a vision model's --limit-mm-per-prompt images; 0 for a text model
    kv_offload_bytes: int = 0  # engine.kvOffload.cpuBytes: host memory for offloaded KV blocks
    quantization_read_from: str | None = None  # model.quantization or the name's suffix; None: engine's
    adapters: tuple[LoRAAdapter, ...] = ()
    draft: Draft | None = None  # speculative decoding (extraArgs' --speculative-config)
    # Efficiency factors measured on the service's replicas (reconcile/engine.py): the step model of the
    # candidate they were measured on uses them; every other candidate keeps the catalog's.
    measured: MeasuredSteps | None = None


# Speculative methods that propose from the request's own tokens: no draft weights or KV cache.
DRAFT_FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})


@dataclass(frozen=True)
class Draft:
    """Speculative decoding as vLLM will configure it, with the draft model's shape when it has one."""

    method: str
    model: str | None
    shape: ModelShape | None  # None: nothing to plan (n-gram, suffix, or the target's own MTP layers)
    # Tokens proposed per step: each running sequence's decode verifies 1 + this many tokens (vLLM refuses a
    # config without it where the method has no default; 1 stands in for those).
    num_speculative_tokens: int = 1

    @property
    def tokens_per_decode(self) -> int:
        """Tokens one sequence's decode puts through a step: its own and the proposals it verifies."""
        return 1 + self.num_speculative_tokens


# EAGLE heads: one decoder layer of the target's width on its hidden states, proposing from the target's own
# embeddings and lm_head (vLLM shares them). EAGLE-1 feeds [embedding, hidden] through a 2h -> h projection;
# EAGLE-3 fuses three of the target's layers (3h -> h), attends over 2h-wide inputs and predicts over its own
# draft vocabulary (draft_vocab_size 32,000 in the published Llama heads) mapped onto the target's.
EAGLE_METHODS = frozenset({"eagle", "eagle3"})
EAGLE3_DRAFT_VOCAB = 32_000
_SIZE_IN_NAME = re.compile(r"(?<![0-9.])([0-9]+(?:\.[0-9]+)?)b(?![a-z0-9])", re.IGNORECASE)


def eagle_head_shape(method: str, target: ModelShape) -> ModelShape:
    """The shape of an EAGLE or EAGLE-3 head for `target`, from the target's width (config.json of the
    published heads: one layer, the target's heads and MLP)."""
    hidden = target.hidden_size or round(math.sqrt(target.parameters / (12 * target.layers)))
    intermediate = target.intermediate_size or round(3.5 * hidden)
    kv_width = target.kv_heads * target.head_dim
    layer = 2 * hidden * hidden + 2 * hidden * kv_width + 3 * hidden * intermediate
    if method == "eagle3":
        parameters = (
            layer
            + hidden * hidden
            + 2 * hidden * kv_width
            + 3 * hidden * hidden
            + EAGLE3_DRAFT_VOCAB * hidden
        )
    else:
        parameters = layer + 2 * hidden * hidden
    return ModelShape(
        layers=1,
        kv_heads=target.kv_heads,
        head_dim=target.head_dim,
        parameters=parameters,
        max_context=target.max_context,
        embedding_parameters=0,
        hidden_size=hidden,
        intermediate_size=intermediate,
    )


def _check_eagle_head(model_name: str, target_name: str) -> None:
    """An EAGLE head is trained on one target's hidden states: its name must carry the target's size (8B, 70B)
    as the published heads' names do (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, RedHatAI/Llama-3.1-8B-Instruct-
    speculator.eagle3)."""
    target_sizes = {m.lower() for m in _SIZE_IN_NAME.findall(read_checkpoint_name(target_name).base_name)}
    head_sizes = {m.lower() for m in _SIZE_IN_NAME.findall(model_name)}
    if target_sizes and not target_sizes & head_sizes:
        size = sorted(target_sizes)[0]
        raise PlanningError(
            f"spec.engine.extraArgs --speculative-config: the EAGLE head's name does not carry the target's size "
            f"({size}B); an EAGLE head works only with the model it was trained on: use the head published for "
            "this model (its name names it), or a draft_model from the catalog"
        )


def resolve_draft(
    speculative: Mapping[str, object] | None, target: ModelShape | None = None, target_name: str = ""
) -> Draft | None:
    """The draft model of --speculative-config, sized from the catalog: its weights and KV cache come out
    of the memory budget, so a draft the planner cannot size is refused rather than left out of the plan."""
    if speculative is None:
        return None
    method = speculative.get("method")
    model = speculative.get("model")
    model_name = str(model) if model is not None else None
    if method is None:  # vLLM's inference (SpeculativeConfig.__post_init__)
        method = "ngram" if model_name in ("ngram", "[ngram]") else "draft_model"
    proposed = speculative.get("num_speculative_tokens")
    tokens = proposed if isinstance(proposed, int) and proposed > 0 else 1
    if method in DRAFT_FREE_METHODS or model_name is None:
        return Draft(method=str(method), model=None, shape=None, num_speculative_tokens=tokens)
    if method in EAGLE_METHODS and target is not None:
        _check_eagle_head(model_name, target_name)
        return Draft(
            method=str(method),
            model=model_name,
            shape=eagle_head_shape(str(method), target),
            num_speculative_tokens=tokens,
        )
    try:
        shape = model_shape(model_name)
    except UnknownModelError:
        raise PlanningError(
            f"spec.engine.extraArgs --speculative-config: the draft model {model_name!r} is not in the "
            "operator's catalog, so its weights and KV cache cannot be taken from the memory plan; use a "
            "catalog model as the draft (e.g. meta-llama/Llama-3.2-1B-Instruct), or method ngram or suffix "
            "(no draft weights)"
        ) from None
    return Draft(method=str(method), model=model_name, shape=shape, num_speculative_tokens=tokens)


@dataclass(frozen=True)
class Sized:
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


class DoesNotFitError(PlanningError):
    """The candidate lacks memory (as opposed to lacking a capability the spec needs)."""


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def dtype_bytes(dtype: str) -> int:
    return 4 if dtype == DType.FLOAT32.value else 2


# --- entry point ----------------------------------------------------------------------------------


_QUANTITY_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip
_QUANTITY = re.compile(r"^\+?(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suffix>[KMGTPE]i|[kMGTPE])?$")


def quantity_bytes(text: str) -> int:
    """A Kubernetes memory quantity (40Gi, 500M, 1e9 is not one the API's validation admits here) in bytes."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise PlanningError(f"a memory quantity such as 40Gi is needed, not {text[:32]!r}")
    return math.ceil(float(match["number"]) * _QUANTITY_SUFFIX[match["suffix"] or ""])


def resolve_images(spec: LlamaServiceSpec, shape: ModelShape) -> int:
    """Images one request may carry: engine.maxImagesPerPrompt on a vision model (1 unset), none on a text one."""
    wanted = spec.engine.max_images_per_prompt
    if shape.image_tokens == 0:
        if wanted:
            raise PlanningError(
                f"engine.maxImagesPerPrompt is for a vision model; {spec.model.name} has no vision encoder (set "
                "model.architecture.vision for one the catalog does not know): remove it"
            )
        return 0
    images = 1 if wanted is None else wanted
    if spec.engine.max_model_len is not None and images * shape.image_tokens >= spec.engine.max_model_len:
        raise PlanningError(
            f"engine.maxModelLen {spec.engine.max_model_len} leaves no room for text beside "
            f"{images} image(s) of up to {shape.image_tokens} tokens each: raise engine.maxModelLen above "
            f"{images * shape.image_tokens}, or lower engine.maxImagesPerPrompt"
        )
    return images


def resolve_quantization(spec: LlamaServiceSpec) -> tuple[Quantization, bool, str | None]:
    """How the weights are stored, whether vLLM quantizes them as it loads them (fp8 on the fly from a 16-bit
    checkpoint: engine.quantization fp8), and where the scheme was read (None: engine.quantization).

    The checkpoint's own scheme comes from spec.model.quantization, else from its name (catalog/checkpoints.py);
    engine.quantization may repeat it, not contradict it."""
    engine = spec.engine.quantization
    checkpoint = read_checkpoint_name(spec.model.name)
    if spec.model.quantization is not None:
        stored, read_from = spec.model.quantization, "model.quantization"
    elif checkpoint.quantization is not None:
        stored, read_from = checkpoint.quantization, f"the name's suffix {checkpoint.suffix}"
    else:
        return engine, engine is Quantization.FP8, None
    if stored is Quantization.NONE:
        return engine, engine is Quantization.FP8, None
    if engine not in (Quantization.NONE, stored):
        raise PlanningError(
            f"engine.quantization {engine.value} contradicts the checkpoint's {stored.value} weights (from "
            f"{read_from}): remove engine.quantization (vLLM reads the checkpoint's scheme), or set "
            "model.quantization to how the checkpoint is stored"
        )
    return stored, False, read_from


def resolve_request(spec: LlamaServiceSpec, config: PlanningConfig) -> Request:
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
    quantization, in_flight, read_from = resolve_quantization(spec)
    images = resolve_images(spec, shape)
    return Request(
        model_name=spec.model.name,
        shape=shape,
        dtype=engine.dtype,
        quantization=quantization,
        quantization_in_flight=in_flight,
        quantization_read_from=read_from,
        images_per_prompt=images,
        kv_offload_bytes=quantity_bytes(engine.kv_offload.cpu_bytes) if engine.kv_offload is not None else 0,
        max_model_len=engine.max_model_len,
        max_num_seqs=None if engine.max_num_seqs == "auto" else engine.max_num_seqs,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        extra=extra,
        slo=spec.autoscaling.slo if spec.autoscaling is not None and spec.autoscaling.enabled else None,
        adapters=tuple(spec.adapters),
        draft=resolve_draft(extra.speculative, shape, spec.model.name),
    )
