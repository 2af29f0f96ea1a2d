"""Architectures of well-known Llama models, keyed by Hugging Face hub id.

Numbers are from each model's `config.json` on the Hugging Face hub (num_hidden_layers,
num_key_value_heads, head_dim = hidden_size / num_attention_heads, max_position_embeddings,
vocab_size, tie_word_embeddings) and parameter counts from the safetensors index.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from llama_operator.api.spec import ModelArchitecture
from llama_operator.catalog.checkpoints import read_checkpoint_name


@dataclass(frozen=True)
class ModelShape:
    """What the planner needs to size a model: layers and attention shape, parameters, context."""

    layers: int
    kv_heads: int
    head_dim: int
    parameters: int
    max_context: int
    # Parameters of the embedding and (untied) output matrices: quantization leaves them in 16 bits.
    # None when unknown (a user-given architecture); the planner then assumes a share.
    embedding_parameters: int | None = None
    # Width of the residual stream, of the MLP, and the vocabulary: they size LoRA adapters' buffers
    # (planning/adapters.py). None when unknown (a user-given architecture); estimated from the parameters.
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None

    @classmethod
    def from_spec(cls, architecture: ModelArchitecture) -> ModelShape:
        return cls(
            layers=architecture.layers,
            kv_heads=architecture.kv_heads,
            head_dim=architecture.head_dim,
            parameters=architecture.parameters,
            max_context=architecture.max_context,
        )


@dataclass(frozen=True)
class KnownModel:
    hub_id: str
    shape: ModelShape


class UnknownModelError(LookupError):
    """The model is not in the built-in catalog; the message tells the user what to set."""


def _embeddings(vocab: int, hidden: int, *, tied: bool) -> int:
    return vocab * hidden * (1 if tied else 2)


def _known(
    hub_id: str,
    *,
    layers: int,
    kv_heads: int,
    head_dim: int,
    parameters: int,
    max_context: int,
    vocab: int,
    hidden: int,
    intermediate: int,
    tied: bool,
) -> KnownModel:
    return KnownModel(
        hub_id=hub_id,
        shape=ModelShape(
            layers=layers,
            kv_heads=kv_heads,
            head_dim=head_dim,
            parameters=parameters,
            max_context=max_context,
            embedding_parameters=_embeddings(vocab, hidden, tied=tied),
            hidden_size=hidden,
            intermediate_size=intermediate,
            vocab_size=vocab,
        ),
    )


def _llama3_8b(hub_id: str, max_context: int) -> KnownModel:
    return _known(
        hub_id,
        layers=32,
        kv_heads=8,
        head_dim=128,
        parameters=8_030_261_248,
        max_context=max_context,
        vocab=128_256,
        hidden=4096,
        intermediate=14_336,
        tied=False,
    )


def _llama3_70b(hub_id: str, max_context: int) -> KnownModel:
    return _known(
        hub_id,
        layers=80,
        kv_heads=8,
        head_dim=128,
        parameters=70_553_706_496,
        max_context=max_context,
        vocab=128_256,
        hidden=8192,
        intermediate=28_672,
        tied=False,
    )


def _llama31_405b(hub_id: str) -> KnownModel:
    return _known(
        hub_id,
        layers=126,
        kv_heads=8,
        head_dim=128,
        parameters=405_853_388_800,
        max_context=131_072,
        vocab=128_256,
        hidden=16_384,
        intermediate=53_248,
        tied=False,
    )


KNOWN_MODELS: tuple[KnownModel, ...] = (
    _known(
        "meta-llama/Llama-3.2-1B",
        layers=16,
        kv_heads=8,
        head_dim=64,
        parameters=1_235_814_400,
        max_context=131_072,
        vocab=128_256,
        hidden=2048,
        intermediate=8_192,
        tied=True,
    ),
    _known(
        "meta-llama/Llama-3.2-3B",
        layers=28,
        kv_heads=8,
        head_dim=128,
        parameters=3_212_749_824,
        max_context=131_072,
        vocab=128_256,
        hidden=3072,
        intermediate=8_192,
        tied=True,
    ),
    _llama3_8b("meta-llama/Llama-3.1-8B", 131_072),
    _llama3_8b("meta-llama/Meta-Llama-3.1-8B", 131_072),
    _llama3_8b("meta-llama/Meta-Llama-3-8B", 8192),
    _llama3_70b("meta-llama/Llama-3.1-70B", 131_072),
    _llama3_70b("meta-llama/Meta-Llama-3.1-70B", 131_072),
    _llama3_70b("meta-llama/Llama-3.3-70B", 131_072),
    _llama3_70b("meta-llama/Meta-Llama-3-70B", 8192),
    _llama31_405b("meta-llama/Llama-3.1-405B"),
    _llama31_405b("meta-llama/Meta-Llama-3.1-405B"),
    _known(
        "meta-llama/Llama-2-7b",
        layers=32,
        kv_heads=32,
        head_dim=128,
        parameters=6_738_415_616,
        max_context=4096,
        vocab=32_000,
        hidden=4096,
        intermediate=11_008,
        tied=False,
    ),
    _known(
        "meta-llama/Llama-2-13b",
        layers=40,
        kv_heads=40,
        head_dim=128,
        parameters=13_015_864_320,
        max_context=4096,
        vocab=32_000,
        hidden=5120,
        intermediate=13_824,
        tied=False,
    ),
    _known(
        "meta-llama/Llama-2-70b",
        layers=80,
        kv_heads=8,
        head_dim=128,
        parameters=68_976_648_192,
        max_context=4096,
        vocab=32_000,
        hidden=8192,
        intermediate=28_672,
        tied=False,
    ),
    _known(
        "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        layers=22,
        kv_heads=4,
        head_dim=64,
        parameters=1_100_048_384,
        max_context=2048,
        vocab=32_000,
        hidden=2048,
        intermediate=5_632,
        tied=False,
    ),
)

# Suffixes of fine-tuned or re-packaged variants that keep the base model's shape.
_VARIANT_SUFFIX = re.compile(r"(-(instruct|chat|hf|it))+$")


def _key(model_name: str) -> str:
    """Lower-case basename without variant suffixes: 'meta-llama/Llama-3.2-1B-Instruct' -> 'llama-3.2-1b'."""
    basename = model_name.strip().rstrip("/").rsplit("/", 1)[-1].lower()
    return _VARIANT_SUFFIX.sub("", basename)


_BY_ID: Mapping[str, KnownModel] = {m.hub_id.lower(): m for m in KNOWN_MODELS}
_BY_KEY: Mapping[str, KnownModel] = {_key(m.hub_id): m for m in KNOWN_MODELS}


def find_model(model_name: str) -> KnownModel | None:
    """The built-in entry for a hub id or a local path naming a known model, or None.

    Case-insensitive; `-Instruct`, `-chat`, `-hf` variants share their base model's shape, and so do
    quantized checkpoints named after it (`...-FP8`, `...-AWQ-INT4`).
    """
    exact = _BY_ID.get(model_name.strip().lower())
    if exact is not None:
        return exact
    by_key = _BY_KEY.get(_key(model_name))
    if by_key is not None:
        return by_key
    # A quantized checkpoint by a publisher's name: the base model's shape (catalog/checkpoints.py).
    checkpoint = read_checkpoint_name(model_name)
    if checkpoint.quantization is None:
        return None
    return _BY_ID.get(checkpoint.base_name.lower()) or _BY_KEY.get(_key(checkpoint.base_name))


def model_shape(model_name: str, architecture: ModelArchitecture | None = None) -> ModelShape:
    """The shape to plan with: the spec's architecture when given, else the built-in catalog's."""
    if architecture is not None:
        return ModelShape.from_spec(architecture)
    known = find_model(model_name)
    if known is None:
        examples = ", ".join(m.hub_id for m in KNOWN_MODELS[:4])
        raise UnknownModelError(
            f"model {model_name!r} is not in the operator's built-in catalog ({examples}, ...): set "
            "spec.model.architecture (layers, kvHeads, headDim, parameters, maxContext) from the model's "
            "config.json so the operator can size the KV cache and pick an accelerator"
        )
    return known.shape
