#!/usr/bin/env bash
# Acceptance of every drafter on a model (default: the tiny real stories260K), greedy, at a
# few budgets K and gammas G, on prompts of increasing length. Prints a markdown table.
# usage: scripts/spec-acceptance.sh [MODEL.gguf] [SEER_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-tests/data/models/stories260K.gguf}
seer=${2:-build/seer}
# Prompts of increasing length: the start of a story the model itself tells, cut by words.
story=$($seer generate -m "$model" -p "Once upon a time" --temp 0 -n 400 --ignore-eos --backend cpu 2>/dev/null | tr '\n' ' ')
printf '| drafter | K | G | prompt tokens | acceptance | tokens / verification |\n|---|---|---|---|---|---|\n'
for words in 8 64 160; do
  prompt="Once upon a time$(echo "$story" | cut -d' ' -f1-$words)"
  for cfg in "streaming 32 2" "streaming 32 4" "streaming 64 4" "retrieval 64 4" "snapkv 64 4" \
             "draft 32 4" "ngram 0 4" "ngram 0 8" "quantkv4 0 4" "quantkv8 0 4" "quantkv4+streaming 64 4"; do
    set -- $cfg
    extra="" kind=$1
    [ "$1" = draft ] && extra="--draft-model $model --draft-budget $2"
    [ "$1" = ngram ] || extra="$extra --spec-budget $2"
    # quantkvB: the B-bit KV copy over every slot; quantkvB+streaming: under the streaming view
    case $1 in quantkv*) kind=quantkv; b=${1#quantkv}; extra="--spec-kv-bits ${b%%+*}"
                         [ "${1#*+}" = streaming ] && extra="$extra --spec-kv-view streaming --spec-budget $2" ;; esac
    out=$($seer generate -m "$model" -p "$prompt" --temp 0 -n 200 --ignore-eos --backend cpu --json \
          --spec "$kind" --spec-gamma "$3" --spec-sinks 4 --spec-chunk 8 --spec-window 16 $extra 2>/dev/null)
    echo "$out" | python3 -c "
import json, sys
d = json.load(sys.stdin); s = d['spec']
k = '$2' if '$1' != 'ngram' and '$2' != '0' else '-'
print(f\"| $1 | {k} | $3 | {d['stats']['prompt_tokens']} | {s['acceptance']:.3f} | {s['tokens_per_round']:.2f} |\")"
  done
done
