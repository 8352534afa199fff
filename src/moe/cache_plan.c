// cache_plan.c: pricing, pools and capacity split of the GPU expert cache (rules in the header).
#include "cache_plan.h"

#include <stdlib.h>
#include <string.h>

static const char *const g_bank_names[MOE_BANK_COUNT] = {"gate", "up", "down"};

moe_cache_plan_params moe_cache_plan_default_params(void) {
    moe_cache_plan_params p;
    memset(&p, 0, sizeof(p));
    p.layout = MOE_POOL_LAYOUT_EXACT;
    p.top_k = 1;
    p.n_running = 1;
    p.view_align = 256;
    p.memory_ratio = 0.9;
    return p;
}

uint64_t moe_pool_slot_bytes(const moe_pool_plan *pool) {
    uint64_t s = 0;
    for (int b = 0; b < MOE_BANK_COUNT; b++) s += pool->stride[b];
    return s;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static const moe_layer_geometry *layer_of_block(const moe_geometry *g, int block) {
    for (int i = 0; i < g->n_layers; i++)
        if (g->layers[i].layer == block) return &g->layers[i];
    return NULL;
}

static int floor_per_layer(const moe_geometry *g, const moe_cache_plan_params *p) {
    int max_expert = 0;
    for (int i = 0; i < g->n_layers; i++) max_expert = FT_MAX(max_expert, g->layers[i].n_expert);
    int64_t f = (int64_t)p->top_k * p->n_running;
    return (int)FT_MIN(f, (int64_t)max_expert);
}

// The pools of a layout with their layers, strides, expert counts and floors; no slots yet.
static void make_pools(const moe_geometry *g, const moe_cache_plan_params *p, moe_cache_plan *plan) {
    int fpl = floor_per_layer(g, p);
    if (p->layout == MOE_POOL_LAYOUT_UNIFORM) {
        plan->n_pools = 1;
        plan->pools = ft_calloc(1, sizeof(*plan->pools));
        moe_pool_plan *pool = &plan->pools[0];
        pool->n_layers = g->n_layers;
        pool->layers = ft_malloc((size_t)g->n_layers * sizeof(int));
        for (int i = 0; i < g->n_layers; i++) {
            pool->layers[i] = g->layers[i].layer;
            pool->n_expert_total += g->layers[i].n_expert;
        }
        memcpy(pool->stride, plan->max_stride, sizeof(pool->stride));
    } else {
        plan->n_pools = g->n_groups;
        plan->pools = ft_calloc((size_t)g->n_groups, sizeof(*plan->pools));
        for (int k = 0; k < g->n_groups; k++) {
            const moe_geometry_group *grp = &g->groups[k];
            moe_pool_plan *pool = &plan->pools[k];
            pool->n_layers = grp->n_layers;
            pool->layers = ft_malloc((size_t)grp->n_layers * sizeof(int));
            memcpy(pool->layers, grp->layers, (size_t)grp->n_layers * sizeof(int));
            for (int i = 0; i < grp->n_layers; i++) pool->n_expert_total += layer_of_block(g, grp->layers[i])->n_expert;
            memcpy(pool->stride, grp->bytes, sizeof(pool->stride));
        }
    }
    for (int k = 0; k < plan->n_pools; k++) {
        moe_pool_plan *pool = &plan->pools[k];
        pool->floor_slots = (int)FT_MIN((int64_t)fpl * pool->n_layers, (int64_t)pool->n_expert_total);
    }
}

// Lays the views of pools holding slots[k] slots out in order; returns the end of the last view
// in bank b (offsets written when write is set).
static uint64_t layout_views(moe_cache_plan *plan, const int *slots, uint64_t align, int b, bool write) {
    uint64_t off = 0;
    for (int k = 0; k < plan->n_pools; k++) {
        off = align_up(off, align);
        if (write) plan->pools[k].offset[b] = off;
        off += (uint64_t)slots[k] * plan->pools[k].stride[b];
    }
    return off;
}

static bool views_fit(moe_cache_plan *plan, const int *slots, uint64_t align) {
    for (int b = 0; b < MOE_BANK_COUNT; b++)
        if (layout_views(plan, slots, align, b, false) > plan->arena_bytes[b]) return false;
    return true;
}

// Slots of each pool under a share of s per layer.
static void fair_share(const moe_cache_plan *plan, int64_t s, int *slots) {
    for (int k = 0; k < plan->n_pools; k++)
        slots[k] = (int)FT_MIN(s * plan->pools[k].n_layers, (int64_t)plan->pools[k].n_expert_total);
}

static void split_exact(moe_cache_plan *plan, uint64_t align, int *slots) {
    int64_t hi = 0; // a share beyond which every pool is full
    for (int k = 0; k < plan->n_pools; k++) hi = FT_MAX(hi, (int64_t)plan->pools[k].n_expert_total);
    int64_t lo = 0; // largest share known to fit
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        fair_share(plan, mid, slots);
        if (views_fit(plan, slots, align)) lo = mid;
        else hi = mid - 1;
    }
    fair_share(plan, lo, slots);
    bool *out = ft_calloc((size_t)plan->n_pools, sizeof(bool));
    for (;;) {
        int best = -1;
        for (int k = 0; k < plan->n_pools; k++) {
            if (out[k] || slots[k] >= plan->pools[k].n_expert_total) continue;
            // fewest slots per layer: slots[k] / n_layers(k) < slots[best] / n_layers(best)
            if (best < 0 || (int64_t)slots[k] * plan->pools[best].n_layers <
                                (int64_t)slots[best] * plan->pools[k].n_layers)
                best = k;
        }
        if (best < 0) break;
        slots[best]++;
        if (!views_fit(plan, slots, align)) {
            slots[best]--;
            out[best] = true;
        }
    }
    free(out);
}

// Fills the pools' slots and offsets for N = plan->n_slots.
static void place_pools(moe_cache_plan *plan, uint64_t align) {
    for (int b = 0; b < MOE_BANK_COUNT; b++) plan->arena_bytes[b] = (uint64_t)plan->n_slots * plan->max_stride[b];
    int *slots = ft_calloc((size_t)plan->n_pools, sizeof(int));
    if (plan->layout == MOE_POOL_LAYOUT_UNIFORM) slots[0] = (int)FT_MIN((int64_t)plan->n_slots, plan->pools[0].n_expert_total);
    else split_exact(plan, align, slots);
    plan->bytes = plan->bytes_used = 0;
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        layout_views(plan, slots, align, b, true);
        plan->bytes += plan->arena_bytes[b];
    }
    for (int k = 0; k < plan->n_pools; k++) {
        plan->pools[k].n_slots = slots[k];
        plan->bytes_used += (uint64_t)slots[k] * moe_pool_slot_bytes(&plan->pools[k]);
    }
    free(slots);
}

static void plan_skeleton(const moe_geometry *g, const moe_cache_plan_params *p, moe_cache_plan *plan) {
    memset(plan, 0, sizeof(*plan));
    plan->layout = p->layout;
    plan->top_k = p->top_k;
    plan->n_running = p->n_running;
    plan->floor_per_layer = floor_per_layer(g, p);
    for (int i = 0; i < g->n_layers; i++)
        for (int b = 0; b < MOE_BANK_COUNT; b++)
            plan->max_stride[b] = FT_MAX(plan->max_stride[b], g->layers[i].bytes[b]);
    make_pools(g, p, plan);
}

static int total_experts(const moe_geometry *g) {
    int64_t n = 0;
    for (int i = 0; i < g->n_layers; i++) n += g->layers[i].n_expert;
    return (int)FT_MIN(n, (int64_t)INT32_MAX);
}

int moe_cache_plan_min_slots(const moe_geometry *g, const moe_cache_plan_params *p) {
    moe_cache_plan plan;
    plan_skeleton(g, p, &plan);
    int *slots = ft_calloc((size_t)plan.n_pools, sizeof(int));
    for (int k = 0; k < plan.n_pools; k++) slots[k] = plan.pools[k].floor_slots;
    uint64_t n = 0;
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        uint64_t end = layout_views(&plan, slots, p->view_align, b, false);
        if (plan.max_stride[b]) n = FT_MAX(n, (end + plan.max_stride[b] - 1) / plan.max_stride[b]);
    }
    free(slots);
    moe_cache_plan_free(&plan);
    return (int)n;
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

bool moe_cache_plan_make(const moe_geometry *g, const moe_cache_plan_params *p, moe_cache_plan *out,
                         ft_err *err) {
    memset(out, 0, sizeof(*out));
    if (g->n_layers == 0) return ft_err_set(err, "the model has no routed experts: there is nothing to cache");
    FT_ASSERT(p->top_k >= 1 && p->n_running >= 1 && p->n_slots >= 0);
    FT_ASSERT(p->view_align && !(p->view_align & (p->view_align - 1)));
    plan_skeleton(g, p, out);
    uint64_t slot_bytes = 0;
    for (int b = 0; b < MOE_BANK_COUNT; b++) slot_bytes += out->max_stride[b];
    int64_t n = p->n_slots;
    if (n == 0) {
        double usable = (double)p->vram_free * p->memory_ratio;
        double reserved = (double)p->dense_bytes + (double)p->workspace_bytes +
                          (double)p->kv_bytes_per_token * (double)p->kv_reserve_tokens;
        if (usable - reserved < (double)slot_bytes) {
            moe_cache_plan_free(out);
            return ft_err_set(err,
                              "no room for an expert cache: %.2f x %.1f MiB free = %.1f MiB, minus dense weights "
                              "%.1f MiB, workspace %.1f MiB and a KV floor of %lld tokens (%.1f MiB) leaves %.1f "
                              "MiB, less than one slot (%.2f MiB)",
                              p->memory_ratio, mib(p->vram_free), usable / 1048576.0, mib(p->dense_bytes),
                              mib(p->workspace_bytes), (long long)p->kv_reserve_tokens,
                              (double)p->kv_bytes_per_token * (double)p->kv_reserve_tokens / 1048576.0,
                              (usable - reserved) / 1048576.0, mib(slot_bytes));
        }
        out->budget = (uint64_t)(usable - reserved);
        n = (int64_t)(out->budget / slot_bytes);
        n = FT_MIN(n, (int64_t)total_experts(g));
    }
    out->n_slots = (int)n;
    place_pools(out, p->view_align);
    for (int i = 0; i < g->n_layers; i++) out->n_blocks = FT_MAX(out->n_blocks, g->layers[i].layer + 1);
    out->pool_of_block = ft_malloc((size_t)out->n_blocks * sizeof(int));
    for (int i = 0; i < out->n_blocks; i++) out->pool_of_block[i] = -1;
    for (int k = 0; k < out->n_pools; k++)
        for (int i = 0; i < out->pools[k].n_layers; i++) out->pool_of_block[out->pools[k].layers[i]] = k;
    for (int k = 0; k < out->n_pools; k++) {
        const moe_pool_plan *pool = &out->pools[k];
        if (pool->n_slots >= pool->floor_slots) continue;
        int need = moe_cache_plan_min_slots(g, p);
        ft_err_set(err,
                   "an expert cache of %d slots (%.1f MiB) gives pool %d (%d layers, %.2f MiB per slot) %d slots, "
                   "below its floor of %d (%d per layer: top-k %d x %d running); the smallest cache that meets "
                   "the floor is %d slots (%.1f MiB)",
                   out->n_slots, mib(out->bytes), k, pool->n_layers, mib(moe_pool_slot_bytes(pool)), pool->n_slots,
                   pool->floor_slots, out->floor_per_layer, p->top_k, p->n_running, need,
                   mib((uint64_t)need * slot_bytes));
        moe_cache_plan_free(out);
        return false;
    }
    return true;
}

void moe_cache_plan_free(moe_cache_plan *plan) {
    if (!plan) return;
    for (int k = 0; k < plan->n_pools; k++) free(plan->pools[k].layers);
    free(plan->pools);
    free(plan->pool_of_block);
    memset(plan, 0, sizeof(*plan));
}

// "1-39,41" from ascending block indices.
static void print_ranges(FILE *out, const int *v, int n) {
    for (int k = 0; k < n; k++) {
        int a = v[k], b = a;
        while (k + 1 < n && v[k + 1] == b + 1) b = v[++k];
        fprintf(out, "%s%d", a == v[0] ? "" : ",", a);
        if (b > a) fprintf(out, "-%d", b);
    }
}

void moe_cache_plan_print(const moe_cache_plan *plan, FILE *out) {
    uint64_t slot_bytes = 0;
    for (int b = 0; b < MOE_BANK_COUNT; b++) slot_bytes += plan->max_stride[b];
    fprintf(out, "expert cache plan (%s layout): %d slots priced at %.2f MiB each (", 
            plan->layout == MOE_POOL_LAYOUT_EXACT ? "exact" : "uniform", plan->n_slots, mib(slot_bytes));
    for (int b = 0; b < MOE_BANK_COUNT; b++)
        fprintf(out, "%s%s %.2f", b ? ", " : "", g_bank_names[b], mib(plan->max_stride[b]));
    fprintf(out, " MiB) = %.1f MiB", mib(plan->bytes));
    if (plan->budget) fprintf(out, ", sized from a budget of %.1f MiB", mib(plan->budget));
    fprintf(out, "\n  floor: %d slots per layer (top-k %d x %d running)\n", plan->floor_per_layer, plan->top_k,
            plan->n_running);
    for (int k = 0; k < plan->n_pools; k++) {
        const moe_pool_plan *pool = &plan->pools[k];
        fprintf(out, "  pool %d: layers ", k);
        print_ranges(out, pool->layers, pool->n_layers);
        fprintf(out, " (%d), %.2f MiB per slot (", pool->n_layers, mib(moe_pool_slot_bytes(pool)));
        for (int b = 0; b < MOE_BANK_COUNT; b++)
            fprintf(out, "%s%s %llu B", b ? ", " : "", g_bank_names[b], (unsigned long long)pool->stride[b]);
        fprintf(out, "): %d slots, %.1f per layer, %.1f%% of its experts, %.1f MiB\n", pool->n_slots,
                (double)pool->n_slots / pool->n_layers, 100.0 * pool->n_slots / pool->n_expert_total,
                mib((uint64_t)pool->n_slots * moe_pool_slot_bytes(pool)));
    }
    fprintf(out, "  used %.1f of %.1f MiB (%.1f%%)\n", mib(plan->bytes_used), mib(plan->bytes),
            plan->bytes ? 100.0 * (double)plan->bytes_used / (double)plan->bytes : 0.0);
}
