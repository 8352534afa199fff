// env: the FT_* environment variables the engine reads, one table (env.c) and typed accessors.
//
// Every FT_* variable under src/ is read through here, so the table is their list;
// docs/development.md describes each (tests/test_env.c fails when it misses one). The accessors
// call getenv each time: a caller that wants a value read once caches it. Thread-safe as
// getenv is (while nothing changes the environment). Usable from CUDA C++ (extern "C").
#ifndef FT_ENV_H
#define FT_ENV_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ft_env {
    FT_ENV_API_KEY,
    FT_ENV_REFERENCE,
    FT_ENV_SIMD,
    FT_ENV_AMX,
    FT_ENV_CPU_MOE_ONE_JOB,
    FT_ENV_CPU_PROFILE,
    FT_ENV_CUDA_GRAPHS,
    FT_ENV_CUDA_GEMM,
    FT_ENV_CUDA_FUSE_NORM,
    FT_ENV_CUDA_MOE_ROWS,
    FT_ENV_CUDA_FLASH,
    FT_ENV_CUDA_FLASH_PIPE,
    FT_ENV_CUDA_DELTA_CHUNKED,
    FT_ENV_CUDA_ROUTE_COUNTS,
    FT_ENV_CUDA_PDL,
    FT_ENV_CUDA_DEC_CTAS_PER_SM,
    FT_ENV_CUDA_ROUTER_VEC,
    FT_ENV_CUDA_PROFILE,
    FT_ENV_MOE_TELEMETRY,
    FT_ENV_MOE_PREFETCH,
    FT_ENV_MOE_PREFILL_FILL,
    FT_ENV_CPU_EXPERTS_ROUTE,
    FT_ENV_CPU_EXPERTS_MEETING,
    FT_ENV_CPU_EXPERTS_PROFILE,
    FT_ENV_HYBRID_COSTS,
    FT_ENV_HYBRID_TUNE,
    FT_ENV_COUNT
};

enum ft_env_kind {
    FT_ENV_KIND_FLAG, // on/off: read with ft_env_flag
    FT_ENV_KIND_STR,  // a value: read with ft_env_str or ft_env_is
};

typedef struct ft_env_var {
    const char *name;      // "FT_..."
    enum ft_env_kind kind;
    bool flag_default;     // FLAG: the value when unset or empty
    const char *doc;       // one line: what it does
} ft_env_var;

// The table entry of v (aborts on an id out of range).
const ft_env_var *ft_env_info(enum ft_env v);

// The variable's value, NULL when unset.
const char *ft_env_str(enum ft_env v);
// True when the variable is set to exactly value.
bool ft_env_is(enum ft_env v, const char *value);
// A FLAG variable: its table default when unset or empty, false for "0", true for any other
// value. Aborts when v is not a FLAG.
bool ft_env_flag(enum ft_env v);

#ifdef __cplusplus
}
#endif

#endif
