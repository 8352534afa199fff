// engine_args: the engine's command-line flags, parsed the same way by `ft run`, `ft probs`,
// `ft bench` and `ft serve` (internal to cli/).
//
// Two steps. engine_args_take recognises one flag (and its value) at argv[*i] while a command
// walks its arguments; engine_args_apply then turns what was given into ft_engine_params
// (names checked, defaults filled in, the notices printed). The context length depends on the
// model, so engine_args_n_ctx resolves it once the model is loaded.
//
// Flags named after FreeToken's (--tp-size, --attn, --num-tokens, --kv-reserve-tokens,
// --cuda-graph-max-bs, --disable-moe-prefill-overlap, --memory-ratio, --moe-*) mean what they
// mean there; those that name something ft does differently are accepted with a one-line
// notice of what ft does instead.
#ifndef FT_CLI_ENGINE_ARGS_H
#define FT_CLI_ENGINE_ARGS_H

#include "../engine/engine.h"

#include <stdio.h>

// What a command takes besides the common flags.
enum {
    ENGINE_ARGS_ROUTE_TRACE = 1, // --moe-route-trace FILE (benchmarks only)
};

typedef struct engine_args {
    const char *cmd;               // "run", "bench", ...: prefixes messages ("ft run: ...")
    unsigned extra;                // ENGINE_ARGS_* this command accepts
    bool device_cpu_default;       // bench: the CPU unless a GPU-only flag asks for the GPU
    int batch_default;             // -b when absent
    const char *ctx_help;          // what -c defaults to, for the help text
    // as given; 0 or NULL where the flag was absent (-1 for the graph size and the two floats)
    int64_t threads, n_ctx, n_batch, num_tokens, kv_reserve_tokens, moe_cache_size;
    int64_t cuda_graph_max_bs;     // -1: absent
    double memory_ratio, gpu_memory_limit_gib;
    const char *kv_type, *device, *moe_backend, *pool_layout, *route_trace, *attn, *bw_profile, *cache_policy,
        *layer_slots;
    const char *cache_type_k, *cache_type_v; // llama.cpp's -ctk, -ctv (llama_flags.h)
    bool prefill_serial;           // --disable-moe-prefill-overlap
    enum ft_weights_memory weights_memory; // --mmap, --no-mmap (the later wins), else auto
    bool tp_size_given, attn_given;
    char gpu_flags[256];           // the GPU-only flags given, comma-separated (for the no-GPU notice)
} engine_args;

// Nothing given yet, with the command's defaults (bench: device cpu, -b 512; run, probs,
// serve: the GPU when found, -b 256).
engine_args engine_args_init(const char *cmd, unsigned extra);

// If argv[*i] is one of the engine flags, takes it (and its value, advancing *i) and returns
// true; a missing or malformed value prints why on stderr and sets *bad. Values that only make
// sense together (names, the device) are checked by engine_args_apply.
bool engine_args_take(engine_args *a, int argc, char **argv, int *i, bool *bad);

// Notes a flag that only the GPU reads: bench then runs on the GPU, and where the engine runs on
// the CPU one notice names the flags ignored.
void engine_args_note_gpu_flag(engine_args *a, const char *flag);

// Fills p (from ft_engine_default_params) with what was given: the KV type, device (default:
// cuda when a GPU is found, else cpu; device_cpu_default keeps cpu unless a GPU-only flag asks
// for the GPU), threads, batch, the memory and expert-cache settings. Prints the notices (the
// FreeToken flags ft reads differently; GPU flags on a machine that runs on the CPU) on stderr.
// Returns false after printing the error for a bad value (an unknown name, --tp-size other than
// 1, a ratio outside (0, 1]): a usage error.
bool engine_args_apply(const engine_args *a, ft_engine_params *p);

// The context per sequence: -c when given, else default_ctx, then at most --num-tokens (the
// KV positions all sequences share), and without -c the model's training context up to
// --num-tokens when that is given.
int engine_args_n_ctx(const engine_args *a, int default_ctx, int n_ctx_train);

// The help lines of the common flags (and of the extras the command accepts).
void engine_args_usage(FILE *out, const engine_args *a);

#endif
