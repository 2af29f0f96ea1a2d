"""The step-time model of one vLLM replica, shared by the planner (engine flags, capacity priors), the
autoscaling policy (how many tokens a replica decodes within the TPOT objective) and the simulator.

vLLM's V1 engine runs steps: each gives every running sequence one token and fills the rest of the
`--max-num-batched-tokens` budget with prompt chunks (chunked prefill). A decode step is bound by
memory bandwidth: it reads every weight once and the KV cache of every running sequence. A prompt
chunk is bound by compute, 2 FLOPs per parameter per token (design brief, "Simulator calibration"):

    step(batch, context, chunk) = t0 + (W + batch * context * kv_bytes) / (eta * BW) + chunk * F / (mu * FLOPS)
                                  + allreduce(batch + chunk)

Tensor parallel over `tp` devices shares the weights and the KV cache (their bandwidth adds up) but pays
two all-reduces per transformer layer per step (after attention and after the MLP, Megatron-style), each
moving (batch + chunk) tokens x hidden x activation bytes. A ring all-reduce sends 2 (tp - 1) / tp of
the message over each link and costs a fixed latency per call:

    allreduce(n) = 2 * layers * (latency + 2 (tp - 1) / tp * n * hidden * bytes / link_bandwidth)

so the latency term joins t0 and the byte term is a cost per token of the step (decode or prompt).

The time per output token (TPOT) a sequence sees is one step, so the TPOT objective bounds the batch:
the largest `batch` with step(batch, context, 0) <= TPOT. eta, mu and t0 are ESTIMATES from the design
brief's ranges, deliberately on the slow side (a plan that meets the objective here meets it on the
GPU); `llama-bench profile` measures them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llama_operator.api.plan import Plan

# Share of the data-sheet bandwidth a decode step reaches (brief: 0.5-0.8; Llama-3.1-8B on an A100-40
# reached ~0.77 of the bound at batch 1).
DECODE_BANDWIDTH_EFFICIENCY = 0.75
# Share of dense fp16 FLOPS a prefill reaches (brief: mu ~ 0.4), at 2 FLOPs per parameter per token.
PREFILL_COMPUTE_EFFICIENCY = 0.4
# Fixed time per step (scheduling, sampling, kernel launches with CUDA graphs; brief: 3-5 ms).
STEP_OVERHEAD_SECONDS = 0.004
# Without CUDA graphs (--enforce-eager) every kernel of a step is launched from Python: ~10 kernels per
# layer at ~10 us each for the small models the flag is chosen for. An ESTIMATE.
EAGER_STEP_OVERHEAD_SECONDS = 0.003
# All-reduces per transformer layer per step under tensor parallel: one after attention, one after the MLP.
ALL_REDUCES_PER_LAYER = 2


@dataclass(frozen=True, slots=True)
class StepModel:
    """Step-time coefficients of one model on one replica."""

    weight_read_seconds: float  # t0 + W / (eta BW): a step with nothing but the weights to read
    seconds_per_context_token: float  # kv_bytes / (eta BW): each token of context a decode step reads
    seconds_per_prefill_token: float  # F / (mu FLOPS)
    # Tensor parallel's all-reduce bytes per token of a step, decode or prompt; 0 on one device.
    seconds_per_step_token: float = 0.0
    # The compute each decoding sequence adds to a step (a CPU replica, or a GPU at a large batch): measured
    # profiles only (llama-bench profile); 0 in the data-sheet model.
    seconds_per_decode_sequence: float = 0.0

    def step_seconds(self, batch: int, mean_context: float, chunk: int = 0) -> float:
        """One step: `batch` sequences of `mean_context` tokens each decode one token, `chunk` prompt
        tokens are computed."""
        return self.step_seconds_holding(batch, batch * mean_context, chunk)

    def step_seconds_holding(self, batch: int, context_tokens: float, chunk: int = 0) -> float:
        """One step: `batch` sequences holding `context_tokens` of context between them each decode one
        token, `chunk` prompt tokens are computed. The one step-time formula: the planner, the policy and
        the simulator all time a step here (tests/catalog/test_one_step_time.py)."""
        return (
            self.weight_read_seconds
            + self.seconds_per_decode_sequence * batch
            + self.seconds_per_context_token * context_tokens
            + self.seconds_per_prefill_token * chunk
            + self.seconds_per_step_token * (batch + chunk)
        )

    def decode_run_seconds(self, steps: int, batch: int, context_tokens: int) -> float:
        """`steps` decode steps in a row of `batch` sequences holding `context_tokens` at the first: each
        step is `step_seconds_holding(batch, context, 0)`, the context growing by `batch` a step."""
        per_step = self.step_seconds_holding(batch, 0.0)
        return steps * per_step + self.seconds_per_context_token * (
            steps * context_tokens + batch * steps * (steps - 1) / 2
        )

    def decode_steps_within(self, seconds: float, batch: int, context_tokens: int) -> int:
        """The fewest whole decode steps in a row (as `decode_run_seconds`) that take at least `seconds`."""
        quadratic = self.seconds_per_context_token * batch / 2
        linear = self.step_seconds_holding(batch, context_tokens) - quadratic
        if quadratic > 0:
            root = (-linear + math.sqrt(linear * linear + 4 * quadratic * seconds)) / (2 * quadratic)
        else:
            root = seconds / linear
        steps = max(1, math.ceil(root - 1e-9))
        while self.decode_run_seconds(steps, batch, context_tokens) < seconds:
            steps += 1
        return steps

    def prefill_seconds(self, prompt_tokens: int, chunks: int) -> float:
        """A prompt computed alone in `chunks` steps: each reads the weights once."""
        return (chunks - 1) * self.weight_read_seconds + self.step_seconds_holding(0, 0.0, prompt_tokens)

    def max_batch(self, step_seconds: float, mean_context: float) -> int:
        """The most sequences of `mean_context` tokens a decode step serves within `step_seconds`;
        0 when even one sequence takes longer."""
        spare = step_seconds - self.weight_read_seconds
        per_sequence = (
            self.seconds_per_context_token * max(mean_context, 1.0)
            + self.seconds_per_step_token
            + self.seconds_per_decode_sequence
        )
        if spare < per_sequence:
            return 0
        return math.floor(spare / per_sequence)

    def chunk_within(self, step_seconds: float, batch: int, mean_context: float) -> int:
        """Prompt tokens a step can compute beside `batch` decoding sequences within `step_seconds`."""
        spare = step_seconds - self.step_seconds(batch, mean_context)
        return max(0, math.floor(spare / self.seconds_per_chunk_token))

    @property
    def seconds_per_chunk_token(self) -> float:
        """What one more prompt token adds to a step: its compute and its share of the all-reduces."""
        return self.seconds_per_prefill_token + self.seconds_per_step_token

    def prefill_tokens_per_second(self, chunk: int) -> float:
        """Prefill throughput with full chunks of `chunk` tokens (each step also reads the weights)."""
        return chunk / self.step_seconds_holding(0, 0.0, chunk)

    def tpot_batch(self, tpot_seconds: float, chunk: int, mean_context: float) -> int:
        """The most sequences of `mean_context` tokens that decode within `tpot_seconds` per token even in
        a step that also computes a `chunk`-token prompt chunk (every step is an inter-token interval);
        0 when not even one does. The planner caps max-num-seqs here; the policy sizes decode by it."""
        return self.max_batch(tpot_seconds - chunk * self.seconds_per_chunk_token, mean_context)

    def chunk_step_token_share(
        self, batch: int, mean_context: float, token_budget: int, prompt_tokens_per_second: float
    ) -> float:
        """The share of a replica's output tokens that come out of steps carrying a prompt chunk, when it
        prefills `prompt_tokens_per_second`. vLLM fills each step's `token_budget`
        (--max-num-batched-tokens) with the `batch` decodes first and prompt tokens after, so a step beside
        a small batch carries nearly the whole budget of prompt: where such a step is longer than the TPOT
        objective, this share of the tokens sees an interval over it, whatever the batch."""
        chunk = max(token_budget - batch, 1)
        chunk_steps = prompt_tokens_per_second / chunk  # per second
        busy = chunk_steps * self.step_seconds(batch, mean_context, chunk)
        if busy >= 1.0:
            return 1.0
        decode_steps = (1.0 - busy) / self.step_seconds(batch, mean_context)
        return chunk_steps / (chunk_steps + decode_steps) if chunk_steps > 0 else 0.0

    def decode_tokens_per_second(
        self,
        tpot_seconds: float,
        chunk: int,
        mean_context: float,
        max_num_seqs: int | None = None,
        prompt_tokens_per_second: float = 0.0,
    ) -> float:
        """Output tokens per second one replica produces with every token within `tpot_seconds`.

        The batch is the largest whose every step, one carrying a `chunk`-token prompt chunk too, meets
        the objective (`tpot_batch`), and at most the engine's `max_num_seqs`. Its throughput is that batch
        over its mean step: most steps carry no chunk, and prefilling `prompt_tokens_per_second` takes its
        own share of the replica's time. 0 when no batch meets the objective or prefill alone fills it."""
        batch = self.tpot_batch(tpot_seconds, chunk, mean_context)
        if max_num_seqs is not None:
            batch = min(batch, max_num_seqs)
        decoding_share = 1.0 - prompt_tokens_per_second * self.seconds_per_chunk_token
        if batch <= 0 or decoding_share <= 0:
            return 0.0
        return batch * decoding_share / self.step_seconds(batch, mean_context)


def step_model(
    *,
    bandwidth_bytes_per_s: float,
    fp16_tflops: float,
    weight_bytes: float,
    kv_bytes_per_token: float,
    parameters: float,
    eager: bool = False,
    tensor_parallel: int = 1,
    layers: int = 0,
    hidden_size: int = 0,
    activation_bytes: int = 2,
    link_bytes_per_s: float = 0.0,
    all_reduce_latency_seconds: float = 0.0,
    bandwidth_efficiency: float = DECODE_BANDWIDTH_EFFICIENCY,
    compute_efficiency: float = PREFILL_COMPUTE_EFFICIENCY,
    step_overhead_seconds: float = STEP_OVERHEAD_SECONDS,
) -> StepModel:
    """The step model of a replica (whole devices summed: tensor parallel shares weights and KV, and pays
    its all-reduces over the devices' link). The efficiencies and the overhead default to the catalog's
    estimates; a service's calibration (autoscale/calibration.py) gives its measured ones."""
    bandwidth = bandwidth_bytes_per_s * bandwidth_efficiency
    overhead = step_overhead_seconds + (EAGER_STEP_OVERHEAD_SECONDS if eager else 0.0)
    per_token = 0.0
    if tensor_parallel > 1:
        if link_bytes_per_s <= 0 or layers <= 0 or hidden_size <= 0:
            raise ValueError("tensor parallel needs the layers, the hidden size and the link bandwidth")
        calls = ALL_REDUCES_PER_LAYER * layers
        ring = 2 * (tensor_parallel - 1) / tensor_parallel
        overhead += calls * all_reduce_latency_seconds
        per_token = calls * ring * hidden_size * activation_bytes / link_bytes_per_s
    return StepModel(
        weight_read_seconds=overhead + weight_bytes / bandwidth,
        seconds_per_context_token=kv_bytes_per_token / bandwidth,
        seconds_per_prefill_token=2 * parameters / (fp16_tflops * 1e12 * compute_efficiency),
        seconds_per_step_token=per_token,
    )


@dataclass(frozen=True, slots=True)
class Hardware:
    """What a replica's step model is built from apart from its efficiency factors: catalog figures."""

    bandwidth_bytes_per_s: float  # the replica's devices summed
    fp16_tflops: float
    weight_bytes: float
    kv_bytes_per_token: float
    parameters: float


@dataclass(frozen=True, slots=True)
class Factors:
    """The step model's efficiency factors: the catalog's or calibrated ones."""

    bandwidth_efficiency: float
    compute_efficiency: float
    step_overhead_seconds: float


CATALOG_FACTORS = Factors(
    bandwidth_efficiency=DECODE_BANDWIDTH_EFFICIENCY,
    compute_efficiency=PREFILL_COMPUTE_EFFICIENCY,
    step_overhead_seconds=STEP_OVERHEAD_SECONDS,
)


def calibrated_step_model(hardware: Hardware, fitted: Factors, *, eager: bool = False) -> StepModel:
    """The step model of a replica with calibrated factors in place of the catalog's."""
    return step_model(
        bandwidth_bytes_per_s=hardware.bandwidth_bytes_per_s,
        fp16_tflops=hardware.fp16_tflops,
        weight_bytes=hardware.weight_bytes,
        kv_bytes_per_token=hardware.kv_bytes_per_token,
        parameters=hardware.parameters,
        eager=eager,
        bandwidth_efficiency=fitted.bandwidth_efficiency,
        compute_efficiency=fitted.compute_efficiency,
        step_overhead_seconds=fitted.step_overhead_seconds,
    )


def planned_step_model(plan: Plan) -> StepModel:
    """The step model a plan carries (status.plan's four step figures): what the simulator runs, as the
    reconciler seeds the policy's (reconcile/autoscaling.py)."""
    return StepModel(
        weight_read_seconds=plan.decode_step_seconds,
        seconds_per_context_token=plan.decode_seconds_per_context_token,
        seconds_per_prefill_token=plan.prefill_seconds_per_token,
        seconds_per_step_token=plan.seconds_per_step_token,
    )
