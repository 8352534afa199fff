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
// Would the whole model (every expert on the device), its KV caches and workspace fit the
// budget? The fused plan's arithmetic, asked without uploading; need and budget (may be NULL)
// get its bytes.
bool engine_fused_fits(const ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info, size_t *need,
                       size_t *budget);
// Do the CUDA expert kernels take every routed expert type of the model? If not, why names
// the first tensor that they do not (why may be NULL).
bool engine_experts_run_on_cuda(const ft_model *m, char *why, size_t cap);
// --moe-backend auto's choice for params p (resolved) on the device info describes: fused when
// the whole model fits the budget, else offload; cpu when the expert types have no CUDA kernel
// (neither fused nor offload could run them); fused for a model without experts. Prints which
// and why on stderr.
enum ft_moe_backend engine_auto_pick(const ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info);
// What ft may allocate on the device: --memory-ratio of its free memory, capped at
// --gpu-memory-limit.
size_t engine_cuda_budget(const ft_engine_params *p, const ft_cuda_device_info *info);

// --moe-backend cpu: buffers of the prefill overlay (cuda_cpu_experts.h): 2 (double-buffered),
// 1 with --disable-moe-prefill-overlap.
int engine_cpu_overlay_buffers(const ft_engine_params *p);

// --moe-backend offload (place_offload.c): dense weights on the device, experts in host banks
// behind the GPU expert cache (m->offload). Returns false and sets *err when it cannot.
bool engine_place_offload(ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info, ft_err *err);

#endif
