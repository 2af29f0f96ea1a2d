#!/usr/bin/env bash
# `make demo` / `make demo-down`: the local cluster, the chart, the operator and the examples.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-up}" in
  up)
    bash e2e/cluster.sh up
    exec .venv/bin/python e2e/demo.py up
    ;;
  down)
    if [ -x .venv/bin/python ]; then .venv/bin/python e2e/demo.py down || true; fi
    bash e2e/cluster.sh down
    ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
