"""The resolved plan: what the planner decided for a LlamaService. Shown in status.plan and by `plan`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, ValidationError

from llama_operator.api.autoscaling import Time
from llama_operator.api.base import WireModel


class Toleration(WireModel):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None


class NodeSelectorRequirement(WireModel):
    key: str
    operator: str
    values: list[str] = Field(default_factory=list)


class NodeSelectorTerm(WireModel):
    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list)


class MeasuredSteps(WireModel):
    """The step model's efficiency factors as measured on the service's own replicas
    (status.autoscaling.state.stepCalibration), which the engine was planned with in place of the
    catalog's estimates."""

    bandwidth_efficiency: Annotated[
        float,
        Field(description="Share of the data-sheet memory bandwidth a decode step reaches.", gt=0, le=1),
    ]
    compute_efficiency: Annotated[
        float, Field(description="Share of the data-sheet FLOPS a prompt chunk reaches.", gt=0, le=1)
    ]
    step_overhead_seconds: Annotated[float, Field(description="Fixed time per engine step.", ge=0)]
    accelerator: Annotated[
        str, Field(description="The accelerator (the plan's displayName) they were measured on.")
    ]


class Plan(WireModel):
    """The accelerator, placement and vLLM configuration chosen for each replica."""

    accelerator: Annotated[str, Field(description="Resolved accelerator type (never 'auto').")]
    mig: Annotated[str | None, Field(description="MIG profile, when on a slice.")] = None
    mig_strategy: Annotated[str | None, Field(description="MIG strategy of the nodes (mixed or single).")] = (
        None
    )
    count: Annotated[int, Field(description="Accelerators per replica (tensor parallel size).")] = 1
    display_name: Annotated[
        str, Field(description="Short name for humans, e.g. a100-80gb/1g.10gb or 2xa10g.")
    ] = ""
    memory_bytes: Annotated[int, Field(description="Accelerator memory per replica, in bytes.")] = 0
    price_per_hour: Annotated[float, Field(description="Relative price of one replica per hour.")] = 0.0
    image: Annotated[str, Field(description="vLLM container image.")] = ""
    resources: Annotated[
        dict[str, str], Field(description="Container resource requests and limits (extended resources).")
    ] = Field(default_factory=dict)
    cpu_request: Annotated[str, Field(description="CPU request of the vLLM container.")] = "1"
    memory_request: Annotated[str, Field(description="Memory request of the vLLM container.")] = "4Gi"
    node_selector: Annotated[dict[str, str], Field(description="Node selector.")] = Field(
        default_factory=dict
    )
    node_affinity: Annotated[
        list[NodeSelectorTerm],
        Field(
            description="Required node affinity terms (ORed), e.g. keeping off nodes whose MIG setup is not done."
        ),
    ] = Field(default_factory=list)
    tolerations: Annotated[list[Toleration], Field(description="Tolerations.")] = Field(default_factory=list)
    served_model_name: Annotated[str, Field(description="Model name clients use.")] = ""
    vllm_args: Annotated[list[str], Field(description="Arguments of the vLLM OpenAI server.")] = Field(
        default_factory=list
    )
    vllm_env: Annotated[
        dict[str, str], Field(description="Environment variables that tune vLLM for this accelerator.")
    ] = Field(default_factory=dict)
    dtype: Annotated[str, Field(description="Resolved dtype.")] = ""
    max_model_len: Annotated[int, Field(description="Context length served.")] = 0
    max_num_seqs: Annotated[int, Field(description="Concurrent sequences per replica.")] = 0
    gpu_memory_utilization: Annotated[float, Field(description="Memory fraction vLLM uses.")] = 0.0
    weight_bytes: Annotated[int, Field(description="Model weight bytes per accelerator.")] = 0
    kv_bytes_per_token: Annotated[int, Field(description="KV-cache bytes per token, whole model.")] = 0
    kv_cache_tokens: Annotated[int, Field(description="KV-cache capacity of one replica, in tokens.")] = 0
    max_concurrency: Annotated[
        float, Field(description="Requests of max-model-len tokens the KV cache holds at once.")
    ] = 0.0
    prefill_tokens_per_second: Annotated[
        float,
        Field(
            description="Estimated compute-bound prefill throughput of one replica (tokens/s); seeds the "
            "autoscaler's capacity estimate, which it then learns from observed load."
        ),
    ] = 0.0
    max_num_batched_tokens: Annotated[
        int,
        Field(description="Token budget of one engine step (--max-num-batched-tokens: the prefill chunk)."),
    ] = 0
    enforce_eager: Annotated[
        bool, Field(description="CUDA graphs off (--enforce-eager), to leave their memory to the KV cache.")
    ] = False
    decode_step_seconds: Annotated[
        float,
        Field(
            description="Estimated time of a decode step with nothing but the weights to read (fixed overhead "
            "plus weights / bandwidth); with decodeSecondsPerContextToken it sizes maxNumSeqs for the TPOT "
            "objective and seeds the autoscaler's decode capacity."
        ),
    ] = 0.0
    decode_seconds_per_context_token: Annotated[
        float,
        Field(description="Estimated decode step time per token of context read (KV bytes / bandwidth)."),
    ] = 0.0
    prefill_seconds_per_token: Annotated[
        float,
        Field(description="Estimated step time per prompt token computed (2 x parameters / FLOPS reached)."),
    ] = 0.0
    seconds_per_step_token: Annotated[
        float,
        Field(
            description="Estimated step time per token of a step, decode or prompt, that tensor parallelism's "
            "all-reduces add (0 on one device): the fourth term of the step model the planner sized with."
        ),
    ] = 0.0
    max_loras: Annotated[
        int, Field(description="LoRA adapters one engine step can serve at once (GPU slots); 0: LoRA off.")
    ] = 0
    max_lora_rank: Annotated[int, Field(description="Largest LoRA rank the slots hold; 0: LoRA off.")] = 0
    max_cpu_loras: Annotated[int, Field(description="LoRA adapters kept in host memory; 0: LoRA off.")] = 0
    adapter_bytes: Annotated[
        int,
        Field(
            description="Accelerator memory per GPU (host memory on a CPU replica) the LoRA slots take, out of "
            "what the KV cache would otherwise have."
        ),
    ] = 0
    nodes: Annotated[
        int,
        Field(
            description="Nodes (pods) per replica: above 1, each replica is a LeaderWorkerSet group of this many "
            "pods, count GPUs each, pipeline parallel across them."
        ),
    ] = 1
    speculative_method: Annotated[
        str | None,
        Field(
            description="Speculative decoding method vLLM runs (extraArgs' --speculative-config); unset: none."
        ),
    ] = None
    draft_weight_bytes: Annotated[
        int,
        Field(
            description="Accelerator memory per GPU (host memory on a CPU replica) the speculative draft model's "
            "weights take, out of what the KV cache would otherwise have."
        ),
    ] = 0
    draft_kv_bytes_per_token: Annotated[
        int,
        Field(
            description="KV-cache bytes per token of the draft model, held beside the target's in every block "
            "(kvBytesPerToken includes them)."
        ),
    ] = 0
    measured_steps: Annotated[
        MeasuredSteps | None,
        Field(
            description="The efficiency factors measured on the service's own replicas that the engine "
            "(maxNumBatchedTokens, maxNumSeqs, the step estimates) was planned with; unset: the catalog's."
        ),
    ] = None
    engine_replanned_at: Annotated[
        Time | None,
        Field(
            description="When the engine was last re-planned for measured hardware (or back to the catalog's "
            "estimates): the next such change waits an hour."
        ),
    ] = None
    notes: Annotated[list[str], Field(description="Why the planner chose what it chose.")] = Field(
        default_factory=list
    )
    unknown_gpus: Annotated[
        str | None,
        Field(
            description="GPU nodes accelerator auto left out: their product matches no accelerator in the "
            "catalog (a Warning Event UnknownGPUs when this appears or changes)."
        ),
    ] = None


def status_plan(status: Mapping[str, Any] | None) -> Plan | None:
    """status.plan, typed: None while there is none (or it cannot be read). Fields this version does not
    know (a newer operator wrote them, before a rollback) are left out rather than refusing the plan."""
    raw = (status or {}).get("plan")
    if not isinstance(raw, Mapping) or not raw:
        return None
    known = {field.alias or name for name, field in Plan.model_fields.items()}
    try:
        return Plan.model_validate({key: value for key, value in raw.items() if key in known})
    except ValidationError:
        return None
