// cache_replay.c: a route trace through the expert cache's C reference, and Belady's optimum on
// the same trace.
#include "cache_replay.h"
#include "cache_belady.h"

#include <stdlib.h>
#include <string.h>

moe_replay_params moe_replay_default_params(void) {
    return (moe_replay_params){.warmup = 0,
                               .policy = moe_cache_policy_default_params(),
                               .prefetch = false,
                               .prefetch_copies = MOE_PREFETCH_DEFAULT_COPIES};
}

// Checks that t fits g (its blocks are MoE layers with t's expert count) and the warm-up leaves
// steps to count; fills the per-layer results' block, pool and bytes of one expert.
static bool check_trace(const moe_cache_plan *plan, const moe_geometry *g, const moe_route_trace *t, int64_t warmup,
                        moe_replay_result *out, uint64_t *expert_bytes, ft_err *err) {
    for (int li = 0; li < t->n_layers; li++) {
        int L = t->layers[li];
        const moe_layer_geometry *lg = NULL;
        for (int i = 0; i < g->n_layers && !lg; i++)
            if (g->layers[i].layer == L) lg = &g->layers[i];
        if (!lg) return ft_err_set(err, "the trace routes block %d, which is not a MoE layer of the model", L);
        if (lg->n_expert != t->n_expert)
            return ft_err_set(err, "the trace has %d experts per layer, block %d of the model %d", t->n_expert, L,
                              lg->n_expert);
        expert_bytes[li] = 0;
        for (int b = 0; b < MOE_BANK_COUNT; b++) expert_bytes[li] += lg->bytes[b];
    }
    if (warmup < 0 || warmup >= t->n_steps)
        return ft_err_set(err, "a warm-up of %lld steps leaves none of the trace's %lld to count", (long long)warmup,
                          (long long)t->n_steps);
    out->steps = t->n_steps - warmup;
    out->n_pools = plan->n_pools;
    out->pools = ft_calloc((size_t)plan->n_pools, sizeof(moe_cache_stats));
    out->n_layers = t->n_layers;
    out->layers = ft_calloc((size_t)t->n_layers, sizeof(moe_replay_layer));
    for (int li = 0; li < t->n_layers; li++) {
        out->layers[li].layer = t->layers[li];
        out->layers[li].pool = plan->pool_of_block[t->layers[li]];
    }
    return true;
}

static void add_stats(moe_cache_stats *a, const moe_cache_stats *b) {
    a->selections += b->selections;
    a->hits += b->hits;
    a->misses += b->misses;
    a->bytes_copied += b->bytes_copied;
}

// Pools and total from the layers' counts.
static void sum_layers(moe_replay_result *out) {
    memset(&out->total, 0, sizeof(out->total));
    memset(out->pools, 0, (size_t)out->n_pools * sizeof(moe_cache_stats));
    for (int li = 0; li < out->n_layers; li++) {
        add_stats(&out->pools[out->layers[li].pool], &out->layers[li].stats);
        add_stats(&out->total, &out->layers[li].stats);
    }
}

bool moe_cache_replay_params(const moe_cache_plan *plan, const moe_geometry *g, const moe_route_trace *t,
                             const moe_replay_params *p, moe_replay_result *out, ft_err *err) {
    memset(out, 0, sizeof(*out));
    if (p->prefetch && !t->predicted)
        return ft_err_set(err, "prefetch needs a trace with predictions (ft trace-gen --predict-accuracy)");
    uint64_t *expert_bytes = ft_malloc((size_t)t->n_layers * sizeof(uint64_t));
    if (!check_trace(plan, g, t, p->warmup, out, expert_bytes, err)) {
        free(expert_bytes);
        moe_replay_result_free(out);
        return false;
    }
    moe_expert_cache *c = moe_expert_cache_init_policy(plan, g, &p->policy);
    int n = t->n_seq * t->top_k, max_expert = t->n_expert;
    int32_t *ex = ft_malloc((size_t)n * sizeof(int32_t)), *slots = ft_malloc((size_t)n * sizeof(int32_t));
    int32_t *guess = ft_malloc((size_t)n * sizeof(int32_t));
    moe_cache_copy *copies = ft_malloc((size_t)n * sizeof(moe_cache_copy));
    // epoch marks per expert: selected by the step, guessed (counted once)
    uint64_t *selected = ft_calloc((size_t)max_expert, sizeof(uint64_t));
    uint64_t *guessed = ft_calloc((size_t)max_expert, sizeof(uint64_t));
    uint64_t epoch = 0;
    bool ok = true;
    for (int64_t step = 0; step < t->n_steps && ok; step++) {
        if (step == p->warmup) moe_expert_cache_reset_request(c);
        bool counted = step >= p->warmup;
        for (int li = 0; li < t->n_layers && ok; li++) {
            const uint16_t *sel = moe_route_trace_at(t, step, li);
            for (int i = 0; i < n; i++) ex[i] = sel[i];
            int k;
            moe_replay_layer *rl = &out->layers[li];
            if (p->prefetch) {
                const uint16_t *pr = moe_route_trace_predicted_at(t, step, li);
                for (int i = 0; i < n; i++) guess[i] = pr[i];
                ok = moe_expert_cache_prefetch(c, t->layers[li], guess, n, p->prefetch_copies, copies, &k, err);
                // used or wasted against the step that follows
                epoch++;
                for (int i = 0; i < n; i++) selected[ex[i]] = epoch;
                for (int i = 0; i < n && counted; i++) {
                    if (guessed[guess[i]] == epoch) continue; // a duplicate of another sequence's guess
                    guessed[guess[i]] = epoch;
                    rl->guessed++;
                    rl->guessed_right += selected[guess[i]] == epoch;
                }
                for (int i = 0; i < k && counted; i++) {
                    bool used = selected[copies[i].expert] == epoch;
                    rl->prefetched++;
                    rl->prefetch_used += used;
                    *(used ? &rl->prefetch_used_bytes : &rl->prefetch_wasted_bytes) += expert_bytes[li];
                }
            }
            ok = ok && moe_expert_cache_step(c, t->layers[li], ex, n, slots, copies, &k, err);
        }
        if (ok) moe_expert_cache_end_step(c, NULL);
    }
    if (ok) {
        for (int li = 0; li < t->n_layers; li++) {
            out->layers[li].stats = moe_expert_cache_layer_stats(c, t->layers[li], true);
            out->layers[li].slots = moe_expert_cache_layer_slot_count(c, t->layers[li]);
        }
        sum_layers(out);
        for (int k = 0; k < plan->n_pools; k++) out->moves += moe_expert_cache_pool_moves(c, k);
    } else {
        moe_replay_result_free(out);
    }
    free(ex);
    free(slots);
    free(guess);
    free(copies);
    free(selected);
    free(guessed);
    free(expert_bytes);
    moe_expert_cache_free(c);
    return ok;
}

bool moe_cache_replay(const moe_cache_plan *plan, const moe_geometry *g, const moe_route_trace *t, int64_t warmup,
                      moe_replay_result *out, ft_err *err) {
    moe_replay_params p = moe_replay_default_params();
    p.warmup = warmup;
    return moe_cache_replay_params(plan, g, t, &p, out, err);
}

// ---------------------------------------------------------------------------------------------
// Belady

// The requests of the trace's layers in `lis` (indices into t->layers, ascending), in decode
// order; items are (position in lis) x n_expert + expert. Runs MIN with `slots` slots and adds
// each counted request's misses to its layer's stats. Returns false when a request does not fit.
static bool belady_requests(const moe_route_trace *t, const int *lis, int n_lis, int slots, int64_t warmup,
                            const uint64_t *expert_bytes, moe_replay_result *out) {
    int n = t->n_seq * t->top_k;
    int64_t n_req = t->n_steps * n_lis;
    int32_t *items = ft_malloc((size_t)n_req * (size_t)n * sizeof(int32_t));
    int64_t *start = ft_malloc((size_t)(n_req + 1) * sizeof(int64_t));
    uint32_t *per = ft_malloc((size_t)n_req * sizeof(uint32_t));
    for (int64_t step = 0, r = 0; step < t->n_steps; step++)
        for (int j = 0; j < n_lis; j++, r++) {
            const uint16_t *sel = moe_route_trace_at(t, step, lis[j]);
            start[r] = r * n;
            for (int i = 0; i < n; i++) items[r * n + i] = j * t->n_expert + sel[i];
        }
    start[n_req] = n_req * n;
    bool ok = moe_belady_misses(items, start, n_req, n_lis * t->n_expert, slots, warmup * n_lis, per) >= 0;
    for (int64_t r = warmup * n_lis; r < n_req && ok; r++) {
        moe_replay_layer *rl = &out->layers[lis[r % n_lis]];
        rl->stats.selections += (uint64_t)n;
        rl->stats.misses += per[r];
        rl->stats.hits += (uint64_t)n - per[r];
        rl->stats.bytes_copied += per[r] * expert_bytes[lis[r % n_lis]];
    }
    free(items);
    free(start);
    free(per);
    return ok;
}

bool moe_cache_replay_belady(const moe_cache_plan *plan, const moe_geometry *g, const moe_route_trace *t,
                             int64_t warmup, bool pool_wide, moe_replay_result *out, ft_err *err) {
    memset(out, 0, sizeof(*out));
    uint64_t *expert_bytes = ft_malloc((size_t)t->n_layers * sizeof(uint64_t));
    if (!check_trace(plan, g, t, warmup, out, expert_bytes, err)) {
        free(expert_bytes);
        moe_replay_result_free(out);
        return false;
    }
    int *lis = ft_malloc((size_t)t->n_layers * sizeof(int));
    bool ok = true;
    for (int k = 0; k < plan->n_pools && ok; k++) {
        const moe_pool_plan *pp = &plan->pools[k];
        int n_lis = 0;
        for (int li = 0; li < t->n_layers; li++)
            if (out->layers[li].pool == k) lis[n_lis++] = li;
        if (!n_lis) continue;
        if (pool_wide) {
            // the pool's slots, shared: a layer of the pool the trace leaves out holds none
            ok = belady_requests(t, lis, n_lis, pp->n_slots, warmup, expert_bytes, out);
        } else {
            for (int j = 0; j < n_lis && ok; j++) {
                int pos = 0;
                while (pp->layers[pos] != t->layers[lis[j]]) pos++;
                int own = moe_cache_layer_slots(pp->n_slots, pp->n_layers, pos);
                out->layers[lis[j]].slots = own;
                ok = belady_requests(t, &lis[j], 1, own, warmup, expert_bytes, out);
            }
        }
        if (!ok) ft_err_set(err, "pool %d: a step selects more distinct experts than %s holds", k,
                            pool_wide ? "the pool" : "a layer's share");
    }
    if (ok) sum_layers(out);
    else moe_replay_result_free(out);
    free(lis);
    free(expert_bytes);
    return ok;
}

void moe_replay_result_free(moe_replay_result *r) {
    if (!r) return;
    free(r->pools);
    free(r->layers);
    memset(r, 0, sizeof(*r));
}
