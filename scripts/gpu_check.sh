#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU, build llama-cpp-python with CUDA into its own wheel-cache
# slot (keyed by the flags, as scripts/setup.sh keys its CPU build), then run the writer and answers with
# n_gpu_layers = -1 and print tokens/s next to the CPU build's figures from the same run.
# On a machine without a GPU it says "no GPU" and exits 0, so CI can call it anywhere.
#   bash scripts/gpu_check.sh [--model some.gguf]     (CHORUS_LLAMA_CMAKE_ARGS overrides -DGGML_CUDA=on)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no GPU: nvidia-smi finds no CUDA device here; nothing to check"
  exit 0
fi
nvidia-smi -L
[ -x .venv/bin/python ] || { echo "run scripts/setup.sh first (it builds the CPU wheel this compares against)"; exit 1; }
if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"
  else echo "a GPU is here but no CUDA toolkit (nvcc) to build llama.cpp with; install one and rerun"; exit 1; fi
fi

LLAMA_VERSION=$(sed -n 's/^LLAMA_VERSION="\(.*\)"/\1/p' scripts/setup.sh)
FLAGS="${CHORUS_LLAMA_CMAKE_ARGS:--DGGML_CUDA=on}"
KEY=$(printf '%s %s' "llama-cpp-python==$LLAMA_VERSION" "$FLAGS" | sha256sum | cut -c1-12)
CACHE="${CHORUS_WHEEL_CACHE:-$HOME/.cache/chorus/wheels}/$KEY"
TARGET="${CHORUS_LLAMA_CUDA_DIR:-$HOME/.cache/chorus/llama-cuda}/$KEY"
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)

if ! ls "$CACHE"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $LLAMA_VERSION with: $FLAGS (several minutes)..."
  mkdir -p "$CACHE"
  CMAKE_ARGS="$FLAGS" "${PIP[@]}" wheel --no-cache-dir --no-deps -w "$CACHE" "llama-cpp-python==$LLAMA_VERSION"
fi
# Installed beside the CPU build, not over it: the GPU run puts this folder first on PYTHONPATH.
if [ ! -d "$TARGET/llama_cpp" ]; then
  mkdir -p "$TARGET"
  "${PIP[@]}" install --no-deps --target "$TARGET" "$CACHE"/llama_cpp_python-"$LLAMA_VERSION"-*.whl
fi

OUT=$(mktemp -d)
echo "CPU build, n_gpu_layers=0 ..."
OMP_WAIT_POLICY=PASSIVE .venv/bin/python scripts/gpu_check.py --n-gpu-layers 0 "$@" | tail -1 > "$OUT/cpu.json"
echo "CUDA build, n_gpu_layers=-1 ..."
PYTHONPATH="$TARGET${PYTHONPATH:+:$PYTHONPATH}" .venv/bin/python scripts/gpu_check.py --n-gpu-layers -1 "$@" \
  | tail -1 > "$OUT/gpu.json"
.venv/bin/python - "$OUT/gpu.json" <<'PY'
import json, sys
if not json.load(open(sys.argv[1]))["gpu_offload"]:
    sys.exit("the CUDA build reports no GPU offload support; the wheel was built without CUDA")
PY
.venv/bin/python scripts/gpu_check.py --table "$OUT/cpu.json" "$OUT/gpu.json"
echo "raw results: $OUT"
