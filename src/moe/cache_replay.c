// cache_replay.c: a route trace through the expert cache's C reference.
#include "cache_replay.h"

#include <stdlib.h>
#include <string.h>

bool moe_cache_replay(const moe_cache_plan *plan, const moe_geometry *g, const moe_route_trace *t, int64_t warmup,
                      moe_replay_result *out, ft_err *err) {
    memset(out, 0, sizeof(*out));
    for (int li = 0; li < t->n_layers; li++) {
        int L = t->layers[li];
        const moe_layer_geometry *lg = NULL;
        for (int i = 0; i < g->n_layers && !lg; i++)
            if (g->layers[i].layer == L) lg = &g->layers[i];
        if (!lg) return ft_err_set(err, "the trace routes block %d, which is not a MoE layer of the model", L);
        if (lg->n_expert != t->n_expert)
            return ft_err_set(err, "the trace has %d experts per layer, block %d of the model %d", t->n_expert, L,
                              lg->n_expert);
    }
    if (warmup < 0 || warmup >= t->n_steps)
        return ft_err_set(err, "a warm-up of %lld steps leaves none of the trace's %lld to count", (long long)warmup,
                          (long long)t->n_steps);
    moe_expert_cache *c = moe_expert_cache_init(plan, g);
    int n = t->n_seq * t->top_k;
    int32_t *ex = ft_malloc((size_t)n * sizeof(int32_t)), *slots = ft_malloc((size_t)n * sizeof(int32_t));
    moe_cache_copy *copies = ft_malloc((size_t)n * sizeof(moe_cache_copy));
    bool ok = true;
    for (int64_t step = 0; step < t->n_steps && ok; step++) {
        if (step == warmup) moe_expert_cache_reset_request(c);
        for (int li = 0; li < t->n_layers && ok; li++) {
            const uint16_t *sel = moe_route_trace_at(t, step, li);
            for (int i = 0; i < n; i++) ex[i] = sel[i];
            int k;
            ok = moe_expert_cache_step(c, t->layers[li], ex, n, slots, copies, &k, err);
        }
    }
    if (ok) {
        out->steps = t->n_steps - warmup;
        out->n_pools = plan->n_pools;
        out->pools = ft_calloc((size_t)plan->n_pools, sizeof(moe_cache_stats));
        for (int k = 0; k < plan->n_pools; k++) {
            moe_cache_stats s = moe_expert_cache_pool_stats(c, k, true);
            out->pools[k] = s;
            out->total.selections += s.selections;
            out->total.hits += s.hits;
            out->total.misses += s.misses;
            out->total.bytes_copied += s.bytes_copied;
        }
    }
    free(ex);
    free(slots);
    free(copies);
    moe_expert_cache_free(c);
    return ok;
}

void moe_replay_result_free(moe_replay_result *r) {
    if (!r) return;
    free(r->pools);
    memset(r, 0, sizeof(*r));
}
