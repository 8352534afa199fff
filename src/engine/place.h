// place: the memory plan of an engine's device and where the model's weights go
// (ft_engine_place_model), and the sizes the plan and the batch engine agree on.
//
// Internal to src/engine/.
#ifndef FT_ENGINE_PLACE_H
#define FT_ENGINE_PLACE_H

#include "engine.h"
#include "../backend/cuda/ft_cuda.h"

// Tokens per step: one prefill chunk beside the decode tokens of every other sequence.
int engine_step_tokens(const ft_engine_params *p);
// The largest shapes the backend's ops see (for its scratch).
ft_backend_limits engine_limits(const ft_model *m, const ft_engine_params *p);
// Floats of the activation buffers ft_forward_alloc and ft_batch_init allocate.
size_t engine_activation_floats(const ft_model *m, const ft_engine_params *p);
// Bytes of the n_seq KV caches (K and V of every layer, n_ctx rows each).
size_t engine_kv_bytes(const ft_model *m, const ft_engine_params *p);
// What ft may allocate on the device: --memory-ratio of its free memory, capped at
// --gpu-memory-limit.
size_t engine_cuda_budget(const ft_engine_params *p, const ft_cuda_device_info *info);

// --moe-backend offload (place_offload.c): dense weights on the device, experts in host banks
// behind the GPU expert cache (m->offload). Returns false and sets *err when it cannot.
bool engine_place_offload(ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info, ft_err *err);

#endif
