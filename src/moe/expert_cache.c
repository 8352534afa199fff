// expert_cache.c: slot maps, LRU victims and statistics per pool (the policy is in the header).
#include "expert_cache.h"
#include "frecency.h"

#include <stdlib.h>
#include <string.h>

typedef struct pool_state {
    int n_slots;
    int n_layers;
    int *layers;                       // (n_layers) block indices, ascending
    int32_t *slot_owner;               // (n_slots) block index of the layer owning the slot
    uint64_t moves;                    // self-sizing moves since init
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
    int *range_n;         // (n_blocks) slots the layer owns (its range's length; with self-sizing, it moves)
    uint64_t *copy_bytes; // (n_blocks) native bytes of one expert over the banks: what a copy moves
    int32_t *map;         // (experts of all layers) slot or -1
    moe_cache_stats *layer_total, *layer_request; // (n_blocks)
    uint64_t *seen;       // (max experts of a layer) epoch marks to count distinct experts
    uint64_t seen_epoch;
    int *miss_rank;       // (max experts of a layer) a step's missed expert's order of first appearance
    int floor;            // the plan's per-layer floor: self-sizing never goes below it
    moe_cache_policy_params policy;
    uint64_t tokens;      // moe_expert_cache_end_step calls
    // self-sizing only (NULL otherwise); G = policy.ghost_depth
    uint32_t *ghost_tag;  // (experts of all layers, as map) the layer's eviction count at eviction; 0: none
    uint32_t *evictions;  // (n_blocks)
    uint32_t *tail;       // (n_blocks, G) hits by position from the LRU end
    uint32_t *ghost;      // (n_blocks, G) misses by ghost depth
    int *given, *taken;   // (n_blocks) moves of the current rebalance
    // frecency victims only (NULL otherwise): the header's u_L, and c, l, h of every (L, e)
    uint64_t *layer_steps;  // (n_blocks)
    uint32_t *use_count;    // (experts of all layers, as map)
    uint64_t *use_last, *use_hist;
};

// Tuned on heterogeneous 48-layer traces of 128 experts, top-8, at 16 to 48 slots per layer
// (docs/performance.md, "Cache replay: self-sizing layers and Belady").
moe_cache_policy_params moe_cache_sizing_default_params(void) {
    return (moe_cache_policy_params){
        .self_sizing = true,
        .ghost_depth = 32, // four tokens of top-8 misses deep: a receiver may take up to 32 slots a rebalance (16: 0.2 points less)
        .period = 32,      // counters halve every 32 tokens (a memory of ~64): at 8 the estimates were noisy and lost 1-4 points
        .max_moves = 32,   // one move a token per pool on average, each costing at most one copy; 4 a period could not follow the layers
        .min_gain = 1,     // one (halved) ghost hit of margin: no move on a lone hit; 2 lost 2.5 points at 48 slots a layer
    };
}

moe_cache_policy_params moe_cache_policy_default_params(void) {
    moe_cache_policy_params p = moe_cache_sizing_default_params();
    p.self_sizing = false;
    return p;
}

moe_expert_cache *moe_expert_cache_init(const moe_cache_plan *plan, const moe_geometry *g) {
    moe_cache_policy_params policy = moe_cache_policy_default_params();
    return moe_expert_cache_init_policy(plan, g, &policy);
}

moe_expert_cache *moe_expert_cache_init_policy(const moe_cache_plan *plan, const moe_geometry *g,
                                               const moe_cache_policy_params *policy) {
    FT_ASSERT(policy->ghost_depth >= 1 && policy->ghost_depth <= 64 && policy->period >= 1 &&
              policy->max_moves >= 0 && policy->min_gain >= 0);
    moe_expert_cache *c = ft_calloc(1, sizeof(*c));
    c->policy = *policy;
    c->floor = plan->floor_per_layer;
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
        ps->slot_owner = ft_malloc(n * sizeof(int32_t));
        ps->n_layers = pp->n_layers;
        ps->layers = ft_malloc((size_t)pp->n_layers * sizeof(int));
        memcpy(ps->layers, pp->layers, (size_t)pp->n_layers * sizeof(int));
        for (int s = 0; s < pp->n_slots; s++) ps->slot_layer[s] = ps->slot_expert[s] = -1;
        // the pool's slots split evenly among its layers in layer order, the first
        // n_slots % n_layers of them one more
        int first = 0;
        for (int j = 0; j < pp->n_layers; j++) {
            int L = pp->layers[j], n_own = moe_cache_layer_slots(pp->n_slots, pp->n_layers, j);
            c->range_first[L] = first;
            c->range_n[L] = n_own;
            for (int s = first; s < first + n_own; s++) ps->slot_owner[s] = L;
            first += n_own;
        }
    }
    if (policy->victims == MOE_VICTIMS_FRECENCY) {
        size_t nm = (size_t)(n_map ? n_map : 1);
        c->layer_steps = ft_calloc((size_t)c->n_blocks, sizeof(uint64_t));
        c->use_count = ft_calloc(nm, sizeof(uint32_t));
        c->use_last = ft_calloc(nm, sizeof(uint64_t));
        c->use_hist = ft_calloc(nm, sizeof(uint64_t));
    }
    if (policy->self_sizing) {
        size_t G = (size_t)policy->ghost_depth, nb = (size_t)c->n_blocks;
        c->ghost_tag = ft_calloc((size_t)(n_map ? n_map : 1), sizeof(uint32_t));
        c->evictions = ft_calloc(nb, sizeof(uint32_t));
        c->tail = ft_calloc(nb * G, sizeof(uint32_t));
        c->ghost = ft_calloc(nb * G, sizeof(uint32_t));
        c->given = ft_calloc(nb, sizeof(int));
        c->taken = ft_calloc(nb, sizeof(int));
    }
    return c;
}

void moe_expert_cache_free(moe_expert_cache *c) {
    if (!c) return;
    for (int k = 0; k < c->n_pools; k++) {
        free(c->pools[k].slot_layer);
        free(c->pools[k].slot_expert);
        free(c->pools[k].stamp);
        free(c->pools[k].slot_owner);
        free(c->pools[k].layers);
    }
    free(c->ghost_tag);
    free(c->evictions);
    free(c->tail);
    free(c->ghost);
    free(c->given);
    free(c->taken);
    free(c->layer_steps);
    free(c->use_count);
    free(c->use_last);
    free(c->use_hist);
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
    FT_ASSERT(moe_expert_cache_pool_of(c, layer) >= 0 && !c->policy.self_sizing);
    *first = c->range_first[layer];
    *n = c->range_n[layer];
}

// Where layer L's slots lie: its fixed range, or (self-sizing) anywhere in the pool.
static void owned_span(const moe_expert_cache *c, const pool_state *ps, int L, int *lo, int *hi) {
    *lo = c->policy.self_sizing ? 0 : c->range_first[L];
    *hi = c->policy.self_sizing ? ps->n_slots : c->range_first[L] + c->range_n[L];
}

// The frecency score of the slot holding (L, e) (header: "Frecency victims").
static uint64_t frecency_score(const moe_expert_cache *c, int L, int e) {
    size_t at = (size_t)c->map_base[L] + (size_t)e;
    return moe_frecency_score(c->layer_steps[L], c->use_count[at], c->use_last[at], c->use_hist[at]);
}

// Records the uses of step u_L (advanced here) by its distinct experts (frecency victims only).
static void record_uses(moe_expert_cache *c, int L, const int32_t *experts, int n) {
    uint64_t u = ++c->layer_steps[L], epoch = ++c->seen_epoch;
    for (int i = 0; i < n; i++) {
        int e = experts[i];
        if (c->seen[e] == epoch) continue;
        c->seen[e] = epoch;
        size_t at = (size_t)c->map_base[L] + (size_t)e;
        moe_frecency_use(u, &c->use_count[at], &c->use_last[at], &c->use_hist[at]);
    }
}

// A slot's rank as a victim before its stamp and index: 0 under the LRU; under frecency 0 for an
// empty slot (stamp 0 as well) and 1 + its score for a full one.
static uint64_t victim_rank(const moe_expert_cache *c, const pool_state *ps, int s) {
    if (c->policy.victims != MOE_VICTIMS_FRECENCY || ps->slot_layer[s] < 0) return 0;
    return 1 + frecency_score(c, ps->slot_layer[s], ps->slot_expert[s]);
}

// L's first victim among its slots with stamps below t, by (rank, stamp, slot index) ascending,
// leaving out slots whose expert is marked (seen[expert] == keep; keep 0: none); -1 if none.
static int oldest_slot_but(const moe_expert_cache *c, const pool_state *ps, int L, uint64_t t, uint64_t keep) {
    int best = -1, lo, hi;
    uint64_t best_rank = 0;
    owned_span(c, ps, L, &lo, &hi);
    for (int s = lo; s < hi; s++) {
        if (ps->slot_owner[s] != L || ps->stamp[s] >= t) continue;
        if (keep && ps->slot_layer[s] == L && c->seen[ps->slot_expert[s]] == keep) continue;
        uint64_t r = victim_rank(c, ps, s);
        if (best < 0 || r < best_rank || (r == best_rank && ps->stamp[s] < ps->stamp[best])) best = s, best_rank = r;
    }
    return best;
}

static int oldest_slot(const moe_expert_cache *c, const pool_state *ps, int L, uint64_t t) {
    return oldest_slot_but(c, ps, L, t, 0);
}

// Unmaps what slot s holds (if anything) as an eviction by its layer: with self-sizing the
// expert becomes the layer's ghost.
static void evict_slot(moe_expert_cache *c, pool_state *ps, int s) {
    int L = ps->slot_layer[s];
    if (L < 0) return;
    int at = c->map_base[L] + ps->slot_expert[s];
    c->map[at] = -1;
    if (c->ghost_tag) c->ghost_tag[at] = ++c->evictions[L];
}

// Shadow tags of one step (header: "Shadow tags"), before the step changes anything.
static void count_shadow_tags(moe_expert_cache *c, pool_state *ps, int L, const int32_t *experts, int n) {
    int G = c->policy.ghost_depth, lo, hi;
    owned_span(c, ps, L, &lo, &hi);
    uint64_t epoch = ++c->seen_epoch;
    for (int i = 0; i < n; i++) {
        int e = experts[i];
        if (c->seen[e] == epoch) continue; // once per distinct expert: a copy is what it saves
        c->seen[e] = epoch;
        int s = c->map[c->map_base[L] + e];
        if (s >= 0) {
            int p = 0;
            for (int q = lo; q < hi && p < G; q++) p += ps->slot_owner[q] == L && ps->stamp[q] < ps->stamp[s];
            if (p < G) c->tail[(size_t)L * (size_t)G + (size_t)p]++;
        } else {
            uint32_t tag = c->ghost_tag[c->map_base[L] + e];
            if (tag && c->evictions[L] - tag < (uint32_t)G) c->ghost[(size_t)L * (size_t)G + (c->evictions[L] - tag)]++;
        }
    }
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
    if (c->policy.self_sizing) count_shadow_tags(c, ps, layer, experts, n);
    if (c->layer_steps) record_uses(c, layer, experts, n);
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
            s = oldest_slot(c, ps, layer, t);
            FT_ASSERT(s >= 0);
            moe_cache_copy *cp = &copies[k++];
            *cp = (moe_cache_copy){pool, s, layer, e, ps->slot_layer[s], ps->slot_expert[s]};
            evict_slot(c, ps, s);
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

bool moe_expert_cache_prefetch(moe_expert_cache *c, int layer, const int32_t *experts, int n, int max_copies,
                               moe_cache_copy *copies, int *n_copies, ft_err *err) {
    *n_copies = 0;
    int pool = moe_expert_cache_pool_of(c, layer);
    if (pool < 0) return ft_err_set(err, "layer %d is not a MoE layer of the expert cache", layer);
    for (int i = 0; i < n; i++)
        if (experts[i] < 0 || experts[i] >= c->n_expert[layer])
            return ft_err_set(err, "layer %d: guess %d is expert %d, outside [0, %d)", layer, i, experts[i],
                              c->n_expert[layer]);
    pool_state *ps = &c->pools[pool];
    int32_t *map = c->map + c->map_base[layer];
    uint64_t t = ++ps->clock, keep = ++c->seen_epoch;
    for (int i = 0; i < n; i++) c->seen[experts[i]] = keep; // a guess never evicts another guess
    int k = 0;
    for (int i = 0; i < n && k < max_copies; i++) {
        int e = experts[i];
        if (map[e] >= 0) continue; // resident, or fetched by an earlier duplicate
        int s = oldest_slot_but(c, ps, layer, t, keep);
        if (s < 0) break; // every slot holds a guess
        copies[k++] = (moe_cache_copy){pool, s, layer, e, ps->slot_layer[s], ps->slot_expert[s]};
        evict_slot(c, ps, s);
        ps->slot_layer[s] = layer;
        ps->slot_expert[s] = e;
        ps->stamp[s] = t;
        map[e] = s;
    }
    *n_copies = k;
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

// ---------------------------------------------------------------------------------------------
// Self-sizing: moving slots between the layers of a pool (the contract: expert_cache.h)

// One rebalance of pool k; returns the moves written to out (may be NULL).
static int rebalance_pool(moe_expert_cache *c, int k, moe_cache_move *out) {
    pool_state *ps = &c->pools[k];
    const moe_cache_policy_params *pp = &c->policy;
    int G = pp->ghost_depth, n_moves = 0;
    for (int j = 0; j < ps->n_layers; j++) c->given[ps->layers[j]] = c->taken[ps->layers[j]] = 0;
    for (int m = 0; m < pp->max_moves; m++) {
        int R = -1, D = -1;
        for (int j = 0; j < ps->n_layers; j++) { // layers ascend: a strict comparison keeps the lower on ties
            int L = ps->layers[j];
            if (c->given[L] < G && c->taken[L] == 0 && c->range_n[L] < c->n_expert[L] &&
                (R < 0 || c->ghost[(size_t)L * G + c->given[L]] > c->ghost[(size_t)R * G + c->given[R]]))
                R = L;
        }
        for (int j = 0; j < ps->n_layers && R >= 0; j++) {
            int L = ps->layers[j];
            if (L != R && c->taken[L] < G && c->given[L] == 0 && c->range_n[L] > c->floor &&
                (D < 0 || c->tail[(size_t)L * G + c->taken[L]] < c->tail[(size_t)D * G + c->taken[D]]))
                D = L;
        }
        if (R < 0 || D < 0) break;
        uint64_t gain = c->ghost[(size_t)R * G + c->given[R]], loss = c->tail[(size_t)D * G + c->taken[D]];
        if (gain <= loss + (uint64_t)pp->min_gain) break;
        int s = oldest_slot(c, ps, D, UINT64_MAX);
        FT_ASSERT(s >= 0);
        if (out) out[n_moves] = (moe_cache_move){k, s, D, R, ps->slot_expert[s]};
        evict_slot(c, ps, s);
        ps->slot_layer[s] = ps->slot_expert[s] = -1;
        ps->stamp[s] = 0;
        ps->slot_owner[s] = R;
        c->range_n[D]--;
        c->range_n[R]++;
        c->taken[D]++;
        c->given[R]++;
        ps->moves++;
        n_moves++;
    }
    for (int j = 0; j < ps->n_layers; j++) {
        size_t L = (size_t)ps->layers[j];
        for (int d = 0; d < G; d++) {
            c->tail[L * G + d] >>= 1;
            c->ghost[L * G + d] >>= 1;
        }
    }
    return n_moves;
}

int moe_expert_cache_end_step(moe_expert_cache *c, moe_cache_move *moves) {
    c->tokens++;
    if (!c->policy.self_sizing || c->tokens % (uint64_t)c->policy.period) return 0;
    int n = 0;
    for (int k = 0; k < c->n_pools; k++) n += rebalance_pool(c, k, moves ? moves + n : NULL);
    return n;
}

uint64_t moe_expert_cache_pool_moves(const moe_expert_cache *c, int pool) {
    FT_ASSERT(pool >= 0 && pool < c->n_pools);
    return c->pools[pool].moves;
}

int moe_expert_cache_layer_slot_count(const moe_expert_cache *c, int layer) {
    FT_ASSERT(moe_expert_cache_pool_of(c, layer) >= 0);
    return c->range_n[layer];
}

int moe_expert_cache_slot_owner(const moe_expert_cache *c, int pool, int slot) {
    FT_ASSERT(pool >= 0 && pool < c->n_pools && slot >= 0 && slot < c->pools[pool].n_slots);
    return c->pools[pool].slot_owner[slot];
}
