#!/bin/bash
# gpu_profile.sh: on the GPU machine, after tests_gpu/run_on_gpu.sh has built build-gpu/: the
# decode and prefill speed of an 8-layer slice of Qwen3-30B-A3B's shape (Qwen2 vocabulary)
# with CUDA graphs off and on, and the GPU time of each kernel of one decode step of a 2-layer
# slice (Nsight Compute, graphs off so each launch is seen), sorted by total time.
# Output in $OUT (or /tmp/ft-gpu-out): profile.log, ncu.csv.
set -o pipefail
OUT=${OUT:-/tmp/ft-gpu-out}
export PATH=/usr/local/cuda/bin:$PATH
FT=build-gpu/ft
vocab=${VOCAB:-.gpuvocab/ggml-vocab-qwen2.gguf}
log="$OUT/profile.log"
for n in 8 2; do
    [ -f /tmp/slice$n.gguf ] || $FT synth /tmp/slice$n.gguf --layers $n --embd 2048 --heads 32 --kv-heads 4 \
        --head-dim 128 --experts 128 --top-k 8 --ff 768 --dense-type q8_0 --expert-types q4_K \
        --vocab-from "$vocab" >/dev/null 2>&1 || { echo "synth failed"; exit 1; }
done
# graphs off and on after a 512-token prompt; on after a 1-token prompt (the difference is
# mostly attention over ~600 cached keys)
for gp in 0:512 1:512 0:512 1:512 1:1; do
    g=${gp%%:*} p=${gp##*:}
    echo "8 layers, FT_CUDA_GRAPHS=$g: $(FT_CUDA_GRAPHS=$g $FT bench -m /tmp/slice8.gguf --device cuda -p $p -n 128 -r 3 2>/dev/null |
        grep -E 'prompt|decode' | tr -s ' ' | tr '\n' ' ')" | tee -a "$log"
done
[ -n "$NO_NCU" ] && exit 0
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
# the warm-up run and the first decode steps are skipped: ~50 launches per step on 2 layers;
# caches and clocks as the program leaves them (small kernels are otherwise timed cold)
NCU_FLAGS="--metrics gpu__time_duration.sum --cache-control none --clock-control none --csv"
FT_CUDA_GRAPHS=0 timeout 300 "$NCU" $NCU_FLAGS --launch-skip ${SKIP:-400} --launch-count ${COUNT:-52} \
    $FT bench -m /tmp/slice2.gguf --device cuda -p 1 -n 16 -r 1 >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
echo "ncu rc=$?"
# attention alone after a long prompt (position ~600)
FT_CUDA_GRAPHS=0 timeout 200 "$NCU" $NCU_FLAGS -k regex:attention \
    $FT bench -m /tmp/slice2.gguf --device cuda -p 600 -n 4 -r 1 2>/dev/null | grep -v "==PROF==" | tail -8 |
    awk -F'","' '{print "attention after 600:", $5, $(NF-1), $NF}' | tee -a "$log"
python3 - "$OUT/ncu.csv" <<'EOF' | tee -a "$log"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki, vi, ui = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Metric Unit")
tot = collections.defaultdict(float); cnt = collections.Counter()
seq = []
for r in rows:
    if r[vi] in ("", "Metric Value"): continue
    v = float(r[vi].replace(",", "")); v = v / 1000 if r[ui].startswith("n") else v  # -> usecond
    name = r[ki].split("(")[0][:60]
    tot[name] += v; cnt[name] += 1; seq.append((name, v))
print(f"{len(seq)} kernels, {sum(tot.values()):.1f} us in all")
for n, t in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"{t:9.1f} us {cnt[n]:4d} x  {n}")
print("in order:")
for n, v in seq: print(f"  {v:7.2f}  {n}")
EOF
