// expert_cache.c: slot maps, LRU victims and statistics per pool (the policy is in the header).
#include "expert_cache.h"

#include <stdlib.h>
#include <string.h>

typedef struct pool_state {
    int n_slots;
    uint64_t stride[MOE_BANK_COUNT], offset[MOE_BANK_COUNT];
    int32_t *slot_layer, *slot_expert; // (n_slots) block index and expert; -1 when empty
    uint64_t *stamp;                   // (n_slots)
    uint64_t clock;
    moe_cache_stats total, request;
} pool_state;

struct moe_expert_cache {
    int n_pools;
    pool_state *pools;
    int n_blocks;
    int *pool_of_block;   // (n_blocks) -1: not a MoE layer
    int *n_expert;        // (n_blocks)
    int *map_base;        // (n_blocks) where the block's experts start in map
    int *host_index;      // (n_blocks) the block's index in the geometry (and host banks)
    int *range_first;     // (n_blocks) the layer's own slots in its pool: [first, first + n)
    int *range_n;         // (n_blocks)
    uint64_t *copy_bytes; // (n_blocks) native bytes of one expert over the banks: what a copy moves
    int32_t *map;         // (experts of all layers) slot or -1
    moe_cache_stats *layer_total, *layer_request; // (n_blocks)
    uint64_t *seen;       // (max experts of a layer) epoch marks to count distinct experts
    uint64_t seen_epoch;
    int *miss_rank;       // (max experts of a layer) a step's missed expert's order of first appearance
};

moe_expert_cache *moe_expert_cache_init(const moe_cache_plan *plan, const moe_geometry *g) {
    moe_expert_cache *c = ft_calloc(1, sizeof(*c));
    c->n_blocks = plan->n_blocks;
    c->pool_of_block = ft_malloc((size_t)c->n_blocks * sizeof(int));
    c->n_expert = ft_calloc((size_t)c->n_blocks, sizeof(int));
    c->map_base = ft_calloc((size_t)c->n_blocks, sizeof(int));
    c->host_index = ft_calloc((size_t)c->n_blocks, sizeof(int));
    c->copy_bytes = ft_calloc((size_t)c->n_blocks, sizeof(uint64_t));
    c->range_first = ft_calloc((size_t)c->n_blocks, sizeof(int));
    c->range_n = ft_calloc((size_t)c->n_blocks, sizeof(int));
    memcpy(c->pool_of_block, plan->pool_of_block, (size_t)c->n_blocks * sizeof(int));
    int n_map = 0, max_expert = 1;
    for (int i = 0; i < g->n_layers; i++) {
        int L = g->layers[i].layer;
        FT_ASSERT(L < c->n_blocks && c->pool_of_block[L] >= 0);
        c->n_expert[L] = g->layers[i].n_expert;
        c->map_base[L] = n_map;
        c->host_index[L] = i;
        for (int b = 0; b < MOE_BANK_COUNT; b++) c->copy_bytes[L] += g->layers[i].bytes[b];
        n_map += g->layers[i].n_expert;
        max_expert = FT_MAX(max_expert, g->layers[i].n_expert);
    }
    c->map = ft_malloc((size_t)(n_map ? n_map : 1) * sizeof(int32_t));
    for (int i = 0; i < n_map; i++) c->map[i] = -1;
    c->layer_total = ft_calloc((size_t)c->n_blocks, sizeof(moe_cache_stats));
    c->layer_request = ft_calloc((size_t)c->n_blocks, sizeof(moe_cache_stats));
    c->seen = ft_calloc((size_t)max_expert, sizeof(uint64_t));
    c->miss_rank = ft_calloc((size_t)max_expert, sizeof(int));
    c->n_pools = plan->n_pools;
    c->pools = ft_calloc((size_t)plan->n_pools, sizeof(pool_state));
    for (int k = 0; k < plan->n_pools; k++) {
        pool_state *ps = &c->pools[k];
        const moe_pool_plan *pp = &plan->pools[k];
        ps->n_slots = pp->n_slots;
        memcpy(ps->stride, pp->stride, sizeof(ps->stride));
        memcpy(ps->offset, pp->offset, sizeof(ps->offset));
        size_t n = (size_t)(pp->n_slots ? pp->n_slots : 1);
        ps->slot_layer = ft_malloc(n * sizeof(int32_t));
        ps->slot_expert = ft_malloc(n * sizeof(int32_t));
        ps->stamp = ft_calloc(n, sizeof(uint64_t));
        for (int s = 0; s < pp->n_slots; s++) ps->slot_layer[s] = ps->slot_expert[s] = -1;
        // the pool's slots split evenly among its layers in layer order, the first
        // n_slots % n_layers of them one more
        int first = 0;
        for (int j = 0; j < pp->n_layers; j++) {
            int L = pp->layers[j], n_own = moe_cache_layer_slots(pp->n_slots, pp->n_layers, j);
            c->range_first[L] = first;
            c->range_n[L] = n_own;
            first += n_own;
        }
    }
    return c;
}

void moe_expert_cache_free(moe_expert_cache *c) {
    if (!c) return;
    for (int k = 0; k < c->n_pools; k++) {
        free(c->pools[k].slot_layer);
        free(c->pools[k].slot_expert);
        free(c->pools[k].stamp);
    }
    free(c->pools);
    free(c->pool_of_block);
    free(c->n_expert);
    free(c->map_base);
    free(c->host_index);
    free(c->copy_bytes);
    free(c->range_first);
    free(c->range_n);
    free(c->map);
    free(c->layer_total);
    free(c->layer_request);
    free(c->seen);
    free(c->miss_rank);
    free(c);
}

int moe_expert_cache_pool_of(const moe_expert_cache *c, int layer) {
    return layer >= 0 && layer < c->n_blocks ? c->pool_of_block[layer] : -1;
}

int moe_expert_cache_lookup(const moe_expert_cache *c, int layer, int expert) {
    if (moe_expert_cache_pool_of(c, layer) < 0 || expert < 0 || expert >= c->n_expert[layer]) return -1;
    return c->map[c->map_base[layer] + expert];
}

bool moe_expert_cache_slot(const moe_expert_cache *c, int pool, int slot, int *layer, int *expert) {
    FT_ASSERT(pool >= 0 && pool < c->n_pools && slot >= 0 && slot < c->pools[pool].n_slots);
    *layer = c->pools[pool].slot_layer[slot];
    *expert = c->pools[pool].slot_expert[slot];
    return *layer >= 0;
}

uint64_t moe_expert_cache_stamp(const moe_expert_cache *c, int pool, int slot) {
    FT_ASSERT(pool >= 0 && pool < c->n_pools && slot >= 0 && slot < c->pools[pool].n_slots);
    return c->pools[pool].stamp[slot];
}

int moe_cache_layer_slots(int pool_slots, int pool_layers, int j) {
    FT_ASSERT(pool_layers >= 1 && j >= 0 && j < pool_layers);
    return pool_slots / pool_layers + (j < pool_slots % pool_layers);
}

void moe_expert_cache_layer_range(const moe_expert_cache *c, int layer, int *first, int *n) {
    FT_ASSERT(moe_expert_cache_pool_of(c, layer) >= 0);
    *first = c->range_first[layer];
    *n = c->range_n[layer];
}

// The slot of [first, first + n) with the smallest (stamp, index) among stamps below t; -1 if none.
static int oldest_slot(const pool_state *ps, int first, int n, uint64_t t) {
    int best = -1;
    for (int s = first; s < first + n; s++)
        if (ps->stamp[s] < t && (best < 0 || ps->stamp[s] < ps->stamp[best])) best = s;
    return best;
}

static void add_stats(moe_cache_stats *a, uint64_t n, uint64_t k, uint64_t bytes, uint64_t cpu) {
    a->selections += n;
    a->hits += n - k;
    a->misses += k;
    a->bytes_copied += bytes;
    a->cpu_computed += cpu;
}

bool moe_expert_cache_step(moe_expert_cache *c, int layer, const int32_t *experts, int n, int32_t *slots,
                           moe_cache_copy *copies, int *n_copies, ft_err *err) {
    int n_cpu;
    return moe_expert_cache_step_split(c, layer, experts, n, NULL, slots, copies, n_copies, &n_cpu, err);
}

bool moe_expert_cache_step_split(moe_expert_cache *c, int layer, const int32_t *experts, int n,
                                 const moe_hybrid_costs *costs, int32_t *slots, moe_cache_copy *copies, int *n_copies,
                                 int *n_cpu, ft_err *err) {
    *n_copies = 0;
    *n_cpu = 0;
    int pool = moe_expert_cache_pool_of(c, layer);
    if (pool < 0) return ft_err_set(err, "layer %d is not a MoE layer of the expert cache", layer);
    pool_state *ps = &c->pools[pool];
    int32_t *map = c->map + c->map_base[layer];
    // Validate before changing anything: ids in range, distinct experts within the pool's slots.
    uint64_t epoch = ++c->seen_epoch;
    int distinct = 0;
    for (int i = 0; i < n; i++) {
        int e = experts[i];
        if (e < 0 || e >= c->n_expert[layer])
            return ft_err_set(err, "layer %d: selection %d is expert %d, outside [0, %d)", layer, i, e,
                              c->n_expert[layer]);
        if (c->seen[e] != epoch) {
            c->seen[e] = epoch;
            distinct++;
        }
    }
    if (distinct > c->range_n[layer])
        return ft_err_set(err, "layer %d: the step selects %d distinct experts but the layer has %d slots (pool %d)",
                          layer, distinct, c->range_n[layer], pool);
    uint64_t t = ++ps->clock;
    int missed = 0; // distinct missed experts
    for (int i = 0; i < n; i++) {
        int s = map[experts[i]];
        slots[i] = s;
        if (s >= 0) ps->stamp[s] = t;
    }
    epoch = ++c->seen_epoch;
    for (int i = 0; i < n; i++)
        if (slots[i] < 0 && c->seen[experts[i]] != epoch) {
            c->seen[experts[i]] = epoch;
            missed++;
        }
    // the first n_copy distinct misses are copied for this step; the others' selections go to
    // the CPU (their copies still fill the cache, off the step's critical path)
    int n_copy = missed - moe_hybrid_cpu_share(missed, costs);
    epoch = ++c->seen_epoch;
    int k = 0, j = 0;
    for (int i = 0; i < n; i++) {
        if (slots[i] >= 0) continue;
        int e = experts[i];
        if (c->seen[e] != epoch) { // first appearance: the j-th distinct miss
            c->seen[e] = epoch;
            c->miss_rank[e] = j++;
        }
        int s = map[e];
        if (s < 0) { // first appearance of a missed expert: it takes the oldest slot
            s = oldest_slot(ps, c->range_first[layer], c->range_n[layer], t);
            FT_ASSERT(s >= 0);
            moe_cache_copy *cp = &copies[k++];
            *cp = (moe_cache_copy){pool, s, layer, e, ps->slot_layer[s], ps->slot_expert[s]};
            if (cp->evicted_layer >= 0) c->map[c->map_base[cp->evicted_layer] + cp->evicted_expert] = -1;
            ps->slot_layer[s] = layer;
            ps->slot_expert[s] = e;
            ps->stamp[s] = t;
            map[e] = s;
        }
        slots[i] = c->miss_rank[e] >= n_copy ? -1 : s; // -1: computed on the CPU this step
    }
    *n_copies = k;
    *n_cpu = missed - n_copy;
    uint64_t bytes = (uint64_t)k * c->copy_bytes[layer];
    moe_cache_stats *st[] = {&ps->total, &ps->request, &c->layer_total[layer], &c->layer_request[layer]};
    for (size_t i = 0; i < FT_ARRAY_LEN(st); i++) add_stats(st[i], (uint64_t)n, (uint64_t)missed, bytes, (uint64_t)*n_cpu);
    return true;
}

uint64_t moe_expert_cache_slot_offset(const moe_expert_cache *c, int pool, int slot, enum moe_bank b) {
    FT_ASSERT(pool >= 0 && pool < c->n_pools && slot >= 0 && slot < c->pools[pool].n_slots);
    return c->pools[pool].offset[b] + (uint64_t)slot * c->pools[pool].stride[b];
}

void moe_expert_cache_copy_regions(const moe_expert_cache *c, const moe_expert_banks *hb, const moe_cache_copy *cp,
                                   moe_copy_region out[MOE_BANK_COUNT]) {
    FT_ASSERT(moe_expert_cache_pool_of(c, cp->layer) == cp->pool);
    int li = c->host_index[cp->layer];
    FT_ASSERT(li < hb->n_layers && hb->layers[li].layer == cp->layer);
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        uint64_t bytes = hb->layers[li].bank[b].expert_bytes; // below the stride in a uniform pool
        FT_ASSERT(bytes <= c->pools[cp->pool].stride[b]);
        out[b] = (moe_copy_region){moe_expert_banks_entry(hb, li, (enum moe_bank)b, cp->expert),
                                   moe_expert_cache_slot_offset(c, cp->pool, cp->slot, (enum moe_bank)b), bytes};
    }
}

static int invalidate_slot(moe_expert_cache *c, pool_state *ps, int s) {
    ps->stamp[s] = 0;
    if (ps->slot_layer[s] < 0) return 0;
    c->map[c->map_base[ps->slot_layer[s]] + ps->slot_expert[s]] = -1;
    ps->slot_layer[s] = ps->slot_expert[s] = -1;
    return 1;
}

int moe_expert_cache_invalidate(moe_expert_cache *c, int pool, int first, int n) {
    FT_ASSERT(pool >= 0 && pool < c->n_pools);
    pool_state *ps = &c->pools[pool];
    int lo = FT_MAX(first, 0), hi = (int)FT_MIN((int64_t)first + n, (int64_t)ps->n_slots);
    int held = 0;
    for (int s = lo; s < hi; s++) held += invalidate_slot(c, ps, s);
    return held;
}

int moe_expert_cache_invalidate_bytes(moe_expert_cache *c, enum moe_bank bank, uint64_t offset, uint64_t bytes) {
    int held = 0;
    if (!bytes) return 0;
    for (int k = 0; k < c->n_pools; k++) {
        pool_state *ps = &c->pools[k];
        uint64_t stride = ps->stride[bank], base = ps->offset[bank];
        if (!ps->n_slots || !stride || offset + bytes <= base) continue;
        // slots [first, last] overlap: first ends after offset, last starts before offset + bytes
        uint64_t first = offset <= base ? 0 : (offset - base) / stride;
        uint64_t last = (offset + bytes - 1 - base) / stride;
        if (first >= (uint64_t)ps->n_slots) continue;
        last = FT_MIN(last, (uint64_t)ps->n_slots - 1);
        for (uint64_t s = first; s <= last; s++) held += invalidate_slot(c, ps, (int)s);
    }
    return held;
}

moe_cache_stats moe_expert_cache_layer_stats(const moe_expert_cache *c, int layer, bool request) {
    FT_ASSERT(moe_expert_cache_pool_of(c, layer) >= 0);
    return request ? c->layer_request[layer] : c->layer_total[layer];
}

moe_cache_stats moe_expert_cache_pool_stats(const moe_expert_cache *c, int pool, bool request) {
    FT_ASSERT(pool >= 0 && pool < c->n_pools);
    return request ? c->pools[pool].request : c->pools[pool].total;
}

void moe_expert_cache_reset_request(moe_expert_cache *c) {
    for (int k = 0; k < c->n_pools; k++) memset(&c->pools[k].request, 0, sizeof(moe_cache_stats));
    memset(c->layer_request, 0, (size_t)c->n_blocks * sizeof(moe_cache_stats));
}
