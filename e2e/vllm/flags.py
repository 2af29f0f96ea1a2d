"""Write the vLLM flag contract: every flag of the pinned vLLM's OpenAI server parser, as data.

Runs under the cached vllm venv's python (see install.sh), as `make vllm-flags` does:

    "$(bash e2e/vllm/install.sh)" e2e/vllm/flags.py > operator/llama_operator/data/vllm_flags.json

The operator image does not ship vLLM: the planner checks `spec.engine.extraArgs` against this file
(planning/extra_args.py). CI regenerates it and fails on drift (tests/vllm_args/test_flag_contract.py).

Per flag: every option string (aliases included), the parser's `dest`, whether it takes a value and how
many (nargs), the value's type as the parser converts it, whether '' / 'None' mean "unset", choices, the
keys a structured config flag takes (`--compilation-config.mode 3` or a JSON object; FlexibleArgumentParser
turns `--flag.key value` into `--flag '{"key": value}'`), and the numeric bounds its config field declares.
"""

# ruff: noqa: PLC0415  (vllm is imported only after the environment below is set)
from __future__ import annotations

import argparse
import collections
import dataclasses
import inspect
import json
import os
import re
import sys
import types
import typing
from collections.abc import Callable
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
# vLLM fills in help texts (and the config fields' docs) only when it sees --help on the command line
# (vllm.engine.arg_utils.NEEDS_HELP, read at import); the code-loading search below reads them.
sys.argv = [sys.argv[0], "--help"]

# The converters vLLM's parser uses, by function name, as the contract's type names.
_NAMED_TYPES = {
    "int": "int",
    "float": "float",
    "str": "str",
    "parse_dataclass": "json",  # a JSON object of a config dataclass's fields
    "loads": "json-value",  # any JSON value (json.loads)
    "union_dict_and_str": "json-or-str",  # a JSON object when it looks like one, else a string
    "human_readable_int": "human-int",  # 4096, 4k (x1000) or 4K (x1024)
    "human_readable_int_or_auto": "human-int-or-auto",
}
# Code loading, found from the parser itself (names and help texts of flags, names and docs of the config
# fields a structured flag takes) so that a vLLM upgrade's new flag of the kind is caught without a hand list:
# a flag or key whose name says class/plugin/middleware/module path, or whose text says it imports, loads or
# runs code. tests/vllm_args/test_flag_contract.py checks the measured ones are found.
_CODE_NAME = re.compile(
    r"(^|_)(cls|class|classes|plugin|plugins|middleware|module_path|processors?|remote_code)$"
)
_CODE_TEXT = re.compile(
    r"import path|fully[- ]qualified|qualified name|class name|path to a class|module path|module:class|"
    r"dynamically load|plugin|remote code|dictconfig|executes? (model-generated )?code|"
    r"code interpreter|custom_class",
    re.IGNORECASE,
)
# A sentence that sends elsewhere is not about this flag loading code: "register a plugin via
# `--tool-parser-plugin`" (that flag loads it), "Other custom values can be supported via plugins" (names that
# installed plugins registered, chosen by this flag, loaded by vLLM's plugin mechanism).
_POINTS_ELSEWHERE = re.compile(r"\bvia (`?--[a-z0-9-]+|plugins\b)", re.IGNORECASE)


# Keys whose text does not say it but whose effect is running code, found by reading vLLM's and torch's
# use of them (a review, kept here so the contract carries it): by flag dest, key and why.
_REVIEWED_CODE_KEYS: dict[str, dict[str, str]] = {
    "compilation_config": {
        # torch._inductor.config settings, among them the C++ compiler Inductor executes (cpp.cxx).
        "inductor_compile_config": "sets torch inductor's configuration, including the compiler it runs",
        # vLLM loads the compiled graphs it finds there (generated Python and shared objects) and runs them.
        "cache_dir": "vLLM loads and runs the compiled artifacts it finds in it",
        "local_cache_dir": "vLLM loads and runs the compiled artifacts it finds in it",
    },
}


def _loads_code(name: str, text: str) -> bool:
    if _CODE_NAME.search(name):
        return True
    sentences = re.split(r"(?<=[.!?])\s+", " ".join((text or "").split()))
    return any(_CODE_TEXT.search(s) and not _POINTS_ELSEWHERE.search(s) for s in sentences)


# What a converter vLLM builds inline (a lambda) does to a probe tells what it is: only one kind is known.
_LOWER_SNAKE_PROBE = ("Probe-Value", "probe_value")


@dataclasses.dataclass(frozen=True)
class ValueType:
    name: str
    none_allowed: bool = False  # '' and 'None' parse as None (vllm's optional_type)
    fields: list[str] | None = None
    required: list[str] | None = None  # the keys a JSON object must have
    choices: list[str] | None = None  # when vLLM checks them after parsing, not the parser
    code_keys: list[str] | None = None  # the keys of a structured config that load code
    # What each key of a JSON object takes, where vLLM checks it only at engine start (--speculative-config):
    # {"kind": int|float|bool|str|choice|any, "optional": null allowed, "choices": [...], "bounds": {...}}.
    keys: dict[str, dict[str, Any]] | None = None


def _closure_callable(function: Any) -> Callable[..., Any] | None:
    cells = function.__closure__ or ()
    return next((c.cell_contents for c in cells if callable(c.cell_contents)), None)


def _value_type(converter: Any) -> ValueType:
    """What the parser does with a value, unwrapping vllm's optional_type and parse_type wrappers."""
    if converter is None:
        return ValueType("str")
    name = getattr(converter, "__name__", type(converter).__name__)
    if name in {"_optional_type", "_parse_type"}:
        inner = _value_type(_closure_callable(converter))
        return dataclasses.replace(inner, none_allowed=inner.none_allowed or name == "_optional_type")
    if name == "parse_dataclass":
        docs = _dataclass_docs(converter)
        return ValueType(
            "json",
            fields=sorted(docs) if docs is not None else None,
            code_keys=sorted(k for k, doc in (docs or {}).items() if _loads_code(k, doc)),
        )
    if name == "<lambda>":
        try:
            probed = converter(_LOWER_SNAKE_PROBE[0])
        except Exception:
            probed = None
        return ValueType("lower-snake" if probed == _LOWER_SNAKE_PROBE[1] else "any")
    return ValueType(_NAMED_TYPES.get(name, "any"))


def _with_reviewed_code_keys(dest: str, value_type: ValueType) -> ValueType:
    reviewed = set(_REVIEWED_CODE_KEYS.get(dest, {})) & set(value_type.fields or ())
    if not reviewed:
        return value_type
    return dataclasses.replace(value_type, code_keys=sorted({*(value_type.code_keys or ()), *reviewed}))


def _dataclass_docs(parse_dataclass: Any) -> dict[str, str] | None:
    """The keys a structured config flag takes, with their docs: its dataclass's fields (parse_dataclass's
    `cls` default)."""
    from vllm.config.utils import get_attr_docs

    cls = (parse_dataclass.__defaults__ or (None,))[0]
    if not dataclasses.is_dataclass(cls):
        return None
    docs = get_attr_docs(cls)
    return {f.name: docs.get(f.name) or "" for f in dataclasses.fields(cls)}


def _field_bounds(dests: set[str]) -> dict[str, dict[str, float]]:
    """Numeric bounds (pydantic Gt/Ge/Lt/Le) of the config fields the flags fill, by field name.

    A name that config classes bound differently is left unbounded: the flag feeds one of them only."""
    import annotated_types
    import vllm.config

    found: dict[str, set[tuple[tuple[str, float], ...]]] = collections.defaultdict(set)
    for _, cls in inspect.getmembers(vllm.config, inspect.isclass):
        for field_name, info in (getattr(cls, "__pydantic_fields__", None) or {}).items():
            if field_name not in dests:
                continue
            bounds: dict[str, float] = {}
            for item in info.metadata:
                for kind, attribute in (
                    (annotated_types.Gt, "gt"),
                    (annotated_types.Ge, "ge"),
                    (annotated_types.Lt, "lt"),
                    (annotated_types.Le, "le"),
                ):
                    if isinstance(item, kind):
                        bounds[attribute] = getattr(item, attribute)
            found[field_name].add(tuple(sorted(bounds.items())))
    return {
        name: dict(next(iter(sets))) for name, sets in found.items() if len(sets) == 1 and next(iter(sets))
    }


def _attention_backends() -> ValueType:
    """--attention-backend is a plain string to the parser; AttentionConfig.validate_backend_before then
    looks it up, upper-cased, in AttentionBackendEnum ("auto" meaning none)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    return ValueType(
        "upper-choice", none_allowed=True, choices=[*(b.name for b in AttentionBackendEnum), "AUTO"]
    )


# SpeculativeConfig fields the engine fills itself (EngineArgs.create_speculative_config, post-init): not keys
# a user gives.
_SPECULATIVE_INTERNAL = frozenset(
    {"target_model_config", "target_parallel_config", "draft_model_config", "draft_parallel_config"}
)


def _speculative_config() -> ValueType:
    """--speculative-config is json.loads to the parser; EngineArgs.create_speculative_config then calls
    SpeculativeConfig(**value) at engine start, so an unknown key ("methd") parses and crashes the pod."""
    from vllm.config.speculative import SpeculativeConfig

    fields = [
        f.name
        for f in dataclasses.fields(SpeculativeConfig)
        if f.init and f.name not in _SPECULATIVE_INTERNAL
    ]
    hints = typing.get_type_hints(SpeculativeConfig)
    pydantic_fields = getattr(SpeculativeConfig, "__pydantic_fields__", {})
    return ValueType(
        "json-value",
        none_allowed=True,
        fields=sorted(fields),
        keys={name: _key_kind(hints[name], pydantic_fields.get(name)) for name in sorted(fields)},
    )


def _literal_values(annotation: Any) -> list[str] | None:
    """The values of a Literal, nested Literals flattened; None when the annotation is not only Literals."""
    if typing.get_origin(annotation) is typing.Literal:
        values: list[str] = []
        for arg in typing.get_args(annotation):
            nested = _literal_values(arg) if typing.get_origin(arg) is typing.Literal else [str(arg)]
            if nested is None:
                return None
            values += nested
        return values
    return None


def _key_kind(annotation: Any, info: Any) -> dict[str, Any]:
    """What a config field accepts, in the JSON a user writes: its kind, None allowed, choices, bounds."""
    import annotated_types

    args = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else ()
    )
    optional = type(None) in args
    members = [a for a in args if a is not type(None)] or [annotation]
    kind: dict[str, Any] = {"kind": "any", "optional": optional}
    if len(members) == 1:
        member = members[0]
        literal = _literal_values(member)
        if literal is not None:
            kind.update(kind="choice", choices=literal)
        elif member in (bool, int, float, str):
            kind["kind"] = member.__name__
    bounds = {
        attribute: getattr(item, attribute)
        for item in (getattr(info, "metadata", None) or ())
        for cls, attribute in (
            (annotated_types.Gt, "gt"),
            (annotated_types.Ge, "ge"),
            (annotated_types.Lt, "lt"),
            (annotated_types.Le, "le"),
        )
        if isinstance(item, cls)
    }
    if bounds:
        kind["bounds"] = bounds
    return kind


def _lora_modules() -> ValueType:
    """--lora-modules items are `name=path` or a JSON object of LoRAModulePath (LoRAParserAction)."""
    from vllm.entrypoints.openai.models.protocol import LoRAModulePath

    fields = dataclasses.fields(LoRAModulePath)
    return ValueType(
        "lora-module",
        fields=sorted(f.name for f in fields),
        required=sorted(
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ),
    )


def describe(action: argparse.Action, bounds: dict[str, dict[str, float]]) -> dict[str, Any]:
    takes_value = action.nargs != 0 and not isinstance(
        action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)
    )
    # What vLLM checks after parsing, for the flags whose checks are their own.
    if action.dest == "attention_backend":
        value_type = _attention_backends()
    elif action.dest == "speculative_config":
        value_type = _speculative_config()
    elif type(action).__name__ == "LoRAParserAction":
        value_type = _lora_modules()
    else:
        value_type = _value_type(action.type) if takes_value else ValueType("none")
    value_type = _with_reviewed_code_keys(action.dest, value_type)
    nargs = (
        action.nargs if isinstance(action.nargs, (int, str)) or action.nargs is None else str(action.nargs)
    )
    # None among choices is the unset default, not a value one can type.
    choices = (
        sorted(str(c) for c in action.choices if c is not None)
        if action.choices is not None
        else value_type.choices and sorted(value_type.choices)
    )
    numeric = value_type.name in {"int", "float", "human-int", "human-int-or-auto"}
    return {
        "names": list(action.option_strings),
        "dest": action.dest,
        "takes_value": takes_value,
        "nargs": nargs,
        "type": value_type.name,
        "none_allowed": value_type.none_allowed,
        "choices": choices,
        "negatable": isinstance(action, argparse.BooleanOptionalAction),
        "fields": value_type.fields,
        "required": value_type.required,
        "bounds": bounds.get(action.dest) if numeric else None,
        "loads_code": _loads_code(action.dest, action.help or ""),
        "code_keys": value_type.code_keys or None,
        **({"keys": value_type.keys} if value_type.keys is not None else {}),
    }


def _mark_aliases_of_code_keys(flags: list[dict[str, Any]], helps: dict[str, str]) -> None:
    """A flag whose help sends to a code-loading key of another flag (--log-config-file: "Use
    --logging-config.pylogging_config_file instead") loads code too."""
    code_keys = {
        f"{name}.{key}" for flag in flags for key in flag["code_keys"] or () for name in flag["names"]
    }
    for flag in flags:
        mentioned = set(re.findall(r"--[a-z0-9-]+\.[a-z0-9_]+", helps.get(flag["dest"], "")))
        if mentioned & code_keys:
            flag["loads_code"] = True


def main() -> int:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    import vllm

    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    actions = [a for a in parser._actions if a.option_strings]
    bounds = _field_bounds({a.dest for a in actions})
    flags = sorted((describe(a, bounds) for a in actions), key=lambda f: f["dest"])
    _mark_aliases_of_code_keys(flags, {a.dest: a.help or "" for a in actions})
    json.dump(
        {"vllm": getattr(vllm, "__version__", "?"), "flags": flags}, sys.stdout, indent=1, sort_keys=True
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
