"""Create, never adopt: whose is a live object that has the name the operator wants? Pure.

An object is this LlamaService's only when its *controller* ownerReference carries the LlamaService's
uid. A matching name, our labels, or a non-controller reference prove nothing: a tenant can set them.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from llama_operator.api.spec import API_VERSION, KIND


class Ownership(StrEnum):
    ABSENT = "absent"  # nothing has the name: the operator may create it
    OURS = "ours"  # controlled by this LlamaService: the operator may update or delete it
    FOREIGN = "foreign"  # someone else's: never touched


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid in the object's controller ownerReference when that controller is a LlamaService."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else []:
        if not isinstance(ref, Mapping) or not ref.get("controller"):
            continue
        group = str(ref.get("apiVersion", "")).split("/", 1)[0]
        if ref.get("kind") == KIND and group == API_VERSION.split("/", 1)[0]:
            uid = ref.get("uid")
            return str(uid) if uid else None
        return None  # another controller owns it
    return None


def ownership(live: Mapping[str, Any] | None, owner_uid: str) -> Ownership:
    if live is None:
        return Ownership.ABSENT
    return Ownership.OURS if owner_uid and controller_uid(live) == owner_uid else Ownership.FOREIGN


def object_uid(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    return str(uid) if uid else None
