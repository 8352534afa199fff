// cuda_cpu_experts: `--moe-backend cpu` inside the CUDA backend. The routed experts of a MoE
// layer are computed on the CPU from host memory (the model's mapping), everything else stays
// on the GPU: what llama.cpp users do with `-ot exps=CPU`.
//
// Per MoE layer, on the CUDA backend's stream: the layer's input x (n_tok, n_embd) is copied
// into a pinned host buffer, the CPU backend's moe_ffn (src/backend/cpu: routing and experts,
// -t threads) writes y into another pinned buffer, and y is copied back. The router runs on
// the CPU too, on the host copy of its weights (still in the file's mapping): then the layer
// is exactly the CPU backend's op, and the meeting moves one row of n_embd floats each way
// instead of the row plus the selections.
//
// The meeting costs no device-wide synchronisation: the calling thread waits on an event
// recorded after x's copy (only this stream's work up to that point), computes, and enqueues
// y's copy; the pinned buffers are reused in stream order (a layer's copy of x runs after the
// previous layer's copy of y has read y's buffer). Steps with CPU experts are never captured
// in a CUDA graph: with the meeting as a host node (cudaLaunchHostFunc) the Qwen3-30B-A3B
// shape decoded at 8.4 tok/s against 46.2 tok/s direct on the H200 with 16 threads (likely the
// driver's callback thread ran the CPU op while the pool's threads and the launching thread
// competed for the cores), so the CUDA backend runs these steps directly.
//
// Prefill on the GPU: a step of many tokens makes the CPU compute-bound, while the copy of a
// layer's experts over PCIe is cheap beside it (Qwen3-30B-A3B: 324 MB, ~7 ms), so from the
// CUDA backend's grouped-GEMM threshold on (cuda_backend.c), a layer whose expert types the
// grouped GEMM takes (cuda_cpu_experts_overlay_takes) runs on the GPU: its gate, up and down
// tensors are copied whole from the mapping into a device overlay buffer, and the backend's
// usual path (routing on the device, ft_cuda_moe_gemm) reads them there at their native
// size, as for --moe-backend fused (bit-identical to it). Other layers (BF16 experts) stay on
// the CPU path. The expert ranges of the mapping are page-locked once (cudaHostRegister,
// read-only) so the copies are asynchronous at full PCIe speed; if the driver refuses, a
// one-line notice and pageable copies (synchronous with the host, slower).
// Two buffers (one with overlay_buffers 1): the copies run on a copy stream, the next
// overlay layer's copy issued as soon as the current layer's is enqueued; events keep a copy
// from overwriting a buffer before the work that reads it (everything the backend's stream
// enqueued up to the next overlay layer) has run, and the backend's stream from reading a
// buffer before its copy landed. The buffers remember which layer they hold (the mapping
// never changes), so a layer still there from the last step is not copied again.
//
// Ownership: the backend that attached it frees it. Not thread-safe beyond the above.
#ifndef FT_CUDA_CPU_EXPERTS_H
#define FT_CUDA_CPU_EXPERTS_H

#include "../backend.h"
#include "ft_cuda.h"

typedef struct cuda_cpu_experts cuda_cpu_experts;

typedef struct cuda_cpu_experts_params {
    int n_layer;                 // blocks of the model
    const ft_tensor *routers;    // (n_layer) host copies of each block's router (absent: not MoE)
    const ft_tensor *sel_bias;   // (n_layer) host copies of the selection biases, or NULL
    int n_threads;               // CPU threads for the experts
    bool reference;              // the CPU's scalar reference path
    float *route_gap;            // the CUDA backend's min_route_gap: the CPU's routing gaps join it
    // the prefill overlay: the expert banks' host descriptors (n_layer each, absent: not MoE)
    const ft_tensor *gate_exps, *up_exps, *down_exps;
    int overlay_buffers;         // 0: every layer on the CPU; 1: copy then compute; 2: double-buffered
} cuda_cpu_experts_params;

// Can a layer with these expert banks (host descriptors) run from the overlay? (Its types are
// the grouped GEMM's, ft_cuda_moe_gemm_supported.)
bool cuda_cpu_experts_overlay_takes(const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down);

// Device bytes of one overlay buffer for the layers described (n_layer each, as in the
// params): per bank the largest layer it takes, 256-byte aligned. 0: it takes none.
size_t cuda_cpu_experts_buffer_bytes(const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down, int n_layer);

// A CPU backend reserved for lim (the CUDA backend's limits), and pinned buffers for one step's
// input and output. Copies the router and bias descriptors (not their data).
cuda_cpu_experts *cuda_cpu_experts_init(const cuda_cpu_experts_params *p, const ft_backend_limits *lim);
void cuda_cpu_experts_free(cuda_cpu_experts *ce); // NULL: no-op

// Does it compute layer p->layer? (Its experts are in host memory and it has the layer's router.)
bool cuda_cpu_experts_serves(const cuda_cpu_experts *ce, const ft_moe_params *p);

// Does layer p->layer run from the overlay (when its step is large enough for the grouped GEMM)?
bool cuda_cpu_experts_overlay_serves(const cuda_cpu_experts *ce, const ft_moe_params *p);

// Brings layer p->layer's expert banks into an overlay buffer (unless it holds them) and makes
// s wait for them; views[0], [1], [2] become device descriptors of p's gate, up and down there
// (placement CUDA, native mat_bytes), valid for the work s enqueues until the next call.
// Asserts cuda_cpu_experts_overlay_serves.
void cuda_cpu_experts_overlay_begin(cuda_cpu_experts *ce, const ft_moe_params *p, ft_cuda_stream *s,
                                    ft_tensor views[3]);

// y (n_tok, n_embd), device memory = the routed experts' output for x (device memory), enqueued
// on s as described at the top.
void cuda_cpu_experts_moe_ffn(cuda_cpu_experts *ce, const ft_moe_params *p, const float *x, float *y, int n_tok,
                              ft_cuda_stream *s);

#endif
