"""Which LlamaService a request is for, and how long it may be held. Pure.

A request reaches the activator through the LlamaService's own Service (an extra EndpointSlice names the
activator's pods), so its Host header is what the client called: `name.namespace.svc.cluster.local`,
`name.namespace.svc`, `name.namespace` or, from the same namespace, `name`. An explicit
`X-LlamaService: namespace/name` header wins (for gateways that rewrite Host)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SERVICE_HEADER = "X-LlamaService"
CLUSTER_DOMAIN_SUFFIXES = (".svc.cluster.local", ".svc")

ServiceKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class HeldService:
    """What the activator needs of one LlamaService."""

    uid: str
    activation_timeout_seconds: float


@dataclass(frozen=True, slots=True)
class Resolution:
    key: ServiceKey | None
    status: int  # 0 when resolved, else the HTTP status to answer
    message: str


def _host_name(host: str) -> str:
    """The host without its port, lower-cased (an IPv6 literal keeps its brackets)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def resolve(host: str | None, explicit: str | None, services: Mapping[ServiceKey, HeldService]) -> Resolution:
    """The LlamaService a request is for, or the status and message that say why none is."""
    if explicit:
        namespace, _, name = explicit.strip().partition("/")
        key = (namespace, name)
        if key in services:
            return Resolution(key, 0, "")
        return Resolution(
            None, 404, f"{SERVICE_HEADER}: no LlamaService {explicit!r} is known to the activator"
        )
    name = _host_name(host or "")
    for suffix in CLUSTER_DOMAIN_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    parts = name.split(".")
    if len(parts) == 2:
        key = (parts[1], parts[0])
        if key in services:
            return Resolution(key, 0, "")
        return Resolution(None, 404, f"no LlamaService {parts[0]!r} in namespace {parts[1]!r}")
    if len(parts) == 1 and parts[0]:
        matches = [key for key in services if key[1] == parts[0]]
        if len(matches) == 1:
            return Resolution(matches[0], 0, "")
        if matches:
            namespaces = ", ".join(sorted(ns for ns, _ in matches))
            return Resolution(
                None,
                421,
                f"{parts[0]!r} names a LlamaService in several namespaces ({namespaces}): call "
                f"{parts[0]}.<namespace> or set {SERVICE_HEADER}: <namespace>/<name>",
            )
        return Resolution(None, 404, f"no LlamaService named {parts[0]!r}")
    return Resolution(
        None,
        404,
        f"cannot tell the LlamaService from Host {host!r}: call <name>.<namespace>[.svc] or set "
        f"{SERVICE_HEADER}: <namespace>/<name>",
    )


def retry_after_seconds(activation_timeout_seconds: float) -> int:
    """Retry-After on a 503 after the activation timeout: the replica is likely close; come back soon,
    but not in a tight loop."""
    return max(1, min(30, round(activation_timeout_seconds / 10)))


# Hop-by-hop headers (RFC 9110 7.6.1) are the connection's, never forwarded; Host is the upstream's.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


def forwarded_headers(headers: Mapping[str, str]) -> dict[str, str]:
    named = {h.strip().lower() for h in headers.get("Connection", headers.get("connection", "")).split(",")}
    return {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP and k.lower() not in named}
