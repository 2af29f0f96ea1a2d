"""What comes in: who calls (the namespace of the pod with the connection's source address), and the body,
read within the size, time and nesting limits and the router's budget of buffered bytes (a JSON body: its
`model` and prompt route it), or left in the socket to stream (any other). No body a client sends makes the
router fail: a body nested deeper than Python's recursion limit raised RecursionError (a 500) once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from llama_operator.router.budget import Budgets, Claim
from llama_operator.router.routing import Caller, Limits, share_of


class RejectedError(Exception):
    """A request refused by a limit: the status, the limit's name (a metric label) and the message."""

    def __init__(self, status: int, limit: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.limit, self.message, self.retry_after = status, limit, message, retry_after


def error(status: int, message: str, *, retry_after: int | None = None, kind: str = "router") -> web.Response:
    """An error in the OpenAI API's shape."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return web.json_response(
        {"error": {"message": message, "type": kind, "code": status}}, status=status, headers=headers
    )


@dataclass
class Body:
    """A request body: read into memory (`data`) when routing needs it (JSON: `model` and the prompt),
    else left in the socket and streamed to the upstream (`stream`)."""

    data: bytes | None
    parsed: dict[str, Any] | None
    stream: aiohttp.StreamReader | None

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else 0


class StreamedBody:
    """A body that is not read to route it (not JSON): passed on to the upstream as it comes, within the
    same deadline as a JSON body (a body sent a byte every few seconds held a connection, an upstream's and
    a slot for as long as its sender liked)."""

    def __init__(self, stream: aiohttp.StreamReader, seconds: float) -> None:
        self.stream = stream
        self.seconds = seconds
        self.expired = False  # the deadline passed before the body ended: the request's answer is 408

    async def chunks(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        while True:
            try:
                chunk = await asyncio.wait_for(self.stream.readany(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                self.expired = True
                raise
            if not chunk:
                return
            yield chunk


def source_address(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    address = str(peer[0]) if peer else ""
    return address[7:] if address.startswith("::ffff:") else address


def caller_of(
    address: str,
    namespace_of: Callable[[str], str | None],
    *,
    trusted_sources: frozenset[str],
    trusted_namespaces: frozenset[str],
) -> Caller:
    """Who opened the connection: a trusted source, or the namespace of the pod with that address."""
    if address in trusted_sources:
        return Caller(None, trusted=True)
    namespace = namespace_of(address)
    return Caller(namespace, trusted=namespace is not None and namespace in trusted_namespaces)


async def read_body(
    request: web.Request, limits: Limits, budgets: Budgets, claim: Claim, namespace: str | None
) -> Body:
    """A JSON body read into memory within the limits, its bytes counted on the request's claim (reserved
    at the declared length first, the whole limit when none is declared), against the caller's namespace's
    share too; any other body left to stream."""
    if not request.body_exists:
        return Body(b"", None, None)
    if request.content_type != "application/json":
        return Body(None, None, request.content)
    length = request.content_length
    if length is not None and length > limits.max_body_bytes:
        raise RejectedError(
            413, "body_size", f"the request body is {length} bytes; the limit is {limits.max_body_bytes}"
        )
    reserve = length if length is not None else limits.max_body_bytes
    if budgets.buffered + reserve > limits.max_buffered_bytes:
        raise RejectedError(
            503, "buffered_bytes", "this router holds too many request bodies now; retry", retry_after=1
        )
    if namespace is not None:
        share = share_of(limits, namespace, limits.max_buffered_bytes)
        if budgets.buffered_of[namespace] + reserve > share:
            message = (
                f"namespace {namespace!r} has request bodies up to its share of this router ({share} bytes)"
            )
            raise RejectedError(429, "namespace_buffered_bytes", f"{message}; retry", retry_after=1)
    claim.buffer(reserve, namespace)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.body_timeout_seconds):
            async for chunk in request.content.iter_any():
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise RejectedError(
                        413,
                        "body_size",
                        f"the request body is over the limit of {limits.max_body_bytes} bytes",
                    )
                chunks.append(chunk)
    except TimeoutError:
        raise RejectedError(
            408, "body_timeout", f"the request body took over {limits.body_timeout_seconds:g}s"
        ) from None
    data = b"".join(chunks)
    claim.unbuffer(reserve - len(data))  # what it really holds, until the request ends
    try:
        parsed = json_object(data, limits.max_json_depth)
    except TooDeepError as err:
        raise RejectedError(400, "json_depth", str(err)) from None
    return Body(data, parsed, None)


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
