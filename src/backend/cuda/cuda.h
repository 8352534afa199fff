// cuda: the CUDA backend, an implementation of ft_backend_ops (backend.h) over device memory.
//
// Weights must be placed on the device (placement FT_PLACEMENT_CUDA, data a device pointer;
// see ft_model_upload), except the token-embedding table of get_rows, which stays in host
// memory (as llama.cpp keeps it): its rows are dequantized on the host and copied over.
// Activation buffers from alloc are device memory. Every op only enqueues work on the
// backend's stream; `read` is the one host synchronisation. Nothing is allocated after
// reserve. Numerics follow the CPU backend with q8_1 activations for quantized weights (as
// llama.cpp's CUDA path), float softmax sums, float attention accumulators.
//
// The expert placement hook of moe_ffn is not consulted. Routed experts run on the device,
// except with --moe-backend cpu, where the layers whose experts stayed in host memory run
// their MoE on the CPU (ft_backend_cuda_attach_cpu_experts, cuda_cpu_experts.h).
#ifndef FT_BACKEND_CUDA_H
#define FT_BACKEND_CUDA_H

#include "../backend.h"
#include "cuda_cpu_experts.h"

// A backend on CUDA device dev. Returns NULL and sets *err when there is no such device or
// the build has no CUDA. Free with be->ops->free(be).
ft_backend *ft_backend_cuda_init(int dev, ft_err *err);

// Serves the routed experts that stay in host memory (placement CPU) through the GPU expert
// cache o (offload.h; not owned, outlives the backend). Call after reserve.
struct ft_offload;
void ft_backend_cuda_attach_offload(ft_backend *be, struct ft_offload *o);

// Device bytes that reserve(lim) will allocate (scratch), for the memory plan.
size_t ft_backend_cuda_scratch_bytes(const ft_backend_limits *lim);

// Steps of up to n tokens may be recorded and replayed as CUDA graphs (--cuda-graph-max-bs);
// 0: none; negative: every step the backend can graph (the default; one-token steps today).
void ft_backend_cuda_set_graph_max_tok(ft_backend *be, int n);

// --moe-backend cpu: MoE layers whose routed experts are in host memory are computed on the CPU
// (cuda_cpu_experts.h). Call after reserve, once.
void ft_backend_cuda_attach_cpu_experts(ft_backend *be, const cuda_cpu_experts_params *p);

#endif
