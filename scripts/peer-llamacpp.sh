#!/usr/bin/env bash
# peer-llamacpp.sh: llama.cpp, the implementation seer's benchmark is compared with, staged,
# built and run on the same GGUF file at the same points as `seer bench`. Nothing of llama.cpp
# is committed: its source comes from the pinned llama-cpp-python source package on PyPI.
#
#   scripts/peer-llamacpp.sh stage
#       (a machine with PyPI) fetches llama-cpp-python==$PEER_VERSION's sdist (or takes
#       PEER_SDIST=FILE), checks its sha256, and keeps of its vendored llama.cpp what the CPU
#       and CUDA builds of llama-bench, llama-batched-bench and llama-server need, as
#       .peer/llama.cpp.tar.xz (git-ignored; 2.5 MB, small enough to travel with the
#       working tree to the GPU machine).
#   scripts/peer-llamacpp.sh build [cpu|cuda]
#       unpacks it into $PEER_DIR (default /tmp/peer-llama) and builds the three tools into
#       $PEER_DIR/build-{cpu,cuda}. Writes $PEER_DIR/build-KIND.done (exit status) when it ends,
#       so it can run in the background: `setsid scripts/peer-llamacpp.sh build cuda >LOG 2>&1 &`
#       then `scripts/peer-llamacpp.sh wait-build cuda [SECONDS]`.
#   scripts/peer-llamacpp.sh wait-build [cpu|cuda] [SECONDS]
#       waits for that marker (default 600 s); exits with the build's status, 124 on timeout.
#   scripts/peer-llamacpp.sh run [cpu|cuda] -m MODEL.gguf --out PEER.json [--ctx-list L,...]
#       [--batched BxL,...] [--batched-cache streams|unified] [--prefill-list P,...] [--gen N]
#       [--batched-gen N] [--reps N] [--threads N] [--timeout SECONDS] [--bench-args 'FLAGS']
#       [--ngl N]
#       llama-bench: plain decode at B = 1 for every L of --ctx-list (tg N at depth L:
#       `-p 0 -n N -d L`, ms/token = median run / N) and prefill for every P of --prefill-list
#       (`-p P -n 0 -d 0`); llama-batched-bench for every BxL of --batched: B sequences of L
#       tokens each, then N new tokens each (`-npp L,1 -ntg N -npl B`: the run with a
#       1-token prompt after it gives llama.cpp's asynchronous log the time to print the
#       first run's line before the process exits), ms/step = its t_tg / N. The cache: by
#       default one stream of L+N cells per sequence, the prompt prefilled once and copied
#       into each (`-pps -c B*(L+N)`: every step reads B*L cells, as seer's does, and the
#       setup takes seconds); `--batched-cache unified`: B prompts prefilled into one unified
#       cache (`-kvu`, minutes at 14 x 32K), whose prefill tok/s is kept too. All
#       with flash attention (`-fa 1`) and every layer on the device (`-ngl 99`; 0 for cpu; --ngl N: N),
#       each point in its own process. Writes the peer file `seer bench --peer` reads
#       (tools/seer/bench.h): llama.cpp's commit and build, the device, the model and the exact
#       commands in "version" and "description"; a point that failed (out of memory) gets an
#       "error". The tools' output goes to PEER.json.log. --bench-args: more llama-bench flags;
#       the CPU comparison in docs/benchmarks.md used --bench-args '--repack 0' (with its
#       repacking on, llama.cpp crashes in its AMX matmul on the development VM).
# Needs: cmake, a C++ compiler (nvcc for cuda), python3, xz. PEER_JOBS: build jobs (default
# all cores); PEER_TARGETS: the tools to build (default: the three); PEER_CMAKE_ARGS: more cmake flags for the build (e.g. -DGGML_AMX_INT8=OFF...).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD

PEER_VERSION=0.3.36
# sha256 of llama_cpp_python-0.3.36.tar.gz as PyPI serves it (checked 2026-11-23).
PEER_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
# The llama.cpp commit that sdist vendors (its CHANGELOG: "update llama.cpp to
# ggml-org/llama.cpp@0c1e57098"); the sdist has no git history, so the build is told.
LLAMA_COMMIT=0c1e57098
stage_dir=$root/.peer
tarball=$stage_dir/llama.cpp.tar.xz
peer_dir=${PEER_DIR:-/tmp/peer-llama}

die() {
  echo "peer-llamacpp: $*" >&2
  exit 1
}

stage() {
  set -e
  mkdir -p "$stage_dir"
  local sdist=${PEER_SDIST:-$stage_dir/llama_cpp_python-$PEER_VERSION.tar.gz}
  if [ ! -f "$sdist" ]; then
    # pip prepares the sdist's metadata after downloading it, building its build backend
    # (scikit-build-core) from source on the way: a minute or two.
    python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$PEER_VERSION" \
      -d "$stage_dir" || die "pip download failed"
    sdist=$stage_dir/llama_cpp_python-$PEER_VERSION.tar.gz
  fi
  echo "$PEER_SHA256  $sdist" | sha256sum -c - >/dev/null ||
    die "$sdist: sha256 is not the pinned $PEER_SHA256"
  stage_tmp=$(mktemp -d)
  trap 'rm -rf "$stage_tmp"' EXIT
  local tmp=$stage_tmp
  tar -xzf "$sdist" -C "$tmp" "llama_cpp_python-$PEER_VERSION/vendor/llama.cpp"
  local src=$tmp/llama_cpp_python-$PEER_VERSION/vendor/llama.cpp dst=$tmp/llama.cpp
  mkdir -p "$dst/tools" "$dst/scripts" "$dst/ggml/src"
  # What the library, common and the three tools are built from; the rest (other ggml
  # backends, vocab files under models/, docs, tests, examples, the web UI's sources,
  # conversion scripts, media) stays behind.
  cp -a "$src"/{CMakeLists.txt,LICENSE,cmake,include,src,common,vendor,licenses} "$dst/"
  cp -a "$src/scripts/ui-assets.cmake" "$dst/scripts/"
  cp -a "$src"/ggml/{CMakeLists.txt,cmake,include} "$dst/ggml/"
  local f
  for f in "$src"/ggml/src/*; do
    case $(basename "$f") in
      ggml-*) [ -d "$f" ] || cp -a "$f" "$dst/ggml/src/" ;; # backends are folders
      *) cp -a "$f" "$dst/ggml/src/" ;;
    esac
  done
  cp -a "$src"/ggml/src/{ggml-cpu,ggml-cuda} "$dst/ggml/src/"
  cp -a "$src"/tools/{llama-bench,batched-bench,server,mtmd} "$dst/tools/"
  mkdir -p "$dst/tools/ui"
  cp -a "$src"/tools/ui/{CMakeLists.txt,sources.cmake,ui.cpp.in,ui.h.in} "$dst/tools/ui/"
  rm -rf "$dst/tools/server/tests" "$dst/tools/server/public"* "$dst/tools/mtmd/tests" \
    "$dst"/tools/mtmd/test-* "$dst/tools/server/README"*
  # tools/CMakeLists.txt of the stage: the three tools and what the server links.
  cat >"$dst/tools/CMakeLists.txt" <<'EOF'
# peer-llamacpp.sh stage: only the tools seer's benchmark runs (and what llama-server links)
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(batched-bench)
add_subdirectory(llama-bench)
add_subdirectory(mtmd)
if (LLAMA_BUILD_SERVER)
    add_subdirectory(ui)
    add_subdirectory(server)
endif()
EOF
  echo "llama-cpp-python $PEER_VERSION (sha256 $PEER_SHA256), llama.cpp $LLAMA_COMMIT" >"$dst/PEER-SOURCE"
  tar -C "$tmp" -cf - llama.cpp | xz -T2 -9 >"$tarball.part"
  mv "$tarball.part" "$tarball"
  echo "peer-llamacpp: staged $tarball ($(du -h "$tarball" | cut -f1), $(stat -c %s "$tarball") bytes)"
}

build() {
  local kind=${1:-cpu}
  case $kind in cpu | cuda) ;; *) die "build: cpu or cuda, not '$kind'" ;; esac
  [ -f "$tarball" ] || die "no $tarball: run 'scripts/peer-llamacpp.sh stage' first"
  local bdir=$peer_dir/build-$kind marker=$peer_dir/build-$kind.done
  mkdir -p "$peer_dir"
  rm -f "$marker"
  local rc=0
  {
    local jobs=${PEER_JOBS:-$(nproc)}
    # The source is unpacked again when the tarball changed (its checksum is kept beside it).
    local sum
    sum=$(sha256sum "$tarball" | cut -d' ' -f1)
    if [ "$(cat "$peer_dir/src.sha256" 2>/dev/null)" != "$sum" ]; then
      rm -rf "$peer_dir/llama.cpp" && tar -xJf "$tarball" -C "$peer_dir" && echo "$sum" >"$peer_dir/src.sha256"
    fi
    local cuda=()
    [ "$kind" = cuda ] && { command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH; }
    [ "$kind" = cuda ] && cuda=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${PEER_CUDA_ARCH:-90a})
    cmake -S "$peer_dir/llama.cpp" -B "$bdir" -DCMAKE_BUILD_TYPE=Release ${cuda[@]+"${cuda[@]}"} \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_COMMIT="$LLAMA_COMMIT" -DBUILD_SHARED_LIBS=OFF \
      -DGGML_NATIVE=ON ${PEER_CMAKE_ARGS:-} &&
      cmake --build "$bdir" -j"$jobs" --target ${PEER_TARGETS:-llama-bench llama-batched-bench llama-server}
  } || rc=$?
  echo "$rc" >"$marker"
  if [ "$rc" -eq 0 ]; then
    echo "peer-llamacpp: built $kind in $bdir/bin after ${SECONDS}s"
  else
    echo "peer-llamacpp: $kind build failed ($rc)"
  fi
  return "$rc"
}

wait_build() {
  local kind=${1:-cuda} secs=${2:-600} marker
  marker=$peer_dir/build-$kind.done
  local t=0
  # Polls the marker the build writes when it ends: a build started with setsid by an earlier
  # command is no child of this one to wait on.
  while [ ! -f "$marker" ]; do
    [ "$t" -ge "$secs" ] && { echo "peer-llamacpp: the $kind build has not finished after ${secs}s" >&2; return 124; }
    sleep 5
    t=$((t + 5))
  done
  return "$(cat "$marker")"
}

case ${1:-} in
  stage) stage ;;
  build) build "${2:-cpu}" ;;
  wait-build) wait_build "${2:-cuda}" "${3:-600}" ;;
  run)
    shift
    kind=cpu
    case ${1:-} in cpu | cuda) kind=$1; shift ;; esac
    exec python3 "$root/scripts/peer_llamacpp_run.py" --bin "$peer_dir/build-$kind/bin" --kind "$kind" "$@" ;;
  *)
    sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    [ -n "${1:-}" ] && [ "$1" != -h ] && [ "$1" != --help ] && exit 2
    exit 0 ;;
esac
