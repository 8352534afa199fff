// cpu_experts_overlay: the prefill overlay of --moe-backend cpu (cuda_cpu_experts.h), which
// brings a layer's expert banks from host memory to the GPU for steps of many tokens.
//
// Prefill on the GPU: a step of many tokens makes the CPU compute-bound, while the copy of a
// layer's experts over PCIe is cheap beside it (Qwen3-30B-A3B: 324 MiB, ~7 ms at 50 GB/s), so
// from the CUDA backend's grouped-GEMM threshold on (cuda_backend.c), a layer whose expert
// types the grouped GEMM takes (cuda_cpu_experts_overlay_takes) runs on the GPU: its gate, up
// and down tensors are copied whole from the mapping into a device overlay buffer, and the
// backend's usual path (routing on the device, ft_cuda_moe_gemm) reads them there at their
// native size, as for --moe-backend fused (bit-identical to it). Other layers (BF16 experts)
// stay on the CPU path. The mapping is never page-locked (cudaHostRegister of the whole
// Qwen3-30B file's 18 GB mapping made a benchmark time out): host threads (a pool of -t
// threads of its own, asleep outside prefill) copy each piece of a layer into a ring of
// pinned staging buffers, and the copy stream moves each piece to the device while the next
// one is filled. Two device buffers (one with overlay_buffers 1): the next overlay layer is
// staged as soon as the current one's work is enqueued (so the GPU computes while the host
// stages); events keep a copy from overwriting a buffer before the work that reads it has run,
// and the backend's stream from reading a buffer before its copy landed. The buffers remember
// which layer they hold (the mapping never changes), so a layer still there from the last step
// is not copied again.
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
