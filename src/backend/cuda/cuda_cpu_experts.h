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
} cuda_cpu_experts_params;

// A CPU backend reserved for lim (the CUDA backend's limits), and pinned buffers for one step's
// input and output. Copies the router and bias descriptors (not their data).
cuda_cpu_experts *cuda_cpu_experts_init(const cuda_cpu_experts_params *p, const ft_backend_limits *lim);
void cuda_cpu_experts_free(cuda_cpu_experts *ce); // NULL: no-op

// Does it compute layer p->layer? (Its experts are in host memory and it has the layer's router.)
bool cuda_cpu_experts_serves(const cuda_cpu_experts *ce, const ft_moe_params *p);

// y (n_tok, n_embd), device memory = the routed experts' output for x (device memory), enqueued
// on s as described at the top.
void cuda_cpu_experts_moe_ffn(cuda_cpu_experts *ce, const ft_moe_params *p, const float *x, float *y, int n_tok,
                              ft_cuda_stream *s);

#endif
