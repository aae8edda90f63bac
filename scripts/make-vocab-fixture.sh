#!/usr/bin/env bash
# make-vocab-fixture.sh NAME...: writes tests/fixtures/NAME/vocab.gguf, the metadata of
# models/NAME.gguf without its tensors, so the tokenizer fixtures run without the weights.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
gcc -std=c11 -O2 -Iinclude -Isrc tests/tools/extract_vocab.c src/gguf/*.c src/util/error.c -lm \
  -o build/extract_vocab
for name in "$@"; do
  build/extract_vocab "models/$name.gguf" "tests/fixtures/$name/vocab.gguf"
  echo "tests/fixtures/$name/vocab.gguf: $(du -h "tests/fixtures/$name/vocab.gguf" | cut -f1)"
done
