#!/usr/bin/env bash
# bench-llamacpp.sh (run as `scripts/bench-gpu.sh llama [STEP ...]`): seer against llama.cpp
# on one GPU machine, on the same Llama-3.1-8B-shaped GGUF files (random weights written by
# `seer gen-model`), at the same points, each tool in its own process so they never share
# the GPU's memory. The steps, in the order given (default: setup, then every type):
#   setup   starts the llama.cpp CUDA build in the background (scripts/peer-llamacpp.sh, from
#           the .peer/llama.cpp.tar.xz carried with the working tree), builds seer and runs the
#           GPU tests (scripts/gpu-check.sh), and forgets the summary of earlier calls
#   weights the whole comparison of the weights in ONE call (about 9 minutes on an H100): the
#           llama.cpp build in the background, seer's build and the tests that run CUDA code
#           (gpu-check.sh, ctest -j 8 -L gpu; GPU_CHECK_LABEL= for all), the bf16, q4_k_m, q4_0,
#           q8_0 and q6_k files written while the tests run; per
#           type B = 1 at 4K and 32K, B = 8 at 4K (BENCH_LLAMA_BATCHED=8x4096; set it empty for
#           none), the prefill of a 4K prompt and verification chains of 5 and 8 tokens
#           (streaming self-draft K 512, G 4 and 7, SYNTHETIC acceptance 0.8); the five types
#           need the 4-GPU machine's cores to build in time (BENCH_LLAMA_TYPES picks fewer)
#   attention the whole comparison of attention in ONE call (about 8 minutes): both builds, the
#           bf16 file, 14 x 32K and 3 x 128K plain and with streaming self-speculation (K 512,
#           G 2 and 4, draft steps with the model's weights and with its q4_0 draft weights,
#           SYNTHETIC acceptance 0.8; BENCH_REAL_ALPHA="K:alpha:label ..." adds projections at
#           acceptances measured on real models), the prefill of 32K and 128K prompts
#   kvcache the quantised KV cache in ONE call: both builds, the bf16 file; llama.cpp with
#           -ctk q8_0 -ctv q8_0 (B = 1 at 32K, 14 and 26 x 32K), then seer bench at the same
#           points with --kv-type bf16, q8 and q4 (each run prints the KV tokens the free memory
#           holds: the largest B x L), llama.cpp's numbers beside each (BENCH_KV_POINTS="BxL ...")
#   offload a model larger than the GPU (docs/host-weights.md): a Llama-3.1-70B-shaped file of
#           $BENCH_OFFLOAD_TYPE (q4_0; bf16 needs 141 GB of disk and host memory), llama.cpp
#           with -ngl $BENCH_OFFLOAD_NGL and seer with --gpu-layers of the same count (default
#           40 of 80 layers: half the weights in host memory, streamed every step), B = 1 at
#           4K; seer's table gives the host-to-device bandwidth and its share of the PCIe floor
#   tp      tensor parallelism in ONE call: both builds, the bf16 file; llama.cpp over every GPU
#           with -sm layer and -sm row (BENCH_TP_SPLITS, e.g. "layer row tensor" where the
#           pinned llama.cpp has -sm tensor), seer at --tp 1, 2 and 4 (as many as there are
#           GPUs; its all-reduce time per step printed), B = 1 at 4K and 32K; a side-by-side
#           table of ms per step last
#   TYPE    one of $BENCH_LLAMA_TYPES (bf16 q4_0 q8_0, and q4_k_m where gen-model writes it):
#           writes the GGUF, runs llama.cpp on it (llama-bench B = 1 at 4K and 32K, prefill of
#           4K and 32K prompts; for bf16 also llama-batched-bench 14 x 32K and 3 x 128K), then
#           `seer bench -m` at the same points with --peer, and deletes the file (16 GB in bf16)
# .peer/ (scripts/peer-llamacpp.sh stage) and .gpu/ (scripts/gpu-check.sh stage) are
# git-ignored: carry both with the working tree to the GPU machine.
# One call may run 10 minutes, so split the steps over consecutive calls, e.g.
#   scripts/bench-gpu.sh llama setup bf16     then     scripts/bench-gpu.sh llama q4_0 q8_0
# The llama.cpp build and the summary live in build-gpu/ (kept between calls); a step that
# finds no finished llama.cpp build waits for the one under way or starts one. A type whose
# step would not fit in the time left is skipped with a message naming the call to make.
# Every call prints the side-by-side table of all types measured since the last setup last.
# Under $OUT: bench-llamacpp.log (everything), llamacpp-results.jsonl (each type's peer file
# and seer's JSON, one per line) and gpu-check.log.
#   BENCH_DEADLINE=570        seconds this call may take
#   BENCH_LLAMA_TYPES         the types `all` means (default: bf16 q4_0 q8_0 [q4_k_m])
#   BENCH_TYPE_SECS=240       the least time a type's step starts with (bf16: 2x)
#   BENCH_LLAMA_REPS=5        llama-bench -r (weights: 3; attention: 1, and seer's prefill runs)
#   BENCH_PEER_SHARE=50       percent of a type's time left that llama.cpp's runs may take
#   BENCH_LLAMA_PROFILE=1     also seer's per-op profile of a B = 1 step at 4K, per type
#   BENCH_TP=N                seer divided over N GPUs (--tp N; docs/tensor-parallel.md)
#   BENCH_LLAMA_SPLIT=row     llama.cpp over the GPUs with -sm row (or layer): the peer of BENCH_TP
# The same path runs on a CPU machine with a small shape (no GPU tests then), to check it:
#   BENCH_LLAMA_KIND=cpu BENCH_LLAMA_SEER=build BENCH_LLAMA_SHAPE="--dim 64 ..."
#   BENCH_LLAMA_CTX=256,512 BENCH_LLAMA_PREFILL=128 BENCH_LLAMA_BATCHED=4x256
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/build-gpu/llamacpp}
work=$root/build-gpu/llamacpp-work
export PEER_DIR=${PEER_DIR:-$root/build-gpu/peer-llama}
mkdir -p "$out" "$work" "$PEER_DIR"
deadline=${BENCH_DEADLINE:-570}
type_secs=${BENCH_TYPE_SECS:-240}
summary=$work/summary.tsv
results=$out/llamacpp-results.jsonl
left() { echo $((deadline - SECONDS)); }
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
if [ -d "$root/.gpu/deps" ]; then
  export PKG_CONFIG_PATH=$root/.gpu/deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=$root/.gpu/deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

kind=${BENCH_LLAMA_KIND:-cuda}
# The tools this script runs (not llama-server, whose build takes minutes more), for every
# step: a setup before another step starts the build that step then waits for.
export PEER_TARGETS=${PEER_TARGETS:-llama-bench llama-batched-bench}
bdir=${BENCH_LLAMA_SEER:-build-gpu} # seer's build folder
# Llama-3.1-8B's shape (the synthetic preset llama-3.1-8b), for gen-model.
# shellcheck disable=SC2206 # the flags are words
shape=(${BENCH_LLAMA_SHAPE:---arch llama --vocab 128256 --dim 4096 --layers 32 --heads 32
       --kv-heads 8 --ffn 14336 --ctx 131072 --rope-base 500000})
ctx=${BENCH_LLAMA_CTX:-4096,32768} prefill=${BENCH_LLAMA_PREFILL:-4096,32768}
batched=${BENCH_LLAMA_BATCHED-14x32768,3x131072} # bf16 only; set and empty: none
reps=${BENCH_LLAMA_REPS:-5}  # llama-bench -r
batched_types=bf16           # the types the batched points run for (all: every type)
spec_b1=""                   # seer bench's speculation flags at B = 1 (none: plain only)
spec_batched=""              # ... at the batched points
pregen=""                    # types whose files a background writer is producing
peer_extra=() seer_extra=()  # more flags of llama.cpp's runs and of seer bench's (offload)
at_least() { local v=$1; [ "$v" -lt "$2" ] && v=$2; echo "$v"; }

default_types() {
  local t="bf16 q4_0 q8_0"
  [ -x "$bdir/seer" ] && "$bdir/seer" gen-model --help 2>&1 | grep -q q4_k_m && t="$t q4_k_m"
  echo "$t"
}

# The llama.cpp CUDA build, in the background; its pid file tells a later call it is running.
peer_build_start() {
  local pid
  pid=$(cat "$work/peer-build.pid" 2>/dev/null)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    echo "== llama.cpp: the CUDA build under way (pid $pid) goes on"
    return
  fi
  if [ "$(cat "$PEER_DIR/build-$kind.done" 2>/dev/null)" = 0 ]; then
    echo "== llama.cpp: the $kind build in $PEER_DIR is there"
    return
  fi
  [ -f .peer/llama.cpp.tar.xz ] || { echo "== llama.cpp: no .peer/llama.cpp.tar.xz (run scripts/peer-llamacpp.sh stage first)"; return 1; }
  rm -f "$PEER_DIR/build-$kind.done"
  setsid scripts/peer-llamacpp.sh build "$kind" >"$work/peer-build.log" 2>&1 </dev/null &
  echo $! >"$work/peer-build.pid"
  echo "== llama.cpp: $kind build started in the background (log $work/peer-build.log)"
}

peer_build_wait() {
  peer_build_start || return 1
  local l
  l=$(left)
  echo "== llama.cpp: waiting for the build (at most $((l - 60))s)"
  scripts/peer-llamacpp.sh wait-build "$kind" "$(at_least $((l - 60)) 1)"
  local rc=$?
  [ "$rc" -ne 0 ] && tail -n 30 "$work/peer-build.log"
  echo "== llama.cpp: build status $rc after ${SECONDS}s"
  return "$rc"
}

seer_build() { # [all]: every target (the tests too); incremental: a kept folder may be stale
  if [ ! -f "$bdir/CMakeCache.txt" ]; then
    # configured as gpu-check.sh configures it, so that its build reuses this one
    cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
      ${SEER_DATA_DIR:+-DSEER_DATA_DIR="$SEER_DATA_DIR"} \
      >"$work/configure.log" 2>&1 || { tail -n 30 "$work/configure.log"; return 1; }
  fi
  local target=(--target seer_cli)
  [ "${1:-}" = all ] && target=()
  cmake --build "$bdir" -j"$(nproc)" ${target[@]+"${target[@]}"} >"$work/build.log" 2>&1 ||
    { tail -n 30 "$work/build.log"; return 1; }
}

setup() { # [build-then-files TYPE...]: after seer's build, write those files while the tests run
  rm -f "$summary" "$work/tests-summary.txt"
  peer_build_start
  if [ "${1:-}" = build-then-files ]; then
    shift
    seer_build all || return 1
    echo "seer built after ${SECONDS}s"
    pregen_start "$@"
    export GPU_CHECK_LABEL=${GPU_CHECK_LABEL-gpu} # the tests that run CUDA code: CI runs the rest
  fi
  if [ "$kind" = cuda ]; then
    local secs
    secs=$(at_least $(( $(left) - 60 )) 1)
    echo "== seer: build and GPU tests (scripts/gpu-check.sh, ctest -j ${GPU_CHECK_JOBS:-1}, at most ${secs}s)"
    timeout "$secs" scripts/gpu-check.sh >"$work/gpu-check.txt" 2>&1
    local rc=$?
    echo "gpu-check: exit $rc after ${SECONDS}s"
    echo "GPU tests (gpu-check exit $rc): $(grep -E 'tests passed|tests failed' "$work/gpu-check.txt" | tail -n 1)" \
      >"$work/tests-summary.txt"
    sed -n '/^== speculation on vs off/,$p' "$work/gpu-check.txt" | tail -n 60
  fi
  seer_build
}

# One row per point of seer's JSON: type, point, llama.cpp, seer, seer's speedup, % of floor.
summarize() { # type, seer JSON...
  local t=$1
  shift
  python3 - "$t" "$@" >>"$summary" <<'EOF'
import json, os, sys
t = sys.argv[1]
real = []  # BENCH_REAL_ALPHA: "K:alpha:label ...", acceptances measured on real models
for w in os.environ.get("BENCH_REAL_ALPHA", "").split():
    k, a_, label = (w.split(":", 2) + ["", ""])[:3]
    real.append((int(k), float(a_), label.replace("_", " ")))
matched, alone = set(), []  # the peer's prefill runs: beside seer's, or its own (once each)
for path in sys.argv[2:]:
    try:
        r = json.load(open(path))
    except (OSError, ValueError) as e:
        print("%s\t%s\t-\t-\t-\t-" % (t, "no seer JSON (%s)" % path.rsplit("/", 1)[-1]))
        continue
    for p in r.get("points", []):
        pl, pe = p.get("plain", {}), p.get("peer", {})
        seer = "%.3f" % pl["ms_per_step"] if "ms_per_step" in pl else p.get("error", "-")[:24]
        peer = "%.3f" % pe["ms_per_step"] if "ms_per_step" in pe else pe.get("error", "-")
        ratio = "%.2fx" % pe["speedup"] if "speedup" in pe else "-"
        floor = "%.0f%%" % (100 * pl["fraction_of_floor"]) if "fraction_of_floor" in pl else "-"
        print("%s\tdecode B=%d L=%d (ms/step)\t%s\t%s\t%s\t%s" % (t, p["batch"], p["ctx"], peer, seer, ratio, floor))
        # speculation (SYNTHETIC acceptance): a verification's cost in plain steps, and the
        # tokens per second against llama.cpp's plain decoding (then at real acceptances)
        B, ms_peer = p["batch"], pe.get("ms_per_step")
        for sp in p.get("spec", []):
            if "verify_ms" not in sp:
                continue
            G, K = sp["gamma"], sp["budget"]
            dw = sp.get("draft_weights", "none")
            at = "B=%d L=%d K=%d G=%d%s" % (B, p["ctx"], K, G, "" if dw == "none" else " draft " + dw)
            print("%s\tverify of %d tokens / plain step, %s\t-\t%.2f\t-\t-" % (t, G + 1, at, sp["verify_ms"] / sp["target_step_ms"]))
            rnd = G * sp["draft_step_ms"] + sp["verify_ms"]
            rows = [("SYNTHETIC a=%.2f" % sp["synthetic_acceptance_alpha"], sp["tokens_per_verification_synthetic"], sp["round_ms_synthetic"])]
            for spec in real:
                k, a_, label = spec
                if k == K:
                    rows.append(("a=%.2f %s" % (a_, label), (1 - a_ ** (G + 1)) / (1 - a_) if a_ < 1 else G + 1.0, rnd))
            for name, toks, ms in rows:
                seer_tps = B * toks / ms * 1e3
                peer_tps = B / ms_peer * 1e3 if ms_peer else None
                print("%s\tspec %s %s (tok/s)\t%s\t%.0f\t%s\t-" % (
                    t, at, name, "%.0f" % peer_tps if peer_tps else "-", seer_tps,
                    "%.2fx" % (seer_tps / peer_tps) if peer_tps else "-"))
    for p in r.get("prefill", []):
        pe = p.get("peer", {})
        seer = "%.0f" % p["tok_per_s"] if "tok_per_s" in p else p.get("error", "-")[:24]
        peer = "%.0f" % pe["tok_per_s"] if "tok_per_s" in pe else pe.get("error", "-")
        ratio = "%.2fx" % pe["speedup"] if "speedup" in pe else "-"
        print("%s\tprefill P=%d (tok/s)\t%s\t%s\t%s\t-" % (t, p["tokens"], peer, seer, ratio))
        matched.add((p["tokens"], 1))
    for q in r.get("peer", {}).get("prefill", []):
        if (q["tokens"], q["batch"]) not in [(a["tokens"], a["batch"]) for a in alone]:
            alone.append(q)
for q in alone:
    if (q["tokens"], q["batch"]) not in matched:
        v = "%.0f" % q["tok_per_s"] if "tok_per_s" in q else q.get("error", "-")
        print("%s\tprefill %dx%d (tok/s)\t%s\t-\t-\t-" % (t, q["batch"], q["tokens"], v))
EOF
}

# Writes the files of the types given, one after the other, in the background (while the
# tests run); bench_type waits for each. Each leaves model-TYPE.status with gen-model's status.
pregen_start() {
  pregen="$*"
  local t
  for t in "$@"; do rm -f "$work/model-$t.gguf" "$work/model-$t.status"; done
  (
    for t in "$@"; do
      nice -n 19 "$bdir/seer" gen-model "${shape[@]}" --dtype "$t" -o "$work/model-$t.gguf" >"$work/gen-$t.log" 2>&1
      echo $? >"$work/model-$t.status"
    done
  ) </dev/null &
  echo "== writing the $* files in the background"
}

gen_file() { # type, file: written here, or waited for when the background writer has it
  local t=$1 f=$2 st
  if [[ " $pregen " == *" $t "* ]]; then
    while [ ! -f "$work/model-$t.status" ] && [ "$(left)" -gt 30 ]; do sleep 1; done
    st=$(cat "$work/model-$t.status" 2>/dev/null)
    echo "== $t: the file written in the background (status ${st:-unfinished}, after ${SECONDS}s)"
    [ "$st" = 0 ]
    return
  fi
  echo "== $t: seer gen-model ${shape[*]} --dtype $t"
  rm -f "$work"/model-*.gguf # the disk holds one 8B file at a time
  "$bdir/seer" gen-model "${shape[@]}" --dtype "$t" -o "$f"
}

# One GPU for the measurements of one GPU's speed: llama.cpp otherwise spreads its layers over
# every GPU it sees (-sm layer), which pipelines its prefill over all of them. Not where
# BENCH_TP or CUDA_VISIBLE_DEVICES says which GPUs to use; the GPU tests still see them all.
one_gpu() { # a command and its arguments, run so
  if [ -z "${BENCH_TP:-}" ] && [ -z "${CUDA_VISIBLE_DEVICES+x}" ] && command -v nvidia-smi >/dev/null &&
    [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -gt 1 ]; then
    echo "== $*: on GPU 0 alone (CUDA_VISIBLE_DEVICES=0), seer and llama.cpp alike"
    CUDA_VISIBLE_DEVICES=0 "$@"
  else
    "$@"
  fi
}

bench_type() { one_gpu bench_type_here "$@"; }

bench_type_here() {
  local t=$1 need=$type_secs
  [ "$t" = bf16 ] && need=$((2 * type_secs))
  if [ "$(left)" -lt "$need" ]; then
    echo "== $t: skipped, $(left)s left of the ${need}s it needs: run 'scripts/bench-gpu.sh llama $t' next"
    printf '%s\t%s\t-\t-\t-\t-\n' "$t" "not run in this call" >>"$summary"
    return
  fi
  seer_build || return 1
  # the file first: it is written while llama.cpp's build may still run
  local f=$work/model-$t.gguf peer=$work/peer-$t.json
  if ! gen_file "$t" "$f"; then
    printf '%s\t%s\t-\t-\t-\t-\n' "$t" "gen-model failed" >>"$summary"
    return 1
  fi
  peer_build_wait || { printf '%s\t%s\t-\t-\t-\t-\n' "$t" "llama.cpp build failed" >>"$summary"; return 1; }
  ls -l "$f"
  local bat=""
  [ "$t" = bf16 ] || [ "$batched_types" = all ] && bat=$batched
  echo "== $t: llama.cpp (after ${SECONDS}s)"
  rm -f "$peer"
  # A share of the time left for llama.cpp (half by default), the rest for seer's runs.
  timeout "$(at_least $(( ($(left) - 30) * ${BENCH_PEER_SHARE:-50} / 100 )) 10)" scripts/peer-llamacpp.sh run "$kind" -m "$f" --out "$peer" \
    --ctx-list "$ctx" --prefill-list "$prefill" --reps "$reps" ${bat:+--batched "$bat"} \
    ${peer_extra[@]+"${peer_extra[@]}"} \
    ${BENCH_LLAMA_SPLIT:+--split-mode "$BENCH_LLAMA_SPLIT"}
  echo "peer: exit $? after ${SECONDS}s"
  [ -f "$peer.log" ] && grep -E '^\$ ' "$peer.log"
  local jsons=() peer_args=()
  [ -s "$peer" ] && peer_args=(--peer "$peer") && tr -d '\n' <"$peer" >>"$results" && echo >>"$results"
  # seer at the same points: B = 1 with the prefill (or the prefill alone, at its first
  # size); the batched points one run each (a list of both batch sizes would also measure
  # 14 x 128K, which does not fit).
  local runs=() bl
  if [ -n "$ctx" ]; then
    runs+=("--ctx-list $ctx --batch-list 1 --prefill ${prefill:-0} $spec_b1")
  elif [ -n "$prefill" ]; then
    runs+=("--ctx-list ${prefill%%,*} --batch-list 1 --prefill $prefill --prefill-reps $reps")
  fi
  for bl in ${bat//,/ }; do
    runs+=("--ctx-list ${bl#*x} --batch-list ${bl%%x*} --prefill 0 $spec_batched")
  done
  local i=0 a
  for a in "${runs[@]}"; do
    local j=$work/seer-$t-$i.json
    rm -f "$j"
    echo "== $t: seer bench -m $f --backend $kind $a --steps 20 (after ${SECONDS}s)"
    # shellcheck disable=SC2086 # $a holds flags
    timeout "$(at_least $(( $(left) - 30 )) 10)" "$bdir/seer" bench -m "$f" --backend "$kind" $a \
      ${BENCH_TP:+--tp "$BENCH_TP"} --steps 20 ${seer_extra[@]+"${seer_extra[@]}"} \
      ${peer_args[@]+"${peer_args[@]}"} --json-out "$j"
    echo "seer bench: exit $? after ${SECONDS}s"
    [ -s "$j" ] && cat "$j" >>"$results"
    jsons+=("$j")
    i=$((i + 1))
  done
  summarize "$t" "${jsons[@]}"
  if [ -n "${BENCH_LLAMA_PROFILE:-}" ] && [ "$(left)" -gt 60 ]; then
    echo "== $t: where a B = 1 step at 4K goes (SEER_CUDA_PROFILE, op by op) -> $out/profile-$t.txt"
    SEER_CUDA_PROFILE=$out/profile-$t.txt timeout 50 "$bdir/seer" bench -m "$f" --backend "$kind" \
      --ctx-list 4096 --batch-list 1 --prefill 0 --steps 10 >/dev/null 2>&1
    [ -s "$out/profile-$t.txt" ] && head -n 40 "$out/profile-$t.txt"
  fi
  rm -f "$f"
}

# The weights in one call: setup (both builds, the GPU tests in parallel), the four files
# written while the tests run, then per type the B = 1 points, a 4K prefill and verification.
weights() {
  local types=${BENCH_LLAMA_TYPES:-bf16 q4_k_m q4_0 q8_0 q6_k}
  ctx=${BENCH_LLAMA_CTX:-4096,32768} prefill=${BENCH_LLAMA_PREFILL:-4096} batched=${BENCH_LLAMA_BATCHED-8x4096}
  reps=${BENCH_LLAMA_REPS:-3} type_secs=${BENCH_TYPE_SECS:-45} batched_types=all
  spec_b1="--spec streaming --spec-budget-list 512 --spec-gamma-list 4,7 --synthetic-accept 0.8"
  setup build-then-files $types
  local t
  for t in $types; do bench_type "$t"; done
}

# A model larger than the GPU, both tools with the same layers on the device: llama.cpp
# computes the others on the CPU, seer streams their weights to the GPU every step.
offload() {
  local t=${BENCH_OFFLOAD_TYPE:-q4_0} ngl=${BENCH_OFFLOAD_NGL:-40}
  shape=(--arch llama --vocab 128256 --dim 8192 --layers 80 --heads 64 --kv-heads 8 --ffn 28672
         --ctx 131072 --rope-base 500000)
  ctx=${BENCH_LLAMA_CTX:-4096} prefill=${BENCH_LLAMA_PREFILL-} batched=""
  reps=${BENCH_LLAMA_REPS:-2} type_secs=${BENCH_TYPE_SECS:-300}
  peer_extra=(--ngl "$ngl" --gen 8)
  seer_extra=(--gpu-layers "$ngl" --steps 5 --warmup 1)
  peer_build_start
  seer_build || return 1
  bench_type "$t"
}

# Attention in one call: both builds, the bf16 file, the batched points plain and speculative,
# the long prefills.
attention() {
  ctx=${BENCH_LLAMA_CTX-} prefill=${BENCH_LLAMA_PREFILL:-32768,131072} batched=${BENCH_LLAMA_BATCHED-14x32768,3x131072}
  reps=${BENCH_LLAMA_REPS:-1} type_secs=${BENCH_TYPE_SECS:-90}
  : "${BENCH_PEER_SHARE:=55}"
  spec_batched="--spec streaming --spec-budget-list 512 --spec-gamma-list 2,4 --spec-weights none,q4_0 --synthetic-accept 0.8"
  rm -f "$summary" "$work/tests-summary.txt"
  peer_build_start
  seer_build || return 1
  bench_type bf16
}

# The KV cache's types in one call: llama.cpp's q8_0 cache and seer's bf16, q8 and q4 on the
# bf16 file, at B = 1 x 32K and at batches beside and past bf16's capacity.
kvcache() {
  local points=${BENCH_KV_POINTS:-1x32768 14x32768 26x32768} f=$work/model-bf16.gguf
  local peer=$work/peer-kv-q8_0.json p kt batched_pts=()
  rm -f "$summary" "$work/tests-summary.txt"
  peer_build_start
  seer_build || return 1
  gen_file bf16 "$f" || { printf '%s\t%s\t-\t-\t-\t-\n' kv "gen-model failed" >>"$summary"; return 1; }
  peer_build_wait || return 1
  for p in $points; do [ "${p%%x*}" -gt 1 ] && batched_pts+=("$p"); done
  local bat
  bat=$(IFS=,; echo "${batched_pts[*]}")
  echo "== kv: llama.cpp -ctk q8_0 -ctv q8_0 (after ${SECONDS}s)"
  rm -f "$peer"
  timeout "$(at_least $(( ($(left) - 30) * 45 / 100 )) 10)" scripts/peer-llamacpp.sh run "$kind" -m "$f" --out "$peer" \
    --ctx-list 32768 --reps 1 --cache-type q8_0 ${bat:+--batched "$bat"}
  echo "peer: exit $? after ${SECONDS}s"
  [ -f "$peer.log" ] && grep -E '^\$ ' "$peer.log"
  local peer_args=()
  [ -s "$peer" ] && peer_args=(--peer "$peer") && tr -d '\n' <"$peer" >>"$results" && echo >>"$results"
  for kt in bf16 q8 q4; do
    local jsons=() i=0
    for p in $points; do
      local j=$work/seer-kv-$kt-$i.json
      rm -f "$j"
      echo "== kv $kt: seer bench -m $f --kv-type $kt --ctx-list ${p#*x} --batch-list ${p%%x*} (after ${SECONDS}s)"
      timeout "$(at_least $(( $(left) - 30 )) 10)" "$bdir/seer" bench -m "$f" --backend "$kind" --kv-type "$kt" \
        --ctx-list "${p#*x}" --batch-list "${p%%x*}" --prefill 0 --steps 20 ${peer_args[@]+"${peer_args[@]}"} \
        --json-out "$j"
      echo "seer bench: exit $? after ${SECONDS}s"
      [ -s "$j" ] && cat "$j" >>"$results"
      jsons+=("$j")
      i=$((i + 1))
    done
    summarize "kv-$kt" "${jsons[@]}"
  done
  rm -f "$f"
}

# Tensor parallelism in one call: the same bf16 file for every run, llama.cpp's split modes
# over every GPU, seer at each --tp that the GPUs allow; ms per step side by side.
tp_compare() {
  local n_gpu f=$work/model-bf16.gguf tab=$work/tp.tsv sm n
  n_gpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  ctx=${BENCH_LLAMA_CTX:-4096,32768} reps=${BENCH_LLAMA_REPS:-3}
  peer_build_start
  seer_build || return 1
  gen_file bf16 "$f" || { echo "bench-gpu llama tp: gen-model failed"; return 1; }
  peer_build_wait || { echo "bench-gpu llama tp: the llama.cpp build failed"; return 1; }
  : >"$tab"
  for sm in ${BENCH_TP_SPLITS:-layer row}; do
    local p=$work/peer-tp-$sm.json
    rm -f "$p"
    echo "== tp: llama.cpp -sm $sm over $n_gpu GPUs (after ${SECONDS}s)"
    timeout "$(at_least $(( ($(left) - 60) / 3 )) 10)" scripts/peer-llamacpp.sh run "$kind" -m "$f" --out "$p" \
      --ctx-list "$ctx" --prefill-list "" --reps "$reps" --split-mode "$sm"
    echo "peer: exit $? after ${SECONDS}s"
    tp_rows "llama.cpp -sm $sm ($n_gpu GPUs)" "$p" >>"$tab"
  done
  for n in 1 2 4; do
    [ "$n" -gt "$n_gpu" ] && continue
    local j=$work/seer-tp-$n.json
    rm -f "$j"
    echo "== tp: seer bench --tp $n (after ${SECONDS}s)"
    timeout "$(at_least $(( ($(left) - 20) / 2 )) 10)" "$bdir/seer" bench -m "$f" --backend "$kind" \
      --ctx-list "$ctx" --batch-list 1 --prefill 0 --tp "$n" --steps 20 --json-out "$j" |
      grep -E '^(floor|per GPU|all-reduce)|ms/step|^ *[0-9]'
    echo "seer bench: exit ${PIPESTATUS[0]} after ${SECONDS}s"
    tp_rows "seer --tp $n" "$j" >>"$tab"
  done
  rm -f "$f"
  echo
  echo "== tensor parallelism: decode ms per step, B = 1, same bf16 file (lower is faster)"
  awk -F'\t' '{printf "%-32s %-10s %10s\n", $1, $2, $3}' "$tab"
}

tp_rows() { # label, JSON (seer's or the peer's): one line per point, "label<TAB>L<TAB>ms"
  python3 - "$1" "$2" <<'PY'
import json, sys
label, path = sys.argv[1], sys.argv[2]
try:
    pts = json.load(open(path)).get("points", [])
except (OSError, ValueError):
    print("%s\t-\tno result" % label)
    sys.exit(0)
for p in pts:
    ms = p.get("plain", {}).get("ms_per_step", p.get("ms_per_step"))
    print("%s\tL=%d\t%s" % (label, p["ctx"], "%.3f" % ms if ms else p.get("error", "-")[:24]))
PY
}


run_all() {
  echo "== bench-gpu llama $(date -u +%Y-%m-%dT%H:%M:%SZ) $(git rev-parse --short HEAD 2>/dev/null), steps: $*"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  local s
  for s in "$@"; do
    case $s in
      setup) setup ;;
      weights) export GPU_CHECK_JOBS=${GPU_CHECK_JOBS:-8}; weights ;;
      attention) attention ;;
      kvcache) one_gpu kvcache ;;
      offload) offload ;;
      tp) tp_compare ;;
      all) for t in ${BENCH_LLAMA_TYPES:-$(default_types)}; do bench_type "$t"; done ;;
      bf16 | f16 | f32 | q8_0 | q4_0 | q4_1 | q4_k_m | q5_k_m | q6_k) bench_type "$s" ;;
      *) echo "bench-gpu llama: unknown step '$s' (setup, weights, attention, kvcache, offload, tp, all, or a type: bf16 q4_0 q8_0 q4_k_m ...)" ;;
    esac
  done
  echo
  echo "== seer against llama.cpp, same GGUF, same device, one process at a time (speedup > 1: seer faster;"
  echo "   decode: ms per step of the whole batch; floor: W as seer's backend stores it + B*L*c, over BW)"
  if [ -s "$summary" ]; then
    { printf 'type\tpoint\tllama.cpp\tseer\tspeedup\tof floor\n'; cat "$summary"; } |
      awk -F'\t' '{printf "%-7s %-50s %10s %10s %8s %8s\n", $1, $2, $3, $4, $5, $6}'
  else
    echo "(nothing measured since the last setup)"
  fi
  [ -s "$work/tests-summary.txt" ] && cat "$work/tests-summary.txt"
  echo "bench-gpu llama: done in ${SECONDS}s"
}

[ $# -eq 0 ] && set -- setup all
run_all "$@" 2>&1 | tee -a "$out/bench-llamacpp.log"
exit "${PIPESTATUS[0]}"
