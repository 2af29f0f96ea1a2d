"""SLO-driven engine tuning: the prompt chunk and decode batch an autoscaled service's objectives allow,
from the step model (catalog/performance.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llama_operator.api.spec import SLOSpec
from llama_operator.catalog.performance import StepModel
from llama_operator.catalog.vllm import (
    VLLM_ITL_BUCKETS,
    measurable_tpot,
    measurable_tpot_at_least,
)
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.model import Candidate, Request
from llama_operator.planning.sizing import KV_BLOCK_TOKENS

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


@dataclass(frozen=True)
class TpotTuning:
    chunk: int  # the largest prompt chunk the TPOT objective allows
    batch: int  # the decode batch the TPOT objective allows beside such a chunk
    step_seconds: float  # a step with that batch and chunk
    why: str


def tpot_floor(steps: StepModel, config: PlanningConfig) -> float:
    """The smallest TPOT objective `tpot_tuning` can plan on a replica: one typical sequence decoding
    beside the smallest prompt chunk it runs (every step that takes a prompt chunk is an inter-token
    interval, so a replica whose steps cannot take even that chunk within the objective never prefills)."""
    return steps.step_seconds(1, float(config.typical_sequence_tokens), MIN_TPOT_CHUNK_TOKENS)


def tpot_tuning(
    request: Request, candidate: Candidate, steps: StepModel, config: PlanningConfig
) -> TpotTuning | None:
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
    read_at = histogram_reading(slo.tpot_seconds)
    context = float(config.typical_sequence_tokens)
    one = steps.step_seconds(1, context)
    floor = tpot_floor(steps, config)
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
    return TpotTuning(chunk=chunk, batch=batch, step_seconds=step, why=why)


def histogram_reading(objective: float) -> str:
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


def _ttft_chunk_why(slo: SLOSpec, step_seconds: float, chunk: int, max_num_seqs: int) -> str:
    """Why the TTFT objective allows a chunk: its step beside a full batch against the objective's share."""
    step_ms = step_seconds * 1000
    share_ms = TTFT_CHUNK_SHARE * slo.ttft_seconds * 1000
    why = (
        f"a step with a {chunk}-token prompt chunk beside {max_num_seqs} decoding sequences is estimated at "
        f"{step_ms:.0f} ms, "
    )
    if round(step_ms) <= round(share_ms):
        return why + (
            f"within {TTFT_CHUNK_SHARE:.0%} of the TTFT objective {slo.ttft_seconds:g}s ({share_ms:.0f} ms)"
        )
    return why + (
        f"over {TTFT_CHUNK_SHARE:.0%} of the TTFT objective {slo.ttft_seconds:g}s ({share_ms:.0f} ms): "
        f"{MIN_CHUNK_TOKENS} tokens is the smallest chunk planned (a smaller one spends more of each step "
        "reading the weights than computing the prompt), so a request arriving as such a step starts "
        "waits that long"
    )


def chunk_budget(
    slo: SLOSpec,
    steps: StepModel,
    max_num_seqs: int,
    config: PlanningConfig,
    tpot: TpotTuning | None,
    *,
    tokens_per_decode: int = 1,
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
    why = _ttft_chunk_why(slo, steps.step_seconds(max_num_seqs, context, chunk), chunk, max_num_seqs)
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
    # vLLM's step budget counts every running sequence's decode tokens too (with speculative decoding, each
    # verifies its proposals beside its own token): the budget is the chunk plus a full batch's, so a step at
    # max-num-seqs still carries a whole chunk.
    decode_tokens = max_num_seqs * tokens_per_decode
    budget = chunk + decode_tokens
    per_sequence = (
        ""
        if tokens_per_decode == 1
        else f" ({max_num_seqs} sequences x (1 + {tokens_per_decode - 1} speculative tokens))"
    )
    return budget, (
        f"a {chunk}-token prompt chunk plus {decode_tokens} decode tokens{per_sequence}: {why}; prefill "
        f"~{steps.prefill_tokens_per_second(chunk):.0f} tokens/s"
    )


def longest_prompt_within(steps: StepModel, token_budget: int, seconds: float) -> int:
    """The longest prompt an idle replica prefills within `seconds`: in steps of `token_budget` prompt
    tokens (nothing else decoding, vLLM fills each step's whole budget), each reading the weights once; the
    first token comes with the last step. 0 when not even one token does."""
    full_step = steps.step_seconds(0, 0.0, token_budget)
    full_steps = math.floor(seconds / full_step)
    rest = seconds - full_steps * full_step - steps.weight_read_seconds
    partial = 0 if rest <= 0 else min(token_budget, math.floor(rest / steps.seconds_per_chunk_token))
    return full_steps * token_budget + partial


def longest_prompt_note(steps: StepModel, token_budget: int, ttft_seconds: float, max_model_len: int) -> str:
    """What the plan says of the longest prompt that can meet the TTFT objective (queue time aside)."""
    longest = longest_prompt_within(steps, token_budget, ttft_seconds)
    rate = steps.prefill_tokens_per_second(token_budget)
    if longest >= max_model_len:
        return (
            f"every prompt up to maxModelLen {max_model_len} can meet the TTFT objective {ttft_seconds:g}s: an "
            f"idle replica prefills ~{longest} tokens within it (~{rate:.0f} tokens/s in steps of "
            f"{token_budget} tokens)"
        )
    return (
        f"prompts over ~{longest} tokens cannot meet the TTFT objective {ttft_seconds:g}s on this accelerator, "
        f"however many replicas: an idle replica prefills ~{rate:.0f} tokens/s in steps of {token_budget} "
        f"tokens; longer prompts (up to maxModelLen {max_model_len}) need a faster accelerator or a longer "
        "ttftSeconds"
    )
