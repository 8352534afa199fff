#!/usr/bin/env bash
# cpu_mode_bench.sh: `--moe-backend cpu` on the Qwen3-30B-A3B shape (the model of
# bench/gpu_vs_llama.sh, written when missing) at 16 GiB of GPU memory, -t threads: once
# profiled (FT_CPU_EXPERTS_PROFILE=1: per-layer host times, the meetings' round trips, the
# pool's wake-up), then twice in turn the flag meeting decoding through CUDA graphs (the
# default), without graphs (FT_CUDA_GRAPHS=0: the stream waits with cuStreamWaitValue32), the
# event meeting (FT_CPU_EXPERTS_MEETING=event), the CPU op's gate/up and down as two pool
# jobs (FT_CPU_MOE_ONE_JOB=0) and the routing on the CPU (FT_CPU_EXPERTS_ROUTE=host), then with
# one thread fewer; prefill through
# the overlay (double-buffered, and serial with --disable-moe-prefill-overlap), and the CPU
# engine's decode on the same model for reference.
#
# usage: FT=build-gpu/ft FT_BENCH_DIR=/tmp bench/cpu_mode_bench.sh [-t 16] [-n 128] [-q | -Q]
# (-q: only the profiled run; -Q: no CPU engine reference)
# llama.cpp's figure on the H200 (issue 8, 2026-11-29): decode 38.6 tok/s with -ot exps=CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
threads=16 n_gen=128 quick=0
while [ $# -gt 0 ]; do
    case "$1" in
        -t) threads="$2"; shift 2 ;;
        -n) n_gen="$2"; shift 2 ;;
        -q) quick=1; shift ;;
        -Q) quick=2; shift ;;
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
    out=$(env "${envs[@]}" timeout 90 "$FT" bench -m "$model" --device cuda --moe-backend cpu -t "$threads" -r 1 \
          --gpu-memory-limit 16 "$@" 2>&1)
    echo "$out" | grep -E "profile|cpu experts:|^prompt|^decode" | sed "s/^/[$label] /"
}
cpu_bench "graphs, profiled" FT_CPU_EXPERTS_PROFILE=1 -- -p 512 -n "$n_gen"
[ "$quick" = 1 ] && exit 0
for round in 1 2; do
    cpu_bench "graphs" FT_CUDA_GRAPHS=1 -- -p 512 -n "$n_gen" -r 3
    cpu_bench "no graphs, stream wait" FT_CUDA_GRAPHS=0 -- -p 512 -n "$n_gen" -r 3
    cpu_bench "event" FT_CPU_EXPERTS_MEETING=event -- -p 512 -n "$n_gen" -r 3
    cpu_bench "graphs, two CPU jobs" FT_CPU_MOE_ONE_JOB=0 -- -p 512 -n "$n_gen" -r 3
    cpu_bench "graphs, routing on the CPU" FT_CPU_EXPERTS_ROUTE=host -- -p 512 -n "$n_gen" -r 3
done
cpu_bench "graphs, -t $((threads - 1))" FT_CUDA_GRAPHS=1 -- -p 512 -n "$n_gen" -r 3 -t $((threads - 1))
cpu_bench "graphs, serial overlay" FT_CUDA_GRAPHS=1 -- -p 512 -n 16 --disable-moe-prefill-overlap
[ "$quick" = 2 ] && exit 0
echo "[cpu engine] $(timeout 120 "$FT" bench -m "$model" --device cpu -t "$threads" -p 16 -n 64 -r 1 2>&1 |
    grep -E "^decode|bytes|GB/s" | tr '\n' ' ')"
