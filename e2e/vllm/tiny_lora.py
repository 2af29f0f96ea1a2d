"""Build a tiny LoRA adapter (PEFT format) for a model built by tiny_model.py, with random weights.

Runs under the cached vllm venv's python (torch and safetensors; no peft needed):

    "$(e2e/vllm/install.sh)" e2e/vllm/tiny_lora.py MODEL_DIR OUT_DIR [--rank 8] [--seed 1]

OUT_DIR gets adapter_config.json and adapter_model.safetensors with PEFT's key names
(base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight: rank x in; lora_B: out x rank) for
q_proj, k_proj, v_proj and o_proj of every layer. lora_B is not zero (PEFT initialises it to zero, which
would make every adapter the base model): each seed gives an adapter that changes the model's output.
"""

# ruff: noqa: PLC0415  (torch loads only under the vllm venv's python)
from __future__ import annotations

import argparse
import json
from pathlib import Path


def build(model_dir: Path, out: Path, *, rank: int, seed: int) -> Path:
    import torch
    from safetensors.torch import save_file

    config = json.loads((model_dir / "config.json").read_text())
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads", heads))
    head_dim = int(config.get("head_dim") or hidden // heads)
    widths = {  # (in, out) of each targeted projection
        "q_proj": (hidden, heads * head_dim),
        "k_proj": (hidden, kv_heads * head_dim),
        "v_proj": (hidden, kv_heads * head_dim),
        "o_proj": (heads * head_dim, hidden),
    }
    generator = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for layer in range(int(config["num_hidden_layers"])):
        for module, (fan_in, fan_out) in widths.items():
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, fan_in, generator=generator) * 0.2
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(fan_out, rank, generator=generator) * 0.2
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "adapter_model.safetensors"))
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(model_dir),
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": sorted(widths),
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2) + "\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(build(args.model_dir, args.out_dir, rank=args.rank, seed=args.seed))


if __name__ == "__main__":
    main()
