#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/ (ASan + UBSan), makes their seed
# corpora (fuzz/make_seeds.c; tests/data/models/stories260K.gguf joins the GGUF seeds) and
# runs each for a bounded time:
#   fuzz_gguf       the GGUF reader and writer         FUZZ_GGUF_SECONDS (default 30)
#   fuzz_tokenizer  vocabularies, encoders, detok      FUZZ_TOKENIZER_SECONDS (default 25)
#   fuzz_model      model loading and one forward call FUZZ_MODEL_SECONDS (default 25)
#   fuzz_cost       the speculation cost file          FUZZ_COST_SECONDS (default 10)
#   fuzz_trace      the acceptance trace file          FUZZ_TRACE_SECONDS (default 10)
#   fuzz_constrain  grammars, JSON schemas, regexes    FUZZ_CONSTRAIN_SECONDS (default 20)
#   fuzz_tp_wire    the op stream of ranks in processes FUZZ_TP_WIRE_SECONDS (default 10)
# FUZZ_SECONDS, when set, gives every target that many seconds. Fails on any crash, leak,
# sanitizer report, timeout or allocation past the limit; the failing input is left in
# build-fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."

shared=${SEER_DATA_DIR:-tests/data}
cc=${FUZZ_CC:-clang}
out=build-fuzz

if ! command -v "$cc" >/dev/null; then
  echo "fuzz.sh: $cc not found (the fuzzer needs clang with libFuzzer)" >&2
  exit 1
fi

echo "fuzz.sh: building the fuzz targets in $out/"
CC=$cc cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEER_FUZZ=ON -DSEER_CUDA=OFF \
  -DSEER_NATIVE=OFF >/dev/null
cmake --build "$out" -j"$(nproc)" --target fuzz_gguf fuzz_tokenizer fuzz_model fuzz_cost fuzz_trace fuzz_constrain fuzz_tp_wire make_seeds >/dev/null

rm -rf "$out/seeds"
mkdir -p "$out/seeds/gguf" "$out/seeds/tokenizer" "$out/seeds/cost" "$out/seeds/trace" "$out/seeds/constrain" "$out/seeds/tp_wire" "$out/artifacts"
printf 'seer-cost 1\nkey m@cpu\nb 1 4\nl 64 1024\nn 4 8\ntarget 1e-3 2e-3 3e-3 4e-3\nverify 4 2e-3 3e-3 4e-3 5e-3\nverify 8 3e-3 4e-3 5e-3 6e-3\ndraft streaming 16 1e-4 1e-4 2e-4 2e-4\ndraft ngram 0 0 0 0 0\nend\n' \
  > "$out/seeds/cost/valid.cost"
printf 'seer-cost 2\nkey m@cpu\nb 1 4\nl 64 1024\nn 4\ntarget 1e-3 2e-3 3e-3 4e-3\nest target 0 0 1 1\nverify 4 2e-3 3e-3 4e-3 5e-3\nest verify 4 0 1 1 1\ndraft streaming 16 1e-4 1e-4 2e-4 2e-4\nest draft streaming 16 0 0 0 1\ndraft ngram 0 0 0 0 0\nend\n' \
  > "$out/seeds/cost/partial.cost"
printf 'seer-accept-trace 1\n# a comment\nseq streaming 256 3/4 4/4 0/4\nseq retrieval 512 1/2 2/2\nseq ngram 0 0/1\nend\n' \
  > "$out/seeds/trace/valid.trace"
# constraint seeds: a kind byte (0 grammar, 1 JSON schema, 2 regex) and the text
printf '\000root ::= "{" ws (item ("," ws item)*)? "}"\nitem ::= [a-z]+ | "x"{2,4}\nws ::= [ \\n]*\n' > "$out/seeds/constrain/grammar"
printf '\001{"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":120},"b":{"enum":["x",null]},"c":{"type":"array","items":{"$ref":"#/$defs/d"},"maxItems":3}},"required":["a"],"$defs":{"d":{"type":"string","pattern":"^[a-z]{2}$"}}}' > "$out/seeds/constrain/schema"
printf '\002^(\\d{3}-)?[A-Z][a-z]+(?:, [^x]+)*$' > "$out/seeds/constrain/regex"
# op stream seeds: alloc handle 1 of 64 bytes, upload 8 bytes into it, download them
printf '\005\000\000\000\000\000\000\000\040\000\000\000\151\000\000\000\000\000\000\000\001\000\000\000\000\000\000\000\151\000\000\000\000\000\000\000\100\000\000\000\000\000\000\000\007\000\000\000\000\000\000\000\060\000\000\000\160\000\000\000\000\000\000\000\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\142\000\000\000\000\000\000\000\010\000\000\000\000\000\000\000\141\142\143\144\145\146\147\150\010\000\000\000\000\000\000\000\050\000\000\000\160\000\000\000\000\000\000\000\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\151\000\000\000\000\000\000\000\010\000\000\000\000\000\000\000' > "$out/seeds/tp_wire/alloc-upload-download"
# ... the upload posted (the kind's top bit: no answer; a failure kept for the download)
printf '\005\000\000\000\000\000\000\000\040\000\000\000\151\000\000\000\000\000\000\000\001\000\000\000\000\000\000\000\151\000\000\000\000\000\000\000\100\000\000\000\000\000\000\000\007\000\000\200\000\000\000\000\060\000\000\000\160\000\000\000\000\000\000\000\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\142\000\000\000\000\000\000\000\010\000\000\000\000\000\000\000\141\142\143\144\145\146\147\150\010\000\000\000\000\000\000\000\050\000\000\000\160\000\000\000\000\000\000\000\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\151\000\000\000\000\000\000\000\010\000\000\000\000\000\000\000' > "$out/seeds/tp_wire/alloc-posted-upload-download"
"$out/make_seeds" "$out/seeds/gguf" "$out/seeds/tokenizer"
if [[ -f "$shared/models/stories260K.gguf" ]]; then
  cp -f "$shared/models/stories260K.gguf" "$out/seeds/gguf/"
else
  echo "fuzz.sh: $shared/models/stories260K.gguf not found; fuzzing without it" >&2
fi
# fuzz_tokenizer's fixed vocabularies: the byte-level BPE fixtures and a SentencePiece one
vocabs=tests/fixtures/smollm2-135m-instruct/vocab.gguf:tests/fixtures/qwen2.5-coder-0.5b-instruct/vocab.gguf
[[ -f "$shared/models/stories260K.gguf" ]] && vocabs+=":$shared/models/stories260K.gguf"

# libFuzzer exits non-zero on a crash, a leak, a sanitizer report or a slow input.
fuzz() {
  local name=$1 seconds=$2 seeds=$3
  shift 3
  echo "fuzz.sh: $name for ${seconds}s"
  mkdir -p "$out/corpus/$name"
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
  SEER_FUZZ_VOCABS=$vocabs OMP_NUM_THREADS=1 \
    "$out/$name" -max_len=65536 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$out/artifacts/$name-" -print_final_stats=1 "$@" \
    "$out/corpus/$name" "$seeds" 2>&1 | grep -v -e '^#[0-9]' -e '^"' -e 'NEW_FUNC' || return 1
}
fuzz fuzz_gguf "${FUZZ_SECONDS:-${FUZZ_GGUF_SECONDS:-30}}" "$out/seeds/gguf"
fuzz fuzz_tokenizer "${FUZZ_SECONDS:-${FUZZ_TOKENIZER_SECONDS:-25}}" "$out/seeds/tokenizer"
fuzz fuzz_model "${FUZZ_SECONDS:-${FUZZ_MODEL_SECONDS:-25}}" "$out/seeds/gguf" -malloc_limit_mb=512
fuzz fuzz_cost "${FUZZ_SECONDS:-${FUZZ_COST_SECONDS:-10}}" "$out/seeds/cost"
fuzz fuzz_trace "${FUZZ_SECONDS:-${FUZZ_TRACE_SECONDS:-10}}" "$out/seeds/trace"
fuzz fuzz_constrain "${FUZZ_SECONDS:-${FUZZ_CONSTRAIN_SECONDS:-20}}" "$out/seeds/constrain"
fuzz fuzz_tp_wire "${FUZZ_SECONDS:-${FUZZ_TP_WIRE_SECONDS:-10}}" "$out/seeds/tp_wire" -malloc_limit_mb=512
echo "fuzz.sh: no crashes"
