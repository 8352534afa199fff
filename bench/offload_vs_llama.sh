#!/usr/bin/env bash
# offload_vs_llama.sh: ft's --moe-backend offload (and hybrid) against llama.cpp's best
# --n-cpu-moe at equal measured GPU memory, on the GPU machine, in one call.
#
# usage: bench/offload_vs_llama.sh -m FILE.gguf [--cap-mib 16384] [--ncmoe "4 6 8 10 12 14 16"]
#                                  [--limits "15.4 15.2 15.0 14.6"] [--trace FILE.ftrt]
#                                  [-n 64] [-r 3] [--llama-bench PATH] [--modes "offload hybrid"]
#
# 1. llama-bench -ngl 99 --n-cpu-moe N -p 0 -n NGEN for each N in turn (ascending: the first that
#    fits is its best), nvidia-smi's peak memory polled every 0.1 s; a run that fails (out of
#    memory) or peaks above the cap does not count;
# 2. for each of --modes (default offload): ft bench --moe-backend MODE --gpu-memory-limit L for
#    each L in turn (descending: the first whose peak fits is used), with the model's own
#    routing, then with --trace when given; --resident-tok-s is passed so no fused run comes
#    first.
# Each engine's figure is the median of -r runs (llama-bench -r, ft bench -r). Prints a table
# of every run (tok/s, peak MiB) and the ratio of ft's fitting runs to llama.cpp's best.
# llama-bench: --llama-bench, else $LLAMA_BENCH, else /tmp/llama.cpp/b/bin/llama-bench;
# $LLAMA_ARGS adds flags (default -fa 1), $FT_ARGS flags to every ft bench (e.g. a cache policy).
# FT (default build/ft) is ft, built with CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."

model="" cap=16384 ncmoe="4 6 8 10 12 14 16" limits="15.4 15.2 15.0 14.6" trace="" n_gen=64 rounds=3 modes=offload
llama="${LLAMA_BENCH:-/tmp/llama.cpp/b/bin/llama-bench}"
while [ $# -gt 0 ]; do
    case "$1" in
        -m) model="$2"; shift 2 ;;
        --cap-mib) cap="$2"; shift 2 ;;
        --ncmoe) ncmoe="$2"; shift 2 ;;
        --limits) limits="$2"; shift 2 ;;
        --trace) trace="$2"; shift 2 ;;
        -n) n_gen="$2"; shift 2 ;;
        -r) rounds="$2"; shift 2 ;;
        --llama-bench) llama="$2"; shift 2 ;;
        --modes) modes="$2"; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "offload_vs_llama: unexpected argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
FT="${FT:-build/ft}"
[ -n "$model" ] || { echo "offload_vs_llama: -m FILE.gguf is required" >&2; exit 2; }
[ -x "$FT" ] || { echo "offload_vs_llama: $FT missing (make, with nvcc)" >&2; exit 1; }
[ -x "$llama" ] || { echo "offload_vs_llama: no llama-bench at $llama" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# peak MEMORY.USED (MiB) of GPU 0 while the command runs: "$out/peak"
with_peak() {
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > "$out/mem" &
    local smi=$! rc=0
    "$@" || rc=$?
    sleep 0.3
    kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null || true
    sort -n "$out/mem" | tail -1 > "$out/peak"
    return $rc
}

resident=$("$FT" bench -m "$model" --device cuda -p 16 -n "$n_gen" -r 1 --json | python3 -c \
    'import json,sys; print(json.load(sys.stdin)["decode_tok_s"])')
echo "fused (resident) decode: $resident tok/s" >&2

echo "engine        setting                tok/s    peak MiB  fits ${cap}"
best_ll="" best_ll_at=""
for n in $ncmoe; do
    # shellcheck disable=SC2086
    if with_peak "$llama" -m "$model" -ngl 99 --n-cpu-moe "$n" -p 0 -n "$n_gen" -r "$rounds" -o json \
        ${LLAMA_ARGS:--fa 1} > "$out/ll.json" 2> "$out/ll.err"; then
        tps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["avg_ts"])' "$out/ll.json")
    else
        tps="failed"
    fi
    peak=$(cat "$out/peak")
    fits=no
    [ "$tps" != failed ] && [ "$peak" -le "$cap" ] && fits=yes
    printf "llama.cpp     --n-cpu-moe %-10s %8s  %8s  %s\n" "$n" "$tps" "$peak" "$fits"
    if [ "$fits" = yes ]; then best_ll=$tps; best_ll_at=$n; break; fi
done

ft_run() { # MODE LIMIT [flags]: decode tok/s (median of -r), peak into $out/peak
    local mode="$1" lim="$2"; shift 2
    with_peak "$FT" bench -m "$model" --device cuda --moe-backend "$mode" --gpu-memory-limit "$lim" \
        --resident-tok-s "$resident" -p 16 -n "$n_gen" -r "$rounds" --json ${FT_ARGS:-} "$@" > "$out/ft.json" 2> "$out/ft.err" \
        || { tail -3 "$out/ft.err" >&2; echo failed; return; }
    grep -h "^hybrid:" "$out/ft.err" >&2 || true
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["decode_tok_s"])' "$out/ft.json"
}
ratios=""
for mode in $modes; do
    ft_lim="" ft_own="" ft_tr=""
    for lim in $limits; do
        tps=$(ft_run "$mode" "$lim")
        peak=$(cat "$out/peak")
        fits=no
        [ "$tps" != failed ] && [ "$peak" -le "$cap" ] && fits=yes
        printf "ft %-10s --gpu-memory-limit %-4s %8s  %8s  %s\n" "$mode" "$lim" "$tps" "$peak" "$fits"
        if [ "$fits" = yes ]; then ft_lim=$lim; ft_own=$tps; break; fi
    done
    [ -n "$ft_lim" ] || { echo "offload_vs_llama: no ft $mode limit fits the cap" >&2; continue; }
    if [ -n "$trace" ]; then
        ft_tr=$(ft_run "$mode" "$ft_lim" --moe-route-trace "$trace")
        printf "ft %-10s --gpu-memory-limit %-4s %8s  %8s  (route trace)\n" "$mode" "$ft_lim" "$ft_tr" "$(cat "$out/peak")"
    fi
    ratios="$ratios $mode:$ft_own:${ft_tr:-}"
done
[ -n "$best_ll" ] || { echo "llama.cpp: no --n-cpu-moe of '$ncmoe' fits ${cap} MiB"; exit 0; }
python3 - "$best_ll" "$best_ll_at" $ratios <<'EOF'
import sys
ll, at = float(sys.argv[1]), sys.argv[2]
for r in sys.argv[3:]:
    mode, own, tr = r.split(":")
    if own and own != "failed":
        print(f"ft {mode} own routing / llama.cpp --n-cpu-moe {at}: {float(own) / ll:.2f}x")
    if tr and tr != "failed":
        print(f"ft {mode} route trace / llama.cpp --n-cpu-moe {at}: {float(tr) / ll:.2f}x")
EOF
