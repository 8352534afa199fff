#!/bin/bash
# offload_bench.sh: --moe-backend offload on the GPU machine (after tests_gpu/run_on_gpu.sh has
# built build-gpu/): bench/bench_offload.c on
#   1. a Laguna-S-shaped model scaled to 1 dense + 6 MoE layers (5 q4_K, 1 bf16, the 39:8 ratio
#      rounded) with the cache scaled to 10.2 slots per MoE layer (61 slots): exact pools
#      against uniform at the same bytes, the model's own routing and a replayed trace;
#   2. the Qwen3-30B-A3B shape (48 layers, 128 experts, top-8, q4_K) capped at 16 GiB, caches
#      of 25% and 50% of the experts (1536 and 3072 slots), own routing and a trace;
# each against the transfer bound (the fused decode of the same model as the resident time).
# Models and traces go to $FT_BENCH_DIR (default /tmp); results to $OUT/offload_bench.txt.
set -o pipefail
B=${B:-build-gpu}; D=${FT_BENCH_DIR:-/tmp}; OUT=${OUT:-/tmp}; P=${P:-256}; N=${N:-64}
LOG="$OUT/offload_bench.txt"
cc -O2 -std=c11 -D_GNU_SOURCE -I. -I.devpkgs/usr/include bench/bench_offload.c "$B/libft.a" -o "$B/bench_offload" \
    -L/tmp/ftlibs -L/usr/local/cuda/lib64 -lpcre2-8 -ljansson -levent -levent_pthreads -lpthread -lm -ldl \
    -lcudart_static -lrt -lstdc++ || exit 1
run() { echo "+ bench_offload run $*" >&2; "$B/bench_offload" run "$@" 2>>"$OUT/offload_bench.err" | tee -a "$LOG"; }
tps() { sed -n "s/.*tg$N \([0-9.]*\) tok.*/\1/p"; }

if [ -z "$SKIP_QWEN" ]; then
    Q=$D/qwen3-30b-shape.gguf
    [ -f "$Q" ] || "$B/ft" synth "$Q" --arch qwen3moe --layers 48 --embd 2048 --heads 32 --kv-heads 4 --head-dim 128 \
        --experts 128 --top-k 8 --ff 768 --ctx 4096 --expert-types q4_K --dense-type q8_0 \
        --vocab-from .gpuvocab/ggml-vocab-qwen2.gguf >/dev/null 2>&1
    "$B/ft" trace-gen --model "$Q" --steps 1000 --seed 5 -o "$D/qwen.ftrt" >/dev/null 2>&1
    echo "== Qwen3-30B-A3B shape, 16 GiB cap, pp$P tg$N" | tee -a "$LOG"
    R=$(run "$Q" --fused -p $P -n $N | tps)
    for s in 1536 3072; do
        run "$Q" --slots $s --limit 16 -p $P -n $N --resident-tps "$R"
        run "$Q" --slots $s --limit 16 -p $P -n $N --resident-tps "$R" --trace "$D/qwen.ftrt"
    done
fi
if [ -z "$SKIP_LAGUNA" ]; then
    L=$D/laguna6.gguf
    [ -f "$L" ] || "$B/bench_offload" laguna "$L" 6 1 >/dev/null 2>&1
    "$B/ft" trace-gen --model "$L" --steps 1000 --seed 5 -o "$D/laguna6.ftrt" >/dev/null 2>&1
    echo "== Laguna-S shape, 1 dense + 5 q4_K + 1 bf16 MoE layers, 61 slots, 16 GiB cap, pp$P tg$N" | tee -a "$LOG"
    R=$(run "$L" --fused -p $P -n $N | tps)
    for lay in "" --uniform; do
        run "$L" --slots 61 $lay --limit 16 -p $P -n $N --resident-tps "$R"
        run "$L" --slots 61 $lay --limit 16 -p $P -n $N --resident-tps "$R" --trace "$D/laguna6.ftrt"
    done
fi
