"""Command line: `python3 -m localcluster up|down|status|binaries|test-tools` (see e2e/cluster.sh)."""

from __future__ import annotations

import argparse
import os

from localcluster import tools
from localcluster.binaries import ensure_all
from localcluster.cluster import Cluster
from localcluster.config import cache_paths, state_dir
from localcluster.util import ClusterError, say


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cluster.sh",
        description="Local Kubernetes test cluster: etcd, kube-apiserver, controller-manager, "
        "scheduler, kwok-simulated GPU nodes and Prometheus, all on 127.0.0.1.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build/fetch binaries if missing, start (or repair) the cluster")
    up.add_argument(
        "--pod-ready-delay",
        default=os.environ.get("LOCALCLUSTER_POD_READY_DELAY"),
        help="default delay from Running to Ready for simulated pods (e.g. 2s, 500ms; "
        "env LOCALCLUSTER_POD_READY_DELAY; default 2s, or what the running cluster uses)",
    )
    up.add_argument(
        "--scrape-interval",
        default=os.environ.get("LOCALCLUSTER_SCRAPE_INTERVAL"),
        help="Prometheus scrape interval (env LOCALCLUSTER_SCRAPE_INTERVAL; default 5s)",
    )
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each step")
    down = sub.add_parser("down", help="stop the processes `up` started and remove the state folder")
    down.add_argument("--timeout", type=float, default=15.0, help="seconds before SIGKILL")
    stop = sub.add_parser(
        "stop", help="stop components (e.g. kube-apiserver), keeping the state: `up` starts them again"
    )
    stop.add_argument("component", nargs="+", help="etcd, kube-apiserver, kwok, prometheus, ...")
    stop.add_argument("--timeout", type=float, default=15.0, help="seconds before SIGKILL")
    sub.add_parser("status", help="each component's PID, port and health; non-zero if any is down")
    tt = sub.add_parser(
        "test-tools",
        help="build or install every upstream tool any test runs (e2e/localcluster/tools.py): `make test` runs "
        "this before the tests, which never build",
    )
    tt.add_argument("--dry-run", action="store_true", help="only list what is missing and would be built")
    b = sub.add_parser("binaries", help="only build/fetch the binaries (into the cache)")
    b.add_argument(
        "--only",
        nargs="*",
        choices=["prometheus", "promtool", "kubectl", "kwok", "etcd", "kubernetes", "karpenter"],
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "up":
            return Cluster(state_dir()).up(args.pod_ready_delay, args.scrape_interval, args.timeout)
        if args.command == "down":
            return Cluster(state_dir()).down(args.timeout)
        if args.command == "stop":
            return Cluster(state_dir()).stop(args.component, args.timeout)
        if args.command == "status":
            return Cluster(state_dir()).status()
        if args.command == "test-tools":
            tools.set_up(dry_run=args.dry_run)
            return 0
        if args.command == "binaries":
            bins = ensure_all(cache_paths(), set(args.only) if args.only else None)
            for name, path in bins.as_dict().items():
                print(f"{name}: {path}")
            return 0
    except ClusterError as e:
        say(f"ERROR: {e}")
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    return 2
