#!/usr/bin/env bash
# Builds seer and runs every test: the release build, the same tests under ASan + UBSan,
# and the fuzzers (GGUF reader, tokenizers, model loading; about 80 s, see scripts/fuzz.sh).
# Needs ../shared beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

echo "== release build and tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure

echo "== ASan + UBSan build and tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEER_SANITIZE=ON -DSEER_CUDA=OFF >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure

echo "== fuzzing the GGUF reader, the tokenizers and model loading"
scripts/fuzz.sh
