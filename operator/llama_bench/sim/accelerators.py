"""Per-accelerator and per-model parameters of the simulated vLLM replica, with their sources.

The step-time model (design brief, "Simulator calibration"):
    t_step = t0 + (W + sum(ctx) * kv_bytes_per_token) / (eta * BW) + prefill_tokens * F / (mu * FLOPS)
W the weight bytes, F the FLOPs per prefill token, eta the bandwidth efficiency, mu the compute
efficiency, t0 a fixed per-step overhead.

Sources: bandwidth and dense fp16 tensor FLOPS from NVIDIA's data sheets (a MIG slice gets 1/7 of
the SMs per `g` and 1/8 of the memory bandwidth per memory slice, NVIDIA MIG user guide). eta, mu
and t0 are ESTIMATES chosen so that batch-1 ITL and prefill throughput land in the design brief's
estimated ranges (T4 10-14 ms / ~13k tok/s less without FlashAttention-2, A10G 6-8 ms / ~14k, ...);
replace them by measurements when a GPU is available. KV-cache capacity is derived from memory at
gpu_memory_utilization 0.9 less weights and 0.5 GB of activations, which reproduces the brief's
"est. KV tokens at 0.9" column. Prices are AWS on-demand us-east-1 list prices per GPU-hour
(g4dn.xlarge, g5.xlarge, g6.xlarge, p4d/p4de/p5 divided by 8 GPUs, a slice by 7 per `g`): ESTIMATES.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One replica's device: a whole GPU or a MIG slice."""

    name: str
    memory_gb: float
    bandwidth_gbps: float  # GB/s
    fp16_tflops: float  # dense tensor-core peak
    bandwidth_efficiency: float  # eta (estimate)
    compute_efficiency: float  # mu (estimate)
    step_overhead_seconds: float  # t0 (estimate)
    price_per_hour: float  # USD (estimate)
    max_num_batched_tokens: int = 2048  # vLLM V1's chunked-prefill budget below 70 GiB devices


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the step-time model needs of a model, in fp16."""

    name: str
    weight_bytes: float
    kv_bytes_per_token: float
    prefill_flops_per_token: float  # ~2 x non-embedding parameters


ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in (
        # T4: 320 GB/s, 65 TFLOPS fp16; no FlashAttention-2, hence the lower mu.
        Accelerator("t4", 16, 320, 65, 0.8, 0.30, 0.0035, 0.526),
        # A10G: 600 GB/s, ~70 TFLOPS fp16 dense (AWS variant of the A10).
        Accelerator("a10g", 24, 600, 70, 0.85, 0.40, 0.0030, 1.006),
        # L4: 300 GB/s, 121 TFLOPS fp16 dense.
        Accelerator("l4", 24, 300, 121, 0.8, 0.30, 0.0035, 0.805),
        Accelerator("a100-40gb", 40, 1555, 312, 0.8, 0.40, 0.0030, 4.10),
        Accelerator("a100-40gb-1g.5gb", 5, 194, 312 / 7, 0.8, 0.40, 0.0035, 4.10 / 7),
        Accelerator("a100-80gb-1g.10gb", 10, 255, 312 / 7, 0.8, 0.40, 0.0035, 5.12 / 7),
        Accelerator("a100-80gb-2g.20gb", 20, 510, 2 * 312 / 7, 0.8, 0.40, 0.0035, 2 * 5.12 / 7),
        Accelerator("a100-80gb-3g.40gb", 40, 1020, 3 * 312 / 7, 0.8, 0.40, 0.0030, 3 * 5.12 / 7),
        Accelerator("h100-80gb-1g.10gb", 10, 420, 989 / 7, 0.8, 0.40, 0.0030, 12.29 / 7),
    )
}

MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        # 16 layers x 8 KV heads x 64 dims x 2 (K, V) x 2 bytes = 32 KiB per token; 2.47 GB of weights.
        ModelShape("llama-3.2-1b", 2.47e9, 32768, 1.95e9),
        # 28 layers x 8 x 128 x 2 x 2 = 112 KiB per token; 3.21 B parameters.
        ModelShape("llama-3.2-3b", 6.43e9, 114688, 5.6e9),
        # 32 layers x 8 x 128 x 2 x 2 = 128 KiB per token; 8.03 B parameters.
        ModelShape("llama-3.1-8b", 16.06e9, 131072, 15.0e9),
    )
}

ACTIVATION_RESERVE_BYTES = 0.5e9
GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True, slots=True)
class ReplicaProfile:
    """Step-time coefficients of one model on one accelerator."""

    accelerator: Accelerator
    model: ModelShape
    step_base_seconds: float  # t0 + W / (eta BW)
    seconds_per_context_token: float  # kv_bytes / (eta BW), per token of context read in a step
    seconds_per_prefill_token: float  # F / (mu FLOPS)
    kv_capacity_tokens: int
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    # Measured profiles (sim.profile) only; zero for the data-sheet ones: the compute each decoding
    # sequence adds to a step (CPU, or a GPU at large batch), and the fixed latency a request sees
    # outside the engine (HTTP, tokenisation, detokenisation), added to its first and last token.
    seconds_per_decode_sequence: float = 0.0
    request_overhead_seconds: float = 0.0

    @property
    def prefill_tokens_per_second(self) -> float:
        """Prefill throughput with full chunks, decode overhead included."""
        chunk = self.max_num_batched_tokens
        return chunk / (self.step_base_seconds + chunk * self.seconds_per_prefill_token)

    def step_seconds(self, decoding: int, context_tokens: int, prefill_tokens: int) -> float:
        """One engine step: `decoding` sequences holding `context_tokens` of context each get a token,
        and `prefill_tokens` prompt tokens are computed."""
        return (
            self.step_base_seconds
            + self.seconds_per_decode_sequence * decoding
            + self.seconds_per_context_token * context_tokens
            + self.seconds_per_prefill_token * prefill_tokens
        )


def replica_profile(accelerator: str, model: str = "llama-3.2-1b", max_num_seqs: int = 256) -> ReplicaProfile:
    """The simulated replica of `model` on `accelerator`; ValueError when unknown or too small."""
    if accelerator not in ACCELERATORS:
        raise ValueError(f"unknown accelerator {accelerator!r}; known: {', '.join(ACCELERATORS)}")
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    acc, shape = ACCELERATORS[accelerator], MODELS[model]
    bandwidth = acc.bandwidth_gbps * 1e9 * acc.bandwidth_efficiency
    kv_bytes = acc.memory_gb * 1e9 * GPU_MEMORY_UTILIZATION - shape.weight_bytes - ACTIVATION_RESERVE_BYTES
    kv_tokens = int(kv_bytes / shape.kv_bytes_per_token)
    flops = acc.fp16_tflops * 1e12 * acc.compute_efficiency
    if kv_tokens < 2048:
        raise ValueError(f"{model} does not fit on {accelerator} with room for a KV cache")
    return ReplicaProfile(
        accelerator=acc,
        model=shape,
        step_base_seconds=acc.step_overhead_seconds + shape.weight_bytes / bandwidth,
        seconds_per_context_token=shape.kv_bytes_per_token / bandwidth,
        seconds_per_prefill_token=shape.prefill_flops_per_token / flops,
        kv_capacity_tokens=kv_tokens,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=acc.max_num_batched_tokens,
    )


# What an operator would believe before measuring: the design brief's "est. prefill tok/s" column.
# The SLO policy starts from this and corrects it online; the simulator's true capacity differs.
# L4 and the whole A100 are not in that table: theirs is the brief's formula at mu = 0.4 (F / (mu FLOPS)).
PUBLISHED_PREFILL_TOKENS_PER_SECOND: dict[str, float] = {
    "t4": 13_000,
    "a10g": 14_000,
    "l4": 24_800,
    "a100-40gb": 64_000,
    "a100-40gb-1g.5gb": 9_000,
    "a100-80gb-1g.10gb": 9_000,
    "a100-80gb-2g.20gb": 18_000,
    "a100-80gb-3g.40gb": 27_000,
    "h100-80gb-1g.10gb": 29_000,
}
