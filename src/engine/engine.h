// engine: the forward pass driver and generation loop over one sequence.
//
// An engine is a batch engine (batch.h) with one sequence: a backend, a KV cache and
// activation buffers sized once for its batch (nothing is allocated per token).
// ft_engine_eval runs tokens through the model at the sequence's current position: a prompt
// goes through every layer in batches of up to n_batch tokens (prefill), a generated token
// alone (decode). Not thread-safe: one caller per engine; several engines may share a model.
#ifndef FT_ENGINE_H
#define FT_ENGINE_H

#include "../model/model.h"
#include "sampler.h"

#include <stdio.h>

typedef struct ft_engine ft_engine;

// Where the routed experts of a CUDA engine live and run (--moe-backend):
//   fused:   every expert resident in device memory with the rest of the model;
//   offload: experts in page-locked host banks, a GPU expert cache in front of them (src/moe/);
//   cpu:     experts computed on the CPU from host memory, everything else on the GPU;
//   auto:    fused when the whole model fits the memory budget, else offload.
// The CPU device ignores it (everything runs on the CPU).
enum ft_moe_backend { FT_MOE_BACKEND_AUTO, FT_MOE_BACKEND_FUSED, FT_MOE_BACKEND_OFFLOAD, FT_MOE_BACKEND_CPU };

typedef struct ft_engine_params {
    int n_threads;          // CPU threads (default: ft_engine_default_threads)
    int n_ctx;              // positions in the KV cache (0: the model's training context)
    int n_batch;            // tokens per prefill step (a prompt is cut into chunks of n_batch)
    int n_seq;              // sequences with a KV cache at once (batch.h; ft_engine: 1)
    enum ft_type kv_type;   // FT_TYPE_F16 or FT_TYPE_Q8_0
    bool reference;         // every op on its scalar reference path (also FT_REFERENCE=1)
    enum ft_placement device; // FT_PLACEMENT_CPU (default) or FT_PLACEMENT_CUDA (device 0)
    double memory_ratio;    // CUDA: share of the device's free memory the plan may use (0: 0.9)
    size_t gpu_memory_limit;  // CUDA: cap on everything ft allocates on the device, bytes (0: none)
    enum ft_moe_backend moe_backend;
    int moe_cache_size;       // offload: expert slots (0: sized from the budget)
    int moe_pool_layout;      // offload: enum moe_pool_layout (exact or uniform)
    int64_t kv_reserve_tokens;// offload: KV tokens reserved before the cache is sized (0: n_seq x n_ctx)
    bool moe_prefill_serial;  // offload: prefill layers stream without double-buffering
    int cuda_graph_max_bs;    // CUDA: largest step (tokens) captured in a graph; 0: none; -1: all
    const char *moe_route_trace; // benchmarks: replay this route trace (route_trace.h) instead of routing
} ft_engine_params;

ft_engine_params ft_engine_default_params(void);

// Parses "auto", "fused", "offload" or "cpu". Returns false if none.
bool ft_moe_backend_from_name(const char *name, enum ft_moe_backend *out);
const char *ft_moe_backend_name(enum ft_moe_backend b);

// The --device default: cuda when a CUDA device is found, else cpu.
enum ft_placement ft_engine_default_device(void);
// Parses "cpu" or "cuda". Returns false if neither.
bool ft_engine_device_from_name(const char *name, enum ft_placement *out);

// CPU threads when none are asked for: the physical cores on the CPU device. A CUDA engine's
// threads compute only the experts of --moe-backend cpu, and while they do, the thread driving
// the GPU, the driver's and the system's need a core too: its pool's threads spin, so one that
// is preempted stalls the layer; one core is left to them (docs/performance.md, cpu mode threads).
int ft_engine_default_threads(enum ft_placement device);

// The parameters as an engine will use them: defaults filled in (n_ctx, n_batch, n_seq,
// n_threads, FT_REFERENCE), the context checked against the model's. Returns false and sets
// *err when the context exceeds the model's.
bool ft_engine_params_resolve(const ft_model *m, ft_engine_params *p, ft_err *err);

// Prepares the model for engines with params p: for the CUDA device, prints the memory plan
// (weights, KV cache, workspace against the device's free memory) on stderr, and when it fits
// uploads the weights (ft_model_upload); for the CPU, nothing. Call once, before
// ft_engine_init. Returns false and sets *err when the plan does not fit (nothing allocated)
// or the upload fails.
bool ft_engine_place_model(ft_model *m, const ft_engine_params *p, ft_err *err);

// Returns NULL and sets *err when the parameters do not fit the model (context beyond the
// model's limit, a KV type its head size cannot hold).
ft_engine *ft_engine_init(const ft_model *m, const ft_engine_params *p, ft_err *err);
void ft_engine_free(ft_engine *e); // NULL is a no-op

// Evaluates n tokens at the current position and advances it. Returns the next-token logits
// after the last one (n_vocab floats, valid until the next call), or NULL and sets *err when
// the tokens do not fit in the remaining context or an id is outside the vocabulary.
const float *ft_engine_eval(ft_engine *e, const int32_t *tokens, int n, ft_err *err);

// The smallest routing gap (see ft_backend.min_route_gap) since the sequence was reset: how
// close any routing decision came to a tie.
float ft_engine_route_gap(const ft_engine *e);

// Forgets the sequence (position back to 0).
void ft_engine_reset(ft_engine *e);
int ft_engine_pos(const ft_engine *e);
int ft_engine_n_ctx(const ft_engine *e);
const ft_model *ft_engine_model(const ft_engine *e);

// ---------------------------------------------------------------------------------------------
// Generation

// Called with each generated token id; return false to stop.
typedef bool (*ft_token_fn)(void *ctx, int32_t token);

typedef struct ft_generate_stats {
    int n_prompt, n_gen;
    double prompt_s, gen_s;       // wall time of prefill and of decoding
    bool stopped_eog;             // ended on an end-of-generation token
} ft_generate_stats;

// Evaluates the prompt, then samples up to n_predict tokens, calling on_token for each (an
// end-of-generation token ends it without being passed on). eog lists the end-of-generation
// ids (n_eog may be 0). Returns false and sets *err when the prompt does not fit.
bool ft_generate(ft_engine *e, ft_sampler *s, const int32_t *prompt, int n_prompt, int n_predict,
                 const int32_t *eog, int n_eog, ft_token_fn on_token, void *ctx,
                 ft_generate_stats *stats, ft_err *err);

// ---------------------------------------------------------------------------------------------
// Expert-cache telemetry (--moe-backend offload; moe_stats.c)
//
// Cumulative counters of the GPU expert cache that ft_engine_place_model gave the model, per
// MoE layer, per pool and in all; a rebuild keeps them. Two snapshots taken around a run give
// the run's figures (ft_moe_stats_sub). Reading waits for the device: call between steps.

typedef struct ft_moe_counts {
    uint64_t selections, hits, misses;
    uint64_t bytes_copied;   // host-to-device bytes of expert copies
    uint64_t copy_ns;        // device time of those copies
} ft_moe_counts;

typedef struct ft_moe_stats {
    int n_slots;             // --moe-cache-size in use
    bool uniform;            // --moe-pool-layout uniform
    uint64_t cache_bytes;    // the arenas
    int n_layers;            // MoE layers
    int *layer_block;        // (n_layers) block index
    int *layer_pool;         // (n_layers) the pool serving it
    ft_moe_counts *layers;   // (n_layers)
    int n_pools;
    int *pool_slots;         // (n_pools)
    int *pool_layers;        // (n_pools) layers it serves
    ft_moe_counts *pools;    // (n_pools)
    ft_moe_counts total;
} ft_moe_stats;

// Does the model have an expert cache (placed with --moe-backend offload)?
bool ft_moe_cache_present(const ft_model *m);
// After ft_engine_place_model for the CUDA device: are the routed experts left in the file's
// mapping for the CPU to compute (--moe-backend cpu, or auto for types without CUDA kernels)?
bool ft_engine_experts_on_cpu(const ft_model *m);
// Reads the counters into *out (allocated; free with ft_moe_stats_free). Returns false, *out
// zeroed, when the model has no expert cache.
bool ft_moe_stats_read(const ft_model *m, ft_moe_stats *out);
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
// Prints one line per pool and one in all: hit rate, misses, host-to-device bytes (and per
// token when n_tokens > 0) and the copies' GB/s.
void ft_moe_stats_print(const ft_moe_stats *s, int n_tokens, FILE *out);
// Resizes the expert cache to n_slots (same layout), keeping the host banks; every slot starts
// empty. Returns false and sets *err (the old cache stays) when there is no cache or the plan
// fails (below the floor, does not fit). Not while a step runs.
bool ft_moe_cache_rebuild(const ft_model *m, int n_slots, ft_err *err);

#endif
