// cache_plan: how the GPU expert cache's memory is laid out, decided before anything is
// allocated.
//
// Unit of price. `--moe-cache-size N` counts expert slots (one slot = gate, up and down of one
// (layer, expert)). Bank b's arena is N x (the largest expert of bank b over all layers), so N
// buys the same bytes whatever the layout: the cost of N slots if every slot had to hold the
// widest expert. The layouts (exact pools per geometry, or uniform), the capacity rule, the
// floor and the sizing from a budget: above moe_cache_plan_make; docs/expert-cache.md.
//
// A plan is plain data, owned by the caller (moe_cache_plan_free); thread-safe to read.
#ifndef FT_MOE_CACHE_PLAN_H
#define FT_MOE_CACHE_PLAN_H

#include "geometry.h"

#include <stdio.h>

enum moe_pool_layout { MOE_POOL_LAYOUT_EXACT, MOE_POOL_LAYOUT_UNIFORM };

typedef struct moe_cache_plan_params {
    int n_slots;                    // --moe-cache-size; 0: sized from the budget below
    enum moe_pool_layout layout;    // --moe-pool-layout
    int top_k;                      // experts one token selects per MoE layer
    int n_running;                  // sequences decoded in one step (--max-running-requests)
    uint64_t view_align;            // pool views start on multiples of this (bytes, power of 2)
    // The byte budget, used when n_slots == 0
    uint64_t vram_free;             // free device memory
    double memory_ratio;            // --memory-ratio: the share of vram_free ft may use
    uint64_t dense_bytes;           // everything but the routed experts
    uint64_t workspace_bytes;       // activations, scratch, prefill overlay
    uint64_t kv_bytes_per_token;    // KV bytes of one token over all layers
    int64_t kv_reserve_tokens;      // --kv-reserve-tokens: the KV floor
} moe_cache_plan_params;

// n_slots 0, exact layout, top_k 1, n_running 1, view_align 256, memory_ratio 0.9.
moe_cache_plan_params moe_cache_plan_default_params(void);

typedef struct moe_pool_plan {
    int n_layers;
    int *layers;                           // (n_layers) block indices, ascending
    int n_expert_total;                    // experts of all its layers (the most it can hold)
    int floor_slots;                       // the per-step floor over its layers
    int n_slots;
    uint64_t stride[MOE_BANK_COUNT];       // bytes of one slot in each bank
    uint64_t offset[MOE_BANK_COUNT];       // start of the view in each bank's arena
} moe_pool_plan;

typedef struct moe_cache_plan {
    enum moe_pool_layout layout;
    int n_slots;                           // N, the unit of price
    int floor_per_layer;                   // min(top_k x n_running, n_expert)
    int top_k, n_running;
    uint64_t max_stride[MOE_BANK_COUNT];   // widest expert of each bank over all layers
    uint64_t arena_bytes[MOE_BANK_COUNT];  // N x max_stride[b]
    uint64_t bytes;                        // all arenas
    uint64_t bytes_used;                   // inside the pool views
    uint64_t budget;                       // the byte budget when sized from it, else 0
    int n_pools;
    moe_pool_plan *pools;
    int n_blocks;                          // 1 + the largest MoE block index
    int *pool_of_block;                    // (n_blocks) pool serving block L, -1: not MoE
} moe_cache_plan;

// Layouts.
// - exact: layers with the same tuple of per-bank expert bytes (a geometry group) form one
//   pool. A pool's slots are exact-width: its view in bank b's arena is n_slots x stride[b]
//   bytes, slot s at offset[b] + s x stride[b]. Views are disjoint, start on view_align
//   boundaries, and lie inside their arenas. A narrow pool therefore holds more slots per byte.
// - uniform: one pool for all layers at the widest stride of each bank (n_slots = N), the
//   layout that pads every slot, kept for comparison.
//
// Capacity rule (exact layout), "a fair share per layer":
//   1. Every MoE layer gets the same number of slots s: pool p gets s x n_layers(p), capped at
//      the experts its layers have (a pool that holds all its experts stops growing). s is the
//      largest value whose views fit in every arena.
//   2. Bytes left over go one slot at a time to the pool with the fewest slots per layer (ties:
//      the lower pool index) as long as its views still fit; a pool that no longer fits, or
//      is full, drops out.
//   Floor: every layer must be able to hold the experts one decode step selects, top_k x
//   n_running (at most its expert count), so pool p needs floor x n_layers(p) slots (the
//   cache splits a pool's slots evenly among its layers, expert_cache.h, so each layer's own
//   range then holds at least the floor); a plan below it is an error that names the smallest
//   N that meets it. The uniform layout has the same floor over all layers.
//
// Sizing from a budget (n_slots == 0): budget = vram_free x memory_ratio - dense_bytes -
// workspace_bytes - kv_bytes_per_token x kv_reserve_tokens, and N = budget / (sum over banks
// of the widest expert), capped at the model's expert count.
//
// Plans the cache for geometry g. Returns false and sets *err when the model has no experts,
// the budget leaves nothing for the cache, or the cache is below the floor (the message gives
// the numbers and the smallest N that would do). Free with moe_cache_plan_free.
bool moe_cache_plan_make(const moe_geometry *g, const moe_cache_plan_params *p, moe_cache_plan *out,
                         ft_err *err);
void moe_cache_plan_free(moe_cache_plan *plan);

// The smallest N whose plan meets the floor for g under p's layout, top_k and n_running.
int moe_cache_plan_min_slots(const moe_geometry *g, const moe_cache_plan_params *p);

// Bytes of one slot of pool i over all banks.
uint64_t moe_pool_slot_bytes(const moe_pool_plan *pool);

// Prints the plan: the price of N, each pool's layers, strides, slots, slots per layer and
// share of its experts, and the bytes used.
void moe_cache_plan_print(const moe_cache_plan *plan, FILE *out);

#endif
