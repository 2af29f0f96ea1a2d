"""The LlamaService spec: the user's contract. The CRD schema is generated from these models."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, WithJsonSchema, field_validator, model_validator
from pydantic.alias_generators import to_camel

from llama_operator.api.base import WireModel
from llama_operator.api.secrets import CREDENTIAL_IN_ARGS_MESSAGE, carries_credential

GROUP = "serving.llama-operator.dev"
VERSION = "v1alpha1"
KIND = "LlamaService"
PLURAL = "llamaservices"
SINGULAR = "llamaservice"
SHORT_NAMES = ("llama", "llamas")
API_VERSION = f"{GROUP}/{VERSION}"


class AcceleratorType(StrEnum):
    """The built-in accelerators (catalog/accelerators.py); a platform adds others by name through the
    operator's config.accelerators, and a LlamaService may name those too."""

    T4 = "t4"
    A10 = "a10"
    A10G = "a10g"
    L4 = "l4"
    L40S = "l40s"
    A100_40GB = "a100-40gb"
    A100_80GB = "a100-80gb"
    H100_PCIE = "h100-pcie"
    H100_80GB = "h100-80gb"  # H100 SXM
    H200 = "h200"
    B200 = "b200"
    CPU = "cpu"
    AUTO = "auto"


# A platform-defined accelerator's name (config.accelerators): a DNS label, like the built-in ones.
ACCELERATOR_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A MIG profile's name as NVIDIA spells it: <compute slices>g.<memory>gb.
MIG_PROFILE_PATTERN = r"^[1-7]g\.[0-9]+gb$"

_H100_MIG = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
# MIG profiles each built-in GPU offers (NVIDIA MIG user guide). Part of the contract: CEL checks `mig`
# against it for the built-in types; a platform-defined type's profiles are checked when planning.
MIG_PROFILES_BY_TYPE: dict[AcceleratorType, tuple[str, ...]] = {
    AcceleratorType.A100_40GB: ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    AcceleratorType.A100_80GB: ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    AcceleratorType.H100_PCIE: _H100_MIG,
    AcceleratorType.H100_80GB: _H100_MIG,
    AcceleratorType.H200: ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    AcceleratorType.B200: ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
}
BUILTIN_TYPES: frozenset[str] = frozenset(t.value for t in AcceleratorType)
ALL_MIG_PROFILES: tuple[str, ...] = tuple(
    sorted({p for ps in MIG_PROFILES_BY_TYPE.values() for p in ps}, key=lambda p: (int(p[0]), p))
)


class DType(StrEnum):
    AUTO = "auto"
    HALF = "half"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"


class Quantization(StrEnum):
    # No bitsandbytes: the pinned vLLM (0.32) no longer has that method ("Unknown quantization method"),
    # so a pod would crash-loop; every value here is checked against the real parser in CI.
    NONE = "none"
    AWQ = "awq"
    GPTQ = "gptq"
    FP8 = "fp8"
    # A W8A8 INT8 checkpoint in the compressed-tensors format (llm-compressor's, e.g. RedHatAI/*-quantized.w8a8):
    # 8-bit weights and activations on vLLM's CUTLASS INT8 kernels (sm_75 to sm_90), or oneDNN's on the CPU.
    INT8 = "int8"


DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# metadata.name names the Service (a DNS-1035 label: a letter first, at most 63 characters), the
# Deployment, the PodDisruptionBudget and the PodMonitor, and is a label value: every one of those
# limits holds when the name is such a label.
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
MAX_NAME_LENGTH = 63
NAME_RULE_MESSAGE = (
    "metadata.name must be a DNS-1035 label of at most 63 characters: lowercase letters, digits and '-', "
    "starting with a letter and ending with a letter or digit (it names the Service and the Deployment)"
)
# The API server's quantity grammar (k8s.io/apimachinery resource.Quantity); the CRD checks with isQuantity.
QUANTITY = re.compile(
    r"^[+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
QUANTITY_ZERO = re.compile(r"^[+-]?0*(\.0*)?([KMGTPE]i|[numkMGTPE]|[eE].*)?$")
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


# Model fields become vLLM arguments (`--model NAME`, `--revision REV`, `--served-model-name NAME`): a value
# starting with '-' would be read by vLLM's parser as a flag (`--revision --port=9000`), the pod would
# crash-loop. Refused here, so at `kubectl apply` too (the CRD's pattern).
NOT_AN_OPTION = r"^[^-]"


def refuse_option_like(field: str, value: str | None) -> str | None:
    if value is not None and value.startswith("-"):
        raise ValueError(
            f"{field} must not start with '-': vLLM would read it as a flag (it becomes a command-line argument)"
        )
    return value


class SecretKeyRef(WireModel):
    """A key in a Secret of the LlamaService's namespace."""

    name: Annotated[str, Field(description="Name of the Secret.", pattern=DNS_SUBDOMAIN, max_length=253)]
    key: Annotated[str, Field(description="Key in the Secret holding the value.", min_length=1)] = "token"


class ModelCache(WireModel):
    """Where model weights are cached. Without a claim, an emptyDir (downloaded on every start)."""

    persistent_volume_claim: Annotated[
        str | None,
        Field(
            description="Name of a PersistentVolumeClaim in the namespace holding the model cache "
            "(mounted read-write at /models; HF_HOME points there).",
            pattern=DNS_SUBDOMAIN,
            max_length=253,
        ),
    ] = None
    size_limit: Annotated[
        str | None,
        Field(
            description="Size limit of the emptyDir used when no claim is named: a Kubernetes quantity "
            "such as 20Gi.",
            max_length=64,
        ),
    ] = None

    node_local: Annotated[
        bool,
        Field(
            description="Cache the weights and vLLM's compile cache on each node (a hostPath under "
            "/var/lib/llama-operator/models/<namespace>), so a replica started where one ran before reads them "
            "from local disk instead of downloading and compiling again. The namespace must allow hostPath "
            "volumes (Pod Security 'privileged'). Not with persistentVolumeClaim.",
        ),
    ] = False

    @model_validator(mode="after")
    def _one_cache(self) -> ModelCache:
        # As the CRD's CEL rule on spec.model.cache.
        if self.node_local and self.persistent_volume_claim:
            raise ValueError(
                "model.cache.nodeLocal and model.cache.persistentVolumeClaim exclude each other: "
                "a node-local cache or a claim, not both"
            )
        return self

    @field_validator("size_limit")
    @classmethod
    def _quantity(cls, v: str | None) -> str | None:
        if v is not None and not (
            QUANTITY.match(v) and not v.startswith("-") and QUANTITY_ZERO.match(v) is None
        ):
            raise ValueError(
                f"model.cache.sizeLimit {v!r} is not a positive Kubernetes quantity such as 20Gi"
            )
        return v


EXPERTS_MESSAGE = "architecture.experts and architecture.expertsPerToken describe a mixture of experts together: set both or neither"
EXPERTS_PER_TOKEN_MESSAGE = "architecture.expertsPerToken must be at most architecture.experts"
ACTIVE_PARAMETERS_MESSAGE = (
    "architecture.activeParameters must be at most architecture.parameters (the total)"
)


class VisionEncoder(WireModel):
    """A vision encoder's weights and what an image costs the language model."""

    parameters: Annotated[
        int,
        Field(
            description="The encoder's (and its projector's) parameters, part of architecture.parameters.",
            ge=1_000_000,
        ),
    ]
    image_tokens: Annotated[
        int,
        Field(
            description="Tokens one image adds to a request at most (its tiles' patches after the projector): "
            "they take context and KV cache like prompt tokens.",
            ge=1,
            le=1_000_000,
        ),
    ]


class ModelArchitecture(WireModel):
    """What the planner needs to size a model it does not know (not in the built-in catalog)."""

    layers: Annotated[int, Field(description="Number of transformer layers.", ge=1, le=1024)]
    kv_heads: Annotated[int, Field(description="Number of key/value heads (GQA groups).", ge=1, le=1024)]
    head_dim: Annotated[int, Field(description="Dimension of one attention head.", ge=8, le=1024)]
    parameters: Annotated[
        int, Field(description="Total number of parameters, e.g. 1235814400.", ge=1_000_000)
    ]
    max_context: Annotated[
        int, Field(description="The model's maximum context length in tokens.", ge=128, le=10_000_000)
    ]
    active_parameters: Annotated[
        int | None,
        Field(
            description="Mixture of experts: the parameters one token runs through (shared layers and its "
            "experts), e.g. 17B of Llama 4 Scout's 109B. They set the prompt's compute; every expert's "
            "weights stay in memory. Unset: all parameters (a dense model).",
            ge=1_000_000,
        ),
    ] = None
    experts: Annotated[
        int | None,
        Field(
            description="Mixture of experts: routed experts per MoE layer (config.json num_local_experts).",
            ge=2,
            le=4096,
        ),
    ] = None
    experts_per_token: Annotated[
        int | None,
        Field(
            description="Mixture of experts: experts each token is routed to (num_experts_per_tok).",
            ge=1,
            le=4096,
        ),
    ] = None
    vision: Annotated[
        VisionEncoder | None,
        Field(description="A vision encoder beside the language model (image inputs)."),
    ] = None

    @model_validator(mode="after")
    def _experts(self) -> ModelArchitecture:
        # As the CRD's CEL rules on spec.model.architecture.
        if (self.experts is None) != (self.experts_per_token is None):
            raise ValueError(EXPERTS_MESSAGE)
        if (
            self.experts is not None
            and self.experts_per_token is not None
            and self.experts_per_token > self.experts
        ):
            raise ValueError(EXPERTS_PER_TOKEN_MESSAGE)
        if self.active_parameters is not None and self.active_parameters > self.parameters:
            raise ValueError(ACTIVE_PARAMETERS_MESSAGE)
        return self


# What model.name may be, as the docs say: a hub id (owner/name, or a legacy single name) or a path inside the
# model cache volume. Not /etc, /proc/self/root, file:// URLs, '..', NUL or newlines (issue 43).
MODEL_NAME_PATTERN = (
    r"^([A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?|/models(/[A-Za-z0-9_][A-Za-z0-9._-]*)+/?)$"
)


MODEL_NAME_MESSAGE = (
    "model.name must be a Hugging Face hub id (owner/name, letters, digits, '.', '_', '-') or a path inside the "
    "model cache volume (/models/...), without '..'"
)


class ModelSpec(WireModel):
    """The model to serve."""

    name: Annotated[
        str,
        Field(
            description="Hugging Face hub id (e.g. meta-llama/Llama-3.2-1B-Instruct), or a path inside the "
            "model cache volume (starting with /models/).",
            min_length=1,
            max_length=512,
            pattern=MODEL_NAME_PATTERN,
        ),
    ]
    served_name: Annotated[
        str | None,
        Field(
            description="Model name clients send in requests. Default: the LlamaService's name.",
            min_length=1,
            max_length=256,
            pattern=NOT_AN_OPTION,
        ),
    ] = None
    revision: Annotated[
        str | None,
        Field(
            description="Model revision (branch, tag or commit) to load.",
            max_length=256,
            pattern=NOT_AN_OPTION,
        ),
    ] = None
    token_secret_ref: Annotated[
        SecretKeyRef | None,
        Field(description="Secret key holding a Hugging Face token (exposed to vLLM as HF_TOKEN)."),
    ] = None
    cache: Annotated[ModelCache | None, Field(description="Where to cache model weights.")] = None
    architecture: Annotated[
        ModelArchitecture | None,
        Field(description="Model shape; required when the model is not in the operator's built-in catalog."),
    ] = None
    quantization: Annotated[
        Quantization | None,
        Field(
            description="How the checkpoint's weights are stored, where its name does not say it (the planner "
            "reads well-known publishers' names: ...-FP8, ...-FP8-dynamic, ...-quantized.w8a8, ...-AWQ-INT4, "
            "...-GPTQ-INT4). fp8: an FP8 checkpoint (W8A8 on GPUs with FP8 tensor cores, weight-only through "
            "Marlin from compute capability 8.0); none: 16-bit weights. vLLM reads the scheme from the "
            "checkpoint; this sizes the weights and checks the GPU runs it."
        ),
    ] = None
    trust_remote_code: Annotated[
        bool,
        Field(
            description="Run the Python code the model repository ships (vLLM's --trust-remote-code). Only where "
            "the platform allows it (the operator's config.allowTrustRemoteCode); refused otherwise."
        ),
    ] = False

    @field_validator("name", mode="before")
    @classmethod
    def _hub_id_or_cache_path(cls, value: object) -> object:
        if (
            isinstance(value, str)
            and not value.startswith("-")
            and re.fullmatch(MODEL_NAME_PATTERN.removeprefix("^").removesuffix("$"), value) is None
        ):
            raise ValueError(MODEL_NAME_MESSAGE)
        return value

    @field_validator("name", "served_name", "revision", mode="before")
    @classmethod
    def _not_an_option(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str):
            refuse_option_like(f"model.{to_camel(info.field_name or '')}", value)
        return value


class AcceleratorSpec(WireModel):
    """The hardware each replica runs on."""

    # The built-in types parse to AcceleratorType; another name is a platform-defined accelerator
    # (config.accelerators), checked against the operator's catalog when planning.
    type: Annotated[
        str,
        Field(
            description="GPU type ("
            + ", ".join(t.value for t in AcceleratorType if t not in ("cpu", "auto"))
            + ", or one the platform added in the operator's config.accelerators), 'cpu' for vLLM's CPU "
            "build, or 'auto' for the cheapest option present in the cluster that fits the model.",
        ),
        WithJsonSchema({"type": "string", "pattern": ACCELERATOR_NAME_PATTERN, "maxLength": 63}),
    ] = AcceleratorType.AUTO
    mig: Annotated[
        str | None,
        Field(
            description="MIG profile of the GPU to run on (a slice, e.g. 1g.10gb). Only on a GPU with MIG: "
            + ", ".join(t.value for t in MIG_PROFILES_BY_TYPE)
            + " (or a platform-defined one with MIG profiles).",
            pattern=MIG_PROFILE_PATTERN,
        ),
    ] = None
    count: Annotated[
        int,
        Field(
            description="GPUs per replica (tensor parallel size), per node with nodes > 1. Must be 1 with a MIG "
            "slice.",
            ge=1,
            le=8,
        ),
    ] = 1
    nodes: Annotated[
        int,
        Field(
            description="Nodes per replica, for a model larger than one node: each replica is a group of this many "
            "pods, one per node with count GPUs each (a LeaderWorkerSet group; vLLM's Ray backend, tensor parallel "
            "count within a node, pipeline parallel across the nodes). Needs the LeaderWorkerSet API "
            "(leaderworkerset.x-k8s.io) in the cluster. Default 1: one pod per replica. With type auto, the "
            "planner chooses more than one node only where no single node fits.",
            ge=1,
            le=16,
        ),
    ] = 1
    # The GPU Operator's MIG strategy is the cluster's; in a cluster the nodes say it. This says which the
    # service expects where no node says (offline `plan`), or picks one where nodes of both offer the slice.
    mig_strategy: Annotated[
        Literal["mixed", "single"] | None,
        Field(
            description="With mig: how the slice is exposed, mixed (nvidia.com/mig-<profile>) or single (slices as "
            "nvidia.com/gpu on nodes labelled with the slice's product). Unset: as the nodes offer it, else "
            "the operator's config.migStrategy."
        ),
    ] = None

    @field_validator("type")
    @classmethod
    def _type_name(cls, v: str) -> str:
        if v in BUILTIN_TYPES:
            return AcceleratorType(v)
        if len(v) > 63 or not re.match(ACCELERATOR_NAME_PATTERN, v):
            raise ValueError(
                f"{v!r} is not an accelerator type: give one of "
                f"{', '.join(t.value for t in AcceleratorType)}, or the name of one the platform added "
                "(lower-case letters, digits and '-')"
            )
        return v

    @field_validator("mig", mode="before")
    @classmethod
    def _known_profile(cls, v: object) -> object:
        if isinstance(v, str) and not re.match(MIG_PROFILE_PATTERN, v):
            raise ValueError(f"unknown MIG profile {v!r}; known: {', '.join(ALL_MIG_PROFILES)}")
        return v

    @model_validator(mode="after")
    def _mig_rules(self) -> AcceleratorSpec:
        if self.nodes > 1 and (self.mig is not None or self.type == AcceleratorType.CPU):
            raise ValueError(
                "accelerator.nodes > 1 spreads a replica over whole GPUs of several nodes: remove mig, or use "
                "a GPU type (not cpu), or set nodes to 1"
            )
        if self.mig is None:
            if self.mig_strategy is not None:
                raise ValueError("accelerator.migStrategy applies to a MIG slice: set mig too, or remove it")
            return self
        # A platform-defined type's profiles are the operator's catalog's: checked when planning.
        profiles: tuple[str, ...] | None = () if self.type not in BUILTIN_TYPES else None
        if profiles is None:
            profiles = MIG_PROFILES_BY_TYPE.get(AcceleratorType(self.type))
        if profiles is None:
            raise ValueError(
                f"accelerator.mig is only valid on {', '.join(t.value for t in MIG_PROFILES_BY_TYPE)}; "
                f"remove mig or change type {str(self.type)!r}"
            )
        if profiles and self.mig not in profiles:
            raise ValueError(
                f"accelerator.mig {self.mig!r} is not a profile of {self.type}; use one of "
                f"{', '.join(profiles)}"
            )
        if self.count != 1:
            raise ValueError("accelerator.count must be 1 with a MIG slice (a process sees one MIG device)")
        return self


AutoOrInt = int | Literal["auto"]


class KVOffload(WireModel):
    """KV-cache blocks kept in host memory beside the GPU's (vLLM's native CPU offloading): a prefix evicted from
    the GPU comes back from there instead of being prefilled again."""

    cpu_bytes: Annotated[
        str,
        Field(
            description="Host memory for offloaded KV blocks, a Kubernetes quantity such as 40Gi (vLLM's "
            "--kv-offloading-size, over all of a replica's GPUs). The planner adds it to the pod's memory "
            "request and limit.",
            max_length=64,
        ),
    ]

    @field_validator("cpu_bytes")
    @classmethod
    def _quantity(cls, v: str) -> str:
        if not (QUANTITY.match(v) and not v.startswith("-") and QUANTITY_ZERO.match(v) is None):
            raise ValueError("engine.kvOffload.cpuBytes must be a positive Kubernetes quantity such as 40Gi")
        return v


class EngineSpec(WireModel):
    """vLLM engine settings. Left unset, each is derived from the model and the accelerator."""

    image: Annotated[
        str | None,
        Field(description="vLLM container image. Default: the operator's pinned image for the accelerator."),
    ] = None
    dtype: Annotated[
        DType,
        Field(
            description="Weight and activation dtype. 'auto' picks bfloat16 where the GPU has it, else half."
        ),
    ] = DType.AUTO
    quantization: Annotated[
        Quantization,
        Field(
            description="Weight quantization of the checkpoint (awq, gptq; int8: a W8A8 INT8 checkpoint in the "
            "compressed-tensors format, on GPUs from T4 to H200 and on the CPU, not on B200), or fp8 on-the-fly. "
            "(bitsandbytes is not offered: the pinned vLLM has no such method.)"
        ),
    ] = Quantization.NONE
    kv_offload: Annotated[
        KVOffload | None,
        Field(description="Offload KV-cache blocks to host memory (planned into the pod's memory)."),
    ] = None
    max_images_per_prompt: Annotated[
        int | None,
        Field(
            description="A vision model: images one request may carry (vLLM's --limit-mm-per-prompt), each "
            "planned at the model's image tokens; 0 serves text only and frees the encoder's cache. Unset: 1.",
            ge=0,
            le=64,
        ),
    ] = None
    max_model_len: Annotated[
        int | None,
        Field(
            description="Context length to serve. Default: the longest that leaves KV-cache room for 16 "
            "sequences that long (or the TPOT objective's batch), at least 4096 tokens, at most the model's "
            "context.",
            ge=128,
            le=10_000_000,
        ),
    ] = None
    max_num_seqs: Annotated[
        AutoOrInt,
        Field(
            description="Maximum concurrent sequences per replica, or 'auto' to derive it from the KV cache.",
            json_schema_extra={"x-kubernetes-int-or-string": True},
        ),
    ] = "auto"
    gpu_memory_utilization: Annotated[
        float | None,
        Field(
            description="Fraction of accelerator memory vLLM may use, 0.5 to 0.98. Unset: the planner's "
            "default (0.90). A number, so that the API server checks it.",
            ge=0.5,
            le=0.98,
        ),
    ] = None
    prefix_caching: Annotated[bool, Field(description="Enable automatic prefix caching.")] = True
    api_key_secret_ref: Annotated[
        SecretKeyRef | None,
        Field(
            description="Secret key holding the API key clients must send (vLLM's --api-key, given to it as the "
            "VLLM_API_KEY environment variable so that it is never in args, status or logs)."
        ),
    ] = None
    extra_args: Annotated[
        list[Annotated[str, Field(max_length=1024)]],
        Field(
            description="Further vLLM arguments, passed through after validation. Flags the operator sets "
            "from other fields (model, port, dtype, max-model-len, ...) are rejected here.",
            max_length=64,
        ),
    ] = Field(default_factory=list)

    @field_validator("extra_args")
    @classmethod
    def _no_credentials(cls, v: list[str]) -> list[str]:
        # As the CRD's CEL rule: refused before it is stored, and the message never quotes the item.
        if any(carries_credential(a) for a in v):
            raise ValueError(CREDENTIAL_IN_ARGS_MESSAGE)
        return v

    @field_validator("max_num_seqs")
    @classmethod
    def _seqs(cls, v: AutoOrInt) -> AutoOrInt:
        if isinstance(v, int) and not 1 <= v <= 4096:
            raise ValueError("engine.maxNumSeqs must be 'auto' or between 1 and 4096")
        return v

    @field_validator("gpu_memory_utilization", mode="before")
    @classmethod
    def _util_auto(cls, v: object) -> object:
        # 'auto' was the way to say "unset" before the field was typed; objects stored then still read.
        return None if v == "auto" else v


# An objective window in whole days, 1 to 366.
OBJECTIVE_WINDOW_PATTERN = r"^([1-9][0-9]?|[12][0-9][0-9]|3[0-5][0-9]|36[0-6])d$"
# The platform's objective where neither the LlamaService nor the operator's config states one.
DEFAULT_SLO_OBJECTIVE = 0.99
MIN_OBJECTIVE, MAX_OBJECTIVE = 0.5, 0.9999  # an objective's range (a budget of 1 request in 10,000 at most)
# The most an objective may be: beyond them it is a value meant in milliseconds (ttftSeconds: 500), which would
# plan and scale for a latency nobody waits for. The CRD's CEL rules and the validator say the same.
MAX_TTFT_SECONDS = 60
MAX_TPOT_SECONDS = 5
TTFT_UNIT_MESSAGE = (
    f"autoscaling.slo.ttftSeconds is in seconds and at most {MAX_TTFT_SECONDS}: an objective in milliseconds "
    "is written divided by 1000 (0.5 for 500 ms)"
)
TPOT_UNIT_MESSAGE = (
    f"autoscaling.slo.tpotSeconds is in seconds and at most {MAX_TPOT_SECONDS}: an objective in milliseconds "
    "is written divided by 1000 (0.05 for 50 ms)"
)


class SLOSpec(WireModel):
    """The latency objective autoscaling keeps."""

    ttft_seconds: Annotated[
        float,
        Field(
            description="Time-to-first-token objective in seconds (queue time included), at most "
            "60: 0.5 for half a second.",
            gt=0,
        ),
    ] = 0.5
    tpot_seconds: Annotated[
        float | None,
        Field(
            description="Time-per-output-token objective in seconds: the interval between two streamed tokens "
            "(vLLM's inter-token latency), at the same percentile as TTFT. Unset: no TPOT objective. It caps "
            "the batch a replica runs (maxNumSeqs) and adds replicas when decode, not prefill, limits them. "
            "Read from vLLM's histogram (bounds 0.01, 0.025, 0.05, 0.075, 0.1 s, ...): a value between two "
            "bounds is planned for the lower one, a value below 0.01 is judged at 0.01.",
            ge=0.005,
        ),
    ] = None
    # One percentile for both objectives: a service's latency objective is one error budget (the SLO
    # alerts burn one budget per service), and the benchmark suites users compare with (MLPerf's LLM
    # server scenario) state TTFT and TPOT at the same percentile. TPOT is read per token, where the
    # tail comes from the steps that carry a prompt chunk, so the same percentile is as meaningful.
    percentile: Annotated[
        float,
        Field(
            description="Percentile of TTFT (and of TPOT, when set) held to the objective, e.g. 95.",
            ge=50,
            le=99.9,
        ),
    ] = 95
    queue_depth_per_replica: Annotated[
        float,
        Field(description="Target of waiting requests per ready replica.", gt=0, le=10_000),
    ] = 4
    # The promise (what an SLA counts): the share of requests whose TTFT (and TPOT) meets the objective over
    # objectiveWindow. The burn-rate alerts, the dashboard's error budget and the policy all read this one
    # field (through llama_operator_slo_objective_ratio for the first two).
    objective: Annotated[
        float | None,
        Field(
            description="Share of requests that must meet the TTFT (and TPOT) objective over objectiveWindow, "
            "e.g. 0.99: the error budget is the rest (1%). The burn-rate alerts page on it, the dashboard "
            "shows it, and the autoscaler sizes replicas for it (a looser objective costs fewer GPU-hours). "
            "Unset: the platform's default (the operator's config.sloObjective, 0.99 unless the chart sets "
            "another).",
            ge=MIN_OBJECTIVE,
            le=MAX_OBJECTIVE,
        ),
    ] = None
    objective_window: Annotated[
        str,
        Field(
            description="The window the objective is kept over, in days (28d: four whole weeks, so every "
            "weekday counts alike). The burn-rate alerts and the dashboard measure how fast its budget goes.",
            pattern=OBJECTIVE_WINDOW_PATTERN,
        ),
    ] = "28d"

    @property
    def objective_window_seconds(self) -> float:
        return float(self.objective_window.removesuffix("d")) * 86_400.0

    def objective_ratio(self, default: float) -> float:
        """The objective in force: the spec's, else the platform's `default` (Settings.slo_objective)."""
        return self.objective if self.objective is not None else default

    @model_validator(mode="after")
    def _plausible(self) -> SLOSpec:
        # As the CRD's CEL rules on spec.autoscaling.slo: an objective written in milliseconds.
        if self.ttft_seconds > MAX_TTFT_SECONDS:
            raise ValueError(TTFT_UNIT_MESSAGE)
        if self.tpot_seconds is not None and self.tpot_seconds > MAX_TPOT_SECONDS:
            raise ValueError(TPOT_UNIT_MESSAGE)
        return self


class AutoscalingSpec(WireModel):
    """SLO autoscaling from Prometheus signals. When enabled, spec.replicas is ignored."""

    enabled: Annotated[bool, Field(description="Scale replicas to keep the SLO.")] = True
    min_replicas: Annotated[
        int,
        Field(
            description="Fewest replicas. 0 lets an idle LlamaService scale to zero after "
            "scaleToZeroAfterSeconds: the activator (the chart's activator.enabled) then holds the first "
            "requests while one replica starts.",
            ge=0,
            le=1000,
        ),
    ] = 1
    max_replicas: Annotated[int, Field(description="Most replicas.", ge=1, le=1000)] = 8
    slo: Annotated[SLOSpec, Field(description="The latency objective.")] = Field(default_factory=SLOSpec)
    scale_down_stabilization_seconds: Annotated[
        int,
        Field(
            description="How long load must stay low before replicas are removed. After a burst (the "
            "needed replicas rising by 2 or more within 60s, within the last 6 windows) the autoscaler holds "
            "3 windows instead: bursts recur, and a removed replica takes a cold start to come back. A rise "
            "set by queueDepthPerReplica alone (a backlog at one scrape), or a one-replica rise within the "
            "load's noise, is held one window, not taken as a burst.",
            ge=0,
            le=3600,
        ),
    ] = 300
    scale_down_interval_seconds: Annotated[
        int,
        Field(
            description="Least time between two scale-downs: replicas come off in steps (each removing at "
            "most half of them), and the SLO is watched under the smaller fleet before the next step. Within "
            "it, a replica is added back only once the need for it has held 30s, or at once when the SLO "
            "breaks or the queue passes its target.",
            ge=0,
            le=3600,
        ),
    ] = 300

    scale_to_zero_after_seconds: Annotated[
        int,
        Field(
            description="With minReplicas 0: how long the service must be idle (vLLM metrics present and "
            "no request received, running or waiting) before its last replica is removed. Missing metrics "
            "never count as idle.",
            ge=0,
            le=86_400,
        ),
    ] = 600
    activation_timeout_seconds: Annotated[
        int,
        Field(
            description="With minReplicas 0: how long the activator holds a request while the first "
            "replica starts; after that the request is answered 503 with Retry-After. Allow the model's "
            "cold start (image pull, weights load).",
            ge=1,
            le=3600,
        ),
    ] = 300

    @property
    def scale_to_zero(self) -> bool:
        return self.min_replicas == 0

    @property
    def replica_bounds(self) -> tuple[int, int]:
        """The replicas a serving LlamaService is kept within: [max(minReplicas, 1), maxReplicas]. Zero is
        reached only by scaling an idle service to zero (minReplicas 0), never by bringing a count in."""
        return max(self.min_replicas, 1), self.max_replicas

    def within_bounds(self, replicas: int) -> bool:
        """Whether a Deployment's replica count needs no correction: within replica_bounds, or zero for a
        service that scales to zero."""
        low, high = self.replica_bounds
        return low <= replicas <= high or (replicas == 0 and self.scale_to_zero)

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"autoscaling.minReplicas ({self.min_replicas}) must be <= maxReplicas ({self.max_replicas})"
            )
        return self


# An adapter's name is the `model` clients send, a label value in the router's metrics and a key of status:
# lower-case, DNS-like, never starting with '-' (it becomes part of a vLLM argument).
ADAPTER_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$"
MAX_ADAPTER_NAME_LENGTH = 63
# An adapter's source: a directory on the model cache volume (mounted at /models), or a Hugging Face hub id
# (owner/name) that vLLM downloads into the cache (HF_HOME is there). No '..', no spaces, no ',' or '='.
ADAPTER_SOURCE_PATTERN = (
    r"^(/models(/[A-Za-z0-9_][A-Za-z0-9._-]*)+/?|[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)$"
)
# The largest --max-lora-rank the pinned vLLM takes (its MaxLoRARanks: 1, 8, 16, 32, 64, 128, 256, 320, 512);
# the planner rounds an adapter's rank up to the next of those (tests/planning/test_adapters.py checks the list).
MAX_ADAPTER_RANK = 512
MAX_ADAPTERS = 64


class LoRAAdapter(WireModel):
    """A LoRA adapter served beside the base model: clients send its name as `model`."""

    name: Annotated[
        str,
        Field(
            description="Name clients send as `model` to use the adapter: lower-case letters, digits, '-', '.' "
            "and '_'; unique among the adapters and different from the base model's served name.",
            min_length=1,
            max_length=MAX_ADAPTER_NAME_LENGTH,
            pattern=ADAPTER_NAME_PATTERN,
        ),
    ]
    source: Annotated[
        str,
        Field(
            description="Where the adapter (PEFT format: adapter_config.json and adapter_model.safetensors) is: a "
            "directory on the model cache volume (starting with /models/, needs model.cache."
            "persistentVolumeClaim), or a Hugging Face hub id (owner/name) that vLLM downloads into the cache.",
            min_length=1,
            max_length=512,
            pattern=ADAPTER_SOURCE_PATTERN,
        ),
    ]
    rank: Annotated[
        int | None,
        Field(
            description="The adapter's LoRA rank (r in adapter_config.json). Sizes vLLM's --max-lora-rank (the "
            "next value vLLM takes: 1, 8, 16, 32, 64, 128, 256, 320 or 512) and the adapters' GPU memory. Unset: "
            "16, vLLM's default; an adapter of a higher rank then fails to load (status says so).",
            ge=1,
            le=MAX_ADAPTER_RANK,
        ),
    ] = None


class LlamaServiceSpec(WireModel):
    """A Llama model served by vLLM on a fitting accelerator, scaled to a latency SLO."""

    model: Annotated[ModelSpec, Field(description="The model to serve.")]
    accelerator: Annotated[AcceleratorSpec, Field(description="Hardware per replica.")] = Field(
        default_factory=AcceleratorSpec
    )
    engine: Annotated[EngineSpec, Field(description="vLLM engine settings.")] = Field(
        default_factory=EngineSpec
    )
    replicas: Annotated[
        int,
        Field(
            description="Replicas when autoscaling is off (the scale subresource maps here).", ge=0, le=1000
        ),
    ] = 1
    autoscaling: Annotated[
        AutoscalingSpec | None, Field(description="SLO autoscaling; absent means a fixed replica count.")
    ] = None
    adapters: Annotated[
        list[LoRAAdapter],
        Field(
            description="LoRA adapters served beside the base model. The operator turns LoRA on in vLLM, sizes it "
            "for the list (and takes the adapters' GPU memory from the KV cache), loads added adapters into "
            "running replicas and unloads removed ones without a restart, and the router sends a request "
            "naming an adapter to a replica that holds it.",
            max_length=MAX_ADAPTERS,
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
    ] = Field(default_factory=list)

    @model_validator(mode="after")
    def _adapter_names(self) -> LlamaServiceSpec:
        # As the CRD's list-map key (names unique) and root CEL rule (not the served name). Without
        # servedName, the served name is metadata.name: the planner checks that one.
        seen: set[str] = set()
        for index, adapter in enumerate(self.adapters):
            if adapter.name in seen:
                raise ValueError(
                    f"adapters[{index}].name {adapter.name!r} is used twice: names must be unique"
                )
            seen.add(adapter.name)
            if adapter.name == self.model.served_name:
                raise ValueError(
                    f"adapters[{index}].name {adapter.name!r} is the base model's served name: clients could not "
                    "choose between them; rename the adapter"
                )
        return self

    @property
    def autoscaling_enabled(self) -> bool:
        return self.autoscaling is not None and self.autoscaling.enabled

    @property
    def active_autoscaling(self) -> AutoscalingSpec | None:
        """The autoscaling in force: None when absent or disabled (spec.replicas then fixes the count)."""
        return self.autoscaling if self.autoscaling_enabled else None

    def with_default_objective(self, default: float) -> LlamaServiceSpec:
        """The spec with the platform's SLO objective (Settings.slo_objective) where it states none, so that
        the policy, the status and the metrics read one objective per service."""
        autoscaling = self.autoscaling
        if autoscaling is None or autoscaling.slo.objective is not None:
            return self
        slo = autoscaling.slo.model_copy(update={"objective": default})
        return self.model_copy(update={"autoscaling": autoscaling.model_copy(update={"slo": slo})})

    @property
    def scales_to_zero(self) -> bool:
        """Autoscaled with minReplicas 0: when idle it scales to zero and the activator holds the next request."""
        return self.active_autoscaling is not None and self.active_autoscaling.scale_to_zero
