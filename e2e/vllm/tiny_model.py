"""Build a tiny Llama-architecture model with random weights that vLLM can serve on a CPU.

Runs under the cached vllm venv's python (it has torch, transformers and tokenizers):

    "$(e2e/vllm/install.sh)" e2e/vllm/tiny_model.py OUT_DIR [--seed 0] [--shape tiny] [--force]

OUT_DIR gets config.json, generation_config.json, model.safetensors and a byte-level BPE
tokenizer (tokenizer.json + tokenizer_config.json with a Llama-3-style chat template).
Shape (`--shape tiny`, the default): hidden 128, 4 heads, 2 KV heads, head_dim 32 (16 crashes vLLM's
CPU attention), 2 layers, vocab 4096, 2048 positions. `--shape engine-bound` (hidden 384, 6 heads, 1 KV
head, head_dim 64, 4 layers, MLP 1024; 36 MB): a decode step of 7-10 ms on one core, large against the
API server's work per streamed token, for the simulator-vs-vLLM benchmark, where the tiny model's 1.5 ms
step left the front end on the other core as the bottleneck. The tokenizer is trained on the source text of a
fixed list of Python standard library modules, so for one Python version the output is the
same bytes every time. Leaves OUT_DIR alone when a build with the same recipe is there.
"""

# ruff: noqa: PLC0415  (torch/transformers load only when a build is needed: the cached path is 50 ms)
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

RECIPE_VERSION = 1


@dataclass(frozen=True)
class Shape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    intermediate: int


SHAPES = {
    "tiny": Shape(hidden=128, heads=4, kv_heads=2, head_dim=32, layers=2, intermediate=256),
    "engine-bound": Shape(hidden=384, heads=6, kv_heads=1, head_dim=64, layers=4, intermediate=1024),
}
VOCAB = 4096
MAX_POSITIONS = 2048

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
EOT = "<|eot_id|>"
SPECIAL_TOKENS = [BOS, EOS, START_HEADER, END_HEADER, EOT]

# Llama-3-shaped, so chat requests exercise the same path as the real models.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{ message['content'] | trim }}{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

# Plain prose and code, present in every CPython install; sorted and capped for determinism.
CORPUS_MODULES = [
    "argparse.py",
    "ast.py",
    "asyncio/base_events.py",
    "calendar.py",
    "collections/__init__.py",
    "configparser.py",
    "contextlib.py",
    "csv.py",
    "dataclasses.py",
    "datetime.py",
    "decimal.py",
    "difflib.py",
    "email/message.py",
    "enum.py",
    "fractions.py",
    "functools.py",
    "gettext.py",
    "heapq.py",
    "http/client.py",
    "http/server.py",
    "inspect.py",
    "json/decoder.py",
    "json/encoder.py",
    "logging/__init__.py",
    "mailbox.py",
    "pathlib.py",
    "pickle.py",
    "pprint.py",
    "random.py",
    "shutil.py",
    "statistics.py",
    "string.py",
    "subprocess.py",
    "tarfile.py",
    "textwrap.py",
    "threading.py",
    "typing.py",
    "unittest/case.py",
    "urllib/parse.py",
    "uuid.py",
    "zipfile.py",
]
CORPUS_CAP_BYTES = 4_000_000
EXTRA_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello! How can I help you today?",
    "Kubernetes schedules pods onto nodes; vLLM serves large language models.",
]


def corpus() -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts: list[str] = list(EXTRA_TEXT)
    total = 0
    for rel in sorted(CORPUS_MODULES):
        path = stdlib / rel
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.extend(text.splitlines())
        total += len(text)
        if total >= CORPUS_CAP_BYTES:
            break
    if total < 100_000:
        raise SystemExit(f"tiny_model: too little corpus text under {stdlib} ({total} bytes)")
    return texts


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    # Like Llama: a plain encode starts with BOS; chat prompts carry it in the template.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOT,
        pad_token=EOS,
        model_max_length=MAX_POSITIONS,
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(str(out))
    # transformers 5 records its new class name; the classic one loads in 4.x and 5.x alike.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def build_model(out: Path, seed: int, shape: Shape) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(out))
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=ids[BOS],
        eos_token_id=[ids[EOT], ids[EOS]],
        pad_token_id=ids[EOS],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=ids[BOS], eos_token_id=[ids[EOT], ids[EOS]], pad_token_id=ids[EOS]
    )
    model.save_pretrained(str(out), safe_serialization=True)


def stamp(seed: int, shape: Shape) -> str:
    s = shape
    recipe = {
        "recipe": RECIPE_VERSION,
        "seed": seed,
        "python": sys.version.split()[0],
        "shape": [s.hidden, s.heads, s.kv_heads, s.head_dim, s.layers, s.intermediate, VOCAB, MAX_POSITIONS],
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def build(out: Path, seed: int = 0, force: bool = False, shape: str = "tiny") -> Path:
    marker = out / ".tiny-model-stamp"
    want = stamp(seed, SHAPES[shape])
    if not force and marker.is_file() and marker.read_text() == want:
        return out
    out.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    # Training is deterministic per input; keep the thread pool out of the picture anyway.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TQDM_DISABLE", "1")  # "Writing model shards" bars
    build_tokenizer(out)
    build_model(out, seed, SHAPES[shape])
    marker.write_text(want)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("out", type=Path, help="folder to write the model into")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny", help="the model's size (default tiny)")
    ap.add_argument("--force", action="store_true", help="rebuild even when a matching build exists")
    ns = ap.parse_args()
    start = time.monotonic()
    build(ns.out, ns.seed, ns.force, ns.shape)
    print(f"{ns.shape} model ready in {ns.out} ({time.monotonic() - start:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
