"""python3 -m imagebuild image [--version X] | registry up|down|status | release --version X [--registry H:P]"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from imagebuild import image, registry, release
from localcluster.util import ClusterError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="imagebuild", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("image", help="build, run and describe the operator image (buildah, Debian base)")
    build.add_argument(
        "--version", help="image tag and org.opencontainers.image.version (default: pyproject's)"
    )
    build.add_argument("--refresh-base", action="store_true", help="rebuild the Debian base (newer packages)")
    reg = sub.add_parser("registry", help="the local OCI registry (CNCF distribution) on 127.0.0.1")
    reg.add_argument("action", choices=["up", "down", "status"])
    rel = sub.add_parser("release", help="version the chart and image, package, push both to a registry")
    rel.add_argument("--version", required=True)
    rel.add_argument("--registry", help="host[:port] to push to (default: the local one, started if needed)")
    args = parser.parse_args(argv)
    try:
        if args.command == "image":
            print(json.dumps(asdict(image.build(args.version, refresh_base=args.refresh_base)), indent=1))
        elif args.command == "registry":
            if args.action == "up":
                print(registry.up().host)
            elif args.action == "down":
                registry.down()
            else:
                running = registry.running()
                print(running.host if running else "not running")
                return 0 if running else 1
        else:
            print(json.dumps(asdict(release.release(args.version, args.registry)), indent=1))
    except ClusterError as exc:
        print(f"imagebuild: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
