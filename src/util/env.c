// env.c: the table of FT_* environment variables (see env.h). docs/development.md says more
// about each; keep the two in step (tests/test_env.c checks the names).
#include "env.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define FLAG_ON(name, doc) [FT_ENV_##name] = {"FT_" #name, FT_ENV_KIND_FLAG, true, doc}
#define FLAG_OFF(name, doc) [FT_ENV_##name] = {"FT_" #name, FT_ENV_KIND_FLAG, false, doc}
#define STR(name, doc) [FT_ENV_##name] = {"FT_" #name, FT_ENV_KIND_STR, false, doc}

static const ft_env_var g_env[FT_ENV_COUNT] = {
    STR(API_KEY, "ft serve: the API key when --api-key is not given (set but empty: refused)"),
    FLAG_OFF(REFERENCE, "run every op on its scalar reference path (slow; for checking)"),
    STR(SIMD, "CPU kernels: scalar (no SIMD), avx2 (no AVX-VNNI, AVX-512 or AMX), avxvnni (AVX2 and "
              "AVX-VNNI: no AVX-512, no AMX) or avx512 (no AMX); unset or another value: the best the CPU has"),
    FLAG_ON(AMX, "0: prefill's q8_0, q4_K and bf16 GEMMs stay off the AMX tiles"),
    FLAG_ON(CPU_MOE_ONE_JOB, "0: the CPU MoE op runs gate/up and down as two pool jobs at decode"),
    FLAG_OFF(CPU_PROFILE, "time the CPU backend's ops by kind (and the thread pool's balance in them) and print "
                          "a table at exit; read when a CPU backend starts"),
    FLAG_ON(CUDA_GRAPHS, "0: no CUDA graphs (every step launched directly)"),
    FLAG_ON(CUDA_GEMM, "0: every matmul and MoE FFN on the matvec kernels (no tensor-core GEMM)"),
    FLAG_ON(CUDA_FUSE_NORM, "0: a decode step's output projection leaves its residual add, and the router its rms_norm, "
                            "to launches of their own"),
    FLAG_ON(CUDA_MOE_ROWS, "0: the MoE FFN of a few rows on per-pair kernels (each pair reads its expert) instead of "
                           "grouped by expert (for A/B)"),
    FLAG_ON(CUDA_FLASH, "0: prefill attention on the non-tensor-core kernels (no flash attention)"),
    FLAG_ON(CUDA_FLASH_PIPE, "0: prefill flash attention over an f16 cache loads, then computes, each key tile (for A/B); read once"),
    FLAG_ON(CUDA_ROUTE_COUNTS, "0: the CUDA routing kernels keep no count of each selection per layer and expert "
                               "(/v1/stats' routing is then empty)"),
    FLAG_ON(CUDA_DELTA_CHUNKED, "0: prefill's gated delta rule token by token on the GPU (no chunked form)"),
    FLAG_ON(CUDA_PDL, "0: no programmatic dependent launch (sm_90 and later use it); read once"),
    STR(CUDA_DEC_CTAS_PER_SM, "decode attention: the CTAs a launch aims at per multiprocessor, 1 to 8 (default 2); "
                              "read once"),
    FLAG_ON(CUDA_ROUTER_VEC, "0: the decode router keeps a warp per expert row; read once"),
    FLAG_OFF(CUDA_PROFILE, "time every CUDA kernel launch site and print a table at exit; read once"),
    FLAG_ON(MOE_TELEMETRY, "0: the expert cache keeps no counters or copy times (all read 0)"),
    STR(MOE_PREFETCH, "offload's decode steps copy at most this many predicted experts of the next MoE layer ahead "
                      "(default 1; 0: none)"),
    FLAG_ON(MOE_PREFILL_FILL, "0: offload's prefill leaves the cache's empty slots empty (every chunk streams what they lack)"),
    STR(CPU_EXPERTS_ROUTE, "cpu mode: host routes on the CPU (the router's host copy) instead of the GPU"),
    STR(CPU_EXPERTS_MEETING, "cpu mode: event meets through events (never graphed); spin: the GPU "
                             "spins instead of the stream waiting"),
    STR(CPU_EXPERTS_PROFILE, "cpu mode: set to any value but 0 (an empty one too): time the host's "
                             "side of decode layers and print it at exit"),
    STR(HYBRID_COSTS, "hybrid mode: COPY_US,CPU_US,MEET_US: one expert's copy, one expert on the CPU and a "
                      "meeting in microseconds, for every layer, instead of the costs measured at start-up"),
    FLAG_OFF(HYBRID_TUNE, "1: hybrid mode corrects the CPU's part of its costs by the CPU ops it times while "
                          "decoding (an experiment: it measured slower than the starting costs)"),
};

const ft_env_var *ft_env_info(enum ft_env v) {
    FT_ASSERT((unsigned)v < FT_ENV_COUNT);
    return &g_env[v];
}

const char *ft_env_str(enum ft_env v) { return getenv(ft_env_info(v)->name); }

bool ft_env_is(enum ft_env v, const char *value) {
    const char *e = ft_env_str(v);
    return e && !strcmp(e, value);
}

bool ft_env_flag(enum ft_env v) {
    const ft_env_var *d = ft_env_info(v);
    FT_ASSERT(d->kind == FT_ENV_KIND_FLAG);
    const char *e = getenv(d->name);
    if (!e || !*e) return d->flag_default;
    return strcmp(e, "0") != 0;
}
