"""Which LlamaService a request is for, whether its caller may reach it, and the router's limits. Pure.

Tenancy: one shared router serves every namespace, and a request reaches only LlamaServices of the
namespace it comes from: the namespace of the pod whose address opened the connection (the router watches
Pods; the TCP source address is the one thing a client cannot choose inside the cluster). Host,
X-LlamaService and `model` only choose among that namespace's services. A LlamaService opens itself to
callers in other namespaces with the annotation `llama-operator.dev/router-allowed-namespaces` (a
comma-separated list, or `*`). A gateway or ingress that does its own authentication can be trusted by the
platform (the chart's router.trustedNamespaces): its requests name the namespace (Host, X-LlamaService
`namespace/name`, or X-LlamaService-Namespace with `model`). Any other source (a node, a host-network pod,
an address outside the cluster) is refused.

Addressing:
- `X-LlamaService: name` or `namespace/name` (for gateways that rewrite Host) wins;
- else Host, when the request came through the LlamaService's own Service (scale to zero):
  `name.namespace.svc.cluster.local`, `name.namespace.svc`, `name.namespace`, or `name`;
- else `model` (the OpenAI endpoint: one base URL, the request's `model` picks the service): the
  service of the caller's namespace that serves that model name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SERVICE_HEADER = "X-LlamaService"
NAMESPACE_HEADER = "X-LlamaService-Namespace"  # trusted callers only: the namespace `model` is looked up in
ALLOWED_NAMESPACES_ANNOTATION = "llama-operator.dev/router-allowed-namespaces"
CLUSTER_DOMAIN_SUFFIXES = (".svc.cluster.local", ".svc")

ServiceKey = tuple[str, str]  # (namespace, name)

FORBIDDEN = (
    "requests are accepted from pods of the namespaces this router serves (or from a trusted gateway); "
    "this source address is neither"
)


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """What the router needs of one LlamaService."""

    uid: str
    activation_timeout_seconds: float
    models: tuple[str, ...] = ()  # the names vLLM serves it under (status.plan.servedModelName)
    allowed_namespaces: frozenset[str] = frozenset()  # callers' namespaces besides its own; "*": any
    max_num_seqs: int = 0  # the plan's: a pod with this many requests in flight takes no affine one more
    adapters: tuple[str, ...] = ()  # spec.adapters' names: `model` may name one of them too
    # status.adapters: (adapter, pods whose vLLM lists it), as the operator last loaded them
    adapter_pods: tuple[tuple[str, frozenset[str]], ...] = ()

    def serves(self, model: str) -> bool:
        return model in self.models or model in self.adapters

    def holders(self, adapter: str) -> frozenset[str]:
        """The pods that hold `adapter` (none when it is no adapter of this service)."""
        return next((pods for name, pods in self.adapter_pods if name == adapter), frozenset())


@dataclass(frozen=True, slots=True)
class Caller:
    """Who opened the connection: the namespace of the pod with that source address, or None when the
    address is no pod's (a node, a host-network pod, outside the cluster). Trusted: its namespace is one the
    platform trusts to name the namespace itself (a gateway that authenticates)."""

    namespace: str | None
    trusted: bool = False


@dataclass(frozen=True, slots=True)
class Resolution:
    key: ServiceKey | None
    status: int  # 0 when resolved, else the HTTP status to answer
    message: str


def parse_allowed(value: str | None) -> frozenset[str]:
    return frozenset(part.strip() for part in (value or "").split(",") if part.strip())


def may_reach(caller: Caller, key: ServiceKey, service: ServiceInfo) -> bool:
    if caller.trusted:
        return True
    if caller.namespace is None:
        return False
    return (
        caller.namespace == key[0]
        or "*" in service.allowed_namespaces
        or (caller.namespace in service.allowed_namespaces)
    )


def _host_name(host: str) -> str:
    """The host without its port, lower-cased (an IPv6 literal keeps its brackets)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_key(host: str | None, default_namespace: str | None) -> ServiceKey | None:
    """(namespace, name) from a Host header, a bare name in the caller's namespace; None if none fits."""
    name = _host_name(host or "")
    for suffix in CLUSTER_DOMAIN_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    parts = name.split(".")
    if len(parts) == 2 and all(parts):
        return (parts[1], parts[0])
    if len(parts) == 1 and parts[0] and default_namespace and not parts[0].startswith("["):
        return (default_namespace, parts[0])
    return None


def _not_reachable(caller: Caller) -> Resolution:
    # One answer whether the service exists in another namespace or nowhere, and not naming what was asked:
    # another tenant's names are not disclosed, not even by a difference in the answer.
    scope = f"namespace {caller.namespace!r}" if caller.namespace else "this address"
    return Resolution(None, 404, f"no LlamaService of that name is reachable from {scope}")


def resolve(
    caller: Caller,
    *,
    host: str | None,
    explicit: str | None,
    model: str | None,
    namespace_header: str | None,
    services: Mapping[ServiceKey, ServiceInfo],
) -> Resolution:
    """The LlamaService a request is for, or the status and message that say why none is."""
    if caller.namespace is None and not caller.trusted:
        return Resolution(None, 403, FORBIDDEN)
    home = caller.namespace
    if caller.trusted and namespace_header:
        home = namespace_header.strip()
    if explicit:
        namespace, slash, name = explicit.strip().partition("/")
        key = (namespace, name) if slash else (home or "", namespace)
        service = services.get(key)
        if service is None or not may_reach(caller, key, service):
            return _not_reachable(caller)
        return Resolution(key, 0, "")
    key_from_host = host_key(host, home)
    if key_from_host is not None:
        service = services.get(key_from_host)
        # A Host that names no service this caller may reach is as one that names none (the router's own
        # name, usually): `model` decides, so another tenant's service answers exactly as an absent one.
        if service is not None and may_reach(caller, key_from_host, service):
            return Resolution(key_from_host, 0, "")
    if model:
        if home is None:
            return Resolution(None, 400, f"a trusted caller names the namespace: set {NAMESPACE_HEADER}")
        matches = sorted(k for k, s in services.items() if k[0] == home and s.serves(model))
        if len(matches) == 1:
            return Resolution(matches[0], 0, "")
        if matches:
            names = ", ".join(name for _, name in matches)
            return Resolution(
                None,
                409,
                f"model {model!r} is served by several LlamaServices of namespace {home!r} ({names}): set "
                f"{SERVICE_HEADER}: <name>",
            )
        return Resolution(None, 404, f"no LlamaService of namespace {home!r} serves model {model!r}")
    return Resolution(
        None,
        404,
        f"cannot tell the LlamaService: set `model` in the request body, call <name>.<namespace>[.svc], or "
        f"set {SERVICE_HEADER}: <name>",
    )


def served_models(
    caller: Caller, namespace_header: str | None, services: Mapping[ServiceKey, ServiceInfo]
) -> list[tuple[ServiceKey, str]]:
    """What /v1/models lists: the models of the caller's namespace (a trusted caller's named one), and their
    LoRA adapters."""
    home = namespace_header.strip() if caller.trusted and namespace_header else caller.namespace
    if home is None:
        return []
    return sorted(
        (key, model) for key, s in services.items() if key[0] == home for model in (*s.models, *s.adapters)
    )


# --- limits ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Limits:
    """What one router replica holds at most; beyond it, 503 with Retry-After (413 for a body too big)."""

    max_body_bytes: int = 8 * 2**20  # a request body read to route it (JSON of the OpenAI endpoints)
    max_buffered_bytes: int = 64 * 2**20  # bodies in memory at once, all requests together
    max_held_requests: int = 1000  # held at once, all services
    max_held_requests_per_service: int = 100
    max_held_bytes_per_service: int = 16 * 2**20  # buffered bodies of one service's held requests
    max_hold_seconds: float = 300.0  # the platform's cap on a service's activationTimeoutSeconds
    header_timeout_seconds: float = 15.0  # a connection's request headers, complete, within this
    body_timeout_seconds: float = 30.0  # a request body, complete, within this
    max_json_depth: int = 64  # nesting of a JSON body (OpenAI bodies nest a few levels; tool schemas more)
    # An upstream that sends nothing (no response, or no byte of a stream) for this long is given up: 504
    # before the response started, the stream cut after. vLLM sends a response that is not streamed whole
    # at the end: this bounds a whole generation then.
    upstream_idle_seconds: float = 300.0
    max_streams: int = 2048  # requests forwarded and not finished, all namespaces together
    # Fair share: each namespace may take this share of the totals above (held requests, held bytes, out of
    # max_buffered_bytes, and streams), or its own share when the platform set one.
    namespace_share: float = 0.5
    namespace_shares: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class HoldCounts:
    requests: int
    requests_of_namespace: int
    requests_of_service: int
    bytes_of_namespace: int
    bytes_of_service: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is not taken: 503 for the router's own limits (another replica may take it), 429 for a
    namespace at its share (the tenant slows down; the others are served)."""

    status: int
    limit: str  # the metric's label
    message: str


def namespace_share(limits: Limits, namespace: str) -> float:
    return dict(limits.namespace_shares).get(namespace, limits.namespace_share)


def share_of(limits: Limits, namespace: str, total: int) -> int:
    """A namespace's part of a total: its share, at least one."""
    return max(1, int(namespace_share(limits, namespace) * total))


def _namespace_full(namespace: str, what: str, share: int) -> str:
    return f"namespace {namespace!r} has {what} its share of this router ({share})"


def admit_hold(limits: Limits, counts: HoldCounts, namespace: str, body_bytes: int) -> Refusal | None:
    """None when one more request of `namespace` may be held, else why not."""
    if counts.requests + 1 > limits.max_held_requests:
        return Refusal(503, "held", f"this router holds {counts.requests} requests already (its limit)")
    share = share_of(limits, namespace, limits.max_held_requests)
    if counts.requests_of_namespace + 1 > share:
        return Refusal(429, "namespace_held", _namespace_full(namespace, "held requests up to", share))
    if counts.requests_of_service + 1 > limits.max_held_requests_per_service:
        return Refusal(
            503,
            "held",
            f"this service has {counts.requests_of_service} requests held already (the per-service limit)",
        )
    share = share_of(limits, namespace, limits.max_buffered_bytes)
    if counts.bytes_of_namespace + body_bytes > share:
        return Refusal(429, "namespace_held_bytes", _namespace_full(namespace, "held bytes up to", share))
    if counts.bytes_of_service + body_bytes > limits.max_held_bytes_per_service:
        return Refusal(503, "held", "the held request bodies of this service reached the per-service limit")
    return None


def admit_stream(limits: Limits, streams: int, streams_of_namespace: int, namespace: str) -> Refusal | None:
    """None when one more request of `namespace` may be forwarded now, else why not."""
    if streams + 1 > limits.max_streams:
        return Refusal(503, "streams", f"this router forwards {streams} requests already (its limit)")
    share = share_of(limits, namespace, limits.max_streams)
    if streams_of_namespace + 1 > share:
        return Refusal(429, "namespace_streams", _namespace_full(namespace, "streams up to", share))
    return None


def hold_seconds(activation_timeout_seconds: float, limits: Limits) -> float:
    """A tenant's activationTimeoutSeconds, capped by the platform."""
    return max(0.0, min(activation_timeout_seconds, limits.max_hold_seconds))


def retry_after_seconds(activation_timeout_seconds: float) -> int:
    """Retry-After on a 503 after the activation timeout: the replica is likely close; come back soon,
    but not in a tight loop."""
    return max(1, min(30, round(activation_timeout_seconds / 10)))


# Hop-by-hop headers (RFC 9110 7.6.1) are the connection's, never forwarded; Host is the upstream's. The
# routing headers stay here too: vLLM has no use for them. Authorization passes through (vLLM's API key).
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
