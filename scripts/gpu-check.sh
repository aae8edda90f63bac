#!/usr/bin/env bash
# gpu-check.sh: builds seer with the CUDA backend (sm_90a, Release) into build-gpu on a GPU
# machine and runs every test with its output; the log goes to $OUT/gpu-check.log when OUT is
# set (else build-gpu/gpu-check.log), and a short table of the CUDA checks comes last.
#
#   scripts/gpu-check.sh stage   on a machine with the build deps: copies the cmocka, jansson,
#                                pcre2 and libmicrohttpd headers and libraries (and the libraries
#                                libmicrohttpd loads: gnutls and its own) into .gpu/deps
#                                (git-ignored), so the GPU build has `seer serve` too
#   scripts/gpu-check.sh         on the GPU machine, from the repository root
#
# SEER_DATA_DIR: the tests' models/ and golden/ (default tests/data, in the repository).
# .gpu/deps, when present, is used for cmocka/jansson.
# GPU_CHECK_JOBS: tests run at once (default 1; each test has its own temporary folder).
# GPU_CHECK_LABEL=gpu: only the tests that run CUDA code (ctest -L; the rest are CPU-only).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD

stage() {
  set -e
  mkdir -p .gpu/deps/include .gpu/deps/lib/pkgconfig
  local pkg hdrs h incdir libdir soname
  for pkg in cmocka jansson pcre2-8 microhttpd; do
    case $pkg in
      cmocka) hdrs="cmocka.h cmocka_pbc.h" ;;
      jansson) hdrs="jansson.h jansson_config.h" ;;
      pcre2-8) hdrs="pcre2.h" ;;
      microhttpd) hdrs="microhttpd.h" ;;
    esac
    # not every .pc file sets includedir/libdir: read them off the flags
    local pc=$pkg
    [ $pkg = pcre2-8 ] && pc=libpcre2-8
    [ $pkg = microhttpd ] && pc=libmicrohttpd
    if ! pkg-config --exists $pc; then
      echo "stage: $pc not installed here; the GPU build goes without it"
      continue
    fi
    incdir=$(pkg-config --cflags-only-I $pc | tr ' ' '\n' | sed -n 's/^-I//p' | head -n 1)
    libdir=$(pkg-config --libs-only-L $pc | tr ' ' '\n' | sed -n 's/^-L//p' | head -n 1)
    : "${incdir:=/usr/include}" "${libdir:=/usr/lib/$(gcc -print-multiarch)}"
    for h in $hdrs; do # the first of the flags' folders (and /usr/include) that holds it
      local d
      for d in $(pkg-config --cflags-only-I $pc | tr ' ' '\n' | sed -n 's/^-I//p') /usr/include; do
        [ -f "$d/$h" ] && { cp "$d/$h" .gpu/deps/include/; break; }
      done
    done
    # real files, not links: the link name for linking, the soname for running
    cp -L "$libdir/lib$pkg.so" .gpu/deps/lib/
    soname=$(objdump -p "$libdir/lib$pkg.so" | awk '/SONAME/ {print $2}')
    [ -n "$soname" ] && cp -L "$libdir/$soname" .gpu/deps/lib/
    cat > .gpu/deps/lib/pkgconfig/$pc.pc <<EOF
prefix=\${pcfiledir}/../..
includedir=\${prefix}/include
libdir=\${prefix}/lib
Name: $pc
Description: $pc staged for the GPU machine
Version: $(pkg-config --modversion $pc)
Cflags: -I\${includedir}
Libs: -L\${libdir} -l$pkg
EOF
    if [ $pkg = microhttpd ]; then # what it loads (gnutls...), which the GPU machine may lack
      ldd "$libdir/lib$pkg.so" | awk '$3 ~ /^\// {print $3}' | grep -v -E '/(libc|libm|libpthread|libdl)\.so' |
        while read -r dep; do mkdir -p .gpu/deps/libdeps && cp -L "$dep" .gpu/deps/libdeps/; done
    fi
  done
  echo "staged into $root/.gpu:"
  find .gpu -type f | sort
}

if [ "${1:-}" = stage ]; then
  stage
  exit $?
fi

shared=${SEER_DATA_DIR:-$root/tests/data}
mkdir -p build-gpu
log=build-gpu/gpu-check.log
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  log=$OUT/gpu-check.log
fi
tests_log=build-gpu/ctest-output.log

run_all() {
  echo "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) in $root"
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "== git: $(git rev-parse --short HEAD), $(git status --porcelain | wc -l) changed files"
  fi
  echo "== device"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi | head -n 4
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
  else
    echo "nvidia-smi not found"
  fi
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  nvcc --version | tail -n 2
  echo "test data: $shared"
  [ -f "$shared/models/stories260K.gguf" ] || echo "WARNING: $shared/models/stories260K.gguf is missing"

  if [ -d "$root/.gpu/deps" ]; then
    export PKG_CONFIG_PATH=$root/.gpu/deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export LD_LIBRARY_PATH=$root/.gpu/deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # libmicrohttpd's own libraries only where the machine lacks them
    if [ -d "$root/.gpu/deps/libdeps" ] && ! ldconfig -p 2>/dev/null | grep -q 'libgnutls\.so\.30 '; then
      export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$root/.gpu/deps/libdeps
    fi
    echo "using staged deps in .gpu/deps"
  fi

  echo "== configure"
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DSEER_DATA_DIR="$shared" 2>&1 | tee build-gpu/configure.log || return 1
  if ! grep -q "seer: CUDA backend enabled" build-gpu/configure.log; then
    echo "FAIL: the CUDA backend was not enabled (nvcc not found?)"
    return 1
  fi
  echo "== build"
  cmake --build build-gpu -j"$(nproc)" || return 1

  echo "== tests"
  export SEER_DATA_DIR=$shared
  local only=()
  [ -n "${GPU_CHECK_LABEL:-}" ] && only=(-L "$GPU_CHECK_LABEL")
  ctest --test-dir build-gpu -V -j "${GPU_CHECK_JOBS:-1}" ${only[@]+"${only[@]}"} --timeout 3000 2>&1 | tee "$tests_log"
  local rc=${PIPESTATUS[0]}
  if grep -q "skipped: no CUDA device" "$tests_log"; then
    echo "FAIL: the CUDA tests skipped: no device visible to them"
    rc=1
  fi

  echo
  echo "== speculation on vs off on the GPU (stories260K, greedy, 200 tokens)"
  local m=$shared/models/stories260K.gguf ref="" ids k
  printf '%-10s %-6s %10s %8s\n' spec same accepted tok/ver
  for k in none streaming retrieval snapkv ngram draft quantkv hierarchy auto; do
    ids=$(build-gpu/seer generate -m "$m" -p "Once upon a time" --temp 0 -n 200 --backend cuda --json \
          --spec $k --spec-budget 32 --spec-gamma 4 --draft-model "$m" --draft-budget 32 2>&1)
    local gen=$(echo "$ids" | grep -o '"generated_ids":\[[0-9,]*\]')
    [ -z "$ref" ] && ref=$gen
    local same=no
    [ "$gen" = "$ref" ] && same=yes
    printf '%-10s %-6s %10s %8s\n' $k $same \
      "$(echo "$ids" | grep -o '"acceptance":[0-9.e-]*' | cut -d: -f2 | cut -c1-6)" \
      "$(echo "$ids" | grep -o '"tokens_per_round":[0-9.e-]*' | cut -d: -f2 | cut -c1-5)"
  done

  echo
  echo "== ctest"
  grep -E '^[0-9]+/[0-9]+ Test +#' "$tests_log" || true
  grep -E 'tests passed|tests failed' "$tests_log" || true
  echo
  echo "== CUDA checks (test_backend_ops: worst L2 rel err per op; test_gpu_model: logits)"
  printf '%-14s %14s %10s %5s\n' op worst_rel_err tol pass
  grep -E '^[0-9]+: summary: ' "$tests_log" | sed -E 's/^[0-9]+: summary: //' | grep -v '^op ' |
    awk '{printf "%-14s %14s %10s %5s\n", $1, $3, $4, $5}'
  grep -E '^[0-9]+: gpu_model: (golden total|golden:|random models)' "$tests_log" | sed -E 's/^[0-9]+: //'
  return "$rc"
}

run_all 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "gpu-check: exit $rc (log: $log)"
exit "$rc"
