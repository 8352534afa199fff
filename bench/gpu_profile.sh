#!/bin/bash
# gpu_profile.sh: on the GPU machine, after tests_gpu/run_on_gpu.sh (or its build step) made
# build-gpu/: the decode and prefill speed of an 8-layer slice of Qwen3-30B-A3B's shape (Qwen2
# vocabulary), and where the GPU time of a step goes: FT_CUDA_PROFILE=1 (launch_profile.cu)
# times every kernel launch site inside the replayed decode graphs and the direct prefill steps
# (a table per kind, per step; divide by 8 for one layer). Decode at two depths: after a
# 512-token prompt (~512-576 cached keys) and from an empty context (llama-bench's tg).
# Output in $OUT (or /tmp/ft-gpu-out): profile.log.
set -o pipefail
OUT=${OUT:-/tmp/ft-gpu-out}
mkdir -p "$OUT"
FT=${FT:-build-gpu/ft}
vocab=${VOCAB:-.gpuvocab/ggml-vocab-qwen2.gguf}
log="$OUT/profile.log"
M=/tmp/slice8.gguf
[ -f $M ] || $FT synth $M --layers 8 --embd 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128 --top-k 8 \
    --ff 768 --dense-type q8_0 --expert-types q4_K --vocab-from "$vocab" >/dev/null 2>&1 || { echo "synth failed"; exit 1; }
bench() { $FT bench -m $M --device cuda "$@" 2>/dev/null | grep -E 'prompt|decode' | tr -s ' ' | tr '\n' ' '; }
# speed, profiling off, the variants alternating
for rep in 1 2; do
    echo "8 layers -p 512 -n 128: $(bench -p 512 -n 128 -r 3)" | tee -a "$log"
    echo "8 layers -p 0 -n 128:   $(bench -p 0 -n 128 -r 3)" | tee -a "$log"
done
echo "--- profile: -p 512 -n 64 (prefill: direct steps; decode after 512: graph-replayed)" | tee -a "$log"
FT_CUDA_PROFILE=1 $FT bench -m $M --device cuda -p 512 -n 64 -r 1 2>&1 >/dev/null | grep -v "^run " | tee -a "$log"
echo "--- profile: -p 0 -n 64 (decode from an empty context)" | tee -a "$log"
FT_CUDA_PROFILE=1 $FT bench -m $M --device cuda -p 0 -n 64 -r 1 2>&1 >/dev/null | grep -A40 "graph-replayed" | tee -a "$log"
