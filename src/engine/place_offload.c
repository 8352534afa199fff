// place_offload.c: `--moe-backend offload`'s placement (see ft_engine_place_model): every
// weight but the routed experts on the device, the experts in page-locked host banks read
// once from the GGUF, and the GPU expert cache (src/backend/cuda/offload.h) in front of them,
// owned by the model (ft_model.offload) and attached to each CUDA engine's backend.
//
// Order: the plan first (nothing allocated: a cache below the floor or a budget that leaves
// nothing fails at once), then the RAM check and the host banks (the long step), the dense
// upload, and the cache's arenas.
#include "place.h"
#include "../backend/cuda/cuda.h"
#include "../backend/cuda/offload.h"
#include "../moe/expert_banks.h"
#include "../moe/geometry.h"
#include "../moe/route_trace.h"

#include <stdio.h>

bool engine_place_offload(ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info, ft_err *err) {
    const double MiB = 1048576.0;
    if (m->offload) return ft_err_set(err, "--moe-backend offload: the model is already placed");
    moe_geometry g;
    if (!moe_geometry_read(m->file, &g, err)) return false;
    if (g.n_layers == 0) {
        moe_geometry_free(&g);
        return ft_err_set(err, "--moe-backend offload: the model has no routed experts");
    }
    size_t dense = ft_model_upload_bytes(m, true);
    size_t kv = engine_kv_bytes(m, p);
    ft_backend_limits lim = engine_limits(m, p);
    size_t work = ft_backend_cuda_scratch_bytes(&lim) + engine_activation_floats(m, p) * sizeof(float);
    size_t margin = (size_t)256 << 20; // the CUDA context's own allocations, fragmentation
    size_t budget = engine_cuda_budget(p, info);
    int64_t kv_tokens = (int64_t)p->n_seq * p->n_ctx;

    ft_offload_params op = {0};
    op.plan = moe_cache_plan_default_params();
    op.plan.n_slots = p->moe_cache_size;
    op.plan.layout = p->moe_pool_layout == MOE_POOL_LAYOUT_UNIFORM ? MOE_POOL_LAYOUT_UNIFORM : MOE_POOL_LAYOUT_EXACT;
    op.plan.top_k = m->hp.n_expert_used;
    op.plan.n_running = p->n_seq;
    op.plan.vram_free = budget; // already the share ft may use (--memory-ratio, --gpu-memory-limit)
    op.plan.memory_ratio = 1.0;
    op.plan.dense_bytes = dense;
    op.plan.workspace_bytes = work + margin;
    op.plan.kv_bytes_per_token = kv_tokens > 0 ? kv / (size_t)kv_tokens : 0;
    op.plan.kv_reserve_tokens = p->kv_reserve_tokens > 0 ? p->kv_reserve_tokens : kv_tokens;
    op.prefill_serial = p->moe_prefill_serial;

    moe_cache_plan plan;
    bool ok = moe_cache_plan_make(&g, &op.plan, &plan, err);
    if (ok) {
        fprintf(stderr, "cuda: %s (sm_%d%d), %.0f MiB free, budget %.0f MiB: dense weights %.1f MiB, KV cache %.1f MiB "
                        "(%d x %d positions, %s), workspace %.1f MiB, expert cache %.1f MiB (%d slots)\n",
                info->name, info->cc_major, info->cc_minor, info->free_mem / MiB, budget / MiB, dense / MiB, kv / MiB,
                p->n_seq, p->n_ctx, ft_type_name(p->kv_type), work / MiB, plan.bytes / MiB, plan.n_slots);
        // the prefill overlay (one layer's experts at the widest stride) is carved from the
        // arenas when they hold it, else allocated beside them
        int most = 0;
        for (int i = 0; i < g.n_layers; i++) most = FT_MAX(most, g.layers[i].n_expert);
        if (plan.n_slots < most) {
            size_t ov = 0;
            for (int b = 0; b < MOE_BANK_COUNT; b++) ov += (size_t)most * plan.max_stride[b];
            fprintf(stderr, "offload: the prefill overlay (%.1f MiB) does not fit in the arenas: allocated beside them\n",
                    ov / MiB);
            work += ov;
        }
        if (dense + kv + work + margin + plan.bytes > budget)
            ok = ft_err_set(err, "--moe-backend offload: %.0f MiB needed (dense %.0f, KV %.0f, workspace %.0f, reserve "
                                 "%.0f, expert cache %.0f for %d slots) but the budget is %.0f MiB; use a smaller "
                                 "--moe-cache-size, -c or fewer sequences",
                            (dense + kv + work + margin + plan.bytes) / MiB, dense / MiB, kv / MiB, work / MiB,
                            margin / MiB, plan.bytes / MiB, plan.n_slots, budget / MiB);
        moe_cache_plan_free(&plan);
    }
    moe_route_trace trace = {0};
    if (ok && p->moe_route_trace) {
        ok = moe_route_trace_read(p->moe_route_trace, &trace, err);
        op.trace = ok ? &trace : NULL;
    }
    moe_expert_banks *hb = NULL;
    if (ok) {
        moe_expert_banks_params bp = moe_expert_banks_default_params();
        bp.alloc = ft_offload_host_allocator();
        fprintf(stderr, "offload: reading %.1f MiB of experts into host banks\n", moe_expert_banks_bytes(&g) / MiB);
        ok = (hb = moe_expert_banks_load(m->file, &g, &bp, err)) != NULL;
    }
    ok = ok && ft_model_upload(m, true, err);
    if (ok) {
        ft_offload *o = ft_offload_init(&g, hb, &op, err);
        hb = NULL; // owned (or freed) by ft_offload_init
        if ((ok = o != NULL)) {
            ft_offload_print(o, stderr);
            m->offload = o;
        }
    }
    moe_expert_banks_free(hb);
    moe_route_trace_free(&trace);
    moe_geometry_free(&g);
    return ok;
}
