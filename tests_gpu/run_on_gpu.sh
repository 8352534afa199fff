#!/bin/bash
# run_on_gpu.sh: on the GPU machine, build ft for CUDA_ARCHS (default sm_90a), run the GPU
# suite (make test-gpu) and the matvec benchmark; logs go to $OUT (or /tmp/ft-gpu-out).
# The machine lacks the jansson/pcre2 headers: they come from .devpkgs (Debian's -dev
# packages, unpacked), linked statically from a folder holding only their .a files.
set -o pipefail
OUT=${OUT:-/tmp/ft-gpu-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
# Link each library against the system's shared copy where the machine has one (the
# packages' .so links point there), else its static archive (jansson's archive defines a
# utf8_encode of its own, hence --allow-multiple-definition in that case only).
mkdir -p /tmp/ftlibs
extra=""
for l in jansson:4 pcre2-8:0; do
    name=${l%%:*}; so=/usr/lib/x86_64-linux-gnu/lib$name.so.${l##*:}
    if [ -e "$so" ]; then ln -sf "$so" /tmp/ftlibs/lib$name.so
    else cp .devpkgs/usr/lib/x86_64-linux-gnu/lib$name.a /tmp/ftlibs/; extra="-Wl,--allow-multiple-definition"; fi
done
ls -l /tmp/ftlibs
MK() {
    make --no-print-directory BUILD=build-gpu CUDA_ARCHS="${CUDA_ARCHS:-sm_90a}" \
        CFLAGS_EXTRA=-I.devpkgs/usr/include LDFLAGS_EXTRA="-L/tmp/ftlibs $extra" "$@"
}
start=$(date +%s)
MK -j16 build-gpu/ft build-gpu/ft_tests_gpu build-gpu/bench_cuda_matvec >"$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
build-gpu/ft --help >/dev/null 2>&1; echo "ft --help rc=$?"
MK test-gpu T="$TESTS" 2>&1 | tee "$OUT/test_gpu.log"
echo "tests done at $(( $(date +%s) - start )) s"
# Whole-model timing on a synthetic Qwen3-30B-A3B-shaped slice (8 of 48 layers): prefill of a
# long prompt and decode, on the GPU; the CPU and GPU next-token distributions side by side.
if [ -z "$NO_TIMING" ]; then
    M=/tmp/ft-slice.gguf
    build-gpu/ft synth $M --layers 8 --embd 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128 \
        --top-k 8 --ff 768 --dense-type q8_0 --expert-types q4_K 2>&1 | tee "$OUT/timing.log"
    P=$(for i in $(seq 1 17); do printf 'the quick brown fox jumps over the lazy dog. '; done)
    for dev in cuda; do
        for rep in 1 2; do
            build-gpu/ft run -m $M -p "$P" -n 128 --temp 1 --seed $rep --device $dev -c 4096 2>&1 >/dev/null | tail -3 | tee -a "$OUT/timing.log"
        done
        build-gpu/ft run -m $M -p "hello" -n 256 --temp 1 --seed 3 --device $dev -c 4096 2>&1 >/dev/null | tail -2 | tee -a "$OUT/timing.log"
    done
    echo "cpu (16 cores) for reference:" | tee -a "$OUT/timing.log"
    build-gpu/ft run -m $M -p "$P" -n 32 --temp 1 --seed 1 --device cpu -c 4096 2>&1 >/dev/null | tail -1 | tee -a "$OUT/timing.log"
    S=$(for i in $(seq 1 8); do printf 'the quick brown fox jumps over the lazy dog. '; done)
    for dev in cuda cpu; do
        echo "probs $dev:" | tee -a "$OUT/timing.log"
        build-gpu/ft probs -m $M -p "$S" --device $dev 2>>"$OUT/timing.log" | tee -a "$OUT/timing.log"
    done
    echo "timing done at $(( $(date +%s) - start )) s"
fi
[ -n "$NO_BENCH" ] || MK bench-cuda BENCH_ARGS="$BENCH_ARGS" 2>&1 | tee "$OUT/bench.log"
echo "all done at $(( $(date +%s) - start )) s"
