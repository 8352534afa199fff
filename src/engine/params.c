// params.c: engine parameters, their defaults and how they resolve (see engine.h).
#include "engine.h"
#include "../backend/cpu/cpu.h"
#include "../util/env.h"

#include <stdlib.h>
#include <string.h>

ft_engine_params ft_engine_default_params(void) {
    ft_engine_params p = {.n_threads = 0,
                          .n_ctx = 0,
                          .n_batch = 256,
                          .n_seq = 1,
                          .kv_type = FT_TYPE_F16,
                          .ctx_checkpoints = 32,
                          .cuda_graph_max_bs = -1};
    return p;
}

enum ft_placement ft_engine_default_device(void) {
    return ft_backend_device_count(FT_PLACEMENT_CUDA) > 0 ? FT_PLACEMENT_CUDA : FT_PLACEMENT_CPU;
}

bool ft_engine_device_from_name(const char *name, enum ft_placement *out) {
    if (!strcmp(name, "cpu")) *out = FT_PLACEMENT_CPU;
    else if (!strcmp(name, "cuda")) *out = FT_PLACEMENT_CUDA;
    else return false;
    return true;
}

int ft_engine_default_threads(enum ft_placement device) {
    int cores = ft_cpu_physical_cores();
    return device == FT_PLACEMENT_CUDA ? FT_MAX(1, cores - 1) : cores;
}

bool ft_engine_params_resolve(const ft_model *m, ft_engine_params *p, ft_err *err) {
    const ft_hparams *hp = &m->hp;
    if (p->n_ctx <= 0) p->n_ctx = hp->n_ctx_train;
    if (p->n_ctx > hp->n_ctx_train)
        return ft_err_set(err, "context %d exceeds the model's limit of %d tokens", p->n_ctx, hp->n_ctx_train);
    if (p->n_seq <= 0) p->n_seq = 1;
    if (p->n_batch <= 0) p->n_batch = 256;
    p->n_batch = FT_MIN(p->n_batch, p->n_ctx); // a prefill chunk never needs more
    // one sequence may always grow to the whole context
    if (p->num_tokens > 0) p->num_tokens = FT_MAX(p->num_tokens, (int64_t)p->n_ctx);
    if (p->n_threads <= 0) p->n_threads = ft_engine_default_threads(p->device);
    if (ft_env_flag(FT_ENV_REFERENCE)) p->reference = true;
    return true;
}
