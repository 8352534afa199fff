#!/bin/bash
# offload_bench.sh: --moe-backend offload on the GPU machine (after tests_gpu/run_on_gpu.sh has
# built build-gpu/), with `ft bench` on
#   1. a Laguna-S-shaped model scaled to 1 dense + 6 MoE layers (5 q4_K, 1 bf16, the 39:8 ratio
#      rounded) with the cache scaled to 10.2 slots per MoE layer (61 slots): exact pools
#      against uniform at the same bytes, the model's own routing and a replayed trace;
#   2. the Qwen3-30B-A3B shape (48 layers, 128 experts, top-8, q4_K) capped at 16 GiB, caches
#      of 25% and 50% of the experts (1536 and 3072 slots), own routing and a trace;
# each against the transfer bound (the fused decode of the same model as the resident time,
# measured once per model and handed to the offload runs with --resident-tok-s; without it, each
# ft bench measures its own).
# Each figure is the median of $REPS runs (ft bench -r) after a short warm-up run.
# Models and traces go to $FT_BENCH_DIR (default /tmp); results to $OUT/offload_bench.txt.
set -o pipefail
B=${B:-build-gpu}; D=${FT_BENCH_DIR:-/tmp}; OUT=${OUT:-/tmp}; P=${P:-256}; N=${N:-64}; REPS=${REPS:-3}
LOG="$OUT/offload_bench.txt"
VOCAB=.gpuvocab/ggml-vocab-qwen2.gguf
run() { # MODEL [ft bench flags]: the table goes to the log
    local m="$1"; shift
    echo "+ ft bench -m $m --device cuda -p $P -n $N -r $REPS $*" | tee -a "$LOG" >&2
    "$B/ft" bench -m "$m" --device cuda -p "$P" -n "$N" -r "$REPS" "$@" 2>>"$OUT/offload_bench.err" | tee -a "$LOG"
}
tps() { sed -n 's/^decode  *[0-9]* tokens  *\([0-9.]*\) tok\/s.*/\1/p'; }

if [ -z "$SKIP_QWEN" ]; then
    Q=$D/qwen3-30b-shape.gguf
    [ -f "$Q" ] || "$B/ft" synth "$Q" --arch qwen3moe --layers 48 --embd 2048 --heads 32 --kv-heads 4 --head-dim 128 \
        --experts 128 --top-k 8 --ff 768 --ctx 4096 --expert-types q4_K --dense-type q8_0 \
        --vocab-from "$VOCAB" >/dev/null 2>&1
    "$B/ft" trace-gen --model "$Q" --steps 1000 --seed 5 -o "$D/qwen.ftrt" >/dev/null 2>&1
    echo "== Qwen3-30B-A3B shape, 16 GiB cap, pp$P tg$N" | tee -a "$LOG"
    R=$(run "$Q" --moe-backend fused | tps); RT=(${R:+--resident-tok-s "$R"})
    for s in 1536 3072; do
        run "$Q" --moe-backend offload --moe-cache-size $s --gpu-memory-limit 16 "${RT[@]}"
        run "$Q" --moe-backend offload --moe-cache-size $s --gpu-memory-limit 16 "${RT[@]}" \
            --moe-route-trace "$D/qwen.ftrt"
    done
fi
if [ -z "$SKIP_LAGUNA" ]; then
    L=$D/laguna6.gguf
    # Laguna-S: hidden 3072, 256 experts, top-10, expert FFN 1024, one leading dense layer
    [ -f "$VOCAB" ] && LV=(--vocab-from "$VOCAB") || LV=()
    [ -f "$L" ] || "$B/ft" synth "$L" --arch laguna --layers 7 --dense-lead 1 --embd 3072 --heads 24 --kv-heads 4 \
        --head-dim 128 --experts 256 --top-k 10 --ff 1024 --ctx 4096 --dense-type q8_0 \
        --expert-types q4_K,q4_K,q4_K,q4_K,q4_K,q4_K,bf16 "${LV[@]}" --name "bench laguna-s shape" >/dev/null 2>&1
    "$B/ft" trace-gen --model "$L" --steps 1000 --seed 5 -o "$D/laguna6.ftrt" >/dev/null 2>&1
    echo "== Laguna-S shape, 1 dense + 5 q4_K + 1 bf16 MoE layers, 61 slots, 16 GiB cap, pp$P tg$N" | tee -a "$LOG"
    R=$(run "$L" --moe-backend fused | tps); RT=(${R:+--resident-tok-s "$R"})
    for lay in exact uniform; do
        run "$L" --moe-backend offload --moe-cache-size 61 --moe-pool-layout $lay --gpu-memory-limit 16 \
            "${RT[@]}"
        run "$L" --moe-backend offload --moe-cache-size 61 --moe-pool-layout $lay --gpu-memory-limit 16 \
            "${RT[@]}" --moe-route-trace "$D/laguna6.ftrt"
    done
fi
