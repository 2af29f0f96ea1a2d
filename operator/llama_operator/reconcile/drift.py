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


def _union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two fieldsV1 sets as one (nested dicts of field names; leaves are {})."""
    out = dict(a)
    for key, value in b.items():
        out[key] = (
            _union(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
        )
    return out


def writes_as_applied(
    managed_fields: Any, field_manager: str, *, replicas_applied: bool
) -> list[dict[str, Any]] | None:
    """managedFields with this manager's own create and replace writes (its `Update` entry) moved into its
    `Apply` entry, or None when there is none to move. Why: the API server keeps a create's (POST) or a
    replace's (PUT) fields apart from the manager's applied ones, and an apply removes only fields it
    owns, so a field the operator stops setting (a hostPath volume turned emptyDir) would stay forever,
    merged into the next desired object. Client-go's csaupgrade does the same for kubectl. The replica
    count moves only when the operator applies it (`replicas_applied`): otherwise it is the autoscaler's,
    and an apply that owned it would take it away when it next leaves it out."""
    if not isinstance(managed_fields, list):
        return None
    entries = [e for e in managed_fields if isinstance(e, dict)]
    updates = [
        e
        for e in entries
        if e.get("manager") == field_manager and e.get("operation") == "Update" and not e.get("subresource")
    ]
    if not updates:
        return None
    moved: dict[str, Any] = {}
    for entry in updates:
        moved = _union(moved, entry.get("fieldsV1") or {})
    if not replicas_applied and isinstance(moved.get("f:spec"), dict):
        moved["f:spec"] = {k: v for k, v in moved["f:spec"].items() if k != "f:replicas"}
    applied = next(
        (
            e
            for e in entries
            if e.get("manager") == field_manager
            and e.get("operation") == "Apply"
            and not e.get("subresource")
        ),
        None,
    )
    merged = {
        "manager": field_manager,
        "operation": "Apply",
        "apiVersion": (applied or updates[0]).get("apiVersion"),
        "time": (applied or updates[0]).get("time"),
        "fieldsType": "FieldsV1",
        "fieldsV1": _union((applied or {}).get("fieldsV1") or {}, moved),
    }
    kept = [e for e in entries if e is not applied and not any(e is u for u in updates)]
    return [*kept, merged]
