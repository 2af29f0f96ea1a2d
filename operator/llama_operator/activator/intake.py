"""Reading a request's JSON body: bounded in nesting as well as in size, so that no body a client sends
makes the parser fail inside the router (a body nested deeper than Python's recursion limit raised
RecursionError: a 500). Pure."""

from __future__ import annotations

import json
from typing import Any


class TooDeepError(ValueError):
    """A JSON body nested deeper than the router's limit (the 400's message says the limit)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the JSON body nests deeper than {limit} levels (the router's limit)")
        self.limit = limit


def nests_deeper_than(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value has arrays or objects nested more than `limit` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def json_object(data: bytes, max_depth: int) -> dict[str, Any] | None:
    """The body as a JSON object, or None when it is no JSON object (forwarded as it is: vLLM answers it).
    Raises TooDeepError past `max_depth` levels."""
    # A body with fewer brackets than the limit cannot nest past it: most bodies skip the walk.
    may_nest = data.count(b"[") + data.count(b"{") > max_depth
    try:
        loaded = json.loads(data)
    except RecursionError:
        raise TooDeepError(max_depth) from None
    except ValueError:  # UnicodeDecodeError is one
        return None
    if may_nest and nests_deeper_than(loaded, max_depth):
        raise TooDeepError(max_depth)
    return loaded if isinstance(loaded, dict) else None
