#!/usr/bin/env bash
# check-symbols.sh BUILD_DIR: fails when the library exports a symbol without the seer_
# prefix (libseer.a, and libseer_cuda.a where CUDA was built), so that seer links into one
# process with other libraries (ggml's gguf_* and ggml_* among them), or a test hook (a
# *_for_tests global: those exist only in the tests' own builds). Lists the offenders.
set -euo pipefail
dir=${1:-build}
bad=0
for lib in "$dir"/libseer.a "$dir"/libseer_cuda.a; do
  [ -f "$lib" ] || continue
  # defined global symbols (functions, data); C++ and CUDA runtime symbols of the CUDA
  # objects (mangled _Z..., __cuda..., __nv...) are the toolchain's, not the library's names
  syms=$(nm -g --defined-only "$lib" | awk 'NF == 3 && $2 ~ /^[TDBRCVW]$/ {print $3}' |
    grep -v -E '^(seer_|_Z|DW\.ref\.|__cuda|__nv|__device_stub|_fatbinary|__fatbinwrap|__sti____cudaRegisterAll)' | sort -u || true)
  if [ -n "$syms" ]; then
    echo "check-symbols: $lib exports $(echo "$syms" | wc -l) symbols without the seer_ prefix:"
    echo "$syms" | sed 's/^/  /'
    bad=1
  fi
  hooks=$(nm -g --defined-only "$lib" | awk 'NF == 3 && $3 ~ /_for_tests$/ {print $3}' | sort -u || true)
  if [ -n "$hooks" ]; then
    echo "check-symbols: $lib holds test hooks:"
    echo "$hooks" | sed 's/^/  /'
    bad=1
  fi
done
[ $bad = 0 ] && echo "check-symbols: every exported symbol carries the seer_ prefix, and no test hook is in the library"
exit $bad
