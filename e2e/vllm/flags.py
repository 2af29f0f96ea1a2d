"""Write the vLLM flag contract: every flag of the pinned vLLM's OpenAI server parser, as data.

Runs under the cached vllm venv's python (see install.sh), as `make vllm-flags` does:

    "$(bash e2e/vllm/install.sh)" e2e/vllm/flags.py > operator/llama_operator/data/vllm_flags.json

The operator image does not ship vLLM: the planner checks `spec.engine.extraArgs` against this file
(planning/extra_args.py). CI regenerates it and fails on drift (tests/vllm_args/test_flag_contract.py).
"""

# ruff: noqa: PLC0415  (vllm is imported only after the environment below is set)
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

# Parsers of vLLM's own that take free-form or structured text: checked loosely, never rejected here.
_NAMED_TYPES = {
    "int": "int",
    "float": "float",
    "str": "str",
    "parse_dataclass": "json",
    "loads": "json",
    "union_dict_and_str": "json-or-str",
    "human_readable_int": "human-int",  # 4096, 4k (x1000) or 4K (x1024)
    "human_readable_int_or_auto": "human-int-or-auto",
}


def _value_type(action: argparse.Action) -> tuple[str, bool]:
    """(type, whether 'None' and '' are accepted as 'unset')."""
    kind: Any = action.type
    if kind is None:
        return "str", False
    name = getattr(kind, "__name__", type(kind).__name__)
    if name == "_optional_type":  # vllm.utils.argparse_utils.optional_type(return_type)
        inner = next((c.cell_contents for c in kind.__closure__ or () if callable(c.cell_contents)), None)
        return _NAMED_TYPES.get(getattr(inner, "__name__", "str"), "any"), True
    return _NAMED_TYPES.get(name, "any"), False


def _fields(action: argparse.Action) -> list[str] | None:
    """The keys a structured config flag takes (its dataclass's fields), for `--flag.key` and JSON."""
    kind: Any = action.type
    if getattr(kind, "__name__", "") != "parse_dataclass" or not kind.__defaults__:
        return None
    cls = kind.__defaults__[0]
    return sorted(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None


def describe(action: argparse.Action) -> dict[str, Any]:
    takes_value = action.nargs != 0 and not isinstance(
        action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)
    )
    value_type, optional = _value_type(action) if takes_value else ("none", False)
    nargs = (
        action.nargs if isinstance(action.nargs, (int, str)) or action.nargs is None else str(action.nargs)
    )
    choices = sorted(str(c) for c in action.choices) if action.choices is not None else None
    return {
        "names": list(action.option_strings),
        "dest": action.dest,
        "takes_value": takes_value,
        "nargs": nargs,
        "type": value_type,
        "none_allowed": optional,
        "choices": choices,
        "negatable": isinstance(action, argparse.BooleanOptionalAction),
        "fields": _fields(action),
    }


def main() -> int:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    import vllm

    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    flags = sorted((describe(a) for a in parser._actions if a.option_strings), key=lambda f: f["dest"])
    json.dump(
        {"vllm": getattr(vllm, "__version__", "?"), "flags": flags}, sys.stdout, indent=1, sort_keys=True
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
