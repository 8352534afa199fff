// offload: the GPU expert cache of `--moe-backend offload`.
//
// The routed experts live in host banks (src/moe/expert_banks.h) in page-locked memory that
// the device reads through its mapping; a cache of expert slots on the device serves the
// expert kernels. Layout and policy are the plain C modules': the plan (src/moe/cache_plan.h)
// and the victims per layer, LRU or frecency (src/moe/expert_cache.h), which the device applies
// bit for bit. Per MoE layer a lookup kernel and a copy kernel run on the backend's stream with
// no host synchronisation (so decode is graphed); big steps stream the whole layer into an
// overlay.
// docs/expert-cache.md describes the steps, the overlay and the telemetry.
//
// Ownership: ft_offload owns the host banks, the arenas and the device tables. One engine
// step at a time (the CUDA backend's stream order); statistics may be read between steps.
// Only the CUDA backend includes it; a build without nvcc has no expert cache (cuda_stub.c).
#ifndef FT_CUDA_OFFLOAD_H
#define FT_CUDA_OFFLOAD_H

#include "../../moe/cache_plan.h"
#include "../../moe/cache_stats.h"
#include "../../moe/expert_banks.h"
#include "../../moe/expert_cache.h"
#include "../../moe/hybrid.h"
#include "../../moe/placement.h"
#include "../../moe/route_trace.h"
#include "ft_cuda.h"

typedef struct ft_offload ft_offload;

// Page-locked host memory the device reads through its mapping (portable), in transparent huge
// pages where the kernel and the driver allow (else cudaHostAlloc's), for moe_expert_banks_load.
moe_host_allocator ft_offload_host_allocator(void);

typedef struct ft_offload_params {
    moe_cache_plan_params plan;   // --moe-cache-size, --moe-pool-layout, top-k, running, budget
    bool prefill_serial;          // --disable-moe-prefill-overlap: one overlay buffer, no overlap
    const moe_route_trace *trace; // replay these selections (copied), or NULL: the router's
    enum moe_victims victims;     // --moe-cache-policy: which of a layer's slots a miss takes
    bool self_sizing;             // --moe-layer-slots adaptive: slots move between a pool's layers
                                  // (moe_cache_sizing_default_params's tuning)
} ft_offload_params;

// The cache for geometry g over host banks hb (built from g with ft_offload_host_allocator;
// the offload takes ownership of hb and of nothing else). Plans with p->plan, allocates the
// arenas and tables on the current device. Returns NULL and sets *err (hb is then freed) when
// the plan fails (below the floor, no budget), the arenas do not fit on the device, or the
// trace does not match the model (layers, expert count, top-k).
ft_offload *ft_offload_init(const moe_geometry *g, moe_expert_banks *hb, const ft_offload_params *p, ft_err *err);
void ft_offload_free(ft_offload *o); // NULL: no-op

// The end of a decode token (after the MoE layers of a step that looked experts up): with
// self-sizing layers, every period-th call moves slots between the layers of each pool on the
// device (moe_expert_cache_end_step), enqueued on s; without, nothing.
void ft_offload_end_token(ft_offload *o, ft_cuda_stream *s);
// Slot moves made since the last (re)build, all pools (waits for the device; 0 without self-sizing).
uint64_t ft_offload_slot_moves(ft_offload *o);

// The plan in use (valid until the next rebuild).
const moe_cache_plan *ft_offload_plan(const ft_offload *o);

// Device bytes the offload holds now (arenas, separate overlay, tables).
uint64_t ft_offload_device_bytes(const ft_offload *o);

// Resizes the cache at run time: waits for the device, tears down the pool views and tables,
// frees the arenas and plans again with n_slots (0: from the budget in the params given at
// init) and layout; keeps the host banks, copies nothing (every slot starts empty). CUDA
// graphs that read the old arenas become stale: attached backends drop theirs at their next
// step (ft_offload_generation). Returns false and sets *err, keeping the old cache, when the
// new plan fails or does not fit.
bool ft_offload_rebuild(ft_offload *o, int n_slots, enum moe_pool_layout layout, ft_err *err);
// Counts rebuilds (starts at 1).
uint64_t ft_offload_generation(const ft_offload *o);

// ---------------------------------------------------------------------------------------------
// Telemetry: cumulative counters since init (a rebuild keeps them); a caller diffs two
// snapshots for a request. Reading waits for the device (never call it inside a step).
// FT_MOE_TELEMETRY=0 (read at init) turns them off, to measure what they cost: the lookup
// writes no counters, the copies are not timed, and every counter stays 0.

typedef struct ft_offload_counts {
    uint64_t selections, hits, misses;
    uint64_t cpu_computed;        // misses the CPU computed instead (hybrid)
    uint64_t bytes_copied;        // host-to-device bytes of the expert copies (decode and prefill)
    uint64_t copy_ns;             // device time of those copies (decode copy kernels, prefill
                                  // overlay copies)
    uint64_t steps;               // layer steps (decode) / layers streamed (prefill)
    uint64_t prefill_layers;      // of which through the overlay
    // prefetch: guesses made, of them selected by the step that followed; copies made, of
    // them hit by that step, and their host-to-device bytes (not in bytes_copied)
    uint64_t guesses, guesses_right, prefetched, prefetch_used, prefetch_bytes;
} ft_offload_counts;

// The MoE layers (block indices, ascending) and pools the counters are kept for.
int ft_offload_n_layers(const ft_offload *o);
int ft_offload_layer_block(const ft_offload *o, int i);  // block index of the i-th MoE layer
int ft_offload_n_pools(const ft_offload *o);
int ft_offload_pool_of_layer(const ft_offload *o, int i); // pool serving the i-th MoE layer

// Reads the counters: layers (n_layers entries, may be NULL), pools (n_pools, may be NULL),
// total (may be NULL). Pool counters are the sums over their layers.
void ft_offload_read_counts(ft_offload *o, ft_offload_counts *layers, ft_offload_counts *pools,
                            ft_offload_counts *total);

// The counters as the engine's callers read them (cache_stats.h): *out allocated.
void ft_offload_stats(ft_offload *o, ft_moe_stats *out);

// The measured host-to-device bandwidth of the expert copies so far (bytes_copied / copy_ns
// over decode copies and prefill stream-ins), GB/s; 0 before any copy.
double ft_offload_copy_gbps(ft_offload *o);

// Prints the plan and the offload's memory (host banks, arenas, overlay) to out.
void ft_offload_print(const ft_offload *o, FILE *out);

// ---------------------------------------------------------------------------------------------
// The CUDA backend's side (cuda_backend.c)

// What the expert kernels of one MoE layer step read: per bank the base of the matrices and
// the bytes between consecutive ones, and the ids (slot numbers or expert ids) per selection.
typedef struct ft_offload_view {
    const void *w[MOE_BANK_COUNT];   // device memory
    size_t mat_bytes[MOE_BANK_COUNT];
    const int32_t *ids;              // (n) device memory; -1: a selection the CPU computes (hybrid)
    bool overlay;                    // the whole layer in the overlay (ids are the expert ids)
    // hybrid cache steps (device memory, else NULL): per selection the expert the CPU computes
    // or -1, and how many selections it computes
    const int32_t *cpu_sel, *n_cpu;
} ft_offload_view;

// Work enqueued between a cache step's lookup and its copies (hybrid: the CPU's meeting starts
// before the copies take the bus).
typedef struct ft_offload_hook {
    void (*after_lookup)(void *ctx, const ft_offload_view *v);
    void *ctx;
} ft_offload_hook;

// Device memory for the per-step outputs of steps of up to max_sel selections (called by the
// backend's reserve; keeps the largest).
void ft_offload_reserve(ft_offload *o, int max_sel);

// Does a step of n_tok tokens of MoE layer `block` with n selections go through the overlay
// (more selections than the layer owns slots, or n_tok >= gemm_min_tok with gemm true)?
bool ft_offload_uses_overlay(const ft_offload *o, int block, int n_tok, int n, bool gemm, int gemm_min_tok);

// Enqueues one MoE layer step on stream s: trace replay (sel is rewritten then), then the
// lookup and the copies (cache path) or the overlay stream-in (overlay path), and fills *v for
// the expert kernels that follow on s. sel (n_tok x k) are the router's selections in device
// memory. The expert kernels of the step must be enqueued on s before the next call (an
// overlay buffer is reused once the work enqueued before that call has run). Aborts on a
// programmer error (not a MoE layer, more selections than the reserve).
// hook (NULL: none) runs after a cache step's lookup; with hybrid costs set, the lookup splits
// the misses (moe_expert_cache_step_split) only when hook is given.
void ft_offload_layer_begin(ft_offload *o, int block, int32_t *sel, int n_tok, int k, bool overlay,
                            ft_cuda_stream *s, ft_offload_view *v, const ft_offload_hook *hook);

// A CUDA graph is about to replay a step's cache steps on s (their lookups and copies, which
// the host does not see and which may refill any slot): the host forgets what the prefill
// overlay holds, as a cache step enqueued by the host does, so that the next overlay step
// claims its slots again and streams its layer in.
void ft_offload_step_replayed(ft_offload *o, ft_cuda_stream *s);

// Makes s wait for the fills enqueued so far (hybrid; nothing otherwise). The backend calls it
// at a step's end (inside a capture: the fill stream's work joins the graph) and before one
// begins; a cache step of a block at or before the last one with a fill calls it itself.
void ft_offload_join_fills(ft_offload *o, ft_cuda_stream *s);

// Prefetch (decode): while a cache step's experts compute, the backend predicts the next MoE
// layer's experts and the offload copies the predicted ones that are not resident into that
// layer's slots (the C reference's moe_expert_cache_prefetch), on a stream of its own; the
// layer's next step waits for those copies before its lookup, which then counts how many of
// the guesses it selected and how many of the copies it hit.
// ft_offload_enable_prefetch: cache steps record where a prefetch may start (after their
// lookup) and where its copies may (after their own). ft_offload_prefetch_begin, right after a
// cache step's ft_offload_layer_begin: NULL when no prefetch can follow it (prefetch not
// enabled, not a cache step, `block` not a MoE layer of the cache, a route trace replayed,
// hybrid costs set); else the prefetch stream, ordered after that step's lookup, and in *guess
// a device buffer of ft_offload_reserve's size where the predictor writes its guesses on that
// stream. Then ft_offload_prefetch(o, block, n, max_copies) enqueues the prefetch of the n
// guesses (best first) after them, at most max_copies copies. ft_offload_prefetch_join_guesses makes s wait for the predictor's launches (before s
// overwrites what they read); layer_begin and ft_offload_join_prefetch make s wait for all of
// it (the backend calls the latter at a step's end, so a capture holds the prefetch stream's
// work).
void ft_offload_enable_prefetch(ft_offload *o);
ft_cuda_stream *ft_offload_prefetch_begin(ft_offload *o, int block, int32_t **guess);
void ft_offload_prefetch(ft_offload *o, int block, int n, int max_copies);
void ft_offload_prefetch_join_guesses(ft_offload *o, ft_cuda_stream *s);
void ft_offload_join_prefetch(ft_offload *o, ft_cuda_stream *s);

// --moe-backend hybrid: decode steps given a hook split their misses by costs (g.n_layers
// entries, in the order of the geometry's layers), which the device reads at run time: a later
// call changes them for captured graphs too. Waits for the device.
void ft_offload_set_hybrid_costs(ft_offload *o, const moe_hybrid_costs *costs);
// Seconds the decode copy kernel takes for experts 0 .. n-1 of the i-th MoE layer (best of
// five, into a temporary; waits for the device): what the hybrid split's copy cost is measured by.
double ft_offload_time_copies(ft_offload *o, int i, int n);
// The host banks (the CPU computes its share from them).
const moe_expert_banks *ft_offload_host_banks(const ft_offload *o);

// ---------------------------------------------------------------------------------------------
// For tests: the device tables read back (waits for the device).

typedef struct ft_offload_debug {
    int n_copies;               // of the last cache-path step
    int32_t *copy_expert;       // (n_copies) in the order of the C reference's copies
    int32_t *copy_slot;
    int32_t *slots;             // (n of the last step) the slot of each selection
    int32_t *cpu_sel;           // (n) hybrid: the expert of each selection the CPU computes, or -1
    int n_cpu;                  // hybrid: how many selections the CPU computes
    int n_fill;                 // hybrid: the last cache step's fills (its CPU experts' copies)
    int32_t *fill_expert, *fill_slot;
    int n_prefetch;             // the last prefetch's copies, until the step after it counts them
    int32_t *prefetch_expert, *prefetch_slot;
    int n_pools;
    int *n_slots;               // (n_pools)
    int32_t **slot_expert;      // (n_pools)(n_slots) -1: empty
    int32_t **slot_owner;       // (n_pools)(n_slots) the block owning each slot
    uint64_t **stamp;           // (n_pools)(n_slots)
    uint64_t *clock;            // (n_pools)
} ft_offload_debug;

// Fills d (allocated; free with ft_offload_debug_free); n is the last step's selection count.
void ft_offload_debug_read(ft_offload *o, int n, ft_offload_debug *d);
void ft_offload_debug_free(ft_offload_debug *d);
// The device base of bank b's arena (pool views at the plan's offsets; NULL before init).
const void *ft_offload_arena(const ft_offload *o, enum moe_bank b);

#endif
