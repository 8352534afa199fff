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

// Where the CPU reads the weights it computes from (the CPU device; cpu mode's experts):
// streamed every decode step, they read faster from memory in huge pages than from the file's
// 4 KiB pages (model.h: ft_model_copy_into_memory), at the price of the memory they take.
enum ft_weights_memory {
    FT_WEIGHTS_AUTO,   // copied when they fit the available memory with a GiB to spare and the
                       // kernel gives huge pages, else mapped
    FT_WEIGHTS_MAPPED, // the file's mapping (--mmap)
    FT_WEIGHTS_COPIED, // copied; a plan whose copy does not fit is an error (--no-mmap)
};

typedef struct ft_engine_params {
    int n_threads;          // CPU threads (default: ft_engine_default_threads)
    int n_ctx;              // positions of one sequence at most (0: the model's training context)
    int n_batch;            // tokens per prefill step (a prompt is cut into chunks of n_batch)
    bool n_batch_auto;      // n_batch is the command's default: engine_prefill_batch may raise it
    int n_seq;              // sequences open at once (batch.h; ft_engine: 1)
    bool n_ctx_default;     // n_ctx is the model's context by default: shrunk to what memory holds
    int64_t num_tokens;     // KV positions all sequences share (0: engine_kv_blocks's default)
    bool prefix_cache;      // keep finished prompts' KV blocks for later prompts (batch.h)
    int ctx_checkpoints;    // with recurrent layers: state snapshots the prefix cache keeps (batch.h)
    enum ft_type kv_type;   // FT_TYPE_F16 or FT_TYPE_Q8_0
    bool reference;         // every op on its scalar reference path (also FT_REFERENCE=1)
    enum ft_placement device; // FT_PLACEMENT_CPU (default) or FT_PLACEMENT_CUDA (device 0)
    double memory_ratio;    // CUDA: share of the device's free memory the plan may use (0: 0.9)
    size_t gpu_memory_limit;  // CUDA: cap on all the process holds on the device, its context too, bytes (0: none)
    enum ft_moe_backend moe_backend;
    int moe_cache_size;       // offload: expert slots (0: sized from the budget)
    int moe_pool_layout;      // offload: enum moe_pool_layout (exact or uniform)
    int64_t kv_reserve_tokens;// offload: KV tokens reserved before the cache is sized (0: n_seq x n_ctx)
    bool moe_prefill_serial;  // offload: prefill layers stream without double-buffering
    bool moe_cache_lru;       // offload: a miss takes the least recently used slot, not frecency's
    bool moe_self_sizing;     // offload: slots move between the layers of a pool at run time
    int cuda_graph_max_bs;    // CUDA: largest step (tokens) captured in a graph; 0: none; -1: all
    const char *moe_route_trace; // benchmarks: replay this route trace (route_trace.h) instead of routing
    const char *bw_profile;   // hybrid: this bandwidth profile (bw_profile.h) instead of the machine's own
    bool print_plan;          // print the memory plan on stderr when placing the model
    bool prefault;            // read the mapping into memory where the CPU computes from it
    enum ft_weights_memory weights_memory; // where the CPU reads those weights: copied or mapped
    ft_progress_fn progress;  // long start-up steps (upload, prefault) report here when set
    void *progress_ctx;
} ft_engine_params;

ft_engine_params ft_engine_default_params(void);


// The --device default: cuda when a CUDA device is found, else cpu.
enum ft_placement ft_engine_default_device(void);
// Parses "cpu" or "cuda". Returns false if neither.
bool ft_engine_device_from_name(const char *name, enum ft_placement *out);

// CPU threads when none are asked for: the physical cores on the CPU device, one fewer on a
// CUDA engine, whose threads compute only --moe-backend cpu's experts: the thread driving the
// GPU, the driver's and the system's need a core too, and a preempted pool thread stalls the
// layer.
int ft_engine_default_threads(enum ft_placement device);

// The parameters as an engine will use them: defaults filled in (n_ctx, n_batch, n_seq,
// n_threads, FT_REFERENCE), the context checked against the model's. Returns false and sets
// *err when the context exceeds the model's.
bool ft_engine_params_resolve(const ft_model *m, ft_engine_params *p, ft_err *err);

// An engine for m on p->device: the backend, the weights placed on it (for a GPU, the memory
// plan checked first: printed with print_plan, nothing allocated when it does not fit), the
// KV cache and the buffers. Returns NULL and sets *err when the parameters do not fit the
// model (context beyond the model's limit, a KV type its head size cannot hold), the device
// is missing, or the plan does not fit.
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
int ft_engine_n_batch(const ft_engine *e); // the prefill chunk in use (engine_prefill_batch may raise it)
// The model's weights as the engine's backend holds them (where each tensor was placed).
const ft_weights *ft_engine_weights(const ft_engine *e);
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
// Expert-cache telemetry (--moe-backend offload): the counters of the GPU expert cache the
// engine's backend holds (cache_stats.h); a rebuild keeps them. Reading waits for the device:
// call between steps.

// Reads the counters into *out (allocated; free with ft_moe_stats_free). Returns false, *out
// zeroed, when the engine has no expert cache.
bool ft_engine_moe_stats(ft_engine *e, ft_moe_stats *out);
// Resizes the expert cache to n_slots (same layout), keeping the host banks; every slot starts
// empty. Returns false and sets *err (the old cache stays) when there is no cache or the plan
// fails (below the floor, does not fit).
bool ft_engine_moe_rebuild(ft_engine *e, int n_slots, ft_err *err);
// The --moe-backend the engine runs (auto resolved; fused on the CPU device).
enum ft_moe_backend ft_engine_moe_backend(const ft_engine *e);
// Bytes of weights copied into memory at start-up (enum ft_weights_memory; 0: mapped).
size_t ft_engine_weights_copied(const ft_engine *e);
// The router's selections per block and expert since the engine started (ft_batch_route_counts:
// hp.n_layer rows of hp.n_expert). Returns false, out untouched, where they are not counted.
bool ft_engine_route_counts(ft_engine *e, uint64_t *out);

#endif
