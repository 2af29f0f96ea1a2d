"""Quantized checkpoints by their names: the base model they were made from and how their weights are stored.

Well-known publishers name a quantized checkpoint after its base model with a suffix that says the scheme
(each from the publishers' model cards on the Hugging Face hub):

- RedHatAI (formerly neuralmagic), made with llm-compressor, compressed-tensors format:
  `...-FP8` and `...-FP8-dynamic` (FP8 weights, static or dynamic activation scales), `...-quantized.w8a8`
  (INT8 weights and activations), `...-quantized.w4a16` (4-bit weights, GPTQ-style groups of 128);
- hugging-quants (AutoAWQ, AutoGPTQ): `...-AWQ-INT4`, `...-GPTQ-INT4`;
- Meta's own FP8 releases: `meta-llama/Llama-3.1-405B-Instruct-FP8`, `Llama-4-Maverick-17B-128E-Instruct-FP8`;
- TheBloke, casperhansen and others: `...-AWQ`, `...-GPTQ`.

vLLM reads the scheme from the checkpoint's quantization_config, so the planner needs it only to size the
weights and to check the GPU runs it; a checkpoint whose name does not say it states it in
`spec.model.quantization`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llama_operator.api.spec import Quantization

# Suffixes of the basename (case-insensitive), longest first: the scheme they name.
QUANTIZED_SUFFIXES: tuple[tuple[str, Quantization], ...] = (
    ("-fp8-dynamic", Quantization.FP8),
    ("-fp8", Quantization.FP8),
    ("-quantized.w8a8", Quantization.INT8),
    ("-quantized.w4a16", Quantization.GPTQ),
    ("-w8a8", Quantization.INT8),
    ("-w4a16", Quantization.GPTQ),
    ("-awq-int4", Quantization.AWQ),
    ("-gptq-int4", Quantization.GPTQ),
    ("-awq", Quantization.AWQ),
    ("-gptq", Quantization.GPTQ),
)
# What comes between the base model's name and the scheme in some publishers' names.
_SEPARATORS = re.compile(r"[-_.]+$")


@dataclass(frozen=True)
class Checkpoint:
    """A model name read as a base model and the scheme its weights are stored in (None: 16 bits or not said)."""

    base_name: str  # the name without the scheme's suffix: what the architecture is looked up by
    quantization: Quantization | None
    suffix: str | None  # the suffix read, as written in the name


def read_checkpoint_name(model_name: str) -> Checkpoint:
    """The base model and the quantization a checkpoint's name says, by the publishers' naming above."""
    stripped = model_name.strip().rstrip("/")
    lowered = stripped.lower()
    for suffix, quantization in QUANTIZED_SUFFIXES:
        if lowered.endswith(suffix) and len(lowered) > len(suffix):
            base = _SEPARATORS.sub("", stripped[: -len(suffix)])
            return Checkpoint(base_name=base, quantization=quantization, suffix=stripped[-len(suffix) :])
    return Checkpoint(base_name=stripped, quantization=None, suffix=None)
