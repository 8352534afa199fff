#!/usr/bin/env bash
# cpu_vs_llama.sh: ft against llama.cpp on the CPU, same GGUF, threads, prompt and generation
# length, alternating in one run, and the ratio ft/llama.cpp of each figure.
#
# usage: bench/cpu_vs_llama.sh [-m FILE.gguf | -s qwen3|mixtral|laguna|all] [-p 512] [-n 128]
#                              [-t THREADS] [-r ROUNDS]
#
# Each round runs `ft bench -r 1 --json` and `node bench/llama_bench.mjs -r 1 --json` (the same
# deterministic token ids, an untimed warm-up each), in turn, swapping which goes first every
# round so drift in the machine's load hits both alike; the table shows the medians over rounds.
# -s picks the issue's synthetic bench models (issue 5), written with `ft synth` into
# ${XDG_CACHE_HOME:-~/.cache}/ft/bench when missing:
#   qwen3    Qwen3-30B-A3B slice: 8 layers, embd 2048, 32/4 heads of 128, 128 experts top-8,
#            expert FFN 768, q4_K experts, q8_0 dense, the Qwen2 vocabulary (default)
#   mixtral  4 layers of Mixtral-8x7B: embd 4096, 32/8 heads, 8 experts top-2, expert FFN 14336,
#            q4_K experts, q8_0 dense, the llama SPM vocabulary (about 3.5 GB)
#   laguna   Laguna's shape as issue 5 gives it: embd 3072, 24/8 heads of 128, 64 experts top-10,
#            expert FFN 1024 and a shared expert of 1024, 6 layers: a dense first layer (FFN
#            2048), four q4_K MoE layers, one bf16 MoE layer; q8_0 dense, the built-in vocabulary
# FT (default build/ft, built if missing) is the ft binary; LLAMA_BENCH (default
# bench/llama_bench.mjs) the llama.cpp side's script: a copy of it beside a copy of node_modules
# whose @node-llama-cpp/linux-x64 bins keep only the AVX2 CPU variants (haswell and below) runs
# llama.cpp as on an AVX2-only CPU, to set beside FT_SIMD=avx2. Needs node with node-llama-cpp
# (`make deps`). A busy machine skews both engines; the load average is printed with the table.
set -euo pipefail
cd "$(dirname "$0")/.."

model="" set_name="qwen3" n_prompt=512 n_gen=128 threads=$(nproc) rounds=3
while [ $# -gt 0 ]; do
    case "$1" in
        -m) model="$2"; set_name=""; shift 2 ;;
        -s) set_name="$2"; shift 2 ;;
        -p) n_prompt="$2"; shift 2 ;;
        -n) n_gen="$2"; shift 2 ;;
        -t) threads="$2"; shift 2 ;;
        -r) rounds="$2"; shift 2 ;;
        -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "cpu_vs_llama: unexpected argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

FT="${FT:-build/ft}"
LLAMA_BENCH="${LLAMA_BENCH:-bench/llama_bench.mjs}"
[ -x "$FT" ] || make -j"$(nproc)" "$FT" >&2
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ft/bench"
vocab_dir="../shared/vocab"

# Writes the named bench model when missing and prints its path.
synth_model() {
    local name="$1" path
    case "$name" in
        qwen3)   path="$cache/qwen3-30b-a3b-slice.gguf" ;;
        mixtral) path="$cache/mixtral-8x7b-slice.gguf" ;;
        laguna)  path="$cache/laguna-slice-dense1.gguf" ;;
        *) echo "cpu_vs_llama: unknown model set '$name' (qwen3, mixtral, laguna, all)" >&2; exit 2 ;;
    esac
    if [ ! -f "$path" ]; then
        mkdir -p "$cache"
        echo "cpu_vs_llama: writing $path" >&2
        case "$name" in
            qwen3) "$FT" synth "$path.tmp" --arch qwen3moe --layers 8 --embd 2048 --heads 32 --kv-heads 4 \
                       --head-dim 128 --experts 128 --top-k 8 --ff 768 --expert-types q4_K --dense-type q8_0 \
                       --vocab-from "$vocab_dir/ggml-vocab-qwen2.gguf" --name bench-qwen3-30b-a3b-slice >&2 ;;
            mixtral) "$FT" synth "$path.tmp" --arch llama --layers 4 --embd 4096 --heads 32 --kv-heads 8 \
                       --head-dim 128 --experts 8 --top-k 2 --ff 14336 --expert-types q4_K --dense-type q8_0 \
                       --vocab-from "$vocab_dir/ggml-vocab-llama-spm.gguf" --name bench-mixtral-slice >&2 ;;
            laguna) "$FT" synth "$path.tmp" --arch laguna --layers 6 --embd 3072 --heads 24 --kv-heads 8 \
                       --head-dim 128 --experts 64 --top-k 10 --ff 1024 --dense-lead 1 \
                       --expert-types q4_K,q4_K,q4_K,q4_K,q4_K,bf16 --dense-type q8_0 \
                       --name bench-laguna-slice >&2 ;;
        esac
        mv "$path.tmp" "$path"
    fi
    echo "$path"
}

# Runs the rounds on one model and prints its table.
compare() {
    local path="$1" out i
    out=$(mktemp)
    echo "cpu_vs_llama: $path, -p $n_prompt -n $n_gen -t $threads, $rounds rounds" >&2
    for ((i = 0; i < rounds; i++)); do
        # ft prefills in chunks of llama_bench.mjs's batch (512), not its own CPU default
        local ft_cmd=("$FT" bench -m "$path" -p "$n_prompt" -n "$n_gen" -t "$threads" -b 512 -r 1 --json)
        local ll_cmd=(node "$LLAMA_BENCH" "$path" -p "$n_prompt" -n "$n_gen" -t "$threads" -r 1 --json)
        if ((i % 2 == 0)); then
            echo "ft $("${ft_cmd[@]}")" >>"$out"; echo "llama $("${ll_cmd[@]}")" >>"$out"
        else
            echo "llama $("${ll_cmd[@]}")" >>"$out"; echo "ft $("${ft_cmd[@]}")" >>"$out"
        fi
        echo "cpu_vs_llama: round $((i + 1))/$rounds done" >&2
    done
    node - "$out" "$path" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF'
const fs = require("fs");
const [file, path, load] = process.argv.slice(2);
const runs = {ft: [], llama: []};
for (const line of fs.readFileSync(file, "utf8").split("\n").filter(Boolean)) {
    const sp = line.indexOf(" ");
    runs[line.slice(0, sp)].push(JSON.parse(line.slice(sp + 1)));
}
const med = v => { const s = [...v].sort((a, b) => a - b), h = s.length >> 1;
                   return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2; };
const m = (who, key) => med(runs[who].map(r => r[key]));
const f = runs.ft[0];
const row = (name, key) => {
    const a = m("ft", key), b = m("llama", key);
    const all = who => runs[who].map(r => r[key].toFixed(1)).join(" ");
    console.log(`${name.padEnd(16)} ${a.toFixed(2).padStart(9)} ${b.toFixed(2).padStart(11)} ${(a / b).toFixed(2).padStart(8)}x` +
                `   ft [${all("ft")}]  llama.cpp [${all("llama")}]`);
};
console.log(`model: ${path} (${f.arch}), ${f.threads} threads, -p ${f.n_prompt} -n ${f.n_gen}, ` +
            `${runs.ft.length} rounds (medians; load average after: ${load})`);
console.log(`${"".padEnd(16)} ${"ft".padStart(9)} ${"llama.cpp".padStart(11)} ${"ft/llama".padStart(9)}`);
row("prompt tok/s", "prompt_tok_s");
row("decode tok/s", "decode_tok_s");
const bw = m("ft", "mem_bw_gbs"), bpt = f.bytes_per_token, roof = bw * 1e9 / bpt;
console.log(`bytes/token ${(bpt / 2 ** 20).toFixed(1)} MiB, memory read ${bw.toFixed(2)} GB/s -> roofline ` +
            `${roof.toFixed(2)} tok/s; decode at ${(100 * m("ft", "decode_tok_s") / roof).toFixed(1)}% (ft), ` +
            `${(100 * m("llama", "decode_tok_s") / roof).toFixed(1)}% (llama.cpp)`);
EOF
    rm -f "$out"
}

if [ -n "$model" ]; then
    compare "$model"
else
    sets="$set_name"
    [ "$set_name" = all ] && sets="qwen3 mixtral laguna"
    for s in $sets; do compare "$(synth_model "$s")"; echo; done
fi
