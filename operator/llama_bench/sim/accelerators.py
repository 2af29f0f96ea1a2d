"""The simulated replica: the runtime's one model of the hardware, under the simulator's short names.

An accelerator is a catalog type (`t4`, `a100-40gb`) or a type and one of its MIG profiles
(`a100-80gb-1g.10gb`); a model is a short name of a catalog model (`llama-3.2-1b`). Everything else (the
memory, bandwidth, FLOPS and price of catalog/accelerators.py, the step-time model of
catalog/performance.py, the KV cache the planner sizes) is the operator's plan for that model on that
hardware: the simulator runs what the operator would deploy, and the SLO policy's capacity prior is the
plan's, as in the operator (status.plan.prefillTokensPerSecond). Nothing about the hardware is defined
here (tests/catalog/test_one_hardware_model.py). A measured profile (sim.profile) replaces the estimate.

The step-time model is the planner's and the policy's (catalog/performance.py, StepModel): the plan's four
step coefficients, tensor parallel's all-reduces included.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

from llama_operator.api.plan import MeasuredSteps, Plan
from llama_operator.api.spec import AutoscalingSpec, LlamaServiceSpec
from llama_operator.catalog.accelerators import ACCELERATORS as CATALOG
from llama_operator.catalog.performance import STEP_OVERHEAD_SECONDS, StepModel, planned_step_model
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.planner import plan_service
from llama_operator.planning.tuning import DEFAULT_MAX_NUM_BATCHED_TOKENS

# The simulator's model names and the catalog models they are (catalog/models.py).
MODELS: dict[str, str] = {
    "llama-3.2-1b": "meta-llama/Llama-3.2-1B-Instruct",
    "llama-3.2-3b": "meta-llama/Llama-3.2-3B-Instruct",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
}

# Every GPU of the catalog, whole and as each of its MIG slices: name -> spec.accelerator.
_HARDWARE: dict[str, dict[str, str]] = {
    name: wanted
    for accelerator in CATALOG.values()
    if accelerator.is_gpu
    for name, wanted in (
        (str(accelerator.type), {"type": str(accelerator.type)}),
        *(
            (f"{accelerator.type}-{profile.name}", {"type": str(accelerator.type), "mig": profile.name})
            for profile in accelerator.mig_profiles
        ),
    )
}
ACCELERATORS: tuple[str, ...] = tuple(_HARDWARE)

# vLLM's default --max-num-seqs: what a replica runs with when the scenario does not take the plan's.
VLLM_DEFAULT_MAX_NUM_SEQS = 256


@dataclass(frozen=True, slots=True)
class ReplicaProfile:
    """Step-time coefficients and limits of one model on one replica."""

    accelerator: str  # an ACCELERATORS name, or a measured profile's name
    model: str  # a MODELS name, or the measured profile's model
    steps: StepModel  # the step-time model (catalog/performance.py): the plan's, or a measured profile's fit
    kv_capacity_tokens: int
    price_per_hour: float  # USD per replica-hour
    max_num_seqs: int = VLLM_DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    # Measured profiles (sim.profile) only; zero for the data-sheet ones: the fixed latency a request sees
    # outside the engine (HTTP, tokenisation, detokenisation), added to its first and last token.
    request_overhead_seconds: float = 0.0

    @property
    def prefill_tokens_per_second(self) -> float:
        """Prefill throughput with full chunks, decode overhead included."""
        return self.steps.prefill_tokens_per_second(self.max_num_batched_tokens)

    def step_seconds(self, decoding: int, context_tokens: int, prefill_tokens: int) -> float:
        """One engine step: `decoding` sequences holding `context_tokens` of context between them each get
        a token, and `prefill_tokens` prompt tokens are computed."""
        return self.steps.step_seconds_holding(decoding, context_tokens, prefill_tokens)


def planned_engine(
    accelerator: str,
    model: str,
    autoscaling: AutoscalingSpec | None = None,
    measured_steps: MeasuredSteps | None = None,
) -> Plan:
    """The operator's plan for `model` on `accelerator` (simulator names), with `measured_steps`' factors
    where given (reconcile/engine.py); ValueError when a name is unknown or the model does not fit."""
    if accelerator not in ACCELERATORS:
        raise ValueError(f"unknown accelerator {accelerator!r}; known: {', '.join(ACCELERATORS)}")
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    spec: dict[str, object] = {"model": {"name": MODELS[model]}, "accelerator": _HARDWARE[accelerator]}
    if autoscaling is not None:
        spec["autoscaling"] = autoscaling.to_wire()
    try:
        return plan_service(
            LlamaServiceSpec.model_validate(spec),
            name="sim",
            config=PlanningConfig(),
            measured=measured_steps,
        )
    except PlanningError as err:
        raise ValueError(f"{model} does not fit on {accelerator}: {err}") from None


@cache
def replica_profile(
    accelerator: str, model: str = "llama-3.2-1b", max_num_seqs: int = VLLM_DEFAULT_MAX_NUM_SEQS
) -> ReplicaProfile:
    """The simulated replica of `model` on `accelerator`, as the operator plans it; ValueError when a
    name is unknown or the model does not fit."""
    plan = planned_engine(accelerator, model)
    return ReplicaProfile(
        accelerator=accelerator,
        model=model,
        steps=planned_step_model(plan),
        kv_capacity_tokens=plan.kv_cache_tokens,
        price_per_hour=plan.price_per_hour,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=plan.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
    )


def at_speed(
    profile: ReplicaProfile, speed: float, overhead: float = STEP_OVERHEAD_SECONDS
) -> ReplicaProfile:
    """The replica on hardware `speed` times as fast as the data sheet (and the catalog's efficiency
    estimates) in bandwidth and compute; the fixed time per step, `overhead`, is the host's: unchanged."""
    if speed == 1.0:
        return profile
    steps = profile.steps
    return replace(
        profile,
        steps=replace(
            steps,
            weight_read_seconds=overhead + (steps.weight_read_seconds - overhead) / speed,
            seconds_per_context_token=steps.seconds_per_context_token / speed,
            seconds_per_prefill_token=steps.seconds_per_prefill_token / speed,
        ),
    )
