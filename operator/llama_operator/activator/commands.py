"""`llama-operator activator`: the activator's process (the chart's activator Deployment runs it)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from typing import Any

from llama_operator.activator.proxy import serve
from llama_operator.infra.kube import load_kube_config


def cmd_activator(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    load_kube_config()
    namespaces = [ns for item in args.namespace or [] for ns in item.split(",") if ns] or None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            serve(
                namespaces=namespaces,
                address=args.listen_address,
                port=args.port,
                admin_port=args.admin_port,
                upstream_override=args.upstream_override,
                demand_interval_seconds=args.demand_interval,
            )
        )
    return 0


def register_activator_command(sub: Any) -> None:
    help_text = (
        "run the activator: holds requests for LlamaServices scaled to zero, reports the demand and forwards "
        "them once a replica is ready"
    )
    p = sub.add_parser("activator", help=help_text, description=help_text)
    p.add_argument(
        "--port", type=int, default=int(os.environ.get("ACTIVATOR_PORT", "8000")), help="proxy port"
    )
    p.add_argument("--admin-port", type=int, default=9090, help="port of /metrics, /healthz and /readyz")
    p.add_argument("--listen-address", default="0.0.0.0", help="address to listen on")
    p.add_argument(
        "--namespace",
        action="append",
        metavar="NS[,NS...]",
        help="namespaces whose LlamaServices it serves (repeatable; default: all)",
    )
    p.add_argument(
        "--demand-interval",
        type=float,
        default=2.0,
        help="seconds between two demand reports for a service while requests are held",
    )
    # Tests and the local cluster: kwok pods serve no HTTP, so a local vLLM stands in for every pod (the
    # pods' readiness still decides when a held request goes).
    p.add_argument("--upstream-override", default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_activator)
