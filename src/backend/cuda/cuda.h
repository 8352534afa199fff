// cuda: the CUDA backend, an implementation of ft_backend_ops (backend.h) over device memory.
//
// Weights are placed on the device through the buffer ops (model.h, ft_weights_place), except
// the token-embedding table of get_rows, which stays in host memory (as llama.cpp keeps it):
// its rows are dequantized on the host and copied over. Activation buffers from alloc are
// device memory. Every op only enqueues work on the backend's stream; `read` is the one host
// synchronisation. Nothing is allocated after reserve. Numerics follow the CPU backend with
// q8_1 activations for quantized weights (as llama.cpp's CUDA path), float softmax sums,
// float attention accumulators.
//
// Routed experts left in host memory are served by the expert cache (--moe-backend offload,
// offload.h) or computed on the CPU (--moe-backend cpu, cuda_cpu_experts.h), whichever the
// engine set up through the expert ops. A build without nvcc gets cuda_stub.c instead: no
// device.
#ifndef FT_BACKEND_CUDA_H
#define FT_BACKEND_CUDA_H

#include "../backend.h"
#include "../bw_measure.h"

// A backend on CUDA device 0 (p->graph_max_tok, p->n_threads for host experts come from p).
// Returns NULL and sets *err when there is no device or the build has no CUDA.
ft_backend *ft_backend_cuda_init(const ft_backend_params *p, ft_err *err);

// The GPU's part of `ft bench bw` on device 0 (bw_measure.h): the CPU's rates, the decode copy
// kernel's cost of an expert, one host meeting and the decode expert kernels' rates. False (err
// set) without a device or in a build without CUDA.
bool ft_backend_cuda_measure_bw(const ft_bw_request *req, moe_bw_profile *out, ft_err *err);

// CUDA devices on the machine (0 without a driver or in a build without CUDA).
int ft_backend_cuda_device_count(void);

// The FT_OPS_* features its ops compute (none yet: gpt-oss's attention sinks, expert biases,
// routing and activation, and gemma4's GELU, scaling and soft-capping, weightless norm, RoPE
// frequency factors, down scales and router input are refused at placement; see backend.h).
unsigned ft_backend_cuda_features(void);

#endif
