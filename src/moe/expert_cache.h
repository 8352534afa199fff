// expert_cache: the slot maps and LRU policy of the GPU expert cache, as the plain C reference.
//
// One pool per moe_cache_plan pool. A pool has n_slots slots; each holds one (layer, expert)
// of the pool's layers or is empty. Each layer of a pool owns a fixed, contiguous range of the
// pool's slots: the slots split evenly among the pool's layers in layer order, the first
// n_slots % n_layers layers one more (moe_cache_layer_slots); a layer's experts live only in its
// own range, so its LRU is its own (a pool-wide LRU over layers that decode in a fixed cycle
// keeps only the previous step's reuse: docs/expert-cache.md). The pool keeps the map
// (layer, expert) -> slot, the reverse map, an age stamp per slot and a clock. The CUDA
// implementation makes the same decisions on the device; this one is what the CPU tests and
// the device's checks run. The policy, exactly: above moe_expert_cache_step.
//
// Not thread-safe: one caller at a time per cache (a decode step's layers run in order).
// Nothing is allocated after init.
#ifndef FT_MOE_EXPERT_CACHE_H
#define FT_MOE_EXPERT_CACHE_H

#include "cache_plan.h"
#include "expert_banks.h"
#include "hybrid.h"

typedef struct moe_cache_copy {
    int pool;
    int slot;            // destination slot in the pool
    int layer, expert;   // the host entry to copy (block index, expert)
    int evicted_layer;   // what the slot held, -1 -1 when it was empty
    int evicted_expert;
} moe_cache_copy;

typedef struct moe_cache_stats {
    uint64_t selections, hits, misses, bytes_copied;
    uint64_t cpu_computed; // misses computed on the CPU instead of copied (moe_expert_cache_step_split)
} moe_cache_stats;

typedef struct moe_expert_cache moe_expert_cache;

// A cache with every slot empty, for plan (which g's layers it was made from). The cache keeps
// its own copy of what it needs from both. Free with moe_expert_cache_free (NULL: no-op).
moe_expert_cache *moe_expert_cache_init(const moe_cache_plan *plan, const moe_geometry *g);
void moe_expert_cache_free(moe_expert_cache *c);

// The policy, exactly (so two implementations agree bit for bit):
//
//   Clock. Each pool has a 64-bit clock, 0 at init. A step of one of its layers first advances
//     it: t = ++clock. Steps of different layers of one pool share the clock.
//   Ranges. Layer L of the pool owns slots [first_L, first_L + n_L) (above); everything below
//     concerns L's range only.
//   Stamps. stamp[s] is 0 while slot s is empty (at init, after invalidation) and otherwise the
//     clock of the last step that used it (a hit or a fill).
//   A step (layer L, selections e_0 .. e_{n-1}, duplicates allowed, any order):
//     1. Hits: for i = 0 .. n-1 in order, if (L, e_i) is mapped to slot s: result[i] = s and
//        stamp[s] = t.
//     2. Misses: the distinct unmapped experts in order of first appearance, m_0 .. m_{k-1}, take
//        the victims v_0 .. v_{k-1}: the k slots of L's range with stamp < t ordered by (stamp, slot index)
//        ascending, i.e. empty slots first (lowest index first), then the least recently used,
//        ties to the lower slot index. A slot used by this step has stamp t and is never a
//        victim. For each j: v_j's old (layer, expert), if any, is unmapped; (L, m_j) is mapped
//        to v_j, stamp[v_j] = t, and a copy (host entry of (L, m_j) -> slot v_j) is emitted, in
//        the order j. Every selection of m_j gets v_j.
//     A step with more distinct experts than L's range has slots is an error (the plan's floor
//     prevents it).
//   Statistics. selections += n; misses += k; hits += n - k (a repeat of a missed expert in the
//     same step is a hit: it costs no copy); bytes_copied += k x the layer's native expert
//     bytes over the banks (what the copies move: the pool's slot bytes in an exact pool, less
//     than its padded stride in a uniform one). Kept
//     per layer and per pool, cumulative and per request (moe_expert_cache_reset_request).
//   Invalidation of slots (the prefill overlay overwrites their bytes) unmaps them and sets
//     their stamps to 0; it does not touch the clock or the statistics.
//
//
// One step of MoE layer `layer` (block index): the n selected experts of every running sequence.
// Writes slots[i] for every selection and the copies to make into copies (room for n), their
// count into *n_copies. Returns false and sets *err (changing nothing) when layer is not a MoE
// layer of the plan, an expert id is out of range, or the step selects more distinct experts
// than the layer's range has slots.
bool moe_expert_cache_step(moe_expert_cache *c, int layer, const int32_t *experts, int n, int32_t *slots,
                           moe_cache_copy *copies, int *n_copies, ft_err *err);

// The step of --moe-backend hybrid: moe_expert_cache_step (the same tables, victims, copies and
// statistics), and of the k distinct missed experts the last n = moe_hybrid_cpu_share(k, costs)
// (order of first appearance: copies k - n .. k - 1) are computed on the CPU this step: their
// selections get slot -1 and their copies fill the cache behind the step (the device runs them
// on a second stream). *n_cpu = n; cpu_computed += n. costs NULL: moe_expert_cache_step.
bool moe_expert_cache_step_split(moe_expert_cache *c, int layer, const int32_t *experts, int n,
                                 const moe_hybrid_costs *costs, int32_t *slots, moe_cache_copy *copies, int *n_copies,
                                 int *n_cpu, ft_err *err);

// Where the bytes of one copy go, per bank: from the host entry to an offset in that bank's
// arena (the pool's view start + slot x stride). A compact entry lands at the start of a
// padded uniform slot.
typedef struct moe_copy_region {
    const uint8_t *src;      // the host entry (moe_expert_banks)
    uint64_t dst_offset;     // in the bank's arena
    uint64_t bytes;          // the entry's bytes: the pool's stride, or less in a uniform pool
} moe_copy_region;

// Fills out[b] for each bank. hb must be the banks of the geometry the cache was made from.
void moe_expert_cache_copy_regions(const moe_expert_cache *c, const moe_expert_banks *hb, const moe_cache_copy *cp,
                                   moe_copy_region out[MOE_BANK_COUNT]);
// Offset of slot s of pool in bank b's arena.
uint64_t moe_expert_cache_slot_offset(const moe_expert_cache *c, int pool, int slot, enum moe_bank b);

// Slots of the j-th of pool_layers layers of a pool of pool_slots slots (the range rule above).
int moe_cache_layer_slots(int pool_slots, int pool_layers, int j);
// The range of slots MoE layer `layer` (block index) owns in its pool.
void moe_expert_cache_layer_range(const moe_expert_cache *c, int layer, int *first, int *n);

// The slot holding (layer, expert), or -1. The pool serving a layer (-1: not a MoE layer).
int moe_expert_cache_lookup(const moe_expert_cache *c, int layer, int expert);
int moe_expert_cache_pool_of(const moe_expert_cache *c, int layer);
// What slot s of pool holds: false when empty. Its stamp (0: empty).
bool moe_expert_cache_slot(const moe_expert_cache *c, int pool, int slot, int *layer, int *expert);
uint64_t moe_expert_cache_stamp(const moe_expert_cache *c, int pool, int slot);

// Invalidates slots [first, first + n) of pool (clipped to the pool). Returns how many held
// an expert.
int moe_expert_cache_invalidate(moe_expert_cache *c, int pool, int first, int n);
// Invalidates every slot of every pool whose bytes in bank's arena overlap
// [offset, offset + bytes): what a prefill overlay written there destroys. Returns how many
// held an expert.
int moe_expert_cache_invalidate_bytes(moe_expert_cache *c, enum moe_bank bank, uint64_t offset, uint64_t bytes);

// Statistics of one MoE layer (block index) or one pool; request: since the last
// moe_expert_cache_reset_request, else since init.
moe_cache_stats moe_expert_cache_layer_stats(const moe_expert_cache *c, int layer, bool request);
moe_cache_stats moe_expert_cache_pool_stats(const moe_expert_cache *c, int pool, bool request);
void moe_expert_cache_reset_request(moe_expert_cache *c);

#endif
