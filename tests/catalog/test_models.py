"""Built-in model architectures: lookup by hub id and variants, and the error for unknown models."""

from __future__ import annotations

import pytest

from llama_operator.api.spec import ModelArchitecture
from llama_operator.catalog.models import KNOWN_MODELS, UnknownModelError, find_model, model_shape


def test_llama_32_1b_matches_the_design_brief() -> None:
    shape = model_shape("meta-llama/Llama-3.2-1B-Instruct")
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (16, 8, 64)
    assert shape.parameters == 1_235_814_400
    assert shape.parameters * 2 == pytest.approx(2.47e9, rel=0.01)
    # Tied embeddings: one 128256 x 2048 matrix.
    assert shape.embedding_parameters == 128_256 * 2048


@pytest.mark.parametrize(
    "name",
    [
        "meta-llama/Llama-3.2-1B",
        "meta-llama/llama-3.2-1b-instruct",
        "META-LLAMA/LLAMA-3.2-1B-INSTRUCT",
        "/models/Llama-3.2-1B-Instruct",
        "someone/Llama-3.2-1B-Instruct",
    ],
)
def test_lookup_is_case_insensitive_and_matches_variants(name: str) -> None:
    found = find_model(name)
    assert found is not None
    assert found.hub_id == "meta-llama/Llama-3.2-1B"


@pytest.mark.parametrize(
    ("name", "hub_id"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B"),
        ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.3-70B"),
        ("meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b"),
        ("meta-llama/Llama-2-13b-hf", "meta-llama/Llama-2-13b"),
        ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "TinyLlama/TinyLlama-1.1B-Chat-v1.0"),
    ],
)
def test_known_models(name: str, hub_id: str) -> None:
    found = find_model(name)
    assert found is not None
    assert found.hub_id == hub_id


def test_catalog_shapes_are_sane() -> None:
    for model in KNOWN_MODELS:
        shape = model.shape
        assert shape.embedding_parameters is not None
        assert 0 < shape.embedding_parameters < shape.parameters
        assert shape.max_context >= 2048


def test_unknown_model_tells_the_user_what_to_set() -> None:
    with pytest.raises(UnknownModelError, match=r"spec\.model\.architecture"):
        model_shape("acme/secret-model")


def test_spec_architecture_wins_over_the_catalog() -> None:
    arch = ModelArchitecture(layers=2, kv_heads=2, head_dim=64, parameters=5_000_000, max_context=1024)
    shape = model_shape("meta-llama/Llama-3.2-1B", arch)
    assert (shape.layers, shape.max_context, shape.embedding_parameters) == (2, 1024, None)
