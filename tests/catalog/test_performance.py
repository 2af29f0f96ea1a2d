"""The step-time model shared by the planner, the policy and the simulator."""

from __future__ import annotations

import pytest

from llama_operator.catalog.performance import CATALOG_FACTORS, StepModel, calibrated_step_model, step_model
from tests.llama_1b import T4_1B, llama_1b_hardware


def test_a_decode_step_reads_the_weights_and_every_sequences_kv_cache() -> None:
    # Batch 1 sits above the brief's 7.7 ms bandwidth floor, at the slow end of its 10-14 ms estimate.
    assert 0.0077 < T4_1B.step_seconds(1, 1000) < 0.016
    one, many = T4_1B.step_seconds(1, 1000), T4_1B.step_seconds(64, 1000)
    assert many - one == pytest.approx(63 * 1000 * 32768 / (320e9 * 0.75), rel=1e-9)
    assert T4_1B.step_seconds(8, 1000, chunk=512) > T4_1B.step_seconds(8, 1000)


def test_the_tpot_batch_is_the_largest_whose_step_fits() -> None:
    tpot, context = 0.05, 2048.0
    batch = T4_1B.tpot_batch(tpot, 0, context)
    assert T4_1B.step_seconds(batch, context) <= tpot < T4_1B.step_seconds(batch + 1, context)
    # A prompt chunk in the same step leaves room for fewer sequences.
    with_chunk = T4_1B.tpot_batch(tpot, 256, context)
    assert 0 < with_chunk < batch
    assert T4_1B.step_seconds(with_chunk, context, 256) <= tpot
    # Faster than the weights can be read: no batch at all.
    assert T4_1B.tpot_batch(0.005, 0, context) == 0


def test_decode_throughput_is_the_tpot_batch_over_its_mean_step() -> None:
    """Every step, one carrying a prompt chunk too, meets TPOT at the batch; most steps carry none, so
    the replica decodes that batch per plain step, for the share of its time prefill leaves."""
    tpot, context, chunk = 0.05, 2048.0, 256
    batch = T4_1B.tpot_batch(tpot, chunk, context)
    plain = batch / T4_1B.step_seconds(batch, context)
    assert T4_1B.decode_tokens_per_second(tpot, chunk, context) == pytest.approx(plain)
    assert plain > batch / tpot  # faster than if every step carried a chunk
    prefill = 2000.0  # prompt tokens/s this replica also prefills
    busy = T4_1B.decode_tokens_per_second(tpot, chunk, context, prompt_tokens_per_second=prefill)
    assert busy == pytest.approx(plain * (1 - prefill * T4_1B.seconds_per_prefill_token))
    full = 1 / T4_1B.seconds_per_prefill_token
    assert T4_1B.decode_tokens_per_second(tpot, chunk, context, prompt_tokens_per_second=full) == 0.0
    # The engine's max-num-seqs below that batch: that many sequences, each step shorter.
    capped = T4_1B.decode_tokens_per_second(tpot, chunk, context, max_num_seqs=batch // 2)
    assert capped == pytest.approx((batch // 2) / T4_1B.step_seconds(batch // 2, context))
    assert capped < plain
    roomy = T4_1B.decode_tokens_per_second(tpot, chunk, context, max_num_seqs=batch + 8)
    assert roomy == pytest.approx(plain)
    assert T4_1B.decode_tokens_per_second(0.005, chunk, context) == 0.0  # no batch meets it


def test_a_faster_memory_decodes_more_within_the_same_tpot() -> None:
    a10g = calibrated_step_model(llama_1b_hardware("a10g"), CATALOG_FACTORS)
    assert a10g.tpot_batch(0.06, 128, 2048) > T4_1B.tpot_batch(0.06, 128, 2048) > 0


def test_chunks_and_prefill_throughput() -> None:
    model = StepModel(
        weight_read_seconds=0.01, seconds_per_context_token=1e-7, seconds_per_prefill_token=1e-4
    )
    assert model.chunk_within(0.11, 0, 0) == 1000
    assert model.chunk_within(0.005, 0, 0) == 0
    # Bigger chunks read the weights fewer times per prompt token: more throughput, towards 1 / t_prefill.
    assert model.prefill_tokens_per_second(256) < model.prefill_tokens_per_second(2048) < 1e4
    eager = step_model(
        bandwidth_bytes_per_s=320e9, fp16_tflops=65, weight_bytes=2.47e9, kv_bytes_per_token=32768,
        parameters=1.24e9, eager=True,
    )  # fmt: skip
    assert eager.weight_read_seconds > T4_1B.weight_read_seconds


def test_the_tokens_of_chunk_carrying_steps_grow_with_the_prompts_a_replica_prefills() -> None:
    """vLLM fills --max-num-batched-tokens with the decodes first, prompt after: beside 2 sequences a
    240-token budget carries 238 prompt tokens a step. (Against the simulator's engine:
    tests/bench/sim/test_calibration_sim.py.)"""
    budget, batch, context, prompt_rate = 240, 2, 1000.0, 238 * 25.0
    share = T4_1B.chunk_step_token_share(batch, context, budget, prompt_rate)
    assert T4_1B.chunk_step_token_share(batch, context, budget, 0.0) == 0.0
    # Prefill that fills the replica's time leaves no decode-only step.
    assert T4_1B.chunk_step_token_share(batch, context, budget, 1e6) == 1.0
    # Half the prompts: half the chunk-carrying steps, and more decode-only steps beside them.
    assert T4_1B.chunk_step_token_share(batch, context, budget, prompt_rate / 2) < share / 2
    # A larger budget carries the same prompts in fewer steps.
    assert T4_1B.chunk_step_token_share(batch, context, 2 * budget, prompt_rate) < share
