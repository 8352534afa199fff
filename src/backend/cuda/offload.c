// offload.c: the GPU expert cache's host side (see offload.h): the plan, the arenas and
// pool views, the device tables the lookup kernel keeps (maps, stamps, clocks, counters), the
// prefill overlay and its copy stream, telemetry and rebuild.
#include "offload.h"
#include "expert_cache_kernels.h"

#include "../../moe/expert_cache.h"
#include "../../util/env.h"
#include "../../util/mapping.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

// Device tables of one pool (its slots' experts and stamps, which the lookup kernel updates).
typedef struct pool_dev {
    int32_t *slot_expert;    // (n_slots) -1: empty
    uint64_t *stamp;         // (n_slots)
    int32_t *slot_map_base;  // (n_slots) where the owning layer's experts start in map
    int32_t *slot_owner;     // (n_slots) self-sizing: the block owning each slot, else NULL
    int32_t *layers;         // self-sizing: the pool's blocks, ascending
    uint64_t *tokens, *moves;// self-sizing: (1) each
} pool_dev;

struct ft_offload {
    bool telemetry;            // FT_MOE_TELEMETRY is not "0": counters and copy timing kept
    moe_geometry g;            // copy of the model's geometry
    moe_expert_banks *hb;      // owned; in mapped page-locked memory
    const uint8_t *hb_dev;     // device address of hb->block
    ft_offload_params params;  // (trace pointer cleared: the trace lives on the device)
    uint64_t generation;

    // the cache: plan, C mirror (ranges, offsets, invalidation), arenas, device tables
    moe_cache_plan plan;
    moe_expert_cache *mirror;  // the C reference's ranges and offsets, and the overlay's
                               // invalidations; the device's lookups are not mirrored
    uint8_t *arena[MOE_BANK_COUNT];
    int n_blocks;
    int *layer_of_block;       // (n_blocks) index into g.layers, -1: not MoE
    int *map_base;             // (n_blocks)
    int n_map;
    int32_t *map;              // (n_map) device: expert -> slot in its pool, -1
    pool_dev *pools;           // (plan.n_pools)
    uint64_t *clock;           // (plan.n_pools) device
    // frecency victims only (NULL otherwise), device: each block's step count, and each expert's
    // uses, last use and history (n_map, as map; src/moe/frecency.h)
    uint64_t *use_steps;       // (n_blocks)
    uint32_t *use_count;
    uint64_t *use_last, *use_hist;
    // self-sizing layers only (NULL otherwise), device: per block its slots, evictions and
    // shadow tags (G each), its expert count and map base; per (layer, expert) its ghost tag
    moe_cache_policy_params sizing; // the tuning (moe_cache_sizing_default_params)
    int32_t *own_n, *n_expert_dev, *map_base_dev;
    uint32_t *evictions, *tail, *ghost, *ghost_tag;

    // per-step outputs (ft_offload_reserve) and counters (kept across rebuilds)
    int max_sel;
    int32_t *slots, *copy_expert, *copy_slot, *n_copies; // device
    uint64_t *stats;           // (g.n_layers, FT_CACHE_STAT_COUNT) device
    uint64_t *span;            // (3) device: the copy kernel's timing
    uint64_t *timer;           // (2) device: overlay copy start per buffer

    // prefill overlay: n_buf buffers, each the most experts of a layer at max_stride per bank;
    // a layer streams in at its own stride
    int n_buf;
    int ov_experts;
    uint64_t ov_bytes[MOE_BANK_COUNT];   // one buffer in bank b
    uint64_t ov_offset[MOE_BANK_COUNT];  // in the arena (when carved from it)
    uint8_t *ov_own[MOE_BANK_COUNT];     // allocated beside the arenas when they are too small
    uint8_t *ov[2][MOE_BANK_COUNT];
    int ov_layer[2];                     // block held (or being copied), -1
    bool ov_claimed;                     // the overlay's slots are invalidated since the last lookup
    int32_t *map_host;                   // (n_map) pinned: the maps as the last claim left them
    ft_cuda_event *ev_map;               // their copy to the host
    int ov_last;                         // buffer of the last overlay step, -1
    bool ov_prefetch;                    // a prefetch may be in flight on the copy stream
    ft_cuda_stream *copy_stream;
    ft_cuda_event *ev_copied[2], *ev_done[2];
    // FT_MOE_PREFILL_FILL: an overlay step also copies the layer's experts its slots lack into
    // the slots still empty (outside the overlay), from the overlay, stamped as a step of the
    // layer, so that the prefill's next chunks and steps find them there (a cache decode left
    // mostly empty is otherwise streamed whole by every chunk); map_host follows
    bool prefill_fill;
    bool *fill_used;                     // (the largest range) scratch: a range's slots taken

    // hybrid (ft_offload_set_hybrid_costs): the split's costs per MoE layer, and per step the
    // CPU's selections and their count
    uint32_t *hybrid_costs;    // device (g.n_layers, 3), NULL: not hybrid
    int32_t *cpu_sel, *n_cpu;  // device (max_sel), (1)
    // the fills (the copies of the experts the CPU computed, off the step's critical path) run
    // on fill_stream, each layer's from its own lists; the backend's stream joins them at the
    // step's end (ft_offload_join_fills), or before a layer that has one pending steps again
    int32_t *fill_expert, *fill_slot, *n_fill; // device (g.n_layers, max_sel), (g.n_layers)
    ft_cuda_stream *fill_stream;
    ft_cuda_event *ev_copied_own, *ev_filled;
    bool fill_pending;
    int fill_last_block;       // the last block whose fill was enqueued
    int last_li;               // the layer of the last hybrid cache step (for the debug read)

    // prefetch (ft_offload_prefetch_begin): the predictor's guesses and the prefetch's lookup
    // and copies run on pf_stream while the step computes; the block's next step waits for them
    // (it starts after the step's lookup, and its copies after the step's own copies)
    bool pf_enabled;           // ft_offload_enable_prefetch: cache steps record the two events
    bool pf_can_start;         // the last layer step was a cache step that recorded them
    ft_cuda_stream *pf_stream;
    ft_cuda_event *ev_pf_looked, *ev_pf_copied, *ev_pf_guessed, *ev_pf_done;
    int32_t *pf_guess, *pf_expert, *pf_slot, *pf_n; // device (max_sel) x3, (1)
    int pf_block;              // the block of the last prefetch until its cache step counts it, -1
    int pf_n_guess;
    bool pf_pending;           // its copies are enqueued and the backend's stream has not waited
    bool pf_guessing;          // the guesses' event is recorded and no stream has waited for it

    // route-trace replay
    uint16_t *trace;           // device (n_steps, n_layers, n_seq, top_k)
    int64_t *trace_step;       // device
    int *trace_li;             // (n_blocks) the block's layer in the trace, -1
    int trace_layers, trace_seq, trace_last;
    int64_t trace_steps;
};

static void *dev_alloc(size_t n) { return ft_cuda_malloc(n ? n : 1); }

static void *dev_zeroed(size_t n) {
    void *p = dev_alloc(n);
    if (p) ft_cuda_memset(p, 0, n ? n : 1, NULL);
    return p;
}

// ---------------------------------------------------------------------------------------------
// Host banks

// The banks are anonymous memory in transparent huge pages, registered page-locked and mapped,
// where the driver takes it (hybrid's CPU computes its experts from them: a TLB miss every 2 MiB
// rather than every 4 KiB), else cudaHostAlloc's.
static void *mapped_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = ft_huge_alloc(bytes), *dev = NULL;
    if (p && ft_cuda_host_register_mapped(p, bytes)) return p;
    ft_huge_free(p, bytes);
    return ft_cuda_host_alloc_mapped(bytes, &dev);
}

static void mapped_free(void *ctx, void *p, size_t bytes) {
    (void)ctx;
    if (!p) return;
    if (ft_cuda_host_unregister(p)) ft_huge_free(p, bytes);
    else ft_cuda_host_free(p);
}

moe_host_allocator ft_offload_host_allocator(void) {
    return (moe_host_allocator){mapped_alloc, mapped_free, NULL, "page-locked and mapped, in huge pages where given"};
}

// ---------------------------------------------------------------------------------------------
// The cache: built from a plan, torn down for a rebuild

static void cache_teardown(ft_offload *o) {
    if (o->copy_stream) ft_cuda_stream_sync(o->copy_stream);
    ft_cuda_device_sync();
    for (int k = 0; k < o->plan.n_pools && o->pools; k++) {
        ft_cuda_free(o->pools[k].slot_expert);
        ft_cuda_free(o->pools[k].stamp);
        ft_cuda_free(o->pools[k].slot_map_base);
        ft_cuda_free(o->pools[k].slot_owner);
        ft_cuda_free(o->pools[k].layers);
        ft_cuda_free(o->pools[k].tokens);
        ft_cuda_free(o->pools[k].moves);
    }
    free(o->pools);
    o->pools = NULL;
    ft_cuda_free(o->clock);
    o->clock = NULL;
    ft_cuda_free(o->use_steps);
    ft_cuda_free(o->use_count);
    ft_cuda_free(o->use_last);
    ft_cuda_free(o->use_hist);
    o->use_steps = o->use_last = o->use_hist = NULL;
    o->use_count = NULL;
    void *sz[] = {o->own_n, o->n_expert_dev, o->map_base_dev, o->evictions, o->tail, o->ghost, o->ghost_tag};
    for (size_t i = 0; i < FT_ARRAY_LEN(sz); i++) ft_cuda_free(sz[i]);
    o->own_n = o->n_expert_dev = o->map_base_dev = NULL;
    o->evictions = o->tail = o->ghost = o->ghost_tag = NULL;
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        ft_cuda_free(o->arena[b]);
        ft_cuda_free(o->ov_own[b]);
        o->arena[b] = o->ov_own[b] = NULL;
    }
    moe_expert_cache_free(o->mirror);
    o->mirror = NULL;
    moe_cache_plan_free(&o->plan);
    memset(&o->plan, 0, sizeof(o->plan));
    o->pf_block = -1; // (the device is idle: nothing pending)
    o->pf_pending = o->pf_guessing = false;
}

// Per slot of pool pp at the fixed ranges, the block owning it (owner) or where that block's
// experts start in the map; free with free().
static int32_t *pool_slot_table(const ft_offload *o, const moe_pool_plan *pp, bool owner) {
    int32_t *t = ft_malloc((size_t)pp->n_slots * sizeof(int32_t) + 1);
    for (int j = 0; j < pp->n_layers; j++) {
        int L = pp->layers[j], first, n_own;
        moe_expert_cache_layer_range(o->mirror, L, &first, &n_own);
        for (int s = first; s < first + n_own; s++) t[s] = owner ? L : o->map_base[L];
    }
    return t;
}

// Self-sizing's tables, at the fixed ranges (what the C reference starts from); false when the
// device is out of memory (the caller tears down).
static bool sizing_build(ft_offload *o) {
    const moe_cache_plan *pl = &o->plan;
    size_t nb = (size_t)o->n_blocks, G = (size_t)o->sizing.ghost_depth;
    int32_t *own = ft_calloc(nb, sizeof(int32_t)), *ne = ft_calloc(nb, sizeof(int32_t));
    for (int i = 0; i < o->g.n_layers; i++) {
        int L = o->g.layers[i].layer, first;
        moe_expert_cache_layer_range(o->mirror, L, &first, &own[L]);
        ne[L] = o->g.layers[i].n_expert;
    }
    o->own_n = dev_alloc(nb * sizeof(int32_t));
    o->n_expert_dev = dev_alloc(nb * sizeof(int32_t));
    o->map_base_dev = dev_alloc(nb * sizeof(int32_t));
    o->evictions = dev_zeroed(nb * sizeof(uint32_t));
    o->tail = dev_zeroed(nb * G * sizeof(uint32_t));
    o->ghost = dev_zeroed(nb * G * sizeof(uint32_t));
    o->ghost_tag = dev_zeroed((size_t)o->n_map * sizeof(uint32_t));
    bool ok = o->own_n && o->n_expert_dev && o->map_base_dev && o->evictions && o->tail && o->ghost && o->ghost_tag;
    if (ok) {
        ft_cuda_memcpy_h2d(o->own_n, own, nb * sizeof(int32_t), NULL);
        ft_cuda_memcpy_h2d(o->n_expert_dev, ne, nb * sizeof(int32_t), NULL);
        ft_cuda_memcpy_h2d(o->map_base_dev, o->map_base, nb * sizeof(int32_t), NULL);
    }
    for (int k = 0; k < pl->n_pools && ok; k++) {
        const moe_pool_plan *pp = &pl->pools[k];
        pool_dev *pd = &o->pools[k];
        size_t n = (size_t)pp->n_slots;
        pd->slot_owner = dev_alloc(n * sizeof(int32_t));
        pd->layers = dev_alloc((size_t)pp->n_layers * sizeof(int32_t));
        pd->tokens = dev_zeroed(sizeof(uint64_t));
        pd->moves = dev_zeroed(sizeof(uint64_t));
        if (!(ok = pd->slot_owner && pd->layers && pd->tokens && pd->moves)) break;
        int32_t *owner = pool_slot_table(o, pp, true);
        ft_cuda_memcpy_h2d(pd->slot_owner, owner, n * sizeof(int32_t), NULL);
        ft_cuda_memcpy_h2d(pd->layers, pp->layers, (size_t)pp->n_layers * sizeof(int32_t), NULL);
        ft_cuda_stream_sync(NULL);
        free(owner);
    }
    ft_cuda_stream_sync(NULL);
    free(own);
    free(ne);
    return ok;
}

// Allocates the arenas, the overlay and the tables for plan (o->plan is set); false and *err
// when the device is out of memory (everything allocated is given back).
static bool cache_build(ft_offload *o, ft_err *err) {
    const moe_cache_plan *pl = &o->plan;
    const double MiB = 1048576.0;
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        if (!(o->arena[b] = dev_alloc(pl->arena_bytes[b]))) {
            cache_teardown(o);
            return ft_err_set(err, "offload: out of device memory for the expert cache's arenas (%.1f MiB)",
                              pl->bytes / MiB);
        }
    }
    // The overlay: two buffers at the end of the arenas when they hold them (one when serial,
    // or when they hold only one), else one allocated beside them.
    o->n_buf = 0;
    for (int b = 0; b < MOE_BANK_COUNT; b++) o->ov_bytes[b] = (uint64_t)o->ov_experts * pl->max_stride[b];
    int fit = 2;
    for (int b = 0; b < MOE_BANK_COUNT; b++)
        fit = (int)FT_MIN((uint64_t)fit, o->ov_bytes[b] ? pl->arena_bytes[b] / o->ov_bytes[b] : 2);
    int want = o->params.prefill_serial ? 1 : 2;
    o->n_buf = FT_MIN(fit, want);
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        if (o->n_buf >= 1) {
            o->ov_offset[b] = pl->arena_bytes[b] - (uint64_t)o->n_buf * o->ov_bytes[b];
            o->ov_offset[b] &= ~(uint64_t)255;
            for (int i = 0; i < o->n_buf; i++) o->ov[i][b] = o->arena[b] + o->ov_offset[b] + i * o->ov_bytes[b];
        } else {
            if (!(o->ov_own[b] = dev_alloc(o->ov_bytes[b]))) {
                cache_teardown(o);
                return ft_err_set(err, "offload: out of device memory for the prefill overlay");
            }
            o->ov[0][b] = o->ov_own[b];
        }
    }
    if (o->n_buf == 0) o->n_buf = -1; // one buffer, not in the arenas (nothing to invalidate)
    o->ov_layer[0] = o->ov_layer[1] = -1;
    o->ov_claimed = false;
    o->ov_last = -1;
    o->ov_prefetch = false;

    o->mirror = moe_expert_cache_init(pl, &o->g);
    int most = 1; // slots of the largest range, for the fills' scratch
    for (int i = 0; i < o->g.n_layers; i++) {
        int first, n_own;
        moe_expert_cache_layer_range(o->mirror, o->g.layers[i].layer, &first, &n_own);
        most = FT_MAX(most, n_own);
    }
    free(o->fill_used);
    o->fill_used = ft_malloc((size_t)most * sizeof(bool));
    o->pools = ft_calloc((size_t)pl->n_pools, sizeof(pool_dev));
    o->clock = dev_alloc((size_t)pl->n_pools * sizeof(uint64_t));
    ft_cuda_memset(o->clock, 0, (size_t)pl->n_pools * sizeof(uint64_t), NULL);
    ft_cuda_memset(o->map, 0xFF, (size_t)o->n_map * sizeof(int32_t), NULL);
    if (o->params.victims == MOE_VICTIMS_FRECENCY) { // counters start at 0, as the reference's
        size_t nb = (size_t)o->n_blocks, nm = (size_t)o->n_map;
        o->use_steps = dev_zeroed(nb * sizeof(uint64_t));
        o->use_count = dev_zeroed(nm * sizeof(uint32_t));
        o->use_last = dev_zeroed(nm * sizeof(uint64_t));
        o->use_hist = dev_zeroed(nm * sizeof(uint64_t));
        if (!o->use_steps || !o->use_count || !o->use_last || !o->use_hist) {
            cache_teardown(o);
            return ft_err_set(err, "offload: out of device memory for the cache tables");
        }
    }
    for (int k = 0; k < pl->n_pools; k++) {
        const moe_pool_plan *pp = &pl->pools[k];
        pool_dev *pd = &o->pools[k];
        size_t n = (size_t)pp->n_slots;
        pd->slot_expert = dev_alloc(n * sizeof(int32_t));
        pd->stamp = dev_alloc(n * sizeof(uint64_t));
        pd->slot_map_base = dev_alloc(n * sizeof(int32_t));
        if (!pd->slot_expert || !pd->stamp || !pd->slot_map_base) {
            cache_teardown(o);
            return ft_err_set(err, "offload: out of device memory for the cache tables");
        }
        ft_cuda_memset(pd->slot_expert, 0xFF, n * sizeof(int32_t), NULL);
        ft_cuda_memset(pd->stamp, 0, n * sizeof(uint64_t), NULL);
        int32_t *base = pool_slot_table(o, pp, false);
        ft_cuda_memcpy_h2d(pd->slot_map_base, base, n * sizeof(int32_t), NULL);
        ft_cuda_stream_sync(NULL);
        free(base);
    }
    if (o->params.self_sizing && !sizing_build(o)) {
        cache_teardown(o);
        return ft_err_set(err, "offload: out of device memory for the cache tables");
    }
    ft_cuda_device_sync();
    return true;
}

static bool plan_and_build(ft_offload *o, const moe_cache_plan_params *pp, ft_err *err) {
    if (!moe_cache_plan_make(&o->g, pp, &o->plan, err)) return false;
    return cache_build(o, err);
}

// ---------------------------------------------------------------------------------------------
// Life cycle

static bool load_trace(ft_offload *o, const moe_route_trace *t, ft_err *err) {
    int top_k = o->params.plan.top_k;
    if (t->n_expert != o->g.layers[0].n_expert || t->top_k != top_k)
        return ft_err_set(err, "route trace: %d experts, top-%d; the model has %d experts, top-%d", t->n_expert,
                          t->top_k, o->g.layers[0].n_expert, top_k);
    o->trace_li = ft_malloc((size_t)o->n_blocks * sizeof(int));
    for (int L = 0; L < o->n_blocks; L++) o->trace_li[L] = -1;
    for (int li = 0; li < t->n_layers; li++) {
        int L = t->layers[li];
        if (L >= o->n_blocks || o->layer_of_block[L] < 0)
            return ft_err_set(err, "route trace: layer %d (block %d) is not a MoE layer of the model", li, L);
        o->trace_li[L] = li;
    }
    for (int i = 0; i < o->g.n_layers; i++)
        if (o->trace_li[o->g.layers[i].layer] < 0)
            return ft_err_set(err, "route trace: MoE block %d of the model is not traced", o->g.layers[i].layer);
    size_t n = (size_t)t->n_steps * (size_t)t->n_layers * (size_t)t->n_seq * (size_t)t->top_k;
    o->trace = dev_alloc(n * sizeof(uint16_t));
    o->trace_step = dev_alloc(sizeof(int64_t));
    if (!o->trace || !o->trace_step) return ft_err_set(err, "route trace: out of device memory");
    ft_cuda_memcpy_h2d(o->trace, t->experts, n * sizeof(uint16_t), NULL);
    ft_cuda_memset(o->trace_step, 0, sizeof(int64_t), NULL);
    ft_cuda_stream_sync(NULL);
    o->trace_layers = t->n_layers;
    o->trace_seq = t->n_seq;
    o->trace_steps = t->n_steps;
    o->trace_last = t->layers[t->n_layers - 1];
    return true;
}

ft_offload *ft_offload_init(const moe_geometry *g, moe_expert_banks *hb, const ft_offload_params *p, ft_err *err) {
    FT_ASSERT(g->n_layers >= 1 && hb && hb->n_layers == g->n_layers);
    ft_offload *o = ft_calloc(1, sizeof(*o));
    moe_geometry_from_layers(g->layers, g->n_layers, &o->g);
    o->hb = hb;
    o->hb_dev = ft_cuda_host_device_pointer(hb->block);
    o->params = *p;
    o->params.trace = NULL;
    o->generation = 1;
    o->n_blocks = o->g.layers[o->g.n_layers - 1].layer + 1;
    o->layer_of_block = ft_malloc((size_t)o->n_blocks * sizeof(int));
    o->map_base = ft_calloc((size_t)o->n_blocks, sizeof(int));
    for (int L = 0; L < o->n_blocks; L++) o->layer_of_block[L] = -1;
    for (int i = 0; i < o->g.n_layers; i++) {
        const moe_layer_geometry *lg = &o->g.layers[i];
        o->layer_of_block[lg->layer] = i;
        o->map_base[lg->layer] = o->n_map;
        o->n_map += lg->n_expert;
        o->ov_experts = FT_MAX(o->ov_experts, lg->n_expert);
        FT_ASSERT(hb->layers[i].layer == lg->layer);
    }
    o->map = dev_alloc((size_t)o->n_map * sizeof(int32_t));
    o->map_host = ft_cuda_host_alloc((size_t)(o->n_map ? o->n_map : 1) * sizeof(int32_t));
    o->ev_map = ft_cuda_event_init_sync_only();
    o->stats = dev_alloc((size_t)o->g.n_layers * FT_CACHE_STAT_COUNT * sizeof(uint64_t));
    o->span = dev_alloc(3 * sizeof(uint64_t));
    o->timer = dev_alloc(2 * sizeof(uint64_t));
    if (!o->map || !o->stats || !o->span || !o->timer) {
        ft_err_set(err, "offload: out of device memory for the cache tables");
        ft_offload_free(o);
        return NULL;
    }
    ft_cuda_memset(o->stats, 0, (size_t)o->g.n_layers * FT_CACHE_STAT_COUNT * sizeof(uint64_t), NULL);
    o->telemetry = ft_env_flag(FT_ENV_MOE_TELEMETRY);
    o->prefill_fill = ft_env_flag(FT_ENV_MOE_PREFILL_FILL);
    o->sizing = moe_cache_sizing_default_params();
    if (o->params.self_sizing && o->prefill_fill) { // (its fills take slots of the fixed ranges)
        fprintf(stderr, "offload: FT_MOE_PREFILL_FILL is off with self-sizing layers\n");
        o->prefill_fill = false;
    }
    if (!o->telemetry)
        fprintf(stderr, "offload: telemetry off (FT_MOE_TELEMETRY=0): the cache's counters and copy times stay at 0\n");
    o->copy_stream = ft_cuda_stream_init();
    o->pf_stream = ft_cuda_stream_init();
    o->ev_pf_looked = ft_cuda_event_init_sync_only();
    o->ev_pf_copied = ft_cuda_event_init_sync_only();
    o->ev_pf_guessed = ft_cuda_event_init_sync_only();
    o->ev_pf_done = ft_cuda_event_init_sync_only();
    o->pf_block = -1;
    for (int i = 0; i < 2; i++) {
        o->ev_copied[i] = ft_cuda_event_init_sync_only();
        o->ev_done[i] = ft_cuda_event_init_sync_only();
    }
    if ((p->trace && !load_trace(o, p->trace, err)) || !plan_and_build(o, &o->params.plan, err)) {
        ft_offload_free(o);
        return NULL;
    }
    return o;
}

void ft_offload_free(ft_offload *o) {
    if (!o) return;
    cache_teardown(o);
    free(o->fill_used);
    for (int i = 0; i < 2; i++) {
        ft_cuda_event_free(o->ev_copied[i]);
        ft_cuda_event_free(o->ev_done[i]);
    }
    ft_cuda_stream_free(o->copy_stream);
    ft_cuda_stream_free(o->pf_stream);
    ft_cuda_event_free(o->ev_pf_looked);
    ft_cuda_event_free(o->ev_pf_copied);
    ft_cuda_event_free(o->ev_pf_guessed);
    ft_cuda_event_free(o->ev_pf_done);
    ft_cuda_free(o->pf_guess);
    ft_cuda_free(o->pf_expert);
    ft_cuda_free(o->pf_slot);
    ft_cuda_free(o->pf_n);
    ft_cuda_free(o->map);
    ft_cuda_host_free(o->map_host);
    ft_cuda_event_free(o->ev_map);
    ft_cuda_free(o->stats);
    ft_cuda_free(o->span);
    ft_cuda_free(o->timer);
    ft_cuda_free(o->slots);
    ft_cuda_free(o->copy_expert);
    ft_cuda_free(o->copy_slot);
    ft_cuda_free(o->n_copies);
    ft_cuda_free(o->trace);
    ft_cuda_free(o->trace_step);
    ft_cuda_free(o->hybrid_costs);
    ft_cuda_free(o->cpu_sel);
    ft_cuda_free(o->n_cpu);
    ft_cuda_free(o->fill_expert);
    ft_cuda_free(o->fill_slot);
    ft_cuda_free(o->n_fill);
    ft_cuda_stream_free(o->fill_stream);
    ft_cuda_event_free(o->ev_copied_own);
    ft_cuda_event_free(o->ev_filled);
    free(o->trace_li);
    free(o->layer_of_block);
    free(o->map_base);
    moe_expert_banks_free(o->hb);
    moe_geometry_free(&o->g);
    free(o);
}

const moe_cache_plan *ft_offload_plan(const ft_offload *o) { return &o->plan; }
uint64_t ft_offload_generation(const ft_offload *o) { return o->generation; }
const void *ft_offload_arena(const ft_offload *o, enum moe_bank b) { return o->arena[b]; }

uint64_t ft_offload_device_bytes(const ft_offload *o) {
    uint64_t n = o->plan.bytes + (uint64_t)o->n_map * 4 + (uint64_t)o->g.n_layers * FT_CACHE_STAT_COUNT * 8;
    for (int b = 0; b < MOE_BANK_COUNT; b++)
        if (o->ov_own[b]) n += o->ov_bytes[b];
    for (int k = 0; k < o->plan.n_pools; k++) n += (uint64_t)o->plan.pools[k].n_slots * 16;
    if (o->use_steps) n += (uint64_t)o->n_blocks * 8 + (uint64_t)o->n_map * 20;
    if (o->own_n) n += (uint64_t)o->n_blocks * (16 + 8 * (uint64_t)o->sizing.ghost_depth) + (uint64_t)o->n_map * 4;
    return n;
}

bool ft_offload_rebuild(ft_offload *o, int n_slots, enum moe_pool_layout layout, ft_err *err) {
    moe_cache_plan_params pp = o->params.plan;
    pp.n_slots = n_slots;
    pp.layout = layout;
    moe_cache_plan check;
    if (!moe_cache_plan_make(&o->g, &pp, &check, err)) return false; // the old cache stays
    moe_cache_plan_free(&check);
    moe_cache_plan_params old = o->params.plan;
    cache_teardown(o);
    o->generation++;
    if (!plan_and_build(o, &pp, err)) {
        ft_err keep = err ? *err : (ft_err){{0}};
        if (!plan_and_build(o, &old, NULL)) ft_abort(__FILE__, __LINE__, "offload: cannot restore the old cache");
        if (err) *err = keep;
        return false;
    }
    o->params.plan = pp;
    return true;
}

void ft_offload_reserve(ft_offload *o, int max_sel) {
    if (max_sel <= o->max_sel) return;
    ft_cuda_device_sync();
    ft_cuda_free(o->slots);
    ft_cuda_free(o->copy_expert);
    ft_cuda_free(o->copy_slot);
    ft_cuda_free(o->n_copies);
    ft_cuda_free(o->cpu_sel);
    ft_cuda_free(o->n_cpu);
    ft_cuda_free(o->fill_expert);
    ft_cuda_free(o->fill_slot);
    ft_cuda_free(o->pf_guess);
    ft_cuda_free(o->pf_expert);
    ft_cuda_free(o->pf_slot);
    ft_cuda_free(o->pf_n);
    o->max_sel = max_sel;
    size_t n = (size_t)max_sel * sizeof(int32_t);
    o->slots = dev_alloc(n);
    o->copy_expert = dev_alloc(n);
    o->copy_slot = dev_alloc(n);
    o->n_copies = dev_alloc(sizeof(int32_t));
    o->cpu_sel = dev_alloc(n);
    o->n_cpu = dev_alloc(sizeof(int32_t));
    o->fill_expert = dev_alloc(n * (size_t)o->g.n_layers);
    o->fill_slot = dev_alloc(n * (size_t)o->g.n_layers);
    o->pf_guess = dev_alloc(n);
    o->pf_expert = dev_alloc(n);
    o->pf_slot = dev_alloc(n);
    o->pf_n = dev_alloc(sizeof(int32_t));
    if (!o->slots || !o->copy_expert || !o->copy_slot || !o->n_copies || !o->cpu_sel || !o->n_cpu ||
        !o->fill_expert || !o->fill_slot || !o->pf_guess || !o->pf_expert || !o->pf_slot || !o->pf_n)
        ft_abort(__FILE__, __LINE__, "offload: out of device memory for %d selections", max_sel);
    ft_cuda_memset(o->pf_n, 0, sizeof(int32_t), NULL);
}

// ---------------------------------------------------------------------------------------------
// Layer steps

// The block's self-sizing tables on the device (slot_owner NULL with fixed ranges).
static ft_cuda_cache_sizing sizing_of(const ft_offload *o, int block) {
    if (!o->own_n) return (ft_cuda_cache_sizing){0};
    int pool = moe_expert_cache_pool_of(o->mirror, block), G = o->sizing.ghost_depth;
    return (ft_cuda_cache_sizing){
        .slot_owner = o->pools[pool].slot_owner, .pool_slots = o->plan.pools[pool].n_slots, .block = block,
        .ghost_depth = G, .evictions = o->evictions + block, .tail = o->tail + (size_t)block * (size_t)G,
        .ghost = o->ghost + (size_t)block * (size_t)G, .ghost_tag = o->ghost_tag + o->map_base[block]};
}

// The slots a lookup of the block ranks: its fixed range, or with self-sizing the whole pool
// (it owns at most its expert count of them; the kernel finds which).
static void lookup_span(const ft_offload *o, int block, int *first, int *n_own) {
    if (!o->own_n) {
        moe_expert_cache_layer_range(o->mirror, block, first, n_own);
        return;
    }
    int pool = moe_expert_cache_pool_of(o->mirror, block);
    *first = 0;
    *n_own = FT_MIN(o->plan.pools[pool].n_slots, o->g.layers[o->layer_of_block[block]].n_expert);
}

// The slots the block is sure to own: its range, or with self-sizing the plan's floor.
static int slots_owned_at_least(const ft_offload *o, int block) {
    int first, n_own;
    moe_expert_cache_layer_range(o->mirror, block, &first, &n_own);
    return o->own_n ? FT_MIN(n_own, o->plan.floor_per_layer) : n_own;
}

bool ft_offload_uses_overlay(const ft_offload *o, int block, int n_tok, int n, bool gemm, int gemm_min_tok) {
    return moe_placement_offload_overlay(n, slots_owned_at_least(o, block), n_tok, gemm, gemm_min_tok);
}

// Bytes one copy of MoE layer li moves (its native expert bytes in every bank).
static uint64_t layer_copy_bytes(const ft_offload *o, int li) {
    uint64_t n = 0;
    for (int b = 0; b < MOE_BANK_COUNT; b++) n += o->g.layers[li].bytes[b];
    return n;
}

// The copy kernel's parameters for lists (count, experts, slots in device memory) of MoE layer
// li into its pool's slots, untimed.
static ft_cuda_cache_copy_params pool_copies(const ft_offload *o, int li, int pool, const int32_t *n_copies,
                                             const int32_t *expert, const int32_t *slot) {
    const moe_pool_plan *pp = &o->plan.pools[pool];
    const moe_host_layer *hl = &o->hb->layers[li];
    ft_cuda_cache_copy_params cp = {.n_copies = n_copies, .copy_expert = expert, .copy_slot = slot};
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        cp.src[b] = o->hb_dev + (hl->bank[b].data - (const uint8_t *)o->hb->block);
        cp.bytes[b] = hl->bank[b].expert_bytes;
        cp.dst[b] = o->arena[b] + pp->offset[b];
        cp.stride[b] = pp->stride[b];
    }
    return cp;
}

// Every slot the overlay's bytes overlap is invalidated, on the device and in the mirror.
static void claim_overlay(ft_offload *o, ft_cuda_stream *s) {
    if (o->ov_claimed) return;
    o->ov_claimed = true;
    for (int b = 0; b < MOE_BANK_COUNT && o->n_buf >= 1; b++) { // (n_buf < 1: memory of its own)
        uint64_t off = o->ov_offset[b], len = (uint64_t)o->n_buf * o->ov_bytes[b];
        moe_expert_cache_invalidate_bytes(o->mirror, (enum moe_bank)b, off, len);
        for (int k = 0; k < o->plan.n_pools; k++) {
            const moe_pool_plan *pp = &o->plan.pools[k];
            uint64_t stride = pp->stride[b], base = pp->offset[b];
            if (!pp->n_slots || !stride || off + len <= base) continue;
            uint64_t first = off <= base ? 0 : (off - base) / stride;
            uint64_t last = (off + len - 1 - base) / stride;
            if (first >= (uint64_t)pp->n_slots) continue;
            last = FT_MIN(last, (uint64_t)pp->n_slots - 1);
            ft_cuda_cache_invalidate(o->pools[k].slot_expert, o->pools[k].stamp, o->pools[k].slot_map_base, o->map,
                                     (int)first, (int)(last - first + 1), s);
        }
    }
    // the copy stream starts only after what s has enqueued so far: decode experts that may
    // still read slots there, and the invalidations (a stream-in reads the maps)
    for (int i = 0; i < 2; i++) ft_cuda_event_record(o->ev_done[i], s);
    // the maps to the host, which splits each stream-in into hits and misses: no lookup runs
    // until the overlay is released (a prefill chunk waits once for the step before it)
    ft_cuda_memcpy_d2h(o->map_host, o->map, (size_t)o->n_map * sizeof(int32_t), s);
    ft_cuda_event_record(o->ev_map, s);
    ft_cuda_event_sync(o->ev_map);
}

// Enqueues the stream-in of every expert of layer `block` into overlay buffer buf on the copy
// stream, timed. A buffer holds the widest layer's experts at the widest stride, but a layer
// lands at its own stride (compact): the grouped GEMM (moe_gemm.cu) reads an expert's
// matrices at exactly their native size. The experts the layer holds in slots (the claim's
// snapshot of its map) are copied from there by one kernel (device memory: a fraction of a
// millisecond for a whole layer); the others come from the host banks on the copy engine, one
// copy per bank and run of consecutive missing experts (so a prefill after decode crosses
// PCIe only for the misses, at the copy engine's rate).
static void stream_in(ft_offload *o, int block, int buf) {
    int li = o->layer_of_block[block];
    const moe_host_layer *hl = &o->hb->layers[li];
    ft_cuda_stream *cs = o->copy_stream;
    ft_cuda_stream_wait_event(cs, o->ev_done[buf]);
    uint64_t *st = o->stats + (size_t)li * FT_CACHE_STAT_COUNT;
    if (o->telemetry) ft_cuda_cache_timer_start(&o->timer[buf], cs);
    const int32_t *map = o->map_host + o->map_base[block];
    int hits = 0;
    for (int e = 0; e < hl->n_expert; e++) hits += map[e] >= 0;
    if (hits > 0) {
        ft_cuda_cache_copy_params cp = pool_copies(o, li, moe_expert_cache_pool_of(o->mirror, block), NULL, NULL, NULL);
        for (int b = 0; b < MOE_BANK_COUNT; b++) {
            cp.slot_src[b] = cp.dst[b];
            cp.slot_stride[b] = cp.stride[b];
            cp.dst[b] = o->ov[buf][b];
            cp.stride[b] = hl->bank[b].expert_bytes;
        }
        cp.n_fixed = hl->n_expert;
        cp.map = o->map + o->map_base[block];
        ft_cuda_cache_copy(&cp, 0, cs);
    }
    uint64_t bytes = 0;
    for (int e0 = 0; e0 < hl->n_expert;) {
        if (map[e0] >= 0) {
            e0++;
            continue;
        }
        int e1 = e0 + 1;
        while (e1 < hl->n_expert && map[e1] < 0) e1++;
        for (int b = 0; b < MOE_BANK_COUNT; b++) {
            const moe_expert_bank *k = &hl->bank[b];
            size_t off = (size_t)e0 * k->expert_bytes, n = (size_t)(e1 - e0) * k->expert_bytes;
            if (n) ft_cuda_memcpy_h2d(o->ov[buf][b] + off, k->data + off, n, cs);
            bytes += n;
        }
        e0 = e1;
    }
    if (o->telemetry) ft_cuda_cache_add(&st[FT_CACHE_STAT_BYTES], bytes, cs);
    if (o->telemetry) {
        ft_cuda_cache_timer_stop(&o->timer[buf], &st[FT_CACHE_STAT_COPY_NS], cs);
        ft_cuda_cache_add(&st[FT_CACHE_STAT_PREFILL_LAYERS], 1, cs);
    }
    ft_cuda_event_record(o->ev_copied[buf], cs);
    o->ov_layer[buf] = block;
}

// Whether slot `slot` of pool k shares bytes with the overlay buffers carved from the arenas.
static bool slot_under_overlay(const ft_offload *o, int k, int slot) {
    const moe_pool_plan *pp = &o->plan.pools[k];
    for (int b = 0; b < MOE_BANK_COUNT && o->n_buf >= 1; b++) {
        uint64_t off = o->ov_offset[b], len = (uint64_t)o->n_buf * o->ov_bytes[b];
        uint64_t s0 = pp->offset[b] + (uint64_t)slot * pp->stride[b], s1 = s0 + pp->stride[b];
        if (pp->stride[b] && s0 < off + len && off < s1) return true;
    }
    return false;
}

// The fills of layer `block`, whose experts overlay buffer buf holds: the experts its map (as
// the host sees it: the claim's, with the fills since) leaves out, in expert order, into the
// layer's empty slots outside the overlay, in slot order, on s (after the buffer landed there).
static void fill_from_overlay(ft_offload *o, int block, int buf, ft_cuda_stream *s) {
    int li = o->layer_of_block[block], k = moe_expert_cache_pool_of(o->mirror, block), first, n_own;
    moe_expert_cache_layer_range(o->mirror, block, &first, &n_own);
    int32_t *map = o->map_host + o->map_base[block];
    const moe_host_layer *hl = &o->hb->layers[li];
    bool *used = o->fill_used;
    for (int i = 0; i < n_own; i++) used[i] = slot_under_overlay(o, k, first + i);
    for (int e = 0; e < hl->n_expert; e++)
        if (map[e] >= first && map[e] < first + n_own) used[map[e] - first] = true;
    ft_cuda_cache_fill_params p = {.n = 0};
    int i = 0;
    for (int e = 0; e < hl->n_expert && p.n < FT_CUDA_CACHE_FILL_MAX; e++) {
        if (map[e] >= 0) continue;
        while (i < n_own && used[i]) i++;
        if (i == n_own) break;
        used[i] = true;
        map[e] = first + i;
        p.expert[p.n] = (int16_t)e;
        p.slot[p.n++] = first + i;
    }
    if (!p.n) return;
    const moe_pool_plan *pp = &o->plan.pools[k];
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        p.src[b] = o->ov[buf][b];
        p.bytes[b] = hl->bank[b].expert_bytes;
        p.dst[b] = o->arena[b] + pp->offset[b];
        p.stride[b] = pp->stride[b];
    }
    p.map = o->map + o->map_base[block];
    p.slot_expert = o->pools[k].slot_expert;
    p.stamp = o->pools[k].stamp;
    p.clock = o->clock + k;
    ft_cuda_cache_fill(&p, s);
}

static void overlay_step(ft_offload *o, int block, const int32_t *sel, ft_cuda_stream *s, ft_offload_view *v) {
    o->pf_block = -1; // a prefetch for a step that streams in instead goes uncounted
    ft_offload_join_fills(o, s); // (the overlay overwrites slots a fill may be writing)
    claim_overlay(o, s);
    int nb = o->n_buf == 2 ? 2 : 1;
    // the work enqueued on s so far includes the last overlay step's experts
    if (o->ov_last >= 0) ft_cuda_event_record(o->ev_done[o->ov_last], s);
    int buf = -1;
    for (int i = 0; i < nb; i++)
        if (o->ov_layer[i] == block) buf = i;
    o->ov_prefetch = false; // a prefetch targets this layer: consumed (waited for) below
    if (buf < 0) {
        buf = nb == 2 && o->ov_last >= 0 ? 1 - o->ov_last : 0;
        // the copy stream must not overwrite what s may still be reading: it waits ev_done
        // (recorded above for the last step's buffer; a buffer never used has no record)
        stream_in(o, block, buf);
    }
    ft_cuda_stream_wait_event(s, o->ev_copied[buf]);
    if (o->prefill_fill && o->fill_used) fill_from_overlay(o, block, buf, s);
    // double buffering: the next MoE layer streams into the other buffer while this computes
    if (nb == 2) {
        int next = -1;
        for (int L = block + 1; L < o->n_blocks && next < 0; L++)
            if (o->layer_of_block[L] >= 0) next = L;
        if (next >= 0 && o->ov_layer[1 - buf] != next) {
            stream_in(o, next, 1 - buf);
            o->ov_prefetch = true;
        }
    }
    o->ov_last = buf;
    const moe_layer_geometry *lg = &o->g.layers[o->layer_of_block[block]];
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        v->w[b] = o->ov[buf][b];
        v->mat_bytes[b] = lg->bytes[b];
    }
    v->ids = sel;
    v->overlay = true;
}

// CTAs of a fill's copy kernel: enough to keep PCIe busy in the gaps between the steps' own
// copies, few enough to leave the SMs to the step.
enum { FILL_CTAS = 16 };

// Before lookups that may refill any slot, the overlay's among them: a stream-in still running
// lands first, and what the overlay holds is forgotten (its slots are claimed again by the
// next overlay step).
static void overlay_release(ft_offload *o, ft_cuda_stream *s) {
    if (o->ov_prefetch) {
        for (int i = 0; i < 2; i++) ft_cuda_stream_wait_event(s, o->ev_copied[i]);
        o->ov_prefetch = false;
    }
    if (o->n_buf >= 1) o->ov_layer[0] = o->ov_layer[1] = -1;
    o->ov_claimed = false;
    o->ov_last = -1;
}

void ft_offload_step_replayed(ft_offload *o, ft_cuda_stream *s) { overlay_release(o, s); }

// The block's frecency counters on the device (all NULL under LRU victims).
static ft_cuda_cache_frecency frecency_of(const ft_offload *o, int block) {
    if (!o->use_steps) return (ft_cuda_cache_frecency){0};
    size_t at = (size_t)o->map_base[block];
    return (ft_cuda_cache_frecency){o->use_steps + block, o->use_count + at, o->use_last + at, o->use_hist + at};
}

static void cache_step(ft_offload *o, int block, const int32_t *sel, int n, ft_cuda_stream *s, ft_offload_view *v,
                       const ft_offload_hook *hook) {
    int li = o->layer_of_block[block];
    overlay_release(o, s);
    int pool = moe_expert_cache_pool_of(o->mirror, block), first, n_own;
    lookup_span(o, block, &first, &n_own);
    const moe_pool_plan *pp = &o->plan.pools[pool];
    uint64_t *st = o->stats + (size_t)li * FT_CACHE_STAT_COUNT;
    uint64_t copy_bytes = layer_copy_bytes(o, li);
    ft_cuda_cache_lookup_params lp = {
        .sel = sel, .n = n, .slots = o->slots, .map = o->map + o->map_base[block],
        .slot_expert = o->pools[pool].slot_expert, .stamp = o->pools[pool].stamp, .clock = o->clock + pool,
        .first = first, .n_own = n_own, .copy_expert = o->copy_expert, .copy_slot = o->copy_slot,
        .n_copies = o->n_copies, .stats = o->telemetry ? st : NULL, .copy_bytes = copy_bytes, .copy_span = o->span,
        .frecency = frecency_of(o, block), .sizing = sizing_of(o, block),
    };
    if (block == o->pf_block) { // the prefetch made for this step (joined by layer_begin)
        lp.pf_slot = o->pf_slot;
        lp.pf_guess = o->pf_guess;
        lp.pf_n = o->pf_n;
        lp.n_guess = o->pf_n_guess;
    }
    o->pf_block = -1;
    bool hybrid = hook && o->hybrid_costs;
    if (hybrid) {
        if (block <= o->fill_last_block) ft_offload_join_fills(o, s); // a new step, not joined yet
        size_t at = (size_t)li * (size_t)o->max_sel;
        lp.costs = o->hybrid_costs + (size_t)li * 3;
        lp.cpu_sel = o->cpu_sel;
        lp.n_cpu = o->n_cpu;
        lp.fill_expert = o->fill_expert + at;
        lp.fill_slot = o->fill_slot + at;
        lp.n_fill = o->n_fill + li;
        o->last_li = li;
    }
    ft_cuda_cache_lookup(&lp, s);
    o->pf_can_start = o->pf_enabled && !hybrid;
    if (o->pf_can_start) ft_cuda_event_record(o->ev_pf_looked, s);
    v->cpu_sel = hybrid ? o->cpu_sel : NULL;
    v->n_cpu = hybrid ? o->n_cpu : NULL;
    if (hook) hook->after_lookup(hook->ctx, v); // the CPU's road starts before the copies
    ft_cuda_cache_copy_params cp = pool_copies(o, li, pool, o->n_copies, o->copy_expert, o->copy_slot);
    cp.copy_span = o->span;
    cp.copy_ns = o->telemetry ? &st[FT_CACHE_STAT_COPY_NS] : NULL;
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        v->w[b] = cp.dst[b];
        v->mat_bytes[b] = pp->stride[b];
    }
    ft_cuda_cache_copy(&cp, 0, s);
    if (o->pf_can_start) ft_cuda_event_record(o->ev_pf_copied, s);
    v->ids = o->slots;
    v->overlay = false;
    if (!hybrid) return;
    // the fills: on fill_stream after the step's own copies (so they do not share the bus with
    // them: the step waits for those), from the layer's own lists, into slots no selection of
    // this step reads; a few CTAs, so the step's kernels keep the machine
    ft_cuda_event_record(o->ev_copied_own, s);
    ft_cuda_stream_wait_event(o->fill_stream, o->ev_copied_own);
    ft_cuda_cache_copy_params fp = pool_copies(o, li, pool, lp.n_fill, lp.fill_expert, lp.fill_slot);
    ft_cuda_cache_copy(&fp, FILL_CTAS, o->fill_stream);
    o->fill_pending = true;
    o->fill_last_block = block;
}

void ft_offload_end_token(ft_offload *o, ft_cuda_stream *s) {
    if (!o->own_n) return;
    ft_offload_join_fills(o, s); // (a moved slot may be a fill's target)
    ft_cuda_cache_frecency f = {0};
    if (o->use_steps) f = (ft_cuda_cache_frecency){o->use_steps, o->use_count, o->use_last, o->use_hist};
    for (int k = 0; k < o->plan.n_pools; k++) {
        const moe_pool_plan *pp = &o->plan.pools[k];
        pool_dev *pd = &o->pools[k];
        ft_cuda_cache_rebalance_params rp = {
            .layers = pd->layers, .n_layers = pp->n_layers, .slot_owner = pd->slot_owner,
            .slot_expert = pd->slot_expert, .slot_map_base = pd->slot_map_base, .stamp = pd->stamp,
            .n_slots = pp->n_slots, .tokens = pd->tokens, .moves = pd->moves, .own_n = o->own_n,
            .n_expert = o->n_expert_dev, .map_base = o->map_base_dev, .map = o->map, .evictions = o->evictions,
            .tail = o->tail, .ghost = o->ghost, .ghost_tag = o->ghost_tag, .ghost_depth = o->sizing.ghost_depth,
            .period = o->sizing.period, .max_moves = o->sizing.max_moves, .min_gain = o->sizing.min_gain,
            .floor = o->plan.floor_per_layer, .frecency = f,
        };
        ft_cuda_cache_rebalance(&rp, s);
    }
    if (o->pf_can_start) ft_cuda_event_record(o->ev_pf_looked, s); // a prefetch after it sees the moves
}

uint64_t ft_offload_slot_moves(ft_offload *o) {
    uint64_t n = 0;
    for (int k = 0; k < o->plan.n_pools && o->own_n; k++) {
        uint64_t m = 0;
        ft_cuda_memcpy_d2h(&m, o->pools[k].moves, sizeof(m), NULL);
        ft_cuda_stream_sync(NULL);
        n += m;
    }
    return n;
}

void ft_offload_join_fills(ft_offload *o, ft_cuda_stream *s) {
    if (!o->fill_pending) return;
    ft_cuda_event_record(o->ev_filled, o->fill_stream);
    ft_cuda_stream_wait_event(s, o->ev_filled);
    o->fill_pending = false;
    o->fill_last_block = -1;
}

void ft_offload_layer_begin(ft_offload *o, int block, int32_t *sel, int n_tok, int k, bool overlay,
                            ft_cuda_stream *s, ft_offload_view *v, const ft_offload_hook *hook) {
    FT_ASSERT(block >= 0 && block < o->n_blocks && o->layer_of_block[block] >= 0);
    int n = n_tok * k;
    FT_ASSERT(n >= 1 && (overlay || n <= o->max_sel));
    ft_offload_join_prefetch(o, s); // (its copies land in this layer's slots)
    if (o->trace) {
        ft_cuda_cache_trace_params tp = {
            .sel = sel, .n_tok = n_tok, .k = k, .trace = o->trace, .n_layers = o->trace_layers,
            .li = o->trace_li[block], .n_seq = o->trace_seq, .n_steps = o->trace_steps, .step = o->trace_step,
            .last = block == o->trace_last,
        };
        ft_cuda_cache_trace(&tp, s);
    }
    o->pf_can_start = false;
    if (overlay) {
        overlay_step(o, block, sel, s, v);
        v->cpu_sel = NULL;
        v->n_cpu = NULL;
    } else {
        cache_step(o, block, sel, n, s, v, hook);
    }
}

// ---------------------------------------------------------------------------------------------
// Prefetch

// CTAs of a prefetch's copy kernel: it runs beside the step's kernels (as a fill does).
enum { PREFETCH_CTAS = 16 };

void ft_offload_enable_prefetch(ft_offload *o) { o->pf_enabled = true; }

ft_cuda_stream *ft_offload_prefetch_begin(ft_offload *o, int block, int32_t **guess) {
    if (!o->pf_can_start || block < 0 || block >= o->n_blocks || o->layer_of_block[block] < 0 || o->trace ||
        o->hybrid_costs || !o->max_sel)
        return NULL;
    FT_ASSERT(!o->pf_pending && !o->pf_guessing);
    o->pf_can_start = false;
    ft_cuda_stream_wait_event(o->pf_stream, o->ev_pf_looked);
    *guess = o->pf_guess;
    return o->pf_stream;
}

void ft_offload_prefetch(ft_offload *o, int block, int n, int max_copies) {
    FT_ASSERT(o->layer_of_block[block] >= 0 && n >= 1 && n <= o->max_sel && max_copies >= 1 && !o->pf_pending);
    ft_cuda_stream *ps = o->pf_stream;
    ft_cuda_event_record(o->ev_pf_guessed, ps);
    o->pf_guessing = true;
    int li = o->layer_of_block[block], pool = moe_expert_cache_pool_of(o->mirror, block), first, n_own;
    lookup_span(o, block, &first, &n_own);
    n = FT_MIN(n, slots_owned_at_least(o, block));
    uint64_t *st = o->stats + (size_t)li * FT_CACHE_STAT_COUNT;
    ft_cuda_cache_prefetch_params pp = {
        .guess = o->pf_guess, .n = n, .max_copies = max_copies, .map = o->map + o->map_base[block], .slot_expert = o->pools[pool].slot_expert,
        .stamp = o->pools[pool].stamp, .clock = o->clock + pool, .first = first, .n_own = n_own,
        .copy_expert = o->pf_expert, .copy_slot = o->pf_slot, .n_copies = o->pf_n,
        .stats = o->telemetry ? st : NULL, .frecency = frecency_of(o, block), .sizing = sizing_of(o, block),
    };
    ft_cuda_cache_prefetch(&pp, ps);
    ft_cuda_stream_wait_event(ps, o->ev_pf_copied); // the bus is the step's own copies' first
    ft_cuda_cache_copy_params cp = pool_copies(o, li, pool, o->pf_n, o->pf_expert, o->pf_slot);
    ft_cuda_cache_copy(&cp, PREFETCH_CTAS, ps);
    ft_cuda_event_record(o->ev_pf_done, ps);
    o->pf_pending = true;
    o->pf_block = block;
    o->pf_n_guess = n;
}

void ft_offload_prefetch_join_guesses(ft_offload *o, ft_cuda_stream *s) {
    if (!o->pf_guessing) return;
    ft_cuda_stream_wait_event(s, o->ev_pf_guessed);
    o->pf_guessing = false;
}

void ft_offload_join_prefetch(ft_offload *o, ft_cuda_stream *s) {
    if (o->pf_guessing) ft_offload_prefetch_join_guesses(o, s);
    if (!o->pf_pending) return;
    ft_cuda_stream_wait_event(s, o->ev_pf_done);
    o->pf_pending = false; // pf_block stays: its cache step counts the prefetch against its selections
}

void ft_offload_set_hybrid_costs(ft_offload *o, const moe_hybrid_costs *costs) {
    size_t n = (size_t)o->g.n_layers * 3;
    if (!o->hybrid_costs) {
        o->hybrid_costs = dev_alloc(n * sizeof(uint32_t));
        o->n_fill = dev_alloc((size_t)o->g.n_layers * sizeof(int32_t));
        o->fill_stream = ft_cuda_stream_init();
        o->ev_copied_own = ft_cuda_event_init_sync_only();
        o->ev_filled = ft_cuda_event_init_sync_only();
        o->fill_last_block = -1;
    }
    uint32_t *h = ft_malloc(n * sizeof(uint32_t));
    for (int i = 0; i < o->g.n_layers; i++) {
        h[3 * i] = costs[i].copy_ns;
        h[3 * i + 1] = costs[i].cpu_ns;
        h[3 * i + 2] = costs[i].meet_ns;
    }
    ft_cuda_device_sync(); // (a step in flight may be reading them)
    ft_cuda_memcpy_h2d(o->hybrid_costs, h, n * sizeof(uint32_t), NULL);
    ft_cuda_stream_sync(NULL);
    free(h);
}

const moe_expert_banks *ft_offload_host_banks(const ft_offload *o) { return o->hb; }

// ---------------------------------------------------------------------------------------------
// Telemetry

int ft_offload_n_layers(const ft_offload *o) { return o->g.n_layers; }
int ft_offload_layer_block(const ft_offload *o, int i) { return o->g.layers[i].layer; }
int ft_offload_n_pools(const ft_offload *o) { return o->plan.n_pools; }
int ft_offload_pool_of_layer(const ft_offload *o, int i) { return o->plan.pool_of_block[o->g.layers[i].layer]; }

static void add_counts(ft_offload_counts *a, const ft_offload_counts *b) {
    a->selections += b->selections;
    a->hits += b->hits;
    a->misses += b->misses;
    a->cpu_computed += b->cpu_computed;
    a->bytes_copied += b->bytes_copied;
    a->copy_ns += b->copy_ns;
    a->steps += b->steps;
    a->prefill_layers += b->prefill_layers;
    a->guesses += b->guesses;
    a->guesses_right += b->guesses_right;
    a->prefetched += b->prefetched;
    a->prefetch_used += b->prefetch_used;
    a->prefetch_bytes += b->prefetch_bytes;
}

void ft_offload_read_counts(ft_offload *o, ft_offload_counts *layers, ft_offload_counts *pools,
                            ft_offload_counts *total) {
    int n = o->g.n_layers;
    uint64_t *h = ft_malloc((size_t)n * FT_CACHE_STAT_COUNT * sizeof(uint64_t));
    ft_cuda_device_sync();
    ft_cuda_memcpy_d2h(h, o->stats, (size_t)n * FT_CACHE_STAT_COUNT * sizeof(uint64_t), NULL);
    ft_cuda_stream_sync(NULL);
    if (pools) memset(pools, 0, (size_t)o->plan.n_pools * sizeof(*pools));
    if (total) memset(total, 0, sizeof(*total));
    for (int i = 0; i < n; i++) {
        const uint64_t *r = h + (size_t)i * FT_CACHE_STAT_COUNT;
        ft_offload_counts c = {
            .selections = r[FT_CACHE_STAT_SELECTIONS], .hits = r[FT_CACHE_STAT_HITS], .misses = r[FT_CACHE_STAT_MISSES],
            .cpu_computed = r[FT_CACHE_STAT_CPU],
            .bytes_copied = r[FT_CACHE_STAT_BYTES], .copy_ns = r[FT_CACHE_STAT_COPY_NS],
            .steps = r[FT_CACHE_STAT_STEPS] + r[FT_CACHE_STAT_PREFILL_LAYERS],
            .prefill_layers = r[FT_CACHE_STAT_PREFILL_LAYERS],
            .guesses = r[FT_CACHE_STAT_PF_GUESSES], .guesses_right = r[FT_CACHE_STAT_PF_RIGHT],
            .prefetched = r[FT_CACHE_STAT_PF_COPIES], .prefetch_used = r[FT_CACHE_STAT_PF_USED],
            .prefetch_bytes = r[FT_CACHE_STAT_PF_COPIES] * layer_copy_bytes(o, i),
        };
        if (layers) layers[i] = c;
        if (pools) add_counts(&pools[ft_offload_pool_of_layer(o, i)], &c);
        if (total) add_counts(total, &c);
    }
    free(h);
}

static ft_moe_counts moe_counts_of(const ft_offload_counts *c) {
    return (ft_moe_counts){.selections = c->selections, .hits = c->hits, .misses = c->misses,
                           .cpu_computed = c->cpu_computed, .bytes_copied = c->bytes_copied, .copy_ns = c->copy_ns,
                           .guesses = c->guesses, .guesses_right = c->guesses_right, .prefetched = c->prefetched,
                           .prefetch_used = c->prefetch_used, .prefetch_bytes = c->prefetch_bytes};
}

void ft_offload_stats(ft_offload *o, ft_moe_stats *out) {
    memset(out, 0, sizeof(*out));
    const moe_cache_plan *plan = &o->plan;
    int nl = ft_offload_n_layers(o), np = ft_offload_n_pools(o);
    out->n_slots = plan->n_slots;
    out->uniform = plan->layout == MOE_POOL_LAYOUT_UNIFORM;
    out->cache_bytes = plan->bytes;
    out->n_layers = nl;
    out->n_pools = np;
    out->layer_block = ft_malloc((size_t)nl * sizeof(int));
    out->layer_pool = ft_malloc((size_t)nl * sizeof(int));
    out->layer_slots = ft_malloc((size_t)nl * sizeof(int));
    out->layers = ft_malloc((size_t)nl * sizeof(ft_moe_counts));
    out->pool_slots = ft_calloc((size_t)np, sizeof(int));
    out->pool_layers = ft_calloc((size_t)np, sizeof(int));
    out->pools = ft_malloc((size_t)np * sizeof(ft_moe_counts));
    ft_offload_counts *lc = ft_malloc((size_t)nl * sizeof(*lc)), *pc = ft_malloc((size_t)np * sizeof(*pc)), tc;
    ft_offload_read_counts(o, lc, pc, &tc);
    for (int i = 0; i < nl; i++) {
        out->layer_block[i] = ft_offload_layer_block(o, i);
        out->layer_pool[i] = ft_offload_pool_of_layer(o, i);
        int first;
        moe_expert_cache_layer_range(o->mirror, out->layer_block[i], &first, &out->layer_slots[i]);
        if (o->own_n) { // self-sizing: what it owns now
            ft_cuda_memcpy_d2h(&out->layer_slots[i], o->own_n + out->layer_block[i], sizeof(int32_t), NULL);
            ft_cuda_stream_sync(NULL);
        }
        out->layers[i] = moe_counts_of(&lc[i]);
        out->pool_layers[out->layer_pool[i]]++;
    }
    for (int p = 0; p < np; p++) {
        out->pools[p] = moe_counts_of(&pc[p]);
        out->pool_slots[p] = p < plan->n_pools ? plan->pools[p].n_slots : 0;
    }
    out->total = moe_counts_of(&tc);
    free(lc);
    free(pc);
}

double ft_offload_copy_gbps(ft_offload *o) {
    ft_offload_counts t;
    ft_offload_read_counts(o, NULL, NULL, &t);
    return t.copy_ns ? (double)t.bytes_copied / (double)t.copy_ns : 0.0;
}

void ft_offload_print(const ft_offload *o, FILE *out) {
    const double MiB = 1048576.0;
    moe_cache_plan_print(&o->plan, out);
    fprintf(out, "offload: host banks %.1f MiB (%s), arenas %.1f MiB, prefill overlay %s (%d buffer%s of %.1f MiB)%s\n",
            o->hb->bytes / MiB, o->hb->alloc.name ? o->hb->alloc.name : "?", o->plan.bytes / MiB,
            o->n_buf >= 1 ? "in the arenas" : "beside the arenas", o->n_buf == 2 ? 2 : 1, o->n_buf == 2 ? "s" : "",
            (o->ov_bytes[0] + o->ov_bytes[1] + o->ov_bytes[2]) / MiB, o->trace ? ", replaying a route trace" : "");
    fprintf(out, "offload: a miss takes the %s slot of its layer (--moe-cache-policy %s)\n",
            o->use_steps ? "least used lately and overall" : "least recently used", o->use_steps ? "frecency" : "lru");
}

// ---------------------------------------------------------------------------------------------
// For tests

void ft_offload_debug_read(ft_offload *o, int n, ft_offload_debug *d) {
    memset(d, 0, sizeof(*d));
    ft_cuda_device_sync();
    int32_t nc = 0;
    ft_cuda_memcpy_d2h(&nc, o->n_copies, sizeof(int32_t), NULL);
    ft_cuda_stream_sync(NULL);
    d->n_copies = nc;
    d->copy_expert = ft_malloc((size_t)(nc + 1) * sizeof(int32_t));
    d->copy_slot = ft_malloc((size_t)(nc + 1) * sizeof(int32_t));
    d->slots = ft_malloc((size_t)(n + 1) * sizeof(int32_t));
    ft_cuda_memcpy_d2h(d->copy_expert, o->copy_expert, (size_t)nc * sizeof(int32_t), NULL);
    ft_cuda_memcpy_d2h(d->copy_slot, o->copy_slot, (size_t)nc * sizeof(int32_t), NULL);
    ft_cuda_memcpy_d2h(d->slots, o->slots, (size_t)n * sizeof(int32_t), NULL);
    d->cpu_sel = ft_malloc((size_t)(n + 1) * sizeof(int32_t));
    d->fill_expert = ft_malloc((size_t)(n + 1) * sizeof(int32_t));
    d->fill_slot = ft_malloc((size_t)(n + 1) * sizeof(int32_t));
    if (o->hybrid_costs) {
        ft_cuda_memcpy_d2h(d->cpu_sel, o->cpu_sel, (size_t)n * sizeof(int32_t), NULL);
        ft_cuda_memcpy_d2h(&d->n_cpu, o->n_cpu, sizeof(int32_t), NULL);
        ft_cuda_memcpy_d2h(&d->n_fill, o->n_fill + o->last_li, sizeof(int32_t), NULL);
        ft_cuda_stream_sync(NULL);
        size_t at = (size_t)o->last_li * (size_t)o->max_sel;
        FT_ASSERT(d->n_fill >= 0 && d->n_fill <= n);
        ft_cuda_memcpy_d2h(d->fill_expert, o->fill_expert + at, (size_t)d->n_fill * sizeof(int32_t), NULL);
        ft_cuda_memcpy_d2h(d->fill_slot, o->fill_slot + at, (size_t)d->n_fill * sizeof(int32_t), NULL);
    } else {
        for (int i = 0; i < n; i++) d->cpu_sel[i] = -1;
    }
    int32_t npf = 0;
    if (o->pf_n) {
        ft_cuda_memcpy_d2h(&npf, o->pf_n, sizeof(int32_t), NULL);
        ft_cuda_stream_sync(NULL);
    }
    FT_ASSERT(npf >= 0 && npf <= o->max_sel);
    d->n_prefetch = npf;
    d->prefetch_expert = ft_malloc((size_t)(npf + 1) * sizeof(int32_t));
    d->prefetch_slot = ft_malloc((size_t)(npf + 1) * sizeof(int32_t));
    if (npf) {
        ft_cuda_memcpy_d2h(d->prefetch_expert, o->pf_expert, (size_t)npf * sizeof(int32_t), NULL);
        ft_cuda_memcpy_d2h(d->prefetch_slot, o->pf_slot, (size_t)npf * sizeof(int32_t), NULL);
    }
    d->n_pools = o->plan.n_pools;
    d->n_slots = ft_malloc((size_t)d->n_pools * sizeof(int));
    d->slot_expert = ft_malloc((size_t)d->n_pools * sizeof(int32_t *));
    d->stamp = ft_malloc((size_t)d->n_pools * sizeof(uint64_t *));
    d->slot_owner = ft_malloc((size_t)d->n_pools * sizeof(int32_t *));
    d->clock = ft_malloc((size_t)d->n_pools * sizeof(uint64_t));
    ft_cuda_memcpy_d2h(d->clock, o->clock, (size_t)d->n_pools * sizeof(uint64_t), NULL);
    for (int k = 0; k < d->n_pools; k++) {
        int ns = d->n_slots[k] = o->plan.pools[k].n_slots;
        d->slot_expert[k] = ft_malloc((size_t)(ns + 1) * sizeof(int32_t));
        d->stamp[k] = ft_malloc((size_t)(ns + 1) * sizeof(uint64_t));
        ft_cuda_memcpy_d2h(d->slot_expert[k], o->pools[k].slot_expert, (size_t)ns * sizeof(int32_t), NULL);
        ft_cuda_memcpy_d2h(d->stamp[k], o->pools[k].stamp, (size_t)ns * sizeof(uint64_t), NULL);
        d->slot_owner[k] = ft_malloc((size_t)(ns + 1) * sizeof(int32_t));
        if (o->pools[k].slot_owner) {
            ft_cuda_memcpy_d2h(d->slot_owner[k], o->pools[k].slot_owner, (size_t)ns * sizeof(int32_t), NULL);
        } else {
            for (int j = 0; j < o->plan.pools[k].n_layers; j++) {
                int first, n_own, L = o->plan.pools[k].layers[j];
                moe_expert_cache_layer_range(o->mirror, L, &first, &n_own);
                for (int s = first; s < first + n_own; s++) d->slot_owner[k][s] = L;
            }
        }
    }
    ft_cuda_stream_sync(NULL);
}

void ft_offload_debug_free(ft_offload_debug *d) {
    free(d->copy_expert);
    free(d->cpu_sel);
    free(d->fill_expert);
    free(d->fill_slot);
    free(d->prefetch_expert);
    free(d->prefetch_slot);
    free(d->copy_slot);
    free(d->slots);
    for (int k = 0; k < d->n_pools; k++) {
        free(d->slot_expert[k]);
        free(d->stamp[k]);
        free(d->slot_owner[k]);
    }
    free(d->n_slots);
    free(d->slot_expert);
    free(d->slot_owner);
    free(d->stamp);
    free(d->clock);
    memset(d, 0, sizeof(*d));
}

// Copies experts 0 .. n-1 of MoE layer li with the decode copy kernel into a device temporary,
// as decode's misses go (mapped host reads by the SMs): the best of five timed runs after one.
double ft_offload_time_copies(ft_offload *o, int li, int n) {
    FT_ASSERT(li >= 0 && li < o->g.n_layers && n >= 1 && n <= o->hb->layers[li].n_expert);
    const moe_host_layer *hl = &o->hb->layers[li];
    uint64_t bytes = 0;
    for (int b = 0; b < MOE_BANK_COUNT; b++) bytes += hl->bank[b].expert_bytes;
    uint8_t *tmp = ft_cuda_malloc((size_t)n * bytes);
    int32_t *ids = ft_cuda_malloc((size_t)(2 * n + 1) * sizeof(int32_t));
    if (!tmp || !ids) ft_abort(__FILE__, __LINE__, "offload: out of device memory timing the copies");
    int32_t *h = ft_malloc((size_t)(2 * n + 1) * sizeof(int32_t));
    ft_cuda_cache_copy_params cp = {.n_copies = ids, .copy_expert = ids + 1, .copy_slot = ids + 1 + n};
    uint64_t off = 0;
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        cp.src[b] = o->hb_dev + (hl->bank[b].data - (const uint8_t *)o->hb->block);
        cp.bytes[b] = hl->bank[b].expert_bytes;
        cp.dst[b] = tmp + off; // bank b of expert j at off + j * stride: the banks' slots side by side
        cp.stride[b] = bytes;
        off += hl->bank[b].expert_bytes;
    }
    ft_cuda_stream *s = ft_cuda_stream_init();
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        // experts not read since loading where the layer has enough (as decode's misses)
        h[0] = n;
        for (int j = 0; j < n; j++) {
            h[1 + j] = (r * n + j) % hl->n_expert;
            h[1 + n + j] = j;
        }
        ft_cuda_memcpy_h2d(ids, h, (size_t)(2 * n + 1) * sizeof(int32_t), NULL);
        ft_cuda_stream_sync(NULL);
        ft_cuda_stream_sync(s);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        ft_cuda_cache_copy(&cp, 0, s);
        ft_cuda_stream_sync(s);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double t = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
        if (r > 0 && t < best) best = t;
    }
    ft_cuda_stream_free(s);
    ft_cuda_free(ids);
    ft_cuda_free(tmp);
    free(h);
    return best;
}
