#!/usr/bin/env bash
# ref-arch.sh: remakes tests/fixtures/arch/*.tsv, llama.cpp's logits and greedy ids on small
# random-weight files of each family, which tests/test_arch_ref.c checks seer against.
#
#     scripts/ref-arch.sh [SEER_BUILD]        (default build/)
#
# For each case below: `seer gen-model ARGS` writes the file, scripts/ref-arch.c (built here
# against a llama.cpp build) evaluates the prompt ids in one batch and then greedy steps, and
# the fixture keeps the gen-model arguments, the context size, the prompt, llama.cpp's greedy
# ids and every row of its logits. The test regenerates the same file (gen-model's output
# depends only on its arguments) and compares.
#
# llama.cpp: the one vendored by llama-cpp-python 0.3.36 (commit 0c1e570), as for the other
# fixtures, built on the CPU (cmake -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON; static
# libllama.a and libggml*.a). LLAMA_SRC names its source tree and LLAMA_BUILD its build
# directory (defaults: /tmp/peer-llama/llama.cpp and /tmp/peer-llama/build-cpu).
# llama.cpp pads a context to a multiple of 256 positions, so every case asks for such a size
# (LongRoPE picks its table by the context size).
set -euo pipefail
cd "$(dirname "$0")/.."
SEER_BUILD=${1:-build}
LLAMA_SRC=${LLAMA_SRC:-/tmp/peer-llama/llama.cpp}
LLAMA_BUILD=${LLAMA_BUILD:-/tmp/peer-llama/build-cpu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

g++ -O2 -x c scripts/ref-arch.c -I"$LLAMA_SRC/include" -I"$LLAMA_SRC/ggml/include" \
  -o "$work/ref-arch" -x none "$LLAMA_BUILD/src/libllama.a" "$LLAMA_BUILD/ggml/src/libggml.a" \
  "$LLAMA_BUILD/ggml/src/libggml-cpu.a" "$LLAMA_BUILD/ggml/src/libggml-base.a" \
  -fopenmp -lpthread -lm -ldl

shape="--vocab 320 --dim 64 --layers 3 --heads 4 --kv-heads 2 --ffn 128 --seed 7"
# name | context | gen-model arguments
cases=(
  "qwen3|256|--arch qwen3 $shape --head-dim 32"
  "qwen3-yarn|256|--arch qwen3 $shape --rope-base 10000 --rope-scaling yarn --rope-factor 4 --rope-orig-ctx 16"
  "gemma2|256|--arch gemma2 $shape --window 6 --scale 0.5"
  "gemma3|256|--arch gemma3 $shape --window 6 --head-dim 32"
  "phi3-short|256|--arch phi3 $shape --rope-scaling longrope --rope-orig-ctx 256 --rope-attn-factor 1.19"
  "phi3-long|512|--arch phi3 $shape --rope-scaling longrope --rope-orig-ctx 256 --rope-attn-factor 1.19"
  "llama-linear|256|--arch llama $shape --rope-scaling linear --rope-factor 2"
)
# 24 prompt ids: BOS, then a fixed walk over the vocabulary past the specials
prompt="1"
for i in $(seq 1 23); do prompt="$prompt $((3 + (i * 97 + 11) % 317))"; done
n_gen=8

mkdir -p tests/fixtures/arch
for c in "${cases[@]}"; do
  IFS='|' read -r name ctx args <<<"$c"
  # shellcheck disable=SC2086
  "$SEER_BUILD/seer" gen-model $args -o "$work/$name.gguf"
  out=tests/fixtures/arch/$name.tsv
  {
    echo "# llama.cpp 0c1e570 (llama-cpp-python 0.3.36) on seer gen-model's file; scripts/ref-arch.sh remakes it"
    printf 'gen\t%s\n' "$args"
    printf 'ctx\t%s\n' "$ctx"
    printf 'prompt\t%s\n' "$(echo $prompt | tr ' ' '\t')"
    # shellcheck disable=SC2086
    "$work/ref-arch" "$work/$name.gguf" "$ctx" "$n_gen" $prompt
  } >"$out"
  echo "$out: $(grep -c '^row' "$out") rows"
done
