// place.c: the memory plan of an engine's device and where the model's weights go (see
// place.h and ft_engine_place_model in engine.h).
#include "place.h"
#include "../backend/cuda/cuda.h"

#include <stdio.h>

// Tokens per step: one prefill chunk beside the decode tokens of every other sequence.
int engine_step_tokens(const ft_engine_params *p) { return p->n_batch + p->n_seq - 1; }

ft_backend_limits engine_limits(const ft_model *m, const ft_engine_params *p) {
    ft_backend_limits lim = {
        .max_tok = engine_step_tokens(p), .max_width = ft_model_max_width(m), .max_ctx = p->n_ctx,
        .max_head_dim = m->hp.head_dim, .n_expert = m->hp.n_expert, .n_expert_used = m->hp.n_expert_used,
    };
    return lim;
}

// Floats of the activation buffers ft_forward_alloc and ft_batch_init allocate.
size_t engine_activation_floats(const ft_model *m, const ft_engine_params *p) {
    const ft_hparams *hp = &m->hp;
    size_t B = (size_t)engine_step_tokens(p), E = (size_t)hp->n_embd, Q = (size_t)ft_model_max_q_width(m),
           KV = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    return B * (4 * E + 3 * Q + 2 * KV) + (size_t)p->n_seq * (size_t)hp->n_vocab + 64 * 9;
}

// Bytes of the n_seq KV caches (K and V of every layer, n_ctx rows each).
size_t engine_kv_bytes(const ft_model *m, const ft_engine_params *p) {
    const ft_hparams *hp = &m->hp;
    size_t row = ft_row_bytes(p->kv_type, (int64_t)hp->n_head_kv * hp->head_dim);
    return 2 * (size_t)hp->n_layer * (size_t)p->n_ctx * row * (size_t)p->n_seq;
}

// The CPU plan: weights stay in the file's mapping, the KV caches and buffers are allocated.
static void print_cpu_plan(const ft_model *m, const ft_engine_params *p) {
    size_t kv = engine_kv_bytes(m, p);
    size_t weights = (size_t)(gguf_file_size(m->file) - gguf_data_offset(m->file));
    size_t work = engine_activation_floats(m, p) * sizeof(float);
    const double MiB = 1024.0 * 1024.0;
    fprintf(stderr, "cpu: weights %.1f MiB (mapped from the file), KV cache %.1f MiB (%d x %d positions, %s), "
                    "buffers %.1f MiB; %.0f MiB of memory available\n",
            weights / MiB, kv / MiB, p->n_seq, p->n_ctx, ft_type_name(p->kv_type), work / MiB,
            ft_mem_available() / MiB);
}

size_t engine_cuda_budget(const ft_engine_params *p, const ft_cuda_device_info *info) {
    double ratio = p->memory_ratio > 0 ? p->memory_ratio : 0.9;
    size_t budget = (size_t)(ratio * (double)info->free_mem);
    if (p->gpu_memory_limit && p->gpu_memory_limit < budget) budget = p->gpu_memory_limit;
    return budget;
}

// --moe-backend fused (and what auto picks when the model fits): every weight on the device.
static bool place_fused(ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info, ft_err *err) {
    size_t weights = ft_model_upload_bytes(m, false);
    size_t kv = engine_kv_bytes(m, p);
    ft_backend_limits lim = engine_limits(m, p);
    size_t work = ft_backend_cuda_scratch_bytes(&lim) + engine_activation_floats(m, p) * sizeof(float);
    size_t margin = (size_t)256 << 20; // the CUDA context's own allocations, fragmentation
    double ratio = p->memory_ratio > 0 ? p->memory_ratio : 0.9;
    size_t budget = engine_cuda_budget(p, info);
    const double MiB = 1024.0 * 1024.0;
    fprintf(stderr, "cuda: %s (sm_%d%d), %.0f MiB free of %.0f, budget %.0f MiB (--memory-ratio %.2f): weights %.1f MiB, "
                    "KV cache %.1f MiB (%d x %d positions, %s), workspace %.1f MiB (batch %d)\n",
            info->name, info->cc_major, info->cc_minor, info->free_mem / MiB, info->total_mem / MiB, budget / MiB, ratio,
            weights / MiB, kv / MiB, p->n_seq, p->n_ctx, ft_type_name(p->kv_type), work / MiB, engine_step_tokens(p));
    if (weights + kv + work + margin > budget)
        return ft_err_set(err, "the model does not fit on %s: it needs %.0f MiB (weights %.0f, KV %.0f, workspace %.0f, "
                               "reserve %.0f) and the budget is %.0f MiB (--memory-ratio %.2f of %.0f MiB free); use a "
                               "smaller -c, fewer sequences, or --device cpu",
                          info->name, (weights + kv + work + margin) / MiB, weights / MiB, kv / MiB, work / MiB,
                          margin / MiB, budget / MiB, ratio, info->free_mem / MiB);
    return ft_model_upload(m, false, err);
}

bool ft_engine_place_model(ft_model *m, const ft_engine_params *params, ft_err *err) {
    ft_engine_params p = *params;
    if (!ft_engine_params_resolve(m, &p, err)) return false;
    if (p.device != FT_PLACEMENT_CUDA) {
        print_cpu_plan(m, &p);
        return true;
    }
    ft_cuda_device_info info;
    if (!ft_cuda_device_get_info(0, &info)) return ft_err_set(err, "--device cuda: no CUDA device found");
    switch (p.moe_backend) {
    case FT_MOE_BACKEND_AUTO:
    case FT_MOE_BACKEND_FUSED: return place_fused(m, &p, &info, err);
    case FT_MOE_BACKEND_OFFLOAD: return engine_place_offload(m, &p, &info, err);
    case FT_MOE_BACKEND_CPU: break;
    }
    return ft_err_set(err, "--moe-backend %s: not available in this build", ft_moe_backend_name(p.moe_backend));
}

