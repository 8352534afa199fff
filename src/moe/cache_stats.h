// cache_stats: the GPU expert cache's telemetry as the engine's callers see it.
//
// Cumulative counters per MoE layer, per pool and in all, filled by the backend that holds the
// cache (ft_backend_ops.expert_cache_stats); a rebuild keeps them. Two snapshots taken around
// a run give the run's figures (ft_moe_stats_sub). Plain data: the functions here only do
// arithmetic and printing, and a snapshot belongs to whoever read it.
#ifndef FT_MOE_CACHE_STATS_H
#define FT_MOE_CACHE_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct ft_moe_counts {
    uint64_t selections, hits, misses;
    uint64_t cpu_computed;   // misses computed on the CPU instead of copied (hybrid)
    uint64_t bytes_copied;   // host-to-device bytes of expert copies
    uint64_t copy_ns;        // device time of those copies
    // prefetch: guesses of a next-layer predictor, of them selected; the copies it made ahead
    // of the step, of them hit by the step, and their host-to-device bytes (not in bytes_copied)
    uint64_t guesses, guesses_right, prefetched, prefetch_used, prefetch_bytes;
} ft_moe_counts;

typedef struct ft_moe_stats {
    int n_slots;             // --moe-cache-size in use
    bool uniform;            // --moe-pool-layout uniform
    uint64_t cache_bytes;    // the arenas
    int n_layers;            // MoE layers
    int *layer_block;        // (n_layers) block index
    int *layer_pool;         // (n_layers) the pool serving it
    int *layer_slots;        // (n_layers) the slots it holds when read (its range in its pool;
                             // NULL where the cache does not say)
    ft_moe_counts *layers;   // (n_layers)
    int n_pools;
    int *pool_slots;         // (n_pools)
    int *pool_layers;        // (n_pools) layers it serves
    ft_moe_counts *pools;    // (n_pools)
    ft_moe_counts total;
} ft_moe_stats;

void ft_moe_stats_free(ft_moe_stats *s); // a zeroed one is a no-op
// dst = a deep copy of src (dst's old arrays are freed).
void ft_moe_stats_copy(ft_moe_stats *dst, const ft_moe_stats *src);
// a's counters minus b's (an earlier snapshot of the same cache): what happened in between.
void ft_moe_stats_sub(ft_moe_stats *a, const ft_moe_stats *b);
// a's counters plus b's (two windows of the same cache).
void ft_moe_stats_add(ft_moe_stats *a, const ft_moe_stats *b);
// Hit rate of c (0 without selections) and the bandwidth of its copies in GB/s (0 without).
double ft_moe_hit_rate(const ft_moe_counts *c);
double ft_moe_copy_gbps(const ft_moe_counts *c);
// Share of the guesses the steps selected, and of the prefetch's copies they hit (0 without).
double ft_moe_predict_accuracy(const ft_moe_counts *c);
double ft_moe_prefetch_used(const ft_moe_counts *c);
// Host-to-device bytes of the prefetch's copies that no step hit: exact for one layer (its
// copies all move its expert bytes), in proportion to the copies for a pool or in all.
uint64_t ft_moe_prefetch_wasted_bytes(const ft_moe_counts *c);
// Prints one line per pool and one in all: hit rate, misses, host-to-device bytes (and per
// token when n_tokens > 0) and the copies' GB/s.
void ft_moe_stats_print(const ft_moe_stats *s, int n_tokens, FILE *out);

#endif
