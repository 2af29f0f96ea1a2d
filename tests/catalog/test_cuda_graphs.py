"""CUDA-graph capture sizes as the pinned vLLM computes them (vllm/config/vllm.py,
VllmConfig._set_cudagraph_sizes), and max-num-seqs planned on them rather than on powers of two."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llama_operator.catalog.vllm import captured_batch_at_most, cuda_graph_capture_sizes
from tests.planning.builders import plan, spec

# vLLM's defaults worked by hand from its code: 1, 2, 4, multiples of 8 below 256, multiples of 16 from
# 256 up to min(2 * max_num_seqs * decode_query_len, 512), max_num_batched_tokens when it fits.
FINE = list(range(8, 256, 8))


def test_capture_sizes_of_a_full_default_engine() -> None:
    assert cuda_graph_capture_sizes(256, 8192) == (1, 2, 4, *FINE, *range(256, 513, 16))
    assert len(cuda_graph_capture_sizes(256, 8192)) == 51


def test_capture_sizes_stop_at_twice_max_num_seqs_and_at_the_token_budget() -> None:
    assert cuda_graph_capture_sizes(128, 2048) == (1, 2, 4, *FINE, 256)
    assert cuda_graph_capture_sizes(4, 2048) == (1, 2, 4, 8)
    assert cuda_graph_capture_sizes(10, 16) == (1, 2, 4, 8, 16)
    # An off-stride budget below the ceiling is captured too.
    assert cuda_graph_capture_sizes(256, 100) == (1, 2, 4, *range(8, 97, 8), 100)


def test_capture_sizes_on_blackwell_go_to_1024() -> None:
    assert cuda_graph_capture_sizes(512, 8192, blackwell=True)[-1] == 1024
    assert cuda_graph_capture_sizes(512, 8192)[-1] == 512


def test_speculative_decoding_adds_the_uniform_decode_sizes() -> None:
    # 64 sequences, 8 speculative tokens: a decode step of n requests is 9n tokens; vLLM appends 9n for
    # n in 1, 2, 4, 8, ..., 64 up to its 512-token ceiling.
    sizes = cuda_graph_capture_sizes(64, 8192, decode_query_len=9)
    assert {9, 18, 36, 72, 144, 216, 288, 360, 432, 504} <= set(sizes)
    assert 576 not in sizes and sizes[-1] == 512


@given(st.integers(1, 4096))
def test_the_captured_batch_at_most_is_a_capture_size_of_any_engine_that_runs_it(batch: int) -> None:
    captured = captured_batch_at_most(batch)
    assert 1 <= captured <= batch
    if batch <= 512:
        assert captured in cuda_graph_capture_sizes(batch, 8192)
    # Nothing captured lies between it and the batch.
    assert not any(captured < size <= batch for size in cuda_graph_capture_sizes(4096, 1 << 20))


def test_8b_on_an_a100_keeps_the_sequences_its_kv_cache_holds() -> None:
    # 454,592 KV tokens / 2,048 = 221 sequences: 216, a capture size (was 128, a power of two).
    p = plan(spec({"type": "a100-80gb"}, model="meta-llama/Llama-3.1-8B-Instruct"))
    assert p.kv_cache_tokens // 2048 == 221
    assert p.max_num_seqs == 216
