#!/usr/bin/env bash
# long-prompt.sh: writes a long natural-language prompt for long-context tests and
# benchmarks, assembled from text that Debian packages install locally (no download):
#   bible      the King James Bible (public domain) via the `bible` tool of bible-kjv,
#              with its data from bible-kjv-text; about 790K words, ~1M tokens
#   linux-doc  the Linux kernel's reStructuredText documentation from linux-doc-* (GPL-2.0:
#              fine for local prompts, not for redistribution as public domain)
#   mixed      alternating blocks of both
#
#   scripts/long-prompt.sh -t 32768 -o /tmp/prompt-32k.txt
#   scripts/long-prompt.sh -t 131072 -s mixed -q "Summarise the text above." -o p128k.txt
#
# Options:
#   -t TOKENS   target length in tokens (default 8192); the text is cut by words, using the
#               measured tokens per word of each source (Qwen2.5 and SmolLM2 vocabularies:
#               bible 1.27, linux-doc 1.4-1.9): bible lands within 5% of the target,
#               linux-doc and mixed within about 20% (count with the model's tokenizer
#               when it matters)
#   -s SOURCE   bible (default), linux-doc or mixed
#   -k WORDS    skip this many words of the source first (different prompts of one length)
#   -q TEXT     append TEXT after a blank line (a question about the text)
#   -o FILE     output file (default: standard output)
# Packages: apt-get install bible-kjv bible-kjv-text linux-doc-6.1 (or another linux-doc-*).
set -euo pipefail

tokens=8192 source=bible skip=0 question="" out=""
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }
while getopts "t:s:k:q:o:h" opt; do
  case $opt in
    t) tokens=$OPTARG ;;
    s) source=$OPTARG ;;
    k) skip=$OPTARG ;;
    q) question=$OPTARG ;;
    o) out=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[[ $tokens =~ ^[0-9]+$ && $tokens -gt 0 ]] || { echo "long-prompt: -t wants a positive number" >&2; exit 2; }
[[ $skip =~ ^[0-9]+$ ]] || { echo "long-prompt: -k wants a number" >&2; exit 2; }

need_bible() {
  command -v bible >/dev/null && [ -e /usr/lib/bible.data ] || {
    echo "long-prompt: the bible tool or its text is missing: apt-get install bible-kjv bible-kjv-text" >&2
    exit 1
  }
}

doc_dir() {
  ls -d /usr/share/doc/linux-doc-*/Documentation 2>/dev/null | sort -V | tail -n1 || true
}

need_linux_doc() {
  [ -n "$(doc_dir)" ] || {
    echo "long-prompt: no kernel documentation: apt-get install linux-doc-6.1 (or linux-doc)" >&2
    exit 1
  }
}

# One verse per line; the reference in front of each ("Ge1:1 ", "1Co13:4 ") is dropped.
bible_text() {
  bible -f "Gen1:1-Rev22:21" 2>/dev/null | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //'
}

# Prose-heavy guides first, in a fixed order, so that a given length is reproducible.
linux_doc_text() {
  local dir
  dir=$(doc_dir)
  find "$dir/process" "$dir/admin-guide" "$dir/filesystems" "$dir/core-api" "$dir/driver-api" \
    -name '*.rst.gz' 2>/dev/null | LC_ALL=C sort | while read -r f; do zcat "$f"; echo; done
}

# Alternates blocks of about 2000 words (whole lines) from the two sources.
mixed_text() {
  local docs
  docs=$(mktemp)
  linux_doc_text > "$docs"
  bible_text | awk -v B="$docs" '
    function words(s,  w) { return split(s, w, /[ \t]+/) }
    {
      print; n += words($0)
      if (n >= 2000) {
        n = 0
        while (n < 2000 && (getline line < B) > 0) { print line; n += words(line) }
        n = 0
      }
    }'
  rm -f "$docs"
}

case $source in
  bible) ratio=127; need_bible ;;
  linux-doc) ratio=150; need_linux_doc ;;
  mixed) ratio=138; need_bible; need_linux_doc ;;
  *) echo "long-prompt: unknown source '$source' (bible, linux-doc, mixed)" >&2; exit 2 ;;
esac
words=$(( tokens * 100 / ratio ))

# Keeps line structure while counting words: prints lines until the word budget is spent,
# cutting the last line at the budget.
take_words() {
  awk -v skip="$1" -v want="$2" '
    {
      n = split($0, w, /[ \t]+/)
      line = ""
      for (i = 1; i <= n; i++) {
        if (w[i] == "") continue
        seen++
        if (seen <= skip) continue
        if (got >= want) { if (line != "") print line; exit }
        line = line == "" ? w[i] : line " " w[i]
        got++
      }
      if (seen > skip) print line
      if (got >= want) exit
    }'
}

emit() {
  # The word budget ends the pipeline early; its writers then stop on SIGPIPE, which is
  # not an error here.
  set +o pipefail
  case $source in
    bible) bible_text ;;
    linux-doc) linux_doc_text ;;
    mixed) mixed_text ;;
  esac | take_words "$skip" "$words"
  if [ -n "$question" ]; then
    printf '\n%s\n' "$question"
  fi
}

if [ -n "$out" ]; then
  emit > "$out"
  echo "long-prompt: $(wc -w < "$out") words (~$tokens tokens) of $source in $out" >&2
else
  emit
fi
