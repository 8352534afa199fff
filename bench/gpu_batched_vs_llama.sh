#!/usr/bin/env bash
# gpu_batched_vs_llama.sh: aggregate decode of several sequences at once, ft (ft bench
# --parallel) beside llama.cpp (llama-batched-bench) in the same call, the engines alternating:
# each sequence prefills its own -p prompt, then -n steps decode one token of every sequence.
# Prints per sequence count the medians over the rounds of the aggregate decode tok/s (and the
# prompts' tok/s) and their ratio.
#
# usage: bench/gpu_batched_vs_llama.sh -m FILE.gguf [-p 128] [-n 128] [--npl 8,32] [-r 3]
#                                      [--llama-batched-bench PATH]
# llama-batched-bench: the flag, else $LLAMA_BATCHED_BENCH, else /tmp/llama.cpp/b/bin/ (what
# ../shared/tools/llama-bench-build.sh builds), run with -ngl 99 -fa on -b 2048 -ub 512 and a
# context of the largest count x (p + n); without it only ft's figures are printed. FT (default
# build/ft) is ft built with CUDA; FT_ARGS adds flags to ft bench (e.g. --moe-backend).
set -euo pipefail
cd "$(dirname "$0")/.."

model="" n_prompt=128 n_gen=128 npl=8,32 rounds=3
llama="${LLAMA_BATCHED_BENCH:-/tmp/llama.cpp/b/bin/llama-batched-bench}"
while [ $# -gt 0 ]; do
    case "$1" in
        -m) model="$2"; shift 2 ;;
        -p) n_prompt="$2"; shift 2 ;;
        -n) n_gen="$2"; shift 2 ;;
        --npl) npl="$2"; shift 2 ;;
        -r) rounds="$2"; shift 2 ;;
        --llama-batched-bench) llama="$2"; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_batched_vs_llama: unexpected argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$model" ] || { echo "gpu_batched_vs_llama: -m FILE.gguf is required" >&2; exit 2; }
FT="${FT:-build/ft}"
[ -x "$FT" ] || { echo "gpu_batched_vs_llama: $FT missing (make, with nvcc)" >&2; exit 1; }
[ -x "$llama" ] || { echo "gpu_batched_vs_llama: no llama-batched-bench at $llama: ft's figures only" >&2; llama=""; }
max=$(echo "$npl" | tr ',' '\n' | sort -n | tail -1)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "unknown GPU")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
    # shellcheck disable=SC2086
    "$FT" bench -m "$model" --device cuda -p "$n_prompt" -n "$n_gen" -r 1 --parallel "$npl" --json ${FT_ARGS:-} \
        > "$out/ft.$r" 2> "$out/ft.$r.err" || { tail -5 "$out/ft.$r.err" >&2; exit 1; }
    if [ -n "$llama" ]; then
        "$llama" -m "$model" -ngl 99 -fa on -b 2048 -ub 512 -c $((max * (n_prompt + n_gen))) -npp "$n_prompt" \
            -ntg "$n_gen" -npl "$npl" --output-format jsonl > "$out/ll.$r" 2> "$out/ll.$r.err" ||
            { tail -5 "$out/ll.$r.err" >&2; exit 1; }
    fi
done
python3 - "$out" "$gpu" "$model" "$npl" "$rounds" "$n_prompt" "$n_gen" "${llama:-}" <<'PY'
import json, statistics, sys
out, gpu, model, npl, rounds, n_p, n_g, llama = sys.argv[1:9]
rounds, npl = int(rounds), [int(n) for n in npl.split(",")]
ft = {n: ([], []) for n in npl}
ll = {n: ([], []) for n in npl}
for r in range(1, rounds + 1):
    for e in json.load(open(f"{out}/ft.{r}"))["parallel"]:
        ft[e["n_seq"]][0].append(e["prompt_tok_s"])
        ft[e["n_seq"]][1].append(e["decode_tok_s"])
    if llama:
        for line in open(f"{out}/ll.{r}"):
            if line.startswith("{"):
                e = json.loads(line)
                ll[e["pl"]][0].append(e["speed_pp"])
                ll[e["pl"]][1].append(e["speed_tg"])
print(f"model: {model}, {gpu}, -p {n_p} -n {n_g} per sequence, medians of {rounds} rounds (engines alternating)")
print(f"{'sequences':>9} {'test':>7} {'ft tok/s':>10} {'llama.cpp':>10} {'ratio':>7}   rounds ft; llama.cpp")
for n in npl:
    for i, test in enumerate(("prompts", "decode")):
        f = statistics.median(ft[n][i])
        l = statistics.median(ll[n][i]) if ll[n][i] else None
        ratio = f"{f / l:6.2f}x" if l else "      -"
        lt = f"{l:10.1f}" if l else f"{'-':>10}"
        print(f"{n:9d} {test:>7} {f:10.1f} {lt} {ratio}   {' '.join(f'{v:.1f}' for v in ft[n][i])}; "
              f"{' '.join(f'{v:.1f}' for v in ll[n][i])}")
PY
