"""The whole LlamaService object, and parsing a user's manifest into it with errors that name fields."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llama_operator.api.base import WireModel
from llama_operator.api.spec import (
    API_VERSION,
    KIND,
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    NAME_RULE_MESSAGE,
    LlamaServiceSpec,
)
from llama_operator.api.status import LlamaServiceStatus


class ObjectMeta(BaseModel):
    """The part of metadata the operator reads; everything else is kept as given."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=MAX_NAME_LENGTH)]
    # A namespace is a DNS-1123 label (the API server's rule): anything else names no namespace.
    namespace: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)] = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class LlamaService(WireModel):
    """A LlamaService custom resource."""

    model_config = ConfigDict(extra="ignore")

    api_version: Annotated[str, Field(alias="apiVersion")] = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta
    spec: LlamaServiceSpec
    status: LlamaServiceStatus | None = None


class InvalidSpecError(ValueError):
    """A manifest that does not match the contract; the message names each bad field."""


# A key that is not a plain name (a line break, a space, a quote, ...) is shown quoted, so that an error
# about it stays on one line and says exactly which key.
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_\-/]+$")
# Values echoed in messages are cut to this many characters: a message is one line a person reads.
SHOWN_VALUE_LENGTH = 80


def shown(value: object) -> str:
    """A value as an error message shows it: its repr, one line, cut short when long."""
    text = repr(value)
    if len(text) <= SHOWN_VALUE_LENGTH:
        return text
    return f"{text[: SHOWN_VALUE_LENGTH - 20]}... ({len(text)} characters)"


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not _PLAIN_KEY.match(part):
            path += f"[{shown(part)}]"
        elif part.startswith(("function-after", "function-before")) or part in {
            "int",
            "float",
            "str",
            "literal['auto']",
        }:
            continue
        else:
            path += ("." if path else "") + part
    return path


def describe_validation_error(err: ValidationError, prefix: str) -> str:
    lines = []
    for e in err.errors():
        path = _field_path(tuple(e["loc"]))
        where = f"{prefix}.{path}" if path else prefix
        msg = e["msg"].removeprefix("Value error, ")
        # A validator may quote the value it refuses: a huge one is shown cut short.
        given = e.get("input")
        if isinstance(given, str) and len(repr(given)) > SHOWN_VALUE_LENGTH:
            msg = msg.replace(repr(given), shown(given))
        lines.append(f"{where}: {msg}")
    return "; ".join(dict.fromkeys(lines))


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidSpecError(f"{where}: expected a mapping, got {_type_name(value)}")
    return value


def _type_name(value: object) -> str:
    # YAML words, since users write YAML: a list, a string, a number, ...
    names = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    return names.get(type(value), f"a {type(value).__name__}")


def parse_spec(spec: object) -> LlamaServiceSpec:
    """Validate a spec as the API server stored it; raise InvalidSpecError naming each bad field."""
    try:
        return LlamaServiceSpec.model_validate(dict(_mapping(spec, "spec")))
    except ValidationError as err:
        raise InvalidSpecError(describe_validation_error(err, "spec")) from None


def parse_metadata(meta: object) -> ObjectMeta:
    """Validate the metadata the operator derives names from; raise InvalidSpecError naming the field."""
    meta = _mapping(meta, "metadata")
    try:
        return ObjectMeta.model_validate(dict(meta))
    except ValidationError as err:
        if any(e["loc"][:1] == ("name",) for e in err.errors()):
            raise InvalidSpecError(f"{NAME_RULE_MESSAGE}; got {shown(meta.get('name'))}") from None
        raise InvalidSpecError(describe_validation_error(err, "metadata")) from None


def parse_llamaservice(obj: object) -> LlamaService:
    """Validate a whole manifest (e.g. from `plan -f`)."""
    obj = _mapping(obj, "the document")
    if obj.get("kind") != KIND:
        raise InvalidSpecError(f"kind: expected {KIND}, got {shown(obj.get('kind'))}")
    if obj.get("apiVersion") != API_VERSION:
        raise InvalidSpecError(f"apiVersion: expected {API_VERSION}, got {shown(obj.get('apiVersion'))}")
    meta = _mapping(obj.get("metadata") or {}, "metadata")
    if not meta.get("name"):
        raise InvalidSpecError("metadata.name: required")
    spec = parse_spec(obj.get("spec") or {})
    return LlamaService(metadata=parse_metadata(meta), spec=spec)


def service_spec(body: Mapping[str, Any]) -> LlamaServiceSpec:
    """The spec of a LlamaService as the API server holds it, typed; raises InvalidSpecError naming each bad
    field."""
    return parse_spec(body.get("spec") or {})


def stored_status(body: Mapping[str, Any]) -> dict[str, Any]:
    """The status of a LlamaService as the API server holds it: what a merge patch of it applies to. Its
    fields are read typed (api/status.py read_status, api/plan.py status_plan, api/conditions.py)."""
    status = body.get("status")
    return dict(status) if isinstance(status, Mapping) else {}


def has_autoscaling(body: Mapping[str, Any]) -> bool:
    """The spec asks for autoscaling at all (enabled or not): without it there is nothing to parse."""
    return bool((body.get("spec") or {}).get("autoscaling"))
