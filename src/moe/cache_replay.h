// cache_replay: a route trace replayed through an expert cache plan with the C reference of the
// cache (expert_cache.h): hit rates and bytes copied per decode step for a layout, size and
// policy, without a GPU, beside the offline optimum on the same trace and slots
// (cache_belady.h). Used by `ft replay` (policies against the optimum) and `ft inspect
// --moe-route-trace` (layouts at equal bytes).
#ifndef FT_MOE_CACHE_REPLAY_H
#define FT_MOE_CACHE_REPLAY_H

#include "expert_cache.h"
#include "route_trace.h"

typedef struct moe_replay_params {
    int64_t warmup;                  // steps replayed but not counted
    moe_cache_policy_params policy;  // fixed ranges (the LRU) or self-sizing
    bool prefetch;                   // copy the trace's predicted misses before each layer's step
    int prefetch_copies;             // at most this many of them a layer's step (the best-ranked)
} moe_replay_params;

// Warm-up 0, the fixed policy, no prefetch (MOE_PREFETCH_DEFAULT_COPIES when turned on).
moe_replay_params moe_replay_default_params(void);

typedef struct moe_replay_layer {
    int layer, pool;             // block index, the pool serving it
    moe_cache_stats stats;       // counted steps; with prefetch: the demand misses left
    int slots;                   // slots it owns at the end (moves with self-sizing)
    // prefetch, counted steps (in experts; bytes at the layer's expert bytes)
    uint64_t guessed;            // distinct predicted experts
    uint64_t guessed_right;      // of them selected by the step
    uint64_t prefetched;         // copies the prefetch made (predicted and not resident)
    uint64_t prefetch_used;      // of them selected by the step
    uint64_t prefetch_used_bytes, prefetch_wasted_bytes;
} moe_replay_layer;

typedef struct moe_replay_result {
    int64_t steps;              // steps counted (after the warm-up)
    moe_cache_stats total;      // over all pools, counted steps only
    int n_pools;
    moe_cache_stats *pools;     // (n_pools) counted steps only
    int n_layers;
    moe_replay_layer *layers;   // (n_layers) in the trace's layer order
    uint64_t moves;             // self-sizing's slot moves, all steps
} moe_replay_result;

// Replays every step of t (its layers must be MoE layers of g with t's expert count; all its
// sequences' selections of a layer form one cache step; moe_expert_cache_end_step after each
// step's layers) through a fresh cache for plan under p, counting from step p->warmup on. With
// p->prefetch, each layer's step is preceded by moe_expert_cache_prefetch of the trace's
// predictions for it (all sequences'), and a prefetched expert counts as used when the step
// selects it, else as wasted. Returns false and sets *err when the trace does not fit the model,
// asks for prefetch without predictions, or a step selects more distinct experts than a layer
// holds. Free with moe_replay_result_free.
bool moe_cache_replay_params(const moe_cache_plan *plan, const moe_geometry *g, const moe_route_trace *t,
                             const moe_replay_params *p, moe_replay_result *out, ft_err *err);
// moe_cache_replay_params with the fixed policy and no prefetch.
bool moe_cache_replay(const moe_cache_plan *plan, const moe_geometry *g, const moe_route_trace *t, int64_t warmup,
                      moe_replay_result *out, ft_err *err);

// Belady's optimum on the same trace and plan, counted from step `warmup` on (at most `slots`
// copies per request sequence above the counted part's own optimum: cache_belady.h).
// pool_wide false: each layer with the slots the plan's fixed ranges give it (the optimum of
// static ranges); true: each pool's slots shared by its layers, the requests in decode order
// (step-major, layers ascending): the optimum of any policy that moves slots between a pool's
// layers, self-sizing included. The result has no moves and no prefetch; layers[].slots is the
// fixed share (0 when pool-wide). Same errors as moe_cache_replay.
bool moe_cache_replay_belady(const moe_cache_plan *plan, const moe_geometry *g, const moe_route_trace *t,
                             int64_t warmup, bool pool_wide, moe_replay_result *out, ft_err *err);

void moe_replay_result_free(moe_replay_result *r);

#endif
