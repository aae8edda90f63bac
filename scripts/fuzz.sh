#!/usr/bin/env bash
# Builds the GGUF fuzzer with clang into build-fuzz/, makes a seed corpus (tiny generated
# models, odd layouts, and ../shared/models/stories260K.gguf) and fuzzes the reader for
# ${FUZZ_SECONDS:-60} seconds. Fails on any crash, leak, sanitizer report or timeout; the
# failing input is left in build-fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-60}
shared=${SEER_SHARED_DIR:-../shared}
cc=${FUZZ_CC:-clang}
out=build-fuzz

if ! command -v "$cc" >/dev/null; then
  echo "fuzz.sh: $cc not found (the fuzzer needs clang with libFuzzer)" >&2
  exit 1
fi

mkdir -p "$out/corpus" "$out/seeds" "$out/artifacts"
flags=(-std=c11 -g -O1 -Iinclude -Isrc)

"$cc" "${flags[@]}" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  fuzz/fuzz_gguf.c src/gguf/*.c src/util/error.c -lm -o "$out/fuzz_gguf"
"$cc" "${flags[@]}" fuzz/make_seeds.c src/gguf/*.c src/model/gen_model.c src/util/error.c \
  -lm -o "$out/make_seeds"

"$out/make_seeds" "$out/seeds"
if [[ -f "$shared/models/stories260K.gguf" ]]; then
  cp -f "$shared/models/stories260K.gguf" "$out/seeds/"
else
  echo "fuzz.sh: $shared/models/stories260K.gguf not found; fuzzing without it" >&2
fi

# libFuzzer exits non-zero on a crash, a leak, a sanitizer report or a slow input.
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
  "$out/fuzz_gguf" -max_len=65536 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$out/corpus" "$out/seeds"
echo "fuzz.sh: no crashes in ${seconds}s"
