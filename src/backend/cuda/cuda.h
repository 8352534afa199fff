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
// The expert placement hook of moe_ffn is not consulted: every expert runs on the device
// (the GPU expert cache and hybrid placement come later in issue 7).
#ifndef FT_BACKEND_CUDA_H
#define FT_BACKEND_CUDA_H

#include "../backend.h"

// A backend on CUDA device dev. Returns NULL and sets *err when there is no such device or
// the build has no CUDA. Free with be->ops->free(be).
ft_backend *ft_backend_cuda_init(int dev, ft_err *err);

// Serves the routed experts that stay in host memory (placement CPU) through the GPU expert
// cache o (offload.h; not owned, outlives the backend). Call after reserve.
struct ft_offload;
void ft_backend_cuda_attach_offload(ft_backend *be, struct ft_offload *o);

// Device bytes that reserve(lim) will allocate (scratch), for the memory plan.
size_t ft_backend_cuda_scratch_bytes(const ft_backend_limits *lim);

#endif
