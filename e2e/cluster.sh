#!/usr/bin/env bash
# Local test cluster for llama-operator: a real control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler), kwok-simulated GPU nodes and Prometheus.
#
#   e2e/cluster.sh up [--pod-ready-delay 2s] [--scrape-interval 5s]
#   e2e/cluster.sh status
#   e2e/cluster.sh down
#   e2e/cluster.sh binaries            # only build/fetch what `up` needs
#   e2e/cluster.sh test-tools          # every upstream tool a test runs (localcluster/tools.py)
#
# State (PIDs, logs, kubeconfig, env, cluster.json) lives in .cluster/ at the repo root;
# binaries are cached in ${LLAMA_OPERATOR_CACHE:-$HOME/.cache/llama-operator}/bin.
# After `up`: . .cluster/env   (KUBECONFIG, PROMETHEUS_URL, kubectl/helm on PATH)
#
# Needs only python3 (stdlib), go, openssl and, for Prometheus, apt (as root).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The system python3 on purpose: this runs before any venv exists.
py="$(command -v python3 || true)"
if [[ -z "$py" ]]; then
  echo "cluster.sh: python3 not found" >&2
  exit 1
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" -m localcluster "$@"
