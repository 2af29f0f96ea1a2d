"""The operator's configuration the planner reads, and the vLLM images it deploys by default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from llama_operator.catalog.accelerators import (
    BUILTIN_CATALOG,
    Accelerator,
    Catalog,
    MigProfile,
)
from llama_operator.catalog.platforms import AUTO_PLATFORM
from llama_operator.catalog.vllm import MODEL_CACHE_PATH
from llama_operator.catalog.vllm_flags import flag_contract

# The vLLM whose parser the flag contract was generated from (`make vllm-flags`, from the pinned install
# of e2e/vllm/server.py): one version, checked and deployed.
VLLM_VERSION = f"v{flag_contract().vllm_version}"
# vLLM's CUDA image on Docker Hub (docs: deployment/docker).
DEFAULT_GPU_IMAGE = f"vllm/vllm-openai:{VLLM_VERSION}"
# vLLM's x86 CPU image on Docker Hub (docs: getting_started/installation/cpu, "pre-built images":
# vllm/vllm-openai-cpu:v${VLLM_VERSION}-x86_64).
DEFAULT_CPU_IMAGE = f"vllm/vllm-openai-cpu:{VLLM_VERSION}-x86_64"
DEFAULT_MODEL_CACHE_PATH = MODEL_CACHE_PATH

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
    # Whose node labels GPU pods select (config.platform; auto: the nodes' cloud, else GFD's).
    platform: str = AUTO_PLATFORM

    def price(self, accel: Accelerator, mig: MigProfile | None) -> float:
        """Relative price per hour of one device: a GPU, a MIG slice or a CPU replica."""
        if mig is not None:
            override = self.price_overrides.get(f"{accel.type}/{mig.name}")
            if override is not None:
                return override
        base = self.price_overrides.get(accel.type, accel.price_per_hour)
        return base * mig.gpu_fraction if mig is not None else base
