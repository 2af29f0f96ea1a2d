"""`llama-operator router` (alias `activator`): the router's process (the chart's router Deployment runs it)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_operator.router.routing import Limits

if TYPE_CHECKING:
    from llama_operator.router.ext_proc import ServingTls

MIB = 2**20


def _split(items: list[str] | None) -> list[str]:
    return [part.strip() for item in items or [] for part in item.split(",") if part.strip()]


def _shares(items: list[str] | None) -> list[tuple[str, float]]:
    """NS=SHARE items (the chart's limits.namespaceShares)."""
    out = []
    for item in _split(items):
        namespace, _, share = item.partition("=")
        out.append((namespace.strip(), float(share)))
    return out


def _serving_tls(certificate: str | None, key: str | None) -> ServingTls | None:
    """The endpoint picker's certificate and key files, read (both or neither)."""
    if not certificate and not key:
        return None
    if not (certificate and key):
        raise SystemExit("--ext-proc-tls-cert and --ext-proc-tls-key go together")
    from llama_operator.router.ext_proc import ServingTls  # noqa: PLC0415  (gRPC: only `router` pays for it)

    return ServingTls(Path(certificate).read_bytes(), Path(key).read_bytes())


def cmd_router(args: argparse.Namespace) -> int:
    # The proxy pulls in the Kubernetes client (about 1 s to import): only `router` pays for it, not every command.
    from llama_operator.infra.kube import load_kube_config, own_namespace  # noqa: PLC0415
    from llama_operator.router.server import serve  # noqa: PLC0415

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    load_kube_config()
    namespaces = _split(args.namespace) or None
    limits = Limits(
        max_body_bytes=int(args.max_body_mib * MIB),
        max_buffered_bytes=int(args.max_buffered_mib * MIB),
        max_held_requests=args.max_held_requests,
        max_held_requests_per_service=args.max_held_requests_per_service,
        max_held_bytes_per_service=int(args.max_held_mib_per_service * MIB),
        max_hold_seconds=args.max_hold_seconds,
        header_timeout_seconds=args.header_timeout,
        body_timeout_seconds=args.body_timeout,
        upstream_idle_seconds=args.upstream_idle_timeout,
        max_streams=args.max_streams,
        namespace_share=args.namespace_share,
        namespace_shares=tuple(_shares(args.namespace_share_of)),
    )
    namespace = args.own_namespace or own_namespace(os.environ)[0]
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            serve(
                namespaces=namespaces,
                address=args.listen_address,
                port=args.port,
                admin_port=args.admin_port,
                upstream_override=args.upstream_override,
                demand_interval_seconds=args.demand_interval,
                limits=limits,
                own_namespace=namespace,
                identity=os.environ.get("POD_NAME") or socket.gethostname(),
                trusted_namespaces=frozenset(_split(args.trusted_namespace)),
                trusted_sources=frozenset(_split(args.trusted_source)),
                drain_seconds=args.drain_seconds,
                load_scrape_seconds=args.load_scrape_seconds,
                ext_proc_port=args.ext_proc_port,
                ext_proc_tls=_serving_tls(args.ext_proc_tls_cert, args.ext_proc_tls_key),
            )
        )
    return 0


def _add_listening_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--port", type=int, default=int(os.environ.get("ACTIVATOR_PORT", "8000")), help="proxy port"
    )
    p.add_argument("--admin-port", type=int, default=9090, help="port of /metrics, /healthz and /readyz")
    p.add_argument("--listen-address", default="0.0.0.0", help="address to listen on")
    p.add_argument(
        "--ext-proc-port",
        type=int,
        default=0,
        help="serve the endpoint picker of InferencePools (Envoy ext_proc, gRPC) to trusted gateways on this "
        "port (0: not served)",
    )
    p.add_argument("--ext-proc-tls-cert", default=None, help="PEM certificate of the endpoint picker (TLS)")
    p.add_argument("--ext-proc-tls-key", default=None, help="PEM key of the endpoint picker's certificate")


def _add_tenancy_args(p: argparse.ArgumentParser) -> None:
    """Whose services it serves and whose requests may address another namespace."""
    p.add_argument(
        "--namespace",
        action="append",
        metavar="NS[,NS...]",
        help="namespaces whose LlamaServices it serves (repeatable; default: all)",
    )
    p.add_argument(
        "--own-namespace",
        default=None,
        help="where its demand Leases live (default: POD_NAMESPACE, the ServiceAccount's, the kubeconfig's)",
    )
    p.add_argument(
        "--trusted-namespace",
        action="append",
        metavar="NS[,NS...]",
        help="namespaces whose pods (a gateway that authenticates) may address any namespace's services",
    )
    p.add_argument(
        "--trusted-source",
        action="append",
        metavar="IP[,IP...]",
        help="source addresses trusted as a trusted namespace's pods (a gateway on the host network)",
    )


def _add_limit_args(p: argparse.ArgumentParser) -> None:
    """What one request, one service and the whole router may hold (the defaults are Limits')."""
    defaults = Limits()
    p.add_argument(
        "--max-body-mib", type=float, default=defaults.max_body_bytes / MIB, help="request body cap"
    )
    p.add_argument(
        "--max-buffered-mib",
        type=float,
        default=defaults.max_buffered_bytes / MIB,
        help="request bodies in memory at once, all requests together",
    )
    p.add_argument(
        "--max-held-requests", type=int, default=defaults.max_held_requests, help="held at once, total"
    )
    p.add_argument(
        "--max-held-requests-per-service",
        type=int,
        default=defaults.max_held_requests_per_service,
        help="held at once for one LlamaService",
    )
    p.add_argument(
        "--max-held-mib-per-service",
        type=float,
        default=defaults.max_held_bytes_per_service / MIB,
        help="bodies of one LlamaService's held requests",
    )
    p.add_argument(
        "--max-hold-seconds",
        type=float,
        default=defaults.max_hold_seconds,
        help="the platform's cap on a LlamaService's activationTimeoutSeconds",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=defaults.header_timeout_seconds,
        help="seconds a connection has to complete a request's headers (and an idle keep-alive lasts)",
    )
    p.add_argument(
        "--body-timeout", type=float, default=defaults.body_timeout_seconds, help="seconds to receive a body"
    )
    p.add_argument(
        "--upstream-idle-timeout",
        type=float,
        default=defaults.upstream_idle_seconds,
        help="seconds an upstream may send nothing (its response, or the next byte of a stream) before it is "
        "given up (504 before the response started)",
    )


def _add_share_args(p: argparse.ArgumentParser) -> None:
    """The streams in total, and each namespace's fair share of the replica's totals."""
    defaults = Limits()
    p.add_argument(
        "--max-streams", type=int, default=defaults.max_streams, help="requests forwarded at once, in total"
    )
    p.add_argument(
        "--namespace-share",
        type=float,
        default=defaults.namespace_share,
        help="the share of held requests, held bytes and streams one namespace may take (429 beyond)",
    )
    p.add_argument(
        "--namespace-share-of",
        action="append",
        metavar="NS=SHARE",
        help="a namespace's own share instead of --namespace-share (repeatable)",
    )


def _add_timing_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--demand-interval",
        type=float,
        default=2.0,
        help="seconds between two demand reports for a service while requests are held",
    )
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=45.0,
        help="after SIGTERM: how long held and in-flight requests may still finish (held ones then get 503)",
    )
    p.add_argument(
        "--load-scrape-seconds",
        type=float,
        default=2.0,
        help="how often vLLM's queue and KV-cache usage are read from the pods it routes to (0: never)",
    )


def register_router_command(sub: Any) -> None:
    help_text = (
        "run the router: one OpenAI endpoint for the LlamaServices of the caller's namespace, routed by `model` "
        "with prefix affinity; holds requests of services at zero, reports the demand and forwards them once a "
        "replica is ready"
    )
    p = sub.add_parser("router", aliases=["activator"], help=help_text, description=help_text)
    _add_listening_args(p)
    _add_tenancy_args(p)
    _add_limit_args(p)
    _add_share_args(p)
    _add_timing_args(p)
    # Tests and the local cluster: kwok pods serve no HTTP, so a local vLLM stands in for every pod (the
    # pods' readiness still decides when a held request goes).
    p.add_argument("--upstream-override", default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_router)
