// cache_replay: a route trace replayed through an expert cache plan with the C reference of the
// cache (expert_cache.h): hit rates and bytes copied per decode step for a layout and size,
// without a GPU. Used by `ft inspect --moe-route-trace` to compare layouts at equal bytes.
#ifndef FT_MOE_CACHE_REPLAY_H
#define FT_MOE_CACHE_REPLAY_H

#include "expert_cache.h"
#include "route_trace.h"

typedef struct moe_replay_result {
    int64_t steps;              // steps counted (after the warm-up)
    moe_cache_stats total;      // over all pools, counted steps only
    int n_pools;
    moe_cache_stats *pools;     // (n_pools) counted steps only
} moe_replay_result;

// Replays every step of t (its layers must be MoE layers of g with t's expert count; all its
// sequences' selections of a layer form one cache step) through a fresh cache for plan, counting
// from step `warmup` on. Returns false and sets *err when the trace does not fit the model or a
// step selects more distinct experts than a pool holds. Free with moe_replay_result_free.
bool moe_cache_replay(const moe_cache_plan *plan, const moe_geometry *g, const moe_route_trace *t, int64_t warmup,
                      moe_replay_result *out, ft_err *err);
void moe_replay_result_free(moe_replay_result *r);

#endif
