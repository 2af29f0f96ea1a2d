"""SLO-driven engine tuning: an autoscaled service's TTFT and TPOT objectives shape its vLLM flags, and
status.plan says why."""

from __future__ import annotations

from typing import Any

import pytest

from llama_operator.api.plan import Plan
from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.catalog.performance import StepModel
from llama_operator.planning import PlanningConfig, PlanningError, plan_service
from llama_operator.planning.tuning import MIN_CHUNK_TOKENS, MIN_TPOT_CHUNK_TOKENS, TTFT_CHUNK_SHARE
from tests.planning.builders import LLAMA_1B

LLAMA_3B = "meta-llama/Llama-3.2-3B-Instruct"
T4 = {"type": "t4"}
SLICE_1G10 = {"type": "a100-80gb", "mig": "1g.10gb"}


def plan(
    accelerator: dict[str, Any],
    slo: dict[str, Any] | None = None,
    *,
    model: str = LLAMA_1B,
    engine: dict[str, Any] | None = None,
) -> Plan:
    body: dict[str, Any] = {"model": {"name": model}, "accelerator": accelerator, "engine": engine or {}}
    if slo is not None:
        body["autoscaling"] = {"slo": slo}
    return plan_service(LlamaServiceSpec.model_validate(body), name="chat", config=PlanningConfig())


def flag(p: Plan, name: str) -> str | None:
    args = p.vllm_args
    return args[args.index(name) + 1] if name in args else None


def steps(p: Plan) -> StepModel:
    return StepModel(p.decode_step_seconds, p.decode_seconds_per_context_token, p.prefill_seconds_per_token)


def note(p: Plan, start: str) -> str:
    return next(n for n in p.notes if n.startswith(start))


def test_without_autoscaling_the_plan_keeps_vllms_defaults() -> None:
    p = plan(T4)
    assert "--max-num-batched-tokens" not in p.vllm_args and "--enforce-eager" not in p.vllm_args
    assert p.max_num_batched_tokens == 0
    assert p.decode_step_seconds > 0 and p.decode_seconds_per_context_token > 0


def test_the_chunk_is_sized_for_the_ttft_objective() -> None:
    tight, loose = plan(T4, {"ttftSeconds": 0.5}), plan(T4, {"ttftSeconds": 2.0})
    for p, ttft in ((tight, 0.5), (loose, 2.0)):
        budget = int(flag(p, "--max-num-batched-tokens") or 0)
        assert budget == p.max_num_batched_tokens
        # vLLM's budget counts decode tokens too: a whole chunk fits beside a full batch.
        chunk = budget - p.max_num_seqs
        assert chunk >= MIN_CHUNK_TOKENS
        # A step with a full chunk beside a full batch (half-typical contexts) fits its share of TTFT.
        assert steps(p).step_seconds(p.max_num_seqs, 1024, chunk) <= TTFT_CHUNK_SHARE * ttft
        assert "TTFT objective" in note(p, "maxNumBatchedTokens")
    assert tight.max_num_batched_tokens < loose.max_num_batched_tokens
    # The autoscaler's prior is the throughput of those chunks: bigger chunks read the weights less often.
    assert tight.prefill_tokens_per_second < loose.prefill_tokens_per_second


def test_a_tpot_objective_caps_max_num_seqs_where_a_step_would_break_it() -> None:
    free = plan(T4, {"ttftSeconds": 1.0})
    capped = plan(T4, {"ttftSeconds": 1.0, "tpotSeconds": 0.05})
    assert int(flag(capped, "--max-num-seqs") or 0) == capped.max_num_seqs < free.max_num_seqs
    chunk = capped.max_num_batched_tokens - capped.max_num_seqs
    model = steps(capped)
    # The batch decodes typical sequences within the objective even in a step that carries a chunk.
    assert model.step_seconds(capped.max_num_seqs, 2048, chunk) <= 0.05
    assert model.step_seconds(capped.max_num_seqs + 8, 2048, chunk) > 0.05
    assert "TPOT objective 0.05s" in note(capped, "maxNumSeqs")
    # Every step with a chunk is an inter-token interval: the chunk shrinks, and the note says what that
    # costs (the longest prompt that still prefills within TTFT).
    assert MIN_TPOT_CHUNK_TOKENS <= chunk < free.max_num_batched_tokens - free.max_num_seqs
    assert "prompts above" in note(capped, "maxNumBatchedTokens")
    # A looser objective allows a bigger batch.
    assert plan(T4, {"ttftSeconds": 1.0, "tpotSeconds": 0.1}).max_num_seqs > capped.max_num_seqs


def test_an_unreachable_tpot_is_refused_with_the_step_time() -> None:
    with pytest.raises(PlanningError, match=r"tpotSeconds 0\.01 cannot be met on t4: .* ms"):
        plan(T4, {"tpotSeconds": 0.01})
    # Auto placement moves on to hardware that meets it.
    p = plan({"type": "auto"}, {"tpotSeconds": 0.012})
    assert steps(p).step_seconds(1, 2048) < 0.012


def test_an_explicit_max_num_seqs_stands_with_a_warning() -> None:
    p = plan(T4, {"tpotSeconds": 0.05}, engine={"maxNumSeqs": 256})
    assert p.max_num_seqs == 256
    assert "estimated to exceed the TPOT objective" in note(p, "maxNumSeqs 256 from the spec")


def test_every_services_context_leaves_room_for_concurrency() -> None:
    # The case: on a 1g.10gb slice the full 131072-token context leaves room for ~1.24 sequences.
    # A service with fixed replicas gets the same concurrency-aware default as an autoscaled one.
    fixed = plan(SLICE_1G10)
    assert fixed.max_model_len < 131072 and fixed.max_concurrency >= 16
    assert fixed.kv_cache_tokens / 131072 < 1.5
    assert "16 sequences" in note(fixed, f"maxModelLen {fixed.max_model_len}")
    assert "fixed replicas too" in note(fixed, f"maxModelLen {fixed.max_model_len}")
    p = plan(SLICE_1G10, {"ttftSeconds": 1.0})
    assert p.max_model_len == fixed.max_model_len and p.max_concurrency >= 16
    assert "16 sequences" in note(p, f"maxModelLen {p.max_model_len}")
    # A model whose whole context fits 16 times keeps it, and says how many fit.
    short = plan({"type": "h100-80gb"}, model="meta-llama/Meta-Llama-3-8B-Instruct")
    assert short.max_model_len == 8192 and short.max_concurrency >= 16
    assert "capped by the model's context" in note(short, "maxModelLen 8192")
    # With a TPOT objective, room for its batch.
    t = plan(SLICE_1G10, {"ttftSeconds": 1.0, "tpotSeconds": 0.05})
    assert t.max_model_len == 4096  # room for 39 of the batch's 48 at the shortest context served, and said
    assert "fewer than the 48" in note(t, "maxModelLen 4096")
    roomy = plan(T4, {"ttftSeconds": 1.0, "tpotSeconds": 0.05})
    assert roomy.kv_cache_tokens // roomy.max_model_len >= roomy.max_num_seqs
    # A slow slice gets a smaller chunk than 256 rather than no TPOT at all.
    assert t.max_num_batched_tokens - t.max_num_seqs < MIN_CHUNK_TOKENS
    assert steps(t).step_seconds(t.max_num_seqs, 2048, t.max_num_batched_tokens - t.max_num_seqs) <= 0.05
    # An explicit context is the user's.
    assert plan(SLICE_1G10, {"ttftSeconds": 1.0}, engine={"maxModelLen": 65536}).max_model_len == 65536


def test_enforce_eager_only_where_cuda_graphs_starve_the_kv_cache() -> None:
    starved = plan(SLICE_1G10, {"ttftSeconds": 1.0}, model=LLAMA_3B)
    assert "--enforce-eager" in starved.vllm_args and starved.enforce_eager
    with_graphs = plan(
        SLICE_1G10, {"ttftSeconds": 1.0}, model=LLAMA_3B, engine={"extraArgs": ["--no-enforce-eager"]}
    )
    assert "--enforce-eager" not in with_graphs.vllm_args
    # The graph pool goes to the KV cache (~11k tokens with graphs: the figure).
    assert 10_500 < with_graphs.kv_cache_tokens < 12_000 < starved.kv_cache_tokens
    assert "CUDA-graph pool" in note(starved, "enforce-eager")
    # Slower steps without graphs: the step model knows.
    assert starved.decode_step_seconds > with_graphs.decode_step_seconds
    # Roomy replicas keep their graphs.
    for accel in (T4, SLICE_1G10, {"type": "a10g"}):
        assert "--enforce-eager" not in plan(accel, {"ttftSeconds": 1.0}).vllm_args


def test_extra_args_override_the_tuned_flags_once() -> None:
    p = plan(T4, {"tpotSeconds": 0.05}, engine={"extraArgs": ["--max-num-batched-tokens", "4k"]})
    assert p.vllm_args.count("--max-num-batched-tokens") == 1 and flag(p, "--max-num-batched-tokens") == "4k"
    assert p.max_num_batched_tokens == 4000
    assert "from extraArgs" in note(p, "maxNumBatchedTokens 4000")
    eager = plan(T4, {"ttftSeconds": 1.0}, engine={"extraArgs": ["--enforce-eager"]})
    assert eager.vllm_args.count("--enforce-eager") == 1 and eager.enforce_eager
