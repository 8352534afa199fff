#!/usr/bin/env bash
# gpu_vs_llama.sh: ft and llama.cpp side by side on the GPU, in the same call, runs
# alternating: pp (the prompt) and tg (decode) at each depth, as llama-bench runs them,
# on a synthetic model of Qwen3-30B-A3B's full shape. Prints the medians over the rounds and
# their ratio.
#
# usage: bench/gpu_vs_llama.sh [-m FILE.gguf] [-p 512] [-n 128] [-d 0,4096] [-r 3]
#                              [--llama-bench PATH]
#
# Without -m the model is written with `ft synth` when missing: 48 layers, embedding 2048,
# 32/4 heads of 128, 128 experts top-8, expert FFN 768, q4_K experts, q8_0 attention,
# embedding and output, the Qwen2 vocabulary (18.0 GB), at $FT_BENCH_DIR (default
# ${XDG_CACHE_HOME:-~/.cache}/ft/bench)/qwen3-30b-a3b-full.gguf. The vocabulary comes from
# $VOCAB (default ../shared/vocab/ggml-vocab-qwen2.gguf, else .gpuvocab/ in the checkout).
# llama-bench: --llama-bench, else $LLAMA_BENCH, else /tmp/llama.cpp/b/bin/llama-bench (what
# ../shared/tools/llama-bench-build.sh builds); $LLAMA_ARGS adds flags (default -fa 1).
# Without it only ft's figures are printed. FT (default build/ft) is ft, built with CUDA;
# FT_ARGS adds flags to each ft bench. Each engine prefills at its own default chunk (ft 2048
# tokens, llama-bench -ub 512): LLAMA_ARGS="-fa 1 -ub 2048" and FT_ARGS="-b 512" pair them.
set -euo pipefail
cd "$(dirname "$0")/.."

model="" n_prompt=512 n_gen=128 depths=0 rounds=3
llama="${LLAMA_BENCH:-/tmp/llama.cpp/b/bin/llama-bench}"
while [ $# -gt 0 ]; do
    case "$1" in
        -m) model="$2"; shift 2 ;;
        -p) n_prompt="$2"; shift 2 ;;
        -n) n_gen="$2"; shift 2 ;;
        -d) depths="$2"; shift 2 ;;
        -r) rounds="$2"; shift 2 ;;
        --llama-bench) llama="$2"; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_vs_llama: unexpected argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

FT="${FT:-build/ft}"
[ -x "$FT" ] || { echo "gpu_vs_llama: $FT missing (make, with nvcc)" >&2; exit 1; }
[ -x "$llama" ] || { echo "gpu_vs_llama: no llama-bench at $llama: ft's figures only" >&2; llama=""; }

if [ -z "$model" ]; then
    dir="${FT_BENCH_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ft/bench}"
    model="$dir/qwen3-30b-a3b-full.gguf"
    if [ ! -f "$model" ]; then
        vocab="${VOCAB:-../shared/vocab/ggml-vocab-qwen2.gguf}"
        [ -f "$vocab" ] || vocab=.gpuvocab/ggml-vocab-qwen2.gguf
        [ -f "$vocab" ] || { echo "gpu_vs_llama: no Qwen2 vocabulary (set VOCAB)" >&2; exit 1; }
        mkdir -p "$dir"
        echo "gpu_vs_llama: writing $model" >&2
        start=$(date +%s)
        "$FT" synth "$model.tmp" --arch qwen3moe --layers 48 --embd 2048 --heads 32 --kv-heads 4 \
            --head-dim 128 --experts 128 --top-k 8 --ff 768 --ctx 40960 --expert-types q4_K --dense-type q8_0 \
            --vocab-from "$vocab" --name bench-qwen3-30b-a3b-full >&2
        mv "$model.tmp" "$model"
        echo "gpu_vs_llama: written in $(($(date +%s) - start)) s" >&2
    fi
fi

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "unknown GPU")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# One round, at each depth D: ft's pp (the prompt after D tokens, ft bench -d D -p P -n 0) and
# tg (ft bench -p D -n N decodes after D prompt tokens), and llama-bench's two at -d D (after
# D cached tokens).
for r in $(seq 1 "$rounds"); do
    for d in ${depths//,/ }; do
        # shellcheck disable=SC2086
        "$FT" bench -m "$model" --device cuda -d "$d" -p "$n_prompt" -n 0 -r 1 --json ${FT_ARGS:-} > "$out/ft.pp.$d.$r"
        # shellcheck disable=SC2086
        "$FT" bench -m "$model" --device cuda -p "$d" -n "$n_gen" -r 1 --json ${FT_ARGS:-} > "$out/ft.tg.$d.$r"
        if [ -n "$llama" ]; then
            # shellcheck disable=SC2086
            "$llama" -m "$model" -ngl 99 -p "$n_prompt" -n "$n_gen" -d "$d" -r 1 -o json ${LLAMA_ARGS:--fa 1} \
                > "$out/ll.$d.$r" 2>"$out/ll.$d.$r.err" || { cat "$out/ll.$d.$r.err" >&2; exit 1; }
        fi
    done
done
python3 - "$out" "$gpu" "$model" "$depths" "$rounds" "$n_prompt" "$n_gen" "${llama:-}" <<'EOF'
import json, statistics, sys, os
out, gpu, model, depths, rounds, n_p, n_g, llama = sys.argv[1:9]
rounds, depths = int(rounds), [int(d) for d in depths.split(",")]
def load(p): return json.load(open(p))
print(f"model: {model}, {gpu}, medians of {rounds} rounds (ft and llama.cpp alternating)")
print(f"{'test':18} {'ft tok/s':>10} {'llama.cpp':>10} {'ratio':>7}   rounds ft; llama.cpp")
for d in depths:
    for test in ("pp", "tg"):
        ft = []
        for r in range(1, rounds + 1):
            j = load(f"{out}/ft.{test}.{d}.{r}")
            ft.append(j["prompt_tok_s"] if test == "pp" else j["decode_tok_s"])
        ll = []
        if llama:
            for r in range(1, rounds + 1):
                for e in load(f"{out}/ll.{d}.{r}"):
                    if (test == "pp" and e["n_prompt"] > 0) or (test == "tg" and e["n_gen"] > 0):
                        ll.append(e["avg_ts"])
        name = (f"pp{n_p}" if test == "pp" else f"tg{n_g}") + (f" @ d{d}" if d else "")
        f = statistics.median(ft)
        l = statistics.median(ll) if ll else None
        ratio = f"{f / l:6.2f}x" if l else "      -"
        lt = f"{l:10.1f}" if l else f"{'-':>10}"
        print(f"{name:18} {f:10.1f} {lt} {ratio}   {' '.join(f'{v:.1f}' for v in ft)}; {' '.join(f'{v:.1f}' for v in ll)}")
EOF
