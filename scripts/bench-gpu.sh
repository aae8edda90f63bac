#!/usr/bin/env bash
# bench-gpu.sh: decode at real shapes in one call on a GPU machine. Builds the seer tool and
# test_bench with CUDA into build-gpu, then runs the sections asked for, each bounded in time:
#   plain   seer bench, synthetic Llama-3.1-8B (bf16), B = 1 at 4K and 32K, against the floor,
#           and the prefill of a 32K prompt
#   check   test_bench: the synthetic weights, KV fill and bandwidth probe on the GPU against
#           the CPU reference
#   depth   B = 1 at 4K .. 128K, with streaming self-speculation (K 512, G 2 and 4) under
#           SYNTHETIC ACCEPTANCE 0.8
#   batch   B = 4, 8 and 14 (about the H100's capacity at 32K) at 4K and 32K, the same
#           speculation
#   shapes  synthetic Llama-2-7B and Qwen2.5-7B, B = 1 at 4K and 32K, the same speculation
#   families synthetic Qwen3-8B, Gemma-3-4B (windowed layers: the floor counts their window),
#           Mistral-7B and Phi-3-mini-128K, B = 1 at 4K and 32K, a 4K prefill, streaming
#           chains (G 4) and trees of 8 nodes
#   gamma   Llama-3.1-8B at 32K, B = 1 and 8: G 1, 2, 4, 8 and K 512, 2048
#   long    Llama-3.1-8B at 128K, B = 2 and 3, the same speculation as depth
#   peer    HF transformers at the plain section's points (scripts/hf_peer.py: the same
#           synthetic shape, LlamaForCausalLM bf16, SDPA, DynamicCache, eager), then seer bench
#           at the same points with --peer (and the depth section's speculation): the peer's
#           ms/step and seer's speedup over it in the table, the JSON and the plot (needs
#           python3 with torch and transformers)
#   resume  a preempted request of 32K cached tokens on the Llama-3.1-8B shape resumed by
#           recomputation (a 32K prefill) against by copy from the KV host tier (its pages back
#           from page-locked memory, then the pending token's step)
#   sparse  the sparse FFN draft (Griffin): Llama-3.1-8B, B = 1 at 32K, streaming K 512, G 4,
#           draft steps at FFN density 1 (none), 0.65, 0.5 and 0.3, each with the model's
#           weights and its q4_0 draft weights (target: T_D <= 0.5 T_T at 0.5); the neurons
#           chosen once (--spec-ffn-refresh 0), so that T_D is the step's alone
#   offload weights in host memory (docs/host-weights.md): synthetic Llama-3.1-70B (bf16, 141 GB)
#           with 40 of 80 layers on the GPU and Llama-3.1-8B with 0 and 16 of 32, B = 1 and 8
#           at 4K: ms/step against the PCIe floor (streamed bytes / measured host-to-device
#           bandwidth); llama.cpp with -ngl on a 70B-shaped file: `scripts/bench-gpu.sh llama offload`
#   profile device time per op (SEER_CUDA_PROFILE) at 4K and 32K, B = 1 and 8, plain and
#           streaming speculation
# The log goes to $OUT/bench-gpu.log when OUT is set (else build-gpu/bench/), with each
# section's JSON (seer bench --json-out) beside it, and its plot (X.png) where gnuplot is
# installed; the plain table comes last. Plot a JSON elsewhere: seer bench --replot X.json
# --plot X.png.
# Run `scripts/gpu-check.sh stage` once on a machine with the build deps first (.gpu/deps
# holds the headers the GPU machine lacks).
#
# scripts/bench-gpu.sh llama [setup] [TYPE ...]: seer against llama.cpp on the same 8B-shaped
# GGUF files (bf16, q4_0, q8_0, ...) at the same points, the llama.cpp CUDA build started in
# the background first; steps over several calls (scripts/bench-llamacpp.sh says how). Run
# `scripts/peer-llamacpp.sh stage` once on a machine with PyPI first.
# scripts/bench-gpu.sh llama kvcache: the KV cache's types in one call on the bf16 file: llama.cpp
# with -ctk q8_0 -ctv q8_0 and seer bench --kv-type bf16, q8, q4 at 1 x 32K, 14 x 32K (bf16's
# capacity on an H100) and 26 x 32K, each seer run printing the KV tokens the device holds.
# `scripts/peer-llamacpp.sh stage` once on a machine with PyPI first. `scripts/bench-gpu.sh
# llama tp` compares tensor parallelism: seer at --tp 1, 2 and 4, llama.cpp with -sm layer
# and -sm row over the same GPUs, the same file, a side-by-side table last.
#   BENCH_SECTIONS="plain check depth batch"   the sections to run, in this order
#   BENCH_DEADLINE=400                         seconds the whole script may take
#   BENCH_PEER_CTX, BENCH_PEER_BATCH           the peer section's L and B lists (default: plain's)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
if [ "${1:-}" = llama ]; then
  shift
  exec scripts/bench-llamacpp.sh "$@"
fi
root=$PWD
out=${OUT:-$root/build-gpu/bench}
mkdir -p "$out" build-gpu/bench-tmp
tmp=build-gpu/bench-tmp
rm -f "$tmp"/*.txt "$tmp"/*.err # tables of an earlier call would pass for this one's
sections=${BENCH_SECTIONS:-plain check depth batch}
deadline=${BENCH_DEADLINE:-400}
left() { echo $((deadline - SECONDS)); }
# The plain section's points; the peer section measures the same ones unless told otherwise.
plain_shape=llama-3.1-8b plain_ctx=4096,32768 plain_batch=1

bench() { # name, seconds, args...
  local name=$1 secs=$2 l
  shift 2
  l=$(left)
  [ "$l" -lt "$secs" ] && secs=$l
  if [ "$secs" -lt 20 ]; then
    echo "== $name: skipped, ${l}s left"
    return
  fi
  local plot=()
  command -v gnuplot >/dev/null && plot=(--plot "$out/$name.png")
  echo "== $name (at most ${secs}s): seer bench $*"
  timeout "$secs" build-gpu/seer bench --backend cuda --json-out "$out/$name.json" \
    ${plot[@]+"${plot[@]}"} "$@" >"$tmp/$name.txt" 2>"$tmp/$name.err"
  echo "exit $? after ${SECONDS}s"
  cat "$tmp/$name.txt"
  grep -v '^seer bench: L=' "$tmp/$name.err" | tail -n 5
  [ ${#plot[@]} -eq 0 ] && echo "(no gnuplot here: seer bench --replot $name.json --plot $name.png elsewhere)"
  return 0
}

# HF transformers at the plain section's points, then seer at the same points with --peer.
# The peer runs first and exits, so the two never share the GPU's memory.
peer() {
  local ctx=${BENCH_PEER_CTX:-$plain_ctx} batch=${BENCH_PEER_BATCH:-$plain_batch} secs=150 l
  l=$(left)
  [ "$l" -lt "$secs" ] && secs=$l
  if ! python3 -c 'import torch, transformers' 2>/dev/null; then
    echo "== peer: skipped, python3 has no torch or transformers"
    return
  fi
  if [ "$secs" -lt 60 ]; then
    echo "== peer: skipped, ${l}s left"
    return
  fi
  echo "== peer (at most ${secs}s): scripts/hf_peer.py --shape $plain_shape --depths $ctx --batches $batch"
  rm -f "$out/hf-peer.json"
  timeout "$secs" python3 scripts/hf_peer.py --shape "$plain_shape" --depths "$ctx" --batches "$batch" \
    --steps 20 --warmup 3 --json-out "$out/hf-peer.json" >"$tmp/hf-peer.txt" 2>"$tmp/hf-peer.err"
  echo "exit $? after ${SECONDS}s"
  cat "$tmp/hf-peer.txt"
  grep -v '^hf_peer: L=' "$tmp/hf-peer.err" | tail -n 5
  if [ ! -s "$out/hf-peer.json" ]; then
    echo "== peer: hf_peer.py wrote no points, so seer's run with --peer is skipped"
    return
  fi
  bench peer 150 --synthetic "$plain_shape" --ctx-list "$ctx" --batch-list "$batch" --steps 20 \
    --prefill 0 $spec --peer "$out/hf-peer.json"
}

run_all() {
  echo "== bench-gpu $(date -u +%Y-%m-%dT%H:%M:%SZ), sections: $sections"
  command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  nvcc --version | tail -n 1
  if [ -d "$root/.gpu/deps" ]; then
    export PKG_CONFIG_PATH=$root/.gpu/deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export LD_LIBRARY_PATH=$root/.gpu/deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  echo "== build"
  if ! { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
           >"$tmp/configure.log" 2>&1 &&
         cmake --build build-gpu -j"$(nproc)" --target seer_cli test_bench >"$tmp/build.log" 2>&1; }; then
    tail -n 40 "$tmp/configure.log" "$tmp/build.log"
    echo "bench-gpu: build failed"
    return 1
  fi
  echo "built in ${SECONDS}s"

  spec="--spec streaming --spec-budget-list 512 --spec-gamma-list 2,4 --synthetic-accept 0.8"
  for s in $sections; do
    case $s in
      plain) bench plain 120 --synthetic "$plain_shape" --ctx-list "$plain_ctx" --batch-list "$plain_batch" \
               --steps 20 --prefill 32768 ;;
      peer) peer ;;
      check)
        echo "== check: test_bench"
        timeout "$(( $(left) < 60 ? $(left) : 60 ))" build-gpu/test_bench 2>&1 |
          grep -E 'bench_gpu|OK|FAIL|PASS|SKIP|ERROR' ;;
      depth) bench depth 150 --synthetic llama-3.1-8b --ctx-list 4096,16384,32768,65536,131072 \
               --batch-list 1 --steps 20 --prefill 0 $spec ;;
      batch) bench batch 150 --synthetic llama-3.1-8b --ctx-list 4096,32768 --batch-list 4,8,14 \
               --steps 20 --prefill 0 $spec ;;
      shapes)
        bench llama-2-7b 90 --synthetic llama-2-7b --ctx-list 4096,32768 --batch-list 1 --steps 20 $spec
        bench qwen2.5-7b 90 --synthetic qwen2.5-7b --ctx-list 4096,32768 --batch-list 1 --steps 20 $spec ;;
      families) # the newer families' shapes: decode, verification chains and trees, draft steps
        for sh in qwen3-8b gemma-3-4b mistral-7b phi-3-mini-128k; do
          bench "$sh" 75 --synthetic "$sh" --ctx-list 4096,32768 --batch-list 1 --steps 20 --prefill 4096 \
            --spec streaming --spec-budget-list 512 --spec-gamma-list 4 --spec-tree-size 8 --synthetic-accept 0.8
        done ;;
      gamma) bench gamma 150 --synthetic llama-3.1-8b --ctx-list 32768 --batch-list 1,8 --steps 20 \
               --prefill 0 --spec streaming --spec-budget-list 512,2048 --spec-gamma-list 1,2,4,8 \
               --synthetic-accept 0.8 ;;
      long) bench long 120 --synthetic llama-3.1-8b --ctx-list 131072 --batch-list 2,3 --steps 20 \
              --prefill 0 $spec ;;
      resume) bench resume 150 --synthetic llama-3.1-8b --ctx-list 4096 --batch-list 1 --steps 5 \
                --prefill 0 --resume 32768 ;;
      sparse) # T_D of the sparse FFN draft per density, model's and q4_0 draft weights
        for d in 1 0.65 0.5 0.3; do
          bench "sparse-$d" 60 --synthetic llama-3.1-8b --ctx-list 32768 --batch-list 1 --steps 20 \
            --prefill 0 --spec streaming --spec-budget-list 512 --spec-gamma-list 4 --synthetic-accept 0.8 \
            --spec-weights none,q4_0 --spec-ffn-density "$d" --spec-ffn-refresh 0
        done ;;
      offload) # models larger than the GPU: layers streamed from host memory every step
        bench offload-70b 240 --synthetic llama-3.1-70b --gpu-layers 40 --ctx-list 4096 --batch-list 1,8 \
          --steps 5 --warmup 1 --prefill 0
        for g in 0 16; do
          bench "offload-8b-$g" 60 --synthetic llama-3.1-8b --gpu-layers "$g" --ctx-list 4096 --batch-list 1,8 \
            --steps 10 --warmup 2 --prefill 0
        done ;;
      profile) # device time per op (SEER_CUDA_PROFILE: no graphs, an event after every op)
        for pt in "4096 1 none" "32768 1 none" "32768 1 streaming" "32768 8 none"; do
          set -- $pt
          SEER_CUDA_PROFILE="$out/profile-$1-$2-$3.txt" bench "profile-$1-$2-$3" 60 \
            --synthetic llama-3.1-8b --ctx-list "$1" --batch-list "$2" --steps 10 --warmup 1 \
            --prefill 0 --spec "$3" --spec-budget-list 512 --spec-gamma-list 4 --synthetic-accept 0.8
          echo "-- profile L=$1 B=$2 spec=$3 (all forward calls of the run)"
          cat "$out/profile-$1-$2-$3.txt"
        done ;;
      *) echo "unknown section $s" ;;
    esac
  done

  echo
  if [ -f "$tmp/plain.txt" ]; then
    echo "== summary (plain decode, synthetic Llama-3.1-8B bf16)"
    sed -n '/^ *L  *B  *ms\/step/,/^$/p' "$tmp/plain.txt"
  fi
  if [ -f "$tmp/peer.txt" ]; then
    echo "== summary (seer against the peer at the same L and B)"
    grep '^peer ' "$tmp/peer.txt"
    sed -n '/^ *L  *B  *ms\/step/,/^$/p' "$tmp/peer.txt"
  fi
  echo "bench-gpu: done in ${SECONDS}s"
}

run_all 2>&1 | tee "$out/bench-gpu.log"
exit "${PIPESTATUS[0]}"
