"""Speculative decoding: --speculative-config is checked field by field against vLLM's SpeculativeConfig (the
flag contract generated from the pinned vLLM), and a draft model's weights and KV cache come out of the
memory plan."""

from __future__ import annotations

import json

import pytest

from llama_operator.api.plan import Plan
from llama_operator.api.spec import LlamaServiceSpec, Quantization
from llama_operator.catalog.models import model_shape
from llama_operator.planning import PlanningError
from llama_operator.planning.extra_args import parse_extra_args
from llama_operator.planning.sizing import CUDA_GRAPH_BYTES, kv_bytes_per_token, weight_bytes
from llama_operator.planning.tuning import MIN_TPOT_CHUNK_TOKENS
from tests.planning.builders import plan, spec

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
DRAFT_1B = "meta-llama/Llama-3.2-1B-Instruct"


def speculative(config: dict[str, object]) -> list[str]:
    return ["--speculative-config", json.dumps(config)]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            speculative({"methd": "ngram"}),
            r"'methd' is not a field of vLLM's speculative_config; did you mean 'method'",
        ),
        (
            speculative({"method": "ngramm", "num_speculative_tokens": 3}),
            r"method must be one of .*did you mean ngram",
        ),
        (
            speculative({"method": "ngram", "num_speculative_tokens": 0}),
            r"num_speculative_tokens must be more than 0",
        ),
        (
            speculative({"method": "ngram", "num_speculative_tokens": "3"}),
            r"num_speculative_tokens must be an int",
        ),
        (speculative({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 0}), "at least 1"),
        (speculative({"method": "ngram", "num_speculative_tokens": None}), "must not be null"),
        (speculative({"method": "ngram", "target_model_config": {}}), "not a field"),
        (["--speculative-config.methd", "ngram"], r"no such key; did you mean --speculative-config\.method"),
        (["--speculative-config.method", "ngramm"], "must be one of"),
        (speculative({"method": "custom_class", "model": "pkg.Proposer"}), "imports a Python class"),
        (speculative({"model": "pkg.Proposer", "num_speculative_tokens": 2}), "imports a Python class"),
        ([*speculative({"method": "ngram"}), "--spec-method", "ngram"], "mutually exclusive"),
    ],
)
def test_a_wrong_speculative_config_is_refused_naming_the_field(extra: list[str], message: str) -> None:
    with pytest.raises(PlanningError, match=message):
        parse_extra_args(extra)


def test_a_valid_config_is_read_as_vllm_reads_it() -> None:
    # vLLM reads '-' as '_' in the keys, and merges the --spec-* shorthands and the dotted form.
    parsed = parse_extra_args(
        [
            "--speculative-config",
            '{"num-speculative-tokens": 4}',
            "--speculative-config.prompt_lookup_max",
            "5",
            "--spec-method",
            "ngram",
        ]
    )
    assert parsed.speculative == {"num_speculative_tokens": 4, "prompt_lookup_max": 5, "method": "ngram"}
    assert parse_extra_args(["--enforce-eager"]).speculative is None


def test_a_draft_models_weights_and_kv_cache_come_out_of_the_budget() -> None:
    base = {"maxModelLen": 8192}
    alone = plan(spec({"type": "l4"}, base, model=LLAMA_8B))
    drafted = plan(
        spec(
            {"type": "l4"},
            {**base, "extraArgs": speculative({"model": DRAFT_1B, "num_speculative_tokens": 4})},
            model=LLAMA_8B,
        )
    )
    draft = model_shape(DRAFT_1B)
    assert drafted.speculative_method == "draft_model"
    assert drafted.draft_weight_bytes == weight_bytes(draft, dtype_bytes=2, quantization=Quantization.NONE)
    assert drafted.draft_kv_bytes_per_token == kv_bytes_per_token(draft, kv_dtype_bytes=2)
    assert drafted.kv_bytes_per_token == alone.kv_bytes_per_token + drafted.draft_kv_bytes_per_token
    # The budget loses the draft's weights, and each token costs both models' K and V.
    alone_budget = alone.kv_cache_tokens * alone.kv_bytes_per_token
    drafted_budget = drafted.kv_cache_tokens * drafted.kv_bytes_per_token
    # (less the CUDA-graph pool where the smaller cache turned it over to the KV cache: --enforce-eager).
    graphs = CUDA_GRAPH_BYTES if drafted.enforce_eager and not alone.enforce_eager else 0
    assert alone_budget - drafted_budget == pytest.approx(drafted.draft_weight_bytes - graphs, rel=0.05)
    assert drafted.kv_cache_tokens < alone.kv_cache_tokens
    note = next(n for n in drafted.notes if n.startswith("speculative decoding draft_model"))
    assert "GiB" in note and f"{drafted.draft_kv_bytes_per_token} bytes per token" in note


def test_a_draft_that_no_longer_fits_is_refused_and_ngram_costs_nothing() -> None:
    # 8B in 16 bits on an A10G leaves ~3.7 GiB of KV cache: a 1B draft (2.3 GiB) and its KV do not leave 30k.
    with pytest.raises(PlanningError, match="does not fit on a10g"):
        plan(
            spec(
                {"type": "a10g"},
                {
                    "maxModelLen": 30000,
                    "extraArgs": speculative({"model": DRAFT_1B, "num_speculative_tokens": 4}),
                },
                model=LLAMA_8B,
            )
        )
    ngram = plan(
        spec(
            {"type": "a10g"},
            {
                "extraArgs": speculative(
                    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
                )
            },
            model=LLAMA_8B,
        )
    )
    plain = plan(spec({"type": "a10g"}, model=LLAMA_8B))
    assert ngram.speculative_method == "ngram" and ngram.draft_weight_bytes == 0
    assert ngram.kv_cache_tokens == plain.kv_cache_tokens
    assert any("no draft model weights" in n for n in ngram.notes)


def test_an_eagle_head_not_made_for_the_target_is_refused() -> None:
    with pytest.raises(PlanningError, match=r"the EAGLE head's name does not carry the target's size \(8B\)"):
        plan(
            spec(
                {"type": "l4"},
                {
                    "extraArgs": speculative(
                        {"method": "eagle", "model": "someone/eagle-head", "num_speculative_tokens": 3}
                    )
                },
                model=LLAMA_8B,
            )
        )


def test_the_step_budget_covers_every_sequences_speculative_tokens() -> None:
    # Issue 43: H100, 64 sequences, 8 speculative tokens: one decode step verifies 64 * (8 + 1) = 576 tokens;
    # the budget was 240 (a 176-token chunk plus 64).
    def planned(extra: list[str]) -> Plan:
        body = {
            "model": {"name": LLAMA_8B},
            "accelerator": {"type": "h100-80gb"},
            "engine": {"maxNumSeqs": 64, "extraArgs": extra},
            "autoscaling": {"slo": {"ttftSeconds": 0.5, "tpotSeconds": 0.05}},
        }
        return plan(LlamaServiceSpec.model_validate(body))

    drafted = planned(speculative({"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4}))
    alone = planned([])
    assert drafted.max_num_batched_tokens >= 64 * (8 + 1) + MIN_TPOT_CHUNK_TOKENS
    assert drafted.max_num_batched_tokens - 576 == alone.max_num_batched_tokens - 64  # the same prompt chunk
    note = next(n for n in drafted.notes if n.startswith("maxNumBatchedTokens"))
    assert "plus 576 decode tokens (64 sequences x (1 + 8 speculative tokens))" in note


@pytest.mark.parametrize(
    ("method", "head"),
    [
        ("eagle", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"),
        ("eagle3", "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"),
    ],
)
def test_an_eagle_head_is_sized_from_its_target_and_planned(method: str, head: str) -> None:
    # Issue 43: EAGLE and EAGLE-3 drafts were refused. A head is one layer of the target's width: its weights
    # and its one layer of KV per token come out of the budget.
    alone = plan(spec({"type": "l4"}, {"maxModelLen": 8192}, model=LLAMA_8B))
    drafted = plan(
        spec(
            {"type": "l4"},
            {
                "maxModelLen": 8192,
                "extraArgs": speculative({"method": method, "model": head, "num_speculative_tokens": 3}),
            },
            model=LLAMA_8B,
        )
    )
    assert drafted.speculative_method == method
    # One decoder layer of Llama 3.1 8B (218 M parameters) and its projection; EAGLE-3 adds its fused inputs
    # and a 32,000-token lm_head: ~0.5 and ~0.85 GB in bf16, as the published heads weigh.
    expected = {"eagle": 0.50e9, "eagle3": 0.85e9}[method]
    assert drafted.draft_weight_bytes == pytest.approx(expected, rel=0.05)
    assert drafted.draft_kv_bytes_per_token == 2 * 1 * 8 * 128 * 2  # one layer's K and V
    assert drafted.kv_cache_tokens < alone.kv_cache_tokens
