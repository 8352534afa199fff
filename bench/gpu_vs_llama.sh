#!/usr/bin/env bash
# gpu_vs_llama.sh: ft on the GPU (pp512 / tg128 by default, as llama-bench runs them: the
# prompt alone, and decode from an empty context) on a synthetic model of
# Qwen3-30B-A3B's full shape, next to llama.cpp's figures on the same shape and GPU.
#
# usage: bench/gpu_vs_llama.sh [-m FILE.gguf] [-p 512] [-n 128] [-r 3]
#
# Without -m the model is written with `ft synth` when missing: 48 layers, embedding 2048,
# 32/4 heads of 128, 128 experts top-8, expert FFN 768, q4_K experts, q8_0 attention,
# embedding and output, the Qwen2 vocabulary (18.0 GB), at $FT_BENCH_DIR (default
# ${XDG_CACHE_HOME:-~/.cache}/ft/bench)/qwen3-30b-a3b-full.gguf. The vocabulary comes from
# $VOCAB (default ../shared/vocab/ggml-vocab-qwen2.gguf, else .gpuvocab/ in the checkout).
#
# llama.cpp is not rebuilt here: its figures are the ones measured on an NVIDIA H200 on
# 2026-11-29 (issue 7: llama-bench from node-llama-cpp@3.21.1's source, CUDA, sm_90a, same
# model shape): tg128 283 tok/s, pp512 about 7,700 tok/s (noisy). The ratios are against
# those, so they mean something only on an H200.
# FT (default build/ft) is the ft binary, built with CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."

model="" n_prompt=512 n_gen=128 reps=3
while [ $# -gt 0 ]; do
    case "$1" in
        -m) model="$2"; shift 2 ;;
        -p) n_prompt="$2"; shift 2 ;;
        -n) n_gen="$2"; shift 2 ;;
        -r) reps="$2"; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_vs_llama: unexpected argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

LLAMA_TG=283 LLAMA_PP=7700 LLAMA_DATE=2026-11-29
FT="${FT:-build/ft}"
[ -x "$FT" ] || { echo "gpu_vs_llama: $FT missing (make, with nvcc)" >&2; exit 1; }

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
            --head-dim 128 --experts 128 --top-k 8 --ff 768 --ctx 4096 --expert-types q4_K --dense-type q8_0 \
            --vocab-from "$vocab" --name bench-qwen3-30b-a3b-full >&2
        mv "$model.tmp" "$model"
        echo "gpu_vs_llama: written in $(($(date +%s) - start)) s" >&2
    fi
fi

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "unknown GPU")
# llama-bench's two tests: pp (the prompt alone) and tg (decode from an empty context); the
# decode after the prompt, over n_prompt cached keys, is printed too (slower: attention reads them)
json=$("$FT" bench -m "$model" --device cuda -p "$n_prompt" -n "$n_gen" -r "$reps" --json)
json_tg=$("$FT" bench -m "$model" --device cuda -p 0 -n "$n_gen" -r "$reps" --json)
python3 - "$json" "$json_tg" "$gpu" "$LLAMA_PP" "$LLAMA_TG" "$LLAMA_DATE" <<'EOF'
import json, sys
r, t = json.loads(sys.argv[1]), json.loads(sys.argv[2]); gpu = sys.argv[3]
pp, tg, date = float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
n_p, n_g = r['n_prompt'], r['n_gen']
print(f"model: {r['model']} ({r['arch']}), {gpu}, pp{n_p} / tg{n_g}, median of {r['reps']}")
print(f"{'':22} {'ft':>10} {'llama.cpp':>10} {'ft/llama':>9}")
def runs(x, key): return " ".join(f"{v:.1f}" for v in x[key + "_runs"])
print(f"{'pp' + str(n_p) + ' tok/s':22} {r['prompt_tok_s']:10.1f} {pp:10.0f} {r['prompt_tok_s'] / pp:8.2f}x   ft runs [{runs(r, 'prompt_tok_s')}]")
print(f"{'tg' + str(n_g) + ' tok/s':22} {t['decode_tok_s']:10.1f} {tg:10.0f} {t['decode_tok_s'] / tg:8.2f}x   ft runs [{runs(t, 'decode_tok_s')}]")
print(f"{'tg' + str(n_g) + ' after ' + str(n_p) + ' tok/s':22} {r['decode_tok_s']:10.1f} {'':>10} {'':>9}   ft runs [{runs(r, 'decode_tok_s')}]")
bpt = r["bytes_per_token"]
roof = 4.8e12 / bpt
print(f"bytes/token {bpt / 2**30:.2f} GiB: the H200's 4.8 TB/s (datasheet) bounds decode at {roof:.0f} tok/s; "
      f"ft's tg at {100 * t['decode_tok_s'] / roof:.1f}%, llama.cpp at {100 * tg / roof:.1f}%")
print(f"(llama.cpp figures: measured on an H200 on {date}, quoted, not re-run)")
EOF
