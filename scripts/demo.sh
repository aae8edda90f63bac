#!/usr/bin/env bash
# Builds seer and generates a story with the default model (the tiny real model in
# ../shared/models), greedy, with lossless speculative decoding.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
model=${SEER_MODEL:-../shared/models/stories260K.gguf}
build/seer generate -m "$model" -p "${1:-Once upon a time}" --temp 0 -n 200 \
  --spec streaming --spec-budget 64 --spec-gamma 4
