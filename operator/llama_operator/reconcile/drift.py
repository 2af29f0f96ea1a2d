"""Has someone changed what the operator applied? A subset comparison of desired against live objects:
the server adds defaults, so only fields the operator sets are compared."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


def _same_scalar(desired: Any, live: Any) -> bool:
    if desired == live:
        return True
    # Quantities and int-or-strings may come back in another spelling ("1" vs 1).
    return str(desired) == str(live)


def is_subset(desired: Any, live: Any) -> bool:
    """True when every field in `desired` has the same value in `live`."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        return all(k in live and is_subset(v, live[k]) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return False
        return all(is_subset(d, x) for d, x in zip(desired, live, strict=True))
    return _same_scalar(desired, live)


def drifted(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """The live object is missing, or differs from the desired one in a field the operator sets."""
    if live is None:
        return True
    # Every top-level field the operator sets: spec, or an EndpointSlice's endpoints and ports.
    body = [key for key in desired if key not in _ENVELOPE]
    return not (
        all(is_subset(desired[key], live.get(key, {})) for key in body)
        and is_subset(desired["metadata"].get("labels", {}), (live.get("metadata") or {}).get("labels", {}))
    )


_ENVELOPE = frozenset({"apiVersion", "kind", "metadata", "status"})


# Paths under spec that others may own on an object the operator controls: the replica count (the
# autoscaler, `kubectl scale` until the next decision or bounds check) and the pod template's metadata
# (`kubectl rollout restart` stamps an annotation there).
_SHARED_SPEC_FIELDS = ("f:replicas",)
_SHARED_TEMPLATE_FIELDS = ("f:metadata",)


def _owns_spec_fields(fields_v1: Any) -> bool:
    spec = (fields_v1 or {}).get("f:spec") if isinstance(fields_v1, dict) else None
    if not isinstance(spec, dict):
        return False
    for key, value in spec.items():
        if key in _SHARED_SPEC_FIELDS or key == ".":
            continue
        if key == "f:template" and isinstance(value, dict):
            if any(k not in _SHARED_TEMPLATE_FIELDS and k != "." for k in value):
                return True
            continue
        return True
    return False


def spec_managers(managed_fields: Any) -> list[str]:
    """Field managers that own something in an object's spec (replicas and pod-template metadata aside).
    On an object the operator controls, any manager but its own means a hand edit: drift."""
    managers: set[str] = set()
    for entry in managed_fields if isinstance(managed_fields, list) else []:
        if isinstance(entry, dict) and _owns_spec_fields(entry.get("fieldsV1")):
            managers.add(str(entry.get("manager", "")))
    return sorted(managers)


class Repair(StrEnum):
    NONE = "none"  # the live object is as desired
    APPLY = "apply"  # a field the operator sets differs: server-side apply puts it back
    REPLACE = "replace"  # someone else owns fields in the spec: replace the spec to remove them


def repair_needed(desired: dict[str, Any], live: dict[str, Any], own_managers: frozenset[str]) -> Repair:
    """How to bring a live object the operator controls back to the desired one. `live` carries
    metadata.specManagers (see spec_managers), as the indexes keep it."""
    foreign = set((live.get("metadata") or {}).get("specManagers") or []) - own_managers
    if foreign:
        return Repair.REPLACE
    return Repair.APPLY if drifted(desired, live) else Repair.NONE


def merge_patch_changes(patch: Any, current: Any) -> bool:
    """Would this JSON merge patch change `current`? A null in the patch deletes a key, so it changes
    nothing where the key is absent; lists are replaced whole."""
    if isinstance(patch, dict):
        if not isinstance(current, dict):
            return True
        for key, value in patch.items():
            if value is None:
                if current.get(key) is not None:
                    return True
            elif key not in current or merge_patch_changes(value, current[key]):
                return True
        return False
    if isinstance(patch, list):
        return (
            not isinstance(current, list)
            or len(patch) != len(current)
            or any(_list_item_differs(p, c) for p, c in zip(patch, current, strict=True))
        )
    return not _same_scalar(patch, current)


def _list_item_differs(patch: Any, current: Any) -> bool:
    # Inside a replaced list, a null is a value, and the server drops null fields of list items.
    if isinstance(patch, dict) and isinstance(current, dict):
        keys = {k for k, v in patch.items() if v is not None} | set(current)
        return any(
            merge_patch_changes(patch.get(k), current.get(k))
            if patch.get(k) is not None
            else k in current and current[k] is not None
            for k in keys
        )
    return merge_patch_changes(patch, current)
