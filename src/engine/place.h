// place: an engine's memory plan and where the model's weights and experts go on its backend.
//
// Two steps around the backend's reserve: engine_plan decides (--moe-backend auto through
// moe_placement_auto), prints the plan and checks it against the device's budget, allocating
// nothing; engine_place then carries it out: the weights copied onto the backend, and the
// routed experts left in host memory handed to the expert cache or the CPU experts.
//
// Internal to src/engine/.
#ifndef FT_ENGINE_PLACE_H
#define FT_ENGINE_PLACE_H

#include "engine.h"

// Tokens per step: one prefill chunk beside the decode tokens of every other sequence.
int engine_step_tokens(const ft_engine_params *p);
// The largest shapes the backend's ops see (for its scratch).
ft_backend_limits engine_limits(const ft_model *m, const ft_engine_params *p);
// Floats of the activation buffers ft_forward_alloc and ft_batch_init allocate.
size_t engine_activation_floats(const ft_model *m, const ft_engine_params *p);
// The shape of the KV pool: K and V rows of the attention layers in engine_kv_blocks blocks,
// the recurrent layers' states; arrays holds ENGINE_KV_ARRAYS x n_layer entries for it.
#define ENGINE_KV_ARRAYS 4
ft_kv_params engine_kv_params(const ft_model *m, const ft_engine_params *p, int64_t *arrays);
// Blocks of the pool: num_tokens positions (0: one sequence of n_ctx and the others at up to
// 4096 each), at least one whole context.
int64_t engine_kv_blocks(const ft_engine_params *p);
// Before the plan: a default context (n_ctx_default) shrinks, halving down to 4096, until the KV
// pool takes at most a quarter of the memory (the device budget, or the CPU's available memory),
// printed; a context the user set whose KV pool exceeds the CPU's available memory is an error
// (the device plan checks a GPU's). Returns false and sets *err then.
bool engine_fit_context(const ft_model *m, ft_backend *be, ft_engine_params *p, ft_err *err);
// The same against mem bytes (cpu: the CPU's available memory, else a device budget).
bool engine_fit_context_to(const ft_model *m, ft_engine_params *p, size_t mem, bool cpu, ft_err *err);
// The prefill chunk for p: n_batch unless the command's default stands (p->n_batch_auto); then
// 2048 on a GPU and 1024 on the CPU, each halved while its workspace would take more than a
// tenth of the memory (the GPU budget, the CPU's available memory) or, for a model resident on
// the GPU whole, would no longer let it fit; never below n_batch or above n_ctx.
int engine_prefill_batch(const ft_model *m, ft_backend *be, const ft_engine_params *p);
// Bytes of the pool (kv_pool.h): its blocks, and each sequence's table and recurrent state.
size_t engine_kv_bytes(const ft_model *m, const ft_engine_params *p);
// What ft may allocate on the device: --memory-ratio of its free memory, capped at
// --gpu-memory-limit.
size_t engine_device_budget(const ft_engine_params *p, const ft_device_info *info);

// What --moe-backend auto decides from, measured on be: the device bytes of the whole model
// resident against the budget, and whether be's kernels take every routed expert type (if
// not, why names the first tensor they do not; why may be NULL).
moe_auto_facts engine_auto_facts(const ft_model *m, const ft_engine_params *p, ft_backend *be, char *why,
                                 size_t cap);

// An engine's placement, from engine_plan to engine_place.
typedef struct engine_placement {
    enum ft_moe_backend mode;    // never auto; fused on the CPU device
    bool experts_on_host;        // offload and cpu: the routed experts stay in host memory
    size_t copy_bytes;           // the CPU device and cpu mode: weights copied into memory (0: mapped);
                                 // planned, then what engine_place moved
    moe_geometry geometry;       // offload: the model's experts
    moe_route_trace trace;       // offload with --moe-route-trace
    ft_expert_cache_params cache; // offload: what the expert cache is built with
} engine_placement;

// Decides and checks the placement of m on be (p resolved) and prints the plan when p asks.
// Returns false and sets *err when it does not fit (nothing allocated).
bool engine_plan(const ft_model *m, ft_backend *be, const ft_engine_params *p, engine_placement *out, ft_err *err);
// Carries pl out on be (after its reserve): returns the weights on be, the host experts set up,
// the weights the CPU streams copied into memory when the plan says so (and the rest of the
// mapping read in when p asks: prefault). Returns NULL and sets *err on failure.
ft_weights *engine_place(const ft_model *m, ft_backend *be, const ft_engine_params *p, engine_placement *pl,
                         ft_err *err);
void engine_placement_free(engine_placement *pl);

#endif
