#!/usr/bin/env bash
# check-symbols.sh BUILD_DIR: fails when the library exports a symbol without the seer_
# prefix (libseer.a, and libseer_cuda.a where CUDA was built), so that seer links into one
# process with other libraries (ggml's gguf_* and ggml_* among them), or a test hook (a
# *_for_tests global: those exist only in the tests' own builds), and when an object of the
# library reads or writes the environment other than the two that locate files: cost_api.c
# (the cost cache under XDG_CACHE_HOME or HOME) and comm_nccl.cu (SEER_NCCL_LIB, the NCCL
# library); kernel variants come in as seer_cuda_tuning (seer_bench.h). Lists the offenders.
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
  env=$(nm -A "$lib" 2>/dev/null | awk '$(NF-1) == "U" && $NF ~ /^(secure_)?(get|set|unset|put)env$/ {
           split($1, p, ":"); print p[2] ": " $NF}' |
    grep -v -E '^(cost_api\.c\.o: getenv|comm_nccl\.cu\.o: getenv)$' | sort -u || true)
  if [ -n "$env" ]; then
    echo "check-symbols: $lib reads or writes the environment in:"
    echo "$env" | sed 's/^/  /'
    bad=1
  fi
done
[ $bad = 0 ] && echo "check-symbols: every exported symbol carries the seer_ prefix, no test hook is in the library, and it reads no environment but the cost cache and NCCL paths"
exit $bad
