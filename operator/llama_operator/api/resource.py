"""The whole LlamaService object, and parsing a user's manifest into it with errors that name fields."""

from __future__ import annotations

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
    namespace: str = "default"
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


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
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
        lines.append(f"{where}: {msg}")
    return "; ".join(dict.fromkeys(lines))


def parse_spec(spec: Mapping[str, Any]) -> LlamaServiceSpec:
    """Validate a spec as the API server stored it; raise InvalidSpecError naming each bad field."""
    try:
        return LlamaServiceSpec.model_validate(dict(spec))
    except ValidationError as err:
        raise InvalidSpecError(describe_validation_error(err, "spec")) from None


def parse_metadata(meta: Mapping[str, Any]) -> ObjectMeta:
    """Validate the metadata the operator derives names from; raise InvalidSpecError naming the field."""
    try:
        return ObjectMeta.model_validate(dict(meta))
    except ValidationError as err:
        if any(e["loc"][:1] == ("name",) for e in err.errors()):
            raise InvalidSpecError(f"{NAME_RULE_MESSAGE}; got {meta.get('name')!r}") from None
        raise InvalidSpecError(describe_validation_error(err, "metadata")) from None


def parse_llamaservice(obj: Mapping[str, Any]) -> LlamaService:
    """Validate a whole manifest (e.g. from `plan -f`)."""
    if obj.get("kind") != KIND:
        raise InvalidSpecError(f"kind: expected {KIND}, got {obj.get('kind')!r}")
    if obj.get("apiVersion") != API_VERSION:
        raise InvalidSpecError(f"apiVersion: expected {API_VERSION}, got {obj.get('apiVersion')!r}")
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        raise InvalidSpecError("metadata.name: required")
    spec = parse_spec(obj.get("spec") or {})
    return LlamaService(metadata=parse_metadata(meta), spec=spec)
