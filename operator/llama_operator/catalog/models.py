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
    # A mixture of experts: the parameters one token runs through (None: all, a dense model), routed experts
    # per MoE layer and experts per token.
    active_parameters: int | None = None
    experts: int | None = None
    experts_per_token: int | None = None
    # A vision encoder: its parameters (part of `parameters`, kept in 16 bits by quantized checkpoints) and the
    # tokens an image adds to a request at most. 0: a text model.
    vision_parameters: int = 0
    image_tokens: int = 0
    # Where the shape needs saying in the plan (a model vLLM runs only through its Transformers backend).
    caveat: str | None = None

    @property
    def compute_parameters(self) -> int:
        """Parameters a prompt token is computed through: the active ones of a mixture of experts."""
        return self.active_parameters if self.active_parameters is not None else self.parameters

    @property
    def is_moe(self) -> bool:
        return self.experts is not None

    @classmethod
    def from_spec(cls, architecture: ModelArchitecture) -> ModelShape:
        vision = architecture.vision
        return cls(
            layers=architecture.layers,
            kv_heads=architecture.kv_heads,
            head_dim=architecture.head_dim,
            parameters=architecture.parameters,
            max_context=architecture.max_context,
            active_parameters=architecture.active_parameters,
            experts=architecture.experts,
            experts_per_token=architecture.experts_per_token,
            vision_parameters=vision.parameters if vision is not None else 0,
            image_tokens=vision.image_tokens if vision is not None else 0,
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


# Llama 4 (config.json of meta-llama/Llama-4-Scout-17B-16E and Llama-4-Maverick-17B-128E, text_config):
# 48 layers, hidden 5120, 40 query heads and 8 KV heads of 128, vocab 202,048, untied embeddings; each routed
# expert and the shared expert an MLP of intermediate_size 8192, the dense layers' MLP intermediate_size_mlp
# 16384; top-1 routing (num_experts_per_tok 1). Scout: 16 experts in every layer (interleave_moe_layer_step 1),
# max_position_embeddings 10,485,760; Maverick: 128 experts in every other layer (step 2), 1,048,576.
# vision_config: 34 layers of hidden 1408 and MLP 5632, a pixel-shuffle adapter (5632 -> 4096 -> 4096) and a
# 4096 -> 5120 projector; a 336-pixel tile of 14-pixel patches is 576 patches, 144 tokens after the shuffle
# (pixel_shuffle_ratio 0.5); the processor takes up to 16 tiles and a global view: 17 x 144 = 2,448 tokens.
# The totals this gives (108.6 B and 401.6 B; 17.2 B active) match the model cards' 109 B, 400 B and 17 B.
LLAMA4_HIDDEN = 5120
LLAMA4_LAYERS = 48
LLAMA4_EXPERT_MLP = 3 * LLAMA4_HIDDEN * 8192
LLAMA4_DENSE_MLP = 3 * LLAMA4_HIDDEN * 16_384
LLAMA4_VOCAB = 202_048
LLAMA4_VISION_PARAMETERS = 34 * (4 * 1408 * 1408 + 2 * 1408 * 5632) + 5632 * 4096 + 4096 * 4096 + 4096 * 5120
LLAMA4_IMAGE_TOKENS = 17 * 144


def _llama4(hub_id: str, *, experts: int, moe_every: int, max_context: int) -> KnownModel:
    attention = 2 * LLAMA4_HIDDEN * 40 * 128 + 2 * LLAMA4_HIDDEN * 8 * 128  # q and o, k and v
    moe_layers = LLAMA4_LAYERS // moe_every
    routed = moe_layers * experts * LLAMA4_EXPERT_MLP
    shared = moe_layers * (LLAMA4_EXPERT_MLP + LLAMA4_HIDDEN * experts)  # the shared expert, the router
    dense = (LLAMA4_LAYERS - moe_layers) * LLAMA4_DENSE_MLP
    embeddings = _embeddings(LLAMA4_VOCAB, LLAMA4_HIDDEN, tied=False)
    text = LLAMA4_LAYERS * attention + routed + shared + dense + embeddings
    return KnownModel(
        hub_id=hub_id,
        shape=ModelShape(
            layers=LLAMA4_LAYERS,
            kv_heads=8,
            head_dim=128,
            parameters=text + LLAMA4_VISION_PARAMETERS,
            max_context=max_context,
            embedding_parameters=embeddings,
            hidden_size=LLAMA4_HIDDEN,
            intermediate_size=8192,
            vocab_size=LLAMA4_VOCAB,
            active_parameters=text - routed + moe_layers * LLAMA4_EXPERT_MLP,  # one routed expert per token
            experts=experts,
            experts_per_token=1,
            vision_parameters=LLAMA4_VISION_PARAMETERS,
            image_tokens=LLAMA4_IMAGE_TOKENS,
        ),
    )


# Llama 3.2 Vision (config.json of meta-llama/Llama-3.2-11B-Vision and -90B-Vision): the Llama 3.1 8B / 70B
# language model with cross-attention layers added (text_config num_hidden_layers 40 and 100, of which 8 and
# 20 cross_attention_layers), vocab 128,256 (+8 image tokens in the embedding), max_position_embeddings
# 131,072. vision_config: 32 + 8 global layers of hidden 1280 and MLP 5120, a 7680 -> hidden projector; a
# 560-pixel tile is 40 x 40 patches and a class token, 1,601 tokens, up to max_num_tiles 4: 6,404 tokens per
# image, read by the cross-attention layers. The totals this gives (10.6 B, 88.5 B) match the model cards'
# 10.6 B and 88.6 B. The KV cache is planned for every layer, cross-attention ones too (an over-estimate of
# 25 %: those hold the image's tokens, not the text's).
MLLAMA_VISION_LAYERS_PARAMETERS = 40 * (4 * 1280 * 1280 + 2 * 1280 * 5120)
MLLAMA_IMAGE_TOKENS = 4 * 1601
MLLAMA_CAVEAT = (
    "vLLM removed its own Mllama (Llama 3.2 Vision) implementation with the V0 encoder-decoder runner "
    "(vllm-project/vllm PR 24907, v0.11); the pinned vLLM runs it through its Transformers backend, if at all: "
    "try it on the image before production"
)


def _llama32_vision(hub_id: str, *, layers: int, hidden: int, intermediate: int) -> KnownModel:
    layer = 2 * hidden * hidden + 2 * hidden * 8 * 128 + 3 * hidden * intermediate
    embeddings = (128_256 + 8) * hidden + 128_256 * hidden
    vision = MLLAMA_VISION_LAYERS_PARAMETERS + 7680 * hidden
    return KnownModel(
        hub_id=hub_id,
        shape=ModelShape(
            layers=layers,
            kv_heads=8,
            head_dim=128,
            parameters=layers * layer + embeddings + vision,
            max_context=131_072,
            embedding_parameters=embeddings,
            hidden_size=hidden,
            intermediate_size=intermediate,
            vocab_size=128_256,
            vision_parameters=vision,
            image_tokens=MLLAMA_IMAGE_TOKENS,
            caveat=MLLAMA_CAVEAT,
        ),
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
    _llama4("meta-llama/Llama-4-Scout-17B-16E", experts=16, moe_every=1, max_context=10_485_760),
    _llama4("meta-llama/Llama-4-Maverick-17B-128E", experts=128, moe_every=2, max_context=1_048_576),
    _llama32_vision("meta-llama/Llama-3.2-11B-Vision", layers=40, hidden=4096, intermediate=14_336),
    _llama32_vision("meta-llama/Llama-3.2-90B-Vision", layers=100, hidden=8192, intermediate=28_672),
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
