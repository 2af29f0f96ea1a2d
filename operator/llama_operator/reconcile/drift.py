"""Has someone changed what the operator applied? A subset comparison of desired against live objects:
the server adds defaults, so only fields the operator sets are compared."""

from __future__ import annotations

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
    return not (
        is_subset(desired.get("spec", {}), live.get("spec", {}))
        and is_subset(desired["metadata"].get("labels", {}), (live.get("metadata") or {}).get("labels", {}))
    )
