#!/usr/bin/env bash
# ab_bench.sh: two ft binaries side by side on the GPU, runs alternating (A, B, A, B, ...), in
# each expert mode: fused, offload and cpu at a capped GPU memory. For checking that a change
# leaves the speed where it was: prints each mode's medians over the rounds and B / A.
#
# usage: bench/ab_bench.sh FT_A FT_B [-m FILE.gguf] [-r ROUNDS] [--modes fused,offload,cpu]
#                          [-d DEPTHS]
#
# The model defaults to gpu_vs_llama.sh's Qwen3-30B-A3B shape (written there when missing).
# fused: -p 512 -n 128 -r 2; offload and cpu: --gpu-memory-limit ${AB_GIB:-16}, -p 64 -n 128 -r 2.
# -d 16,4096,16384: fused decode after each depth instead (-p D -n 128 -r 2 -c D+192), each a row.
set -euo pipefail
cd "$(dirname "$0")/.."
a="${1:?usage: ab_bench.sh FT_A FT_B [-m FILE] [-r ROUNDS] [--modes LIST]}"
b="${2:?usage: ab_bench.sh FT_A FT_B [-m FILE] [-r ROUNDS] [--modes LIST]}"
shift 2
model="${FT_BENCH_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ft/bench}/qwen3-30b-a3b-full.gguf" rounds=3
modes=fused,offload,cpu depths=""
while [ $# -gt 0 ]; do
    case "$1" in
        -m) model="$2"; shift 2 ;;
        -r) rounds="$2"; shift 2 ;;
        --modes) modes="$2"; shift 2 ;;
        -d) depths="$2"; shift 2 ;;
        *) echo "ab_bench: unexpected argument '$1'" >&2; exit 2 ;;
    esac
done
[ -f "$model" ] || { echo "ab_bench: no $model (bench/gpu_vs_llama.sh writes it)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gib=${AB_GIB:-16}
# the cases: each mode, or with -d fused at each depth ("fused@D")
cases=""
for mode in ${modes//,/ }; do
    if [ "$mode" = fused ] && [ -n "$depths" ]; then
        for d in ${depths//,/ }; do cases="$cases,fused@$d"; done
    else
        cases="$cases,$mode"
    fi
done
cases=${cases#,}
for r in $(seq 1 "$rounds"); do
    for mode in ${cases//,/ }; do
        case "$mode" in
            fused@*) d=${mode#fused@}; args=(--moe-backend fused -p "$d" -n 128 -r 2 -c $((d + 192))) ;;
            fused) args=(--moe-backend fused -p 512 -n 128 -r 2) ;;
            offload) args=(--moe-backend offload --gpu-memory-limit "$gib" -p 64 -n 128 -r 2) ;;
            cpu) args=(--moe-backend cpu --gpu-memory-limit "$gib" -p 64 -n 128 -r 2) ;;
            *) echo "ab_bench: unknown mode $mode" >&2; exit 2 ;;
        esac
        for side in a b; do
            bin=$a; [ $side = b ] && bin=$b
            "$bin" bench -m "$model" --device cuda "${args[@]}" --json > "$out/$mode.$side.$r" 2>"$out/$mode.$side.$r.err" ||
                { tail -5 "$out/$mode.$side.$r.err" >&2; exit 1; }
        done
    done
done
python3 - "$out" "$cases" "$rounds" "$a" "$b" <<'EOF'
import json, statistics, sys
out, modes, rounds, a, b = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4], sys.argv[5]
print(f"A = {a}, B = {b}; medians of {rounds} rounds, A and B alternating")
print(f"{'mode':11} {'test':8} {'A tok/s':>9} {'B tok/s':>9} {'B/A':>6}   rounds A; B")
for m in modes:
    for key, name in (("prompt_tok_s", "prefill"), ("decode_tok_s", "decode")):
        v = {s: [json.load(open(f"{out}/{m}.{s}.{r}"))[key] for r in range(1, rounds + 1)] for s in "ab"}
        ma, mb = statistics.median(v["a"]), statistics.median(v["b"])
        print(f"{m:11} {name:8} {ma:9.1f} {mb:9.1f} {mb / ma:6.3f}   {' '.join(f'{x:.1f}' for x in v['a'])}; "
              f"{' '.join(f'{x:.1f}' for x in v['b'])}")
EOF
