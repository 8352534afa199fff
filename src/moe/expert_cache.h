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
// Self-sizing layers (moe_cache_policy_params.self_sizing, issue 23): a layer then owns a set of
// its pool's slots that changes at run time, moved between the pool's layers by shadow tags that
// estimate what one slot more or fewer would buy each layer; the contract is above
// moe_expert_cache_end_step. Off, ownership is the fixed ranges above, and the decisions are
// the same as before the policy existed.
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

// Which of a layer's slots a miss takes (the policy's step 2, below).
enum moe_victims {
    MOE_VICTIMS_LRU,       // the least recently used
    MOE_VICTIMS_FRECENCY,  // the fewest uses lately and overall (the score: frecency.h)
};

// The replacement policy's parameters.
typedef struct moe_cache_policy_params {
    enum moe_victims victims;
    bool self_sizing;     // move slots between the layers of a pool (else fixed ranges)
    int ghost_depth;      // G: shadow tags per layer (ghost depths counted) and LRU-end positions
    int period;           // tokens (moe_expert_cache_end_step calls) between two rebalances
    int max_moves;        // at most this many slot moves per pool and rebalance
    int min_gain;         // a move needs the receiver's gain above the donor's loss by more than this
} moe_cache_policy_params;

// Fixed ranges (self_sizing false); the sizing fields hold moe_cache_sizing_default_params's.
moe_cache_policy_params moe_cache_policy_default_params(void);
// Self-sizing with the tuned parameters (their reasons: expert_cache.c).
moe_cache_policy_params moe_cache_sizing_default_params(void);

// A cache with every slot empty, for plan (which g's layers it was made from). The cache keeps
// its own copy of what it needs from both. Free with moe_expert_cache_free (NULL: no-op).
// moe_expert_cache_init is moe_expert_cache_init_policy with the default (fixed) policy; the
// latter asserts 1 <= ghost_depth <= 64, period >= 1, max_moves >= 0 and min_gain >= 0.
moe_expert_cache *moe_expert_cache_init(const moe_cache_plan *plan, const moe_geometry *g);
moe_expert_cache *moe_expert_cache_init_policy(const moe_cache_plan *plan, const moe_geometry *g,
                                               const moe_cache_policy_params *policy);
void moe_expert_cache_free(moe_expert_cache *c);

// The policy, exactly (so two implementations agree bit for bit):
//
//   Clock. Each pool has a 64-bit clock, 0 at init. A step of one of its layers first advances
//     it: t = ++clock. Steps of different layers of one pool share the clock.
//   Ranges. Layer L of the pool owns slots [first_L, first_L + n_L) (above); everything below
//     concerns L's range only. With self-sizing, L's range is the slots whose owner is L (at
//     init the same ranges; moe_expert_cache_end_step moves them), in slot order.
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
//   Frecency victims (victims = MOE_VICTIMS_FRECENCY; MOE_FRECENCY_WINDOW = 8): each layer counts
//     its steps, u_L (advanced at the start of each of its steps, before step 1; prefetch does not
//     advance it), and each (L, e) its uses c (the steps of L that selected e), the step of its
//     last use l and a 64-bit history h (bit i: e was selected at step l - i), all updated at
//     the start of the step for its distinct experts. A slot holding (L, e) then scores
//     score = 8 w + floor(80 c / u), where u = u_L, w = the number of the 8 steps u - 1 .. u - 8
//     in which e was selected (bits 1 .. 8 of h << (u - l); none when u - l >= 64), and
//     floor(80 c / u) = 0 while u = 0. The victims are step 2's slots ordered by (empty before
//     full, score, stamp, slot index) ascending instead; the rest of the step is unchanged.
//     Prefetch orders its victims the same way (with u as it stands).
//   Statistics. selections += n; misses += k; hits += n - k (a repeat of a missed expert in the
//     same step is a hit: it costs no copy); bytes_copied += k x the layer's native expert
//     bytes over the banks (what the copies move: the pool's slot bytes in an exact pool, less
//     than its padded stride in a uniform one). Kept
//     per layer and per pool, cumulative and per request (moe_expert_cache_reset_request).
//   Invalidation of slots (the prefill overlay overwrites their bytes) unmaps them and sets
//     their stamps to 0; it does not touch the clock or the statistics.
//
//
//   Shadow tags (self-sizing only; computed before the step changes anything, once per distinct
//     expert of the step; by stamp whatever the victims): each layer counts its evictions, ev_L;
//     evicting (L, e) sets the ghost tag g[L][e] = ++ev_L (a slot taken from L by a move evicts
//     too). A selected expert
//     that is mapped in slot s counts a hit at LRU-end position p = the number of L's slots with
//     stamp < stamp[s] (empty slots included): tail[L][p] += 1 when p < G. One that is unmapped,
//     with g = g[L][e] > 0 and depth d = ev_L - g < G, counts ghost[L][d] += 1. So tail[L][p]
//     estimates the copies L's (p+1)-th slot from the LRU end saves and ghost[L][d] those its
//     (d+1)-th extra slot would save.
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

// Prefetch for MoE layer `layer` (block index): the experts a predictor guessed for its next
// step, duplicates allowed. t = ++clock of the pool; the distinct unmapped experts in order of
// first appearance take victims as a step's misses do (the layer's slots with stamp < t by
// (stamp, slot index): empty first, then least recently used), except that a slot holding a
// guessed expert is never a victim, and are mapped with stamp t, until no victim is left;
// experts already mapped are left as they are (stamps unchanged); at most max_copies of the misses are copied
// (the first: a predictor lists its best guesses first). Writes the copies (room for n) and their count. No statistics change (what was
// used is the caller's to count against the step that follows); with self-sizing, victims become
// ghosts as on any eviction, but the guesses count no shadow tags. Returns false and sets *err
// (changing nothing) when layer is not a MoE layer or an id is out of range.
// The prefetch's copies a layer's step takes by default: one. A wasted copy costs the bus a whole expert, and
// the window a layer's compute leaves the bus is about one expert's copy on the shapes measured
// (docs/expert-cache.md); past it, guesses that miss delay the next layer's own misses.
enum { MOE_PREFETCH_DEFAULT_COPIES = 1 };
bool moe_expert_cache_prefetch(moe_expert_cache *c, int layer, const int32_t *experts, int n, int max_copies,
                               moe_cache_copy *copies, int *n_copies, ft_err *err);

// A slot moved between two layers of a pool by self-sizing.
typedef struct moe_cache_move {
    int pool, slot;
    int from_layer, to_layer;  // block indices
    int evicted_expert;        // what the slot held for from_layer, -1 when empty
} moe_cache_move;

// The end of a decode token (every MoE layer's step of it done). With self-sizing, every
// `period`-th call rebalances each pool (in pool order):
//   1. For m = 0 .. max_moves-1: the receiver R is the pool's layer with the largest
//      ghost[R][given_R] among those with given_R < G, taken_R = 0 and fewer slots than experts;
//      the donor D (!= R) the one with the smallest tail[D][taken_D] among those with taken_D < G,
//      given_D = 0 and more slots than the floor (plan->floor_per_layer); ties to the lower block
//      index. given/taken count this rebalance's moves, so R's next candidate slot is its next
//      ghost depth and D's next the next position from its LRU end. Stop when there is no pair
//      or ghost[R][given_R] <= tail[D][taken_D] + min_gain. Else move D's first victim (step 2's
//      order over all its slots: empty first, then by stamp, or frecency's score then stamp;
//      ties to the lower slot index) to R: the expert it
//      held is unmapped and becomes D's ghost (ev_D and g as for an eviction), its stamp becomes
//      0 (empty), its owner R; a move is written to moves, in order.
//   2. Then every tail and ghost counter of the pool is halved (integer shift), so the estimates
//      follow the recent tokens.
// Returns the number of moves written (at most max_moves x pools; moves may be NULL to drop
// them). Without self-sizing it only counts the token and returns 0.
int moe_expert_cache_end_step(moe_expert_cache *c, moe_cache_move *moves);
// Slot moves made since init in pool (self-sizing).
uint64_t moe_expert_cache_pool_moves(const moe_expert_cache *c, int pool);
// Slots MoE layer `layer` owns now; the layer owning slot s of pool.
int moe_expert_cache_layer_slot_count(const moe_expert_cache *c, int layer);
int moe_expert_cache_slot_owner(const moe_expert_cache *c, int pool, int slot);

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
// The range of slots MoE layer `layer` (block index) owns in its pool (fixed ranges only:
// asserts that self-sizing is off).
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
