#!/usr/bin/env bash
# Builds the three llama.cpp tools bench/anchors/run.sh needs in a llama.cpp or ik_llama.cpp
# source tree (a `fetch`ed snapshot, extracted anywhere outside this repository):
#   bash bench/anchors/build_anchor.sh SRC_DIR
# Release, -march=native (GGML_NATIVE), OpenMP, no curl, no tests or server, and
# ik_llama.cpp's flash attention for the common KV types only (its default compiles every KV
# type: far longer); about 20 minutes on 2 cores. SERVER=1 also builds llama-server (for
# bench/anchors/serve.sh; llama.cpp's tree builds its web UI with npm on the way).
set -euo pipefail
src=${1:?usage: build_anchor.sh SRC_DIR}
cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_SERVER="$([ "${SERVER:-0}" = 1 ] && echo ON || echo OFF)" \
  -DGGML_IQK_FA_ALL_QUANTS=OFF >/dev/null
targets=(llama-bench llama-perplexity llama-quantize)
[ "${SERVER:-0}" = 1 ] && targets+=(llama-server)
cmake --build "$src/build" -j"${JOBS:-2}" --target "${targets[@]}"
ls -l "$src/build/bin/llama-bench" "$src/build/bin/llama-perplexity" "$src/build/bin/llama-quantize"
