#!/usr/bin/env bash
# cpu_mode_bench.sh: `--moe-backend cpu` on the Qwen3-30B-A3B shape (the model of
# bench/gpu_vs_llama.sh, written when missing) at 16 GiB of GPU memory, -t threads: the flag
# meeting (stream wait; and its spinning-kernel form, FT_CPU_EXPERTS_MEETING=spin) against the
# event meeting (FT_CPU_EXPERTS_MEETING=event) alternated, first with FT_CPU_EXPERTS_PROFILE=1
# (per-layer host times, the meeting's round trip, the pool's wake-up), prefill through the
# overlay (double-buffered, and serial with --disable-moe-prefill-overlap), and the CPU
# engine's decode on the same model for reference.
#
# usage: FT=build-gpu/ft FT_BENCH_DIR=/tmp bench/cpu_mode_bench.sh [-t 16] [-n 128] [-q]
# (-q: only the three profiled runs: stream wait, event, spinning import)
# llama.cpp's figure on the H200 (issue 8, 2026-11-29): decode 38.6 tok/s with -ot exps=CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
threads=16 n_gen=128 quick=0
while [ $# -gt 0 ]; do
    case "$1" in
        -t) threads="$2"; shift 2 ;;
        -n) n_gen="$2"; shift 2 ;;
        -q) quick=1; shift ;;
        *) echo "cpu_mode_bench: unexpected argument '$1'" >&2; exit 2 ;;
    esac
done
FT="${FT:-build/ft}"
dir="${FT_BENCH_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ft/bench}"
model="$dir/qwen3-30b-a3b-full.gguf"
if [ ! -f "$model" ]; then
    FT="$FT" FT_BENCH_DIR="$dir" bash bench/gpu_vs_llama.sh -p 16 -n 4 -r 1 >/dev/null || exit 1
fi
cpu_bench() { # label, env..., -- ft bench args
    local label="$1"; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local out
    out=$(env "${envs[@]}" timeout 90 "$FT" bench -m "$model" --device cuda --moe-backend cpu -t "$threads" \
          --gpu-memory-limit 16 -r 1 "$@" 2>&1)
    echo "$out" | grep -E "profile|cpu experts:|^prompt|^decode" | sed "s/^/[$label] /"
}
cpu_bench "stream wait, profiled" FT_CPU_EXPERTS_PROFILE=1 -- -p 512 -n "$n_gen"
cpu_bench "event, profiled" FT_CPU_EXPERTS_PROFILE=1 FT_CPU_EXPERTS_MEETING=event -- -p 512 -n "$n_gen"
cpu_bench "spin, profiled" FT_CPU_EXPERTS_PROFILE=1 FT_CPU_EXPERTS_MEETING=spin -- -p 512 -n "$n_gen"
[ "$quick" = 1 ] && exit 0
cpu_bench "stream wait" FT_CPU_EXPERTS_MEETING=flag -- -p 512 -n "$n_gen"
cpu_bench "event" FT_CPU_EXPERTS_MEETING=event -- -p 512 -n "$n_gen"
cpu_bench "stream wait, serial overlay" FT_CPU_EXPERTS_MEETING=flag -- -p 512 -n 16 --disable-moe-prefill-overlap
echo "[cpu engine] $(timeout 120 "$FT" bench -m "$model" --device cpu -t "$threads" -p 16 -n 64 -r 1 2>&1 |
    grep -E "^decode|bytes|GB/s" | tr '\n' ' ')"
