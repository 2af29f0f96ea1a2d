"""Build a model with Llama-3.2-1B's architecture and random weights (no hub download), or the tests'
tiny Llama, for `e2e/gpu/run.sh`. Runs under the vLLM venv's python (torch, transformers, tokenizers).

    build_model.py OUT_DIR --shape llama-3.2-1b [--config-only]
    build_model.py OUT_DIR --shape tiny

Llama 3.2 1B (design brief): 16 layers, hidden 2048, 32 query heads, 8 KV heads, head dim 64, FFN 8192,
vocab 128,256, tied embeddings, 1.24 B parameters, bf16. Its tokenizer is a word-level one with exactly
the model's vocabulary ("t0" ... "t128255"), so any token id the random weights produce detokenizes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

LLAMA_32_1B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "tie_word_embeddings": True,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "hidden_act": "silu",
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "torch_dtype": "bfloat16",
}


def write_config(out: Path) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(LLAMA_32_1B, indent=2) + "\n")
    return LLAMA_32_1B


def write_tokenizer(out: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: PLC0415

    words = {f"t{i}": i for i in range(vocab)}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": f"t{LLAMA_32_1B['bos_token_id']}",
                "eos_token": f"t{LLAMA_32_1B['eos_token_id']}",
                "unk_token": "t0",
                "model_max_length": LLAMA_32_1B["max_position_embeddings"],
            },
            indent=2,
        )
        + "\n"
    )


def build_llama_32_1b(out: Path, seed: int) -> None:
    import torch  # noqa: PLC0415
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415

    write_config(out)
    config = LlamaConfig.from_pretrained(out)
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"random Llama-3.2-1B architecture: {parameters / 1e9:.3f} B parameters", file=sys.stderr)
    model.save_pretrained(out, safe_serialization=True)
    write_tokenizer(out, int(LLAMA_32_1B["vocab_size"]))  # type: ignore[call-overload]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("out", type=Path)
    ap.add_argument("--shape", choices=["llama-3.2-1b", "tiny", "engine-bound"], required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config-only", action="store_true", help="write config.json only (a dry run)")
    args = ap.parse_args()
    if args.shape in ("tiny", "engine-bound"):  # tiny_model.py's CPU-sized shapes
        tiny = Path(__file__).resolve().parents[1] / "vllm" / "tiny_model.py"
        return subprocess.call(
            [sys.executable, str(tiny), str(args.out), "--seed", str(args.seed), "--shape", args.shape]
        )
    if args.config_only:
        write_config(args.out)
    else:
        build_llama_32_1b(args.out, args.seed)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
