// place.c: the memory plan of an engine's device and where the model's weights go (see
// place.h and ft_engine_place_model in engine.h).
#include "place.h"
#include "../backend/cuda/cuda.h"

#include <stdio.h>
#include <stdlib.h>

static const double MiB = 1024.0 * 1024.0;

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

// The device plan of a placement: what it allocates against what ft may use.
typedef struct cuda_plan {
    size_t weights, kv, work, margin, budget;
} cuda_plan;

static cuda_plan cuda_plan_of(const ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info,
                              bool experts_on_host) {
    ft_backend_limits lim = engine_limits(m, p);
    cuda_plan c = {
        .weights = ft_model_upload_bytes(m, experts_on_host), .kv = engine_kv_bytes(m, p),
        .work = ft_backend_cuda_scratch_bytes(&lim) + engine_activation_floats(m, p) * sizeof(float),
        .margin = (size_t)256 << 20, // the CUDA context's own allocations, fragmentation
        .budget = engine_cuda_budget(p, info),
    };
    return c;
}

static size_t cuda_plan_need(const cuda_plan *c) { return c->weights + c->kv + c->work + c->margin; }

static void print_cuda_plan(const cuda_plan *c, const ft_engine_params *p, const ft_cuda_device_info *info,
                            const char *weights_what) {
    double ratio = p->memory_ratio > 0 ? p->memory_ratio : 0.9;
    fprintf(stderr, "cuda: %s (sm_%d%d), %.0f MiB free of %.0f, budget %.0f MiB (--memory-ratio %.2f%s): %s %.1f MiB, "
                    "KV cache %.1f MiB (%d x %d positions, %s), workspace %.1f MiB (batch %d)\n",
            info->name, info->cc_major, info->cc_minor, info->free_mem / MiB, info->total_mem / MiB, c->budget / MiB,
            ratio, p->gpu_memory_limit ? ", --gpu-memory-limit" : "", weights_what, c->weights / MiB, c->kv / MiB,
            p->n_seq, p->n_ctx, ft_type_name(p->kv_type), c->work / MiB, engine_step_tokens(p));
}

// Fails with the plan's numbers when it exceeds the budget.
static bool check_cuda_plan(const cuda_plan *c, const ft_engine_params *p, const ft_cuda_device_info *info,
                            const char *mode, ft_err *err) {
    if (cuda_plan_need(c) <= c->budget) return true;
    double ratio = p->memory_ratio > 0 ? p->memory_ratio : 0.9;
    return ft_err_set(err, "--moe-backend %s: the model does not fit on %s: it needs %.0f MiB (weights %.0f, KV %.0f, "
                           "workspace %.0f, reserve %.0f) and the budget is %.0f MiB (--memory-ratio %.2f of %.0f MiB "
                           "free%s); use a smaller -c, fewer sequences, another --moe-backend, or --device cpu",
                      mode, info->name, cuda_plan_need(c) / MiB, c->weights / MiB, c->kv / MiB, c->work / MiB, c->margin / MiB,
                      c->budget / MiB, ratio, info->free_mem / MiB,
                      p->gpu_memory_limit ? ", capped by --gpu-memory-limit" : "");
}

bool engine_fused_fits(const ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info, size_t *need,
                       size_t *budget) {
    cuda_plan c = cuda_plan_of(m, p, info, false);
    if (need) *need = cuda_plan_need(&c);
    if (budget) *budget = c.budget;
    return cuda_plan_need(&c) <= c.budget;
}

bool engine_experts_run_on_cuda(const ft_model *m, char *why, size_t cap) {
    for (int il = 0; il < m->hp.n_layer; il++) {
        const ft_layer *l = &m->layers[il];
        const ft_tensor *banks[] = {&l->gate_exps, &l->up_exps, &l->down_exps};
        for (size_t b = 0; b < FT_ARRAY_LEN(banks); b++)
            if (ft_tensor_present(banks[b]) && !ft_cuda_matvec_supported(banks[b]->type)) {
                if (why) snprintf(why, cap, "%s (%s)", banks[b]->name, ft_type_name(banks[b]->type));
                return false;
            }
    }
    return true;
}

// Bytes of the routed experts (what --moe-backend cpu and offload keep in host memory).
static size_t expert_bytes(const ft_model *m) {
    size_t n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const ft_layer *l = &m->layers[il];
        const ft_tensor *banks[] = {&l->gate_exps, &l->up_exps, &l->down_exps};
        for (size_t b = 0; b < FT_ARRAY_LEN(banks); b++)
            if (ft_tensor_present(banks[b])) n += banks[b]->mat_bytes * (size_t)banks[b]->ne[2];
    }
    return n;
}

// --moe-backend fused (and what auto picks when the model fits): every weight on the device.
static bool place_fused(ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info, ft_err *err) {
    cuda_plan c = cuda_plan_of(m, p, info, false);
    print_cuda_plan(&c, p, info, "weights");
    return check_cuda_plan(&c, p, info, "fused", err) && ft_model_upload(m, false, err);
}

int engine_cpu_overlay_buffers(const ft_engine_params *p) { return p->moe_prefill_serial ? 1 : 2; }

// Device bytes of one prefill overlay buffer: per bank, the largest MoE layer the overlay takes.
static size_t cpu_overlay_buffer_bytes(const ft_model *m) {
    int n = m->hp.n_layer;
    ft_tensor *banks[3];
    for (int b = 0; b < 3; b++) banks[b] = ft_calloc((size_t)n, sizeof(ft_tensor));
    for (int il = 0; il < n; il++) {
        const ft_layer *l = &m->layers[il];
        if (!l->is_moe) continue;
        banks[0][il] = l->gate_exps;
        banks[1][il] = l->up_exps;
        banks[2][il] = l->down_exps;
        for (int b = 0; b < 3; b++) banks[b][il].placement = FT_PLACEMENT_CPU; // as they will stay
    }
    size_t bytes = cuda_cpu_experts_buffer_bytes(banks[0], banks[1], banks[2], n);
    for (int b = 0; b < 3; b++) free(banks[b]);
    return bytes;
}

// --moe-backend cpu: the routed experts stay in the file's mapping and the CPU computes them
// (cuda_cpu_experts.h); every other weight on the device. Their pages must fit in RAM, or
// every token would read them from the disk. Prefill steps run the layers whose expert types
// the grouped GEMM takes on the GPU, from a device overlay the plan counts in the workspace.
static bool place_cpu(ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info, ft_err *err) {
    if (m->hp.n_expert == 0) return ft_err_set(err, "--moe-backend cpu: the model has no routed experts");
    cuda_plan c = cuda_plan_of(m, p, info, true);
    size_t experts = expert_bytes(m), ram = ft_mem_available();
    size_t buffer = cpu_overlay_buffer_bytes(m);
    int n_buf = engine_cpu_overlay_buffers(p);
    c.work += (size_t)n_buf * buffer;
    print_cuda_plan(&c, p, info, "weights but the routed experts");
    fprintf(stderr, "cpu: routed experts %.1f MiB in host memory (mapped from the file; %.0f MiB available), "
                    "computed by %d threads\n", experts / MiB, ram / MiB, p->n_threads);
    if (buffer)
        fprintf(stderr, "cpu: prefill steps for the grouped GEMM run the experts on the GPU from an overlay of %d x "
                        "%.1f MiB (in the workspace; %s), copied through %.0f MiB of pinned staging\n", n_buf,
                buffer / MiB, n_buf == 2 ? "double-buffered" : "copy then compute",
                cuda_cpu_experts_staging_bytes() / MiB);
    else
        fprintf(stderr, "cpu: no prefill overlay (the grouped GEMM takes none of the expert types)\n");
    if (experts > ram)
        return ft_err_set(err, "--moe-backend cpu: the routed experts need %.0f MiB of host memory and %.0f MiB are "
                               "available", experts / MiB, ram / MiB);
    return check_cuda_plan(&c, p, info, "cpu", err) && ft_model_upload(m, true, err);
}

enum ft_moe_backend engine_auto_pick(const ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info) {
    char why[200];
    if (m->hp.n_expert == 0) return FT_MOE_BACKEND_FUSED;
    if (!engine_experts_run_on_cuda(m, why, sizeof(why))) {
        fprintf(stderr, "--moe-backend auto: cpu: the experts %s have no CUDA kernel, so the CPU computes them\n", why);
        return FT_MOE_BACKEND_CPU;
    }
    size_t need, budget;
    if (engine_fused_fits(m, p, info, &need, &budget)) {
        fprintf(stderr, "--moe-backend auto: fused: the whole model fits the GPU budget (%.0f of %.0f MiB)\n",
                need / MiB, budget / MiB);
        return FT_MOE_BACKEND_FUSED;
    }
    fprintf(stderr, "--moe-backend auto: offload: the whole model needs %.0f MiB, more than the GPU budget of %.0f "
                    "MiB; the experts stay in host memory behind a GPU expert cache\n", need / MiB, budget / MiB);
    return FT_MOE_BACKEND_OFFLOAD;
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
    if (p.moe_backend == FT_MOE_BACKEND_AUTO) p.moe_backend = engine_auto_pick(m, &p, &info);
    switch (p.moe_backend) {
    case FT_MOE_BACKEND_OFFLOAD: return engine_place_offload(m, &p, &info, err);
    case FT_MOE_BACKEND_CPU: return place_cpu(m, &p, &info, err);
    case FT_MOE_BACKEND_AUTO: // picked above
    case FT_MOE_BACKEND_FUSED: break;
    }
    return place_fused(m, &p, &info, err);
}

