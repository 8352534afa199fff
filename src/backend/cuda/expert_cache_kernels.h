// expert_cache_kernels.h: the device side of the GPU expert cache (expert_cache.cu), as plain C
// launchers for offload.c (internal to src/backend/cuda/). Every pointer is device memory
// unless said otherwise; every launcher enqueues on stream s and returns at once.
#ifndef FT_CUDA_EXPERT_CACHE_KERNELS_H
#define FT_CUDA_EXPERT_CACHE_KERNELS_H

#include "ft_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

// Counters kept per MoE layer (u64 each), in this order.
enum { FT_CACHE_STAT_SELECTIONS, FT_CACHE_STAT_HITS, FT_CACHE_STAT_MISSES, FT_CACHE_STAT_BYTES, FT_CACHE_STAT_COPY_NS,
       FT_CACHE_STAT_STEPS, FT_CACHE_STAT_PREFILL_LAYERS, FT_CACHE_STAT_COPY_BYTES_DECODE, FT_CACHE_STAT_CPU,
       // prefetch: guesses made for the layer, of them selected by its step, copies the
       // prefetch made, of them hit by the step (the rest were wasted)
       FT_CACHE_STAT_PF_GUESSES, FT_CACHE_STAT_PF_RIGHT, FT_CACHE_STAT_PF_COPIES, FT_CACHE_STAT_PF_USED,
       FT_CACHE_STAT_COUNT };

// Frecency victims (src/moe/frecency.h) for one layer: its step count u (1) and, per expert of
// the layer, its uses c, last use l and history h. All NULL: LRU victims.
typedef struct ft_cuda_cache_frecency {
    uint64_t *steps;
    uint32_t *count;
    uint64_t *last, *hist;
} ft_cuda_cache_frecency;

// Self-sizing layers (the C reference's moe_expert_cache_end_step contract) for one layer: the
// pool's slot owners (a layer's slots are those it owns, found in slot order among the pool's
// slots) and the layer's shadow tags. slot_owner NULL: fixed ranges (first, n_own).
typedef struct ft_cuda_cache_sizing {
    const int32_t *slot_owner; // (pool_slots) the block owning each slot
    int pool_slots;
    int block;                 // the layer's block index
    int ghost_depth;           // G
    uint32_t *evictions;       // (1) the layer's eviction count
    uint32_t *tail, *ghost;    // (G) hits by position from the LRU end, misses by ghost depth
    uint32_t *ghost_tag;       // (the layer's experts) its eviction count at eviction, 0: none
} ft_cuda_cache_sizing;

// One layer step of the C reference (src/moe/expert_cache.h) on the device tables, in one CTA:
// moe_expert_cache_step, or with costs moe_expert_cache_step_split (hybrid).
typedef struct ft_cuda_cache_lookup_params {
    const int32_t *sel;        // (n) the step's selections (expert ids), duplicates allowed
    int n;                     // 1 .. the layer's own slots
    int32_t *slots;            // (n) out: the slot of each selection
    int32_t *map;              // (n_expert) the layer's map: expert -> slot in the pool, -1
    int32_t *slot_expert;      // (pool slots) the expert a slot holds (of the range's layer), -1
    uint64_t *stamp;           // (pool slots) age stamps
    uint64_t *clock;           // (1) the pool's clock
    int first, n_own;          // the layer's range of slots (self-sizing: 0, the most it may own)
    int32_t *copy_expert;      // (n) out: the copies, in order
    int32_t *copy_slot;        // (n)
    int32_t *n_copies;         // (1) out
    uint64_t *stats;           // (FT_CACHE_STAT_COUNT) the layer's counters, or NULL (telemetry off)
    uint64_t copy_bytes;       // bytes one copy moves (the layer's native expert bytes)
    uint64_t *copy_span;       // (3) reset here for the copy kernel's timing
    // hybrid (all set, or all NULL): costs (3 words: moe_hybrid_costs, read at run time so the
    // host may update them between steps); cpu_sel (n) out: the expert of each selection the
    // CPU computes (its slot is -1), -1 for the others; n_cpu (1) out: how many selections the
    // CPU computes; the fills (the CPU's experts' copies, for another stream): fill_expert,
    // fill_slot (n) and their count n_fill (1). n_copies then counts the step's own copies.
    const uint32_t *costs;
    int32_t *cpu_sel;
    int32_t *n_cpu;
    int32_t *fill_expert, *fill_slot, *n_fill;
    // the prefetch made for this step (NULL: none): its copies' slots (*pf_n of them) and its
    // n_guess guesses, counted against the step's selections (stats: PF_*); *pf_n is reset
    const int32_t *pf_slot, *pf_guess;
    int32_t *pf_n;
    int n_guess;
    ft_cuda_cache_frecency frecency;
    ft_cuda_cache_sizing sizing;
} ft_cuda_cache_lookup_params;
void ft_cuda_cache_lookup(const ft_cuda_cache_lookup_params *p, ft_cuda_stream *s);

// A prefetch of the C reference (moe_expert_cache_prefetch) on the device tables, in one CTA:
// t = clock + 1; the distinct unmapped guesses in order of first appearance take the range's
// slots with stamp < t by (stamp, index) (frecency: by (empty first, score, stamp, index)),
// never a slot holding a guess, until none is left;
// each is mapped with stamp t and listed as a copy. Resident guesses keep their stamps.
typedef struct ft_cuda_cache_prefetch_params {
    const int32_t *guess;      // (n) the predicted experts, duplicates allowed
    int n;                     // 1 .. the layer's own slots
    int max_copies;            // at most this many copies: the first unmapped guesses
    int32_t *map, *slot_expert;
    uint64_t *stamp, *clock;
    int first, n_own;
    int32_t *copy_expert, *copy_slot, *n_copies; // out: (n), (n), (1)
    uint64_t *stats;           // the layer's counters (PF_GUESSES, PF_COPIES), or NULL
    ft_cuda_cache_frecency frecency; // read only: a prefetch is not a step
    ft_cuda_cache_sizing sizing;     // its victims become ghosts; it counts no shadow tags
} ft_cuda_cache_prefetch_params;
void ft_cuda_cache_prefetch(const ft_cuda_cache_prefetch_params *p, ft_cuda_stream *s);

// The end of a decode token with self-sizing layers (moe_expert_cache_end_step) for one pool,
// in one CTA: every period-th call moves slots between the pool's layers and halves their
// counters. Per-block arrays are indexed by block; tail and ghost are (blocks, G).
typedef struct ft_cuda_cache_rebalance_params {
    const int32_t *layers;        // (n_layers) the pool's blocks, ascending
    int n_layers;                 // at most FT_CUDA_CACHE_POOL_LAYERS_MAX
    int32_t *slot_owner, *slot_expert, *slot_map_base; // (n_slots)
    uint64_t *stamp;              // (n_slots)
    int n_slots;
    uint64_t *tokens, *moves;     // (1) the pool's end-of-token calls and slot moves so far
    int32_t *own_n;               // (blocks) the slots each layer owns
    const int32_t *n_expert, *map_base; // (blocks)
    int32_t *map;
    uint32_t *evictions, *tail, *ghost, *ghost_tag;
    int ghost_depth, period, max_moves, min_gain, floor;
    ft_cuda_cache_frecency frecency; // whole arrays (steps: per block; the others: as map), or NULL
} ft_cuda_cache_rebalance_params;
#define FT_CUDA_CACHE_POOL_LAYERS_MAX 1024
void ft_cuda_cache_rebalance(const ft_cuda_cache_rebalance_params *p, ft_cuda_stream *s);

// The copies of a lookup: bank b of copy j moves bytes[b] from src[b] + copy_expert[j] *
// bytes[b] (mapped host memory) to dst[b] + copy_slot[j] * stride[b]. A fixed grid reads
// *n_copies on the device; its span (device clock) is added to *copy_ns.
// The prefill overlay's stream-in sets map: only the experts e the layer's map holds in slots
// are copied, from there (slot_src[b] + map[e] * slot_stride[b], device memory; the copy engine
// brings the others); it lists no copies (n_copies, copy_expert, copy_slot NULL): copy j is
// expert j into row j, j < n_fixed.
typedef struct ft_cuda_cache_copy_params {
    const int32_t *n_copies, *copy_expert, *copy_slot;
    const uint8_t *src[3];     // device addresses of the layer's host bank arrays
    uint64_t bytes[3];         // bytes of one expert in each bank
    uint8_t *dst[3];           // the pool's view in each bank's arena
    uint64_t stride[3];
    uint64_t *copy_span;       // (3) start, end, blocks done
    uint64_t *copy_ns;         // the layer's FT_CACHE_STAT_COPY_NS counter, or NULL (not timed)
    int n_fixed;               // the copies' count when n_copies is NULL
    const int32_t *map;        // the layer's map (expert -> slot, -1), or NULL: every copy from the host
    const uint8_t *slot_src[3];
    uint64_t slot_stride[3];
} ft_cuda_cache_copy_params;
// CTAs of the copy kernel (0: 2 per SM).
void ft_cuda_cache_copy(const ft_cuda_cache_copy_params *p, int n_ctas, ft_cuda_stream *s);

// A prefill's fills (offload.c's overlay steps): expert[j] of a layer, which the overlay holds
// at row expert[j] (bytes[b] apart), is copied into slot[j] of the layer's pool (an empty one)
// and mapped there, as a step of the layer that used them would: t = ++clock, every fill's
// stamp t. One CTA per fill; the first also writes the tables.
#define FT_CUDA_CACHE_FILL_MAX 256
typedef struct ft_cuda_cache_fill_params {
    int n;                     // 1 .. FT_CUDA_CACHE_FILL_MAX
    int16_t expert[FT_CUDA_CACHE_FILL_MAX];
    int32_t slot[FT_CUDA_CACHE_FILL_MAX];
    const uint8_t *src[3];     // the overlay buffer in each bank
    uint64_t bytes[3];         // bytes of one expert in each bank
    uint8_t *dst[3];           // the pool's view in each bank's arena
    uint64_t stride[3];
    int32_t *map;              // the layer's map (expert -> slot in the pool)
    int32_t *slot_expert;      // the pool's reverse map
    uint64_t *stamp;           // the pool's stamps
    uint64_t *clock;           // the pool's clock
} ft_cuda_cache_fill_params;
void ft_cuda_cache_fill(const ft_cuda_cache_fill_params *p, ft_cuda_stream *s);

// Unmaps slots [first, first + n) of a pool: stamps to 0, their experts' map entries (at
// map[slot_map_base[s] + expert]) to -1.
void ft_cuda_cache_invalidate(int32_t *slot_expert, uint64_t *stamp, const int32_t *slot_map_base, int32_t *map,
                              int first, int n, ft_cuda_stream *s);

// Route-trace replay: sel[t k + j] = the trace's selection j of sequence t % n_seq at step
// *step, layer li; the last traced layer then advances *step (mod n_steps).
typedef struct ft_cuda_cache_trace_params {
    int32_t *sel;
    int n_tok, k;
    const uint16_t *trace;     // (n_steps, n_layers, n_seq, k)
    int n_layers, li, n_seq;
    int64_t n_steps;
    int64_t *step;             // (1)
    int last;
} ft_cuda_cache_trace_params;
void ft_cuda_cache_trace(const ft_cuda_cache_trace_params *p, ft_cuda_stream *s);

// Device-clock timing of work on a stream: start writes the clock to *t0; stop adds the
// time since *t0 to *acc.
void ft_cuda_cache_timer_start(uint64_t *t0, ft_cuda_stream *s);
void ft_cuda_cache_timer_stop(const uint64_t *t0, uint64_t *acc, ft_cuda_stream *s);
// *acc += v (counters of the prefill path).
void ft_cuda_cache_add(uint64_t *acc, uint64_t v, ft_cuda_stream *s);

// Host memory the device reads through its mapping; NULL when it cannot be had. *dev: the
// device address of the first byte.
void *ft_cuda_host_alloc_mapped(size_t n, void **dev);
// Makes the caller's host memory [p, p + n) page-locked and mapped for the device
// (cudaHostRegister, portable); false when the driver refuses. ft_cuda_host_unregister undoes
// it: false where p was not registered so (cudaHostAlloc's memory, for one).
bool ft_cuda_host_register_mapped(void *p, size_t n);
bool ft_cuda_host_unregister(void *p);
// The device address of mapped host memory from ft_cuda_host_alloc_mapped or registered.
void *ft_cuda_host_device_pointer(void *host);
// A 2-D host-to-device copy: height rows of width bytes, spitch / dpitch apart.
void ft_cuda_memcpy_2d_h2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                           ft_cuda_stream *s);
// Work enqueued on s after this waits for the last record of e.
void ft_cuda_stream_wait_event(ft_cuda_stream *s, ft_cuda_event *e);
// Events without timing, for ordering only.
ft_cuda_event *ft_cuda_event_init_sync_only(void);

#ifdef __cplusplus
}
#endif

#endif
