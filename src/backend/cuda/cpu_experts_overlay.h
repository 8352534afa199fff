// cpu_experts_overlay: the prefill overlay of --moe-backend cpu (cuda_cpu_experts.h), which
// brings a layer's expert banks from host memory to the GPU for steps of many tokens.
//
// From the CUDA backend's grouped-GEMM threshold on, a layer whose expert types the grouped
// GEMM takes (cuda_cpu_experts_overlay_takes) runs on the GPU, as in --moe-backend fused and
// bit-identical to it: a step of many tokens makes the CPU compute-bound, while a copy of the
// layer's experts over PCIe is cheap beside it. The mapping is never page-locked: host threads
// (a pool of its own) copy each piece into a ring of pinned staging buffers and the copy stream
// moves it on. One or two device buffers (double-buffered: the next layer staged while this one
// computes); each remembers the layer it holds. docs/expert-cache.md ("cpu mode") has more.
//
// One calling thread: cuda_cpu_experts owns it and computes its pending layers before each
// cpu_experts_overlay_begin (the staging waits on the host for copies that wait for the stream).
#ifndef FT_CPU_EXPERTS_OVERLAY_H
#define FT_CPU_EXPERTS_OVERLAY_H

#include "cuda_cpu_experts.h"

typedef struct cpu_experts_overlay cpu_experts_overlay;

// The overlay p asks for (p->overlay_buffers device buffers sized for its largest layer, the
// staging ring, the copy stream), or NULL when it asks for none or no layer's types are the
// grouped GEMM's. Copies the descriptors (not the data).
cpu_experts_overlay *cpu_experts_overlay_init(const ft_host_experts_params *p);
// Prints what it copied (when it did) and frees it. NULL: no-op.
void cpu_experts_overlay_free(cpu_experts_overlay *o);

// Does layer il run from the overlay? NULL: no.
bool cpu_experts_overlay_takes_layer(const cpu_experts_overlay *o, int il);

// Brings layer p->layer's banks into a buffer (unless it holds them) and makes s wait for them;
// views[0..2] become device descriptors of p's gate, up and down there, valid for the work s
// enqueues until the next call. Asserts cpu_experts_overlay_takes_layer.
void cpu_experts_overlay_begin(cpu_experts_overlay *o, const ft_moe_params *p, ft_cuda_stream *s, ft_tensor views[3]);
// After the layer's work is enqueued: stages the next overlay layer into the other buffer
// (double-buffered only).
void cpu_experts_overlay_end(cpu_experts_overlay *o);

#endif
