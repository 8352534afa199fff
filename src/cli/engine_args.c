// engine_args.c: the engine's command-line flags, shared by run, probs, bench and serve (see
// engine_args.h).
#include "engine_args.h"
#include "args.h"
#include "llama_flags.h"
#include "../kv/kv.h"
#include "../moe/cache_plan.h"

#include <sched.h>
#include <string.h>

engine_args engine_args_init(const char *cmd, unsigned extra) {
    bool bench = !strcmp(cmd, "bench");
    engine_args a = {
        .cmd = cmd, .extra = extra, .device_cpu_default = bench, .batch_default = bench ? 512 : 256,
        .ctx_help = bench                     ? "-p + -n"
                    : !strcmp(cmd, "probs") ? "the prompt's length"
                    : !strcmp(cmd, "serve") ? "the model's, halved until its KV cache takes at most a quarter of\n"
                                              "                             the memory"
                                            : "the model's, at most 4096",
        .cuda_graph_max_bs = -1, .memory_ratio = -1, .gpu_memory_limit_gib = -1,
    };
    return a;
}

void engine_args_note_gpu_flag(engine_args *a, const char *flag) {
    size_t n = strlen(a->gpu_flags);
    if (strstr(a->gpu_flags, flag)) return;
    snprintf(a->gpu_flags + n, sizeof(a->gpu_flags) - n, "%s%s", n ? ", " : "", flag);
}

bool engine_args_take(engine_args *a, int argc, char **argv, int *i, bool *bad) {
    const char *flag = argv[*i];
    if (args_flag(argv, *i, "--mmap") || args_flag(argv, *i, "--no-mmap")) {
        a->weights_memory = !strcmp(flag, "--mmap") ? FT_WEIGHTS_MAPPED : FT_WEIGHTS_COPIED;
        return true;
    }
    if (args_flag(argv, *i, "--disable-moe-prefill-overlap")) {
        a->prefill_serial = true;
        engine_args_note_gpu_flag(a, "--disable-moe-prefill-overlap");
        return true;
    }
    if (args_str(argc, argv, i, "--kv-cache-dtype", &a->kv_type, bad) ||
        args_str(argc, argv, i, "--device", &a->device, bad) ||
        args_int(argc, argv, i, "-t|--threads", 1, 1024, &a->threads, bad) ||
        args_int(argc, argv, i, "-c|--ctx-size|--context-length", 1, 1 << 26, &a->n_ctx, bad) ||
        args_int(argc, argv, i, "-b|--batch-size|--batch", 1, 1 << 16, &a->n_batch, bad) ||
        args_int(argc, argv, i, "--num-tokens", 1, (int64_t)1 << 40, &a->num_tokens, bad))
        return true;
    if (args_str(argc, argv, i, "--attn", &a->attn, bad)) {
        a->attn_given = true;
        return true;
    }
    int64_t tp;
    if (args_int(argc, argv, i, "--tp-size", 1, 1 << 16, &tp, bad)) {
        if (!*bad && tp != 1) {
            fprintf(stderr, "ft %s: --tp-size %lld: ft runs a model on one GPU (no tensor parallelism); only 1 is "
                            "accepted\n", a->cmd, (long long)tp);
            *bad = true;
        }
        a->tp_size_given = true;
        return true;
    }
    // the flags only a CUDA engine reads
    if (args_str(argc, argv, i, "--moe-backend", &a->moe_backend, bad) ||
        args_str(argc, argv, i, "--moe-pool-layout", &a->pool_layout, bad) ||
        args_str(argc, argv, i, "--moe-cache-policy", &a->cache_policy, bad) ||
        args_str(argc, argv, i, "--moe-layer-slots", &a->layer_slots, bad) ||
        args_str(argc, argv, i, "--profile", &a->bw_profile, bad) ||
        args_int(argc, argv, i, "--moe-cache-size", 1, 1 << 24, &a->moe_cache_size, bad) ||
        args_int(argc, argv, i, "--kv-reserve-tokens", 0, (int64_t)1 << 40, &a->kv_reserve_tokens, bad) ||
        args_int(argc, argv, i, "--cuda-graph-max-bs", 0, 1 << 16, &a->cuda_graph_max_bs, bad) ||
        args_float(argc, argv, i, "--memory-ratio", &a->memory_ratio, bad) ||
        args_float(argc, argv, i, "--gpu-memory-limit", &a->gpu_memory_limit_gib, bad)) {
        engine_args_note_gpu_flag(a, flag);
        return true;
    }
    if (llama_flags_take(a, argc, argv, i, bad)) return true;
    if (args_str(argc, argv, i, "--moe-route-trace", &a->route_trace, bad)) {
        if (!(a->extra & ENGINE_ARGS_ROUTE_TRACE) && !*bad) {
            fprintf(stderr, "ft %s: --moe-route-trace is for benchmarks only (ft bench)\n", a->cmd);
            *bad = true;
        }
        engine_args_note_gpu_flag(a, flag);
        return true;
    }
    return false;
}

// A flag of two values: given (NULL: absent, *is_second unchanged) must be first or second;
// *is_second says which. False after printing the error for any other value.
static bool pick_of_two(const char *cmd, const char *flag, const char *given, const char *first, const char *second,
                        bool *is_second) {
    if (!given) return true;
    if (strcmp(given, first) && strcmp(given, second)) {
        fprintf(stderr, "ft %s: %s %s: expected %s or %s\n", cmd, flag, given, first, second);
        return false;
    }
    *is_second = !strcmp(given, second);
    return true;
}

bool engine_args_apply(const engine_args *a, ft_engine_params *p) {
    const char *cmd = a->cmd;
    const char *kv_type;
    if (!llama_flags_kv_type(a, &kv_type)) return false;
    if (kv_type && !ft_kv_type_from_name(kv_type, &p->kv_type)) {
        fprintf(stderr, "ft %s: %s %s: expected f16 or q8_0\n", cmd, a->kv_type ? "--kv-cache-dtype" : "-ctk/-ctv",
                kv_type);
        return false;
    }
    if (a->device) {
        if (!ft_engine_device_from_name(a->device, &p->device)) {
            fprintf(stderr, "ft %s: --device %s: expected cpu or cuda\n", cmd, a->device);
            return false;
        }
    } else {
        p->device = a->device_cpu_default && !a->gpu_flags[0] ? FT_PLACEMENT_CPU : ft_engine_default_device();
    }
    if (a->moe_backend && !ft_moe_backend_from_name(a->moe_backend, &p->moe_backend)) {
        fprintf(stderr, "ft %s: --moe-backend %s: expected fused, offload, cpu, hybrid or auto\n", cmd, a->moe_backend);
        return false;
    }
    bool uniform = p->moe_pool_layout == MOE_POOL_LAYOUT_UNIFORM, frecency = !p->moe_cache_lru;
    if (!pick_of_two(cmd, "--moe-pool-layout", a->pool_layout, "exact", "uniform", &uniform) ||
        !pick_of_two(cmd, "--moe-cache-policy", a->cache_policy, "lru", "frecency", &frecency) ||
        !pick_of_two(cmd, "--moe-layer-slots", a->layer_slots, "fixed", "adaptive", &p->moe_self_sizing))
        return false;
    p->moe_pool_layout = uniform ? MOE_POOL_LAYOUT_UNIFORM : MOE_POOL_LAYOUT_EXACT;
    p->moe_cache_lru = !frecency;
    if (a->memory_ratio != -1 && !(a->memory_ratio > 0 && a->memory_ratio <= 1)) {
        fprintf(stderr, "ft %s: --memory-ratio %g: expected a share of free GPU memory in (0, 1]\n", cmd,
                a->memory_ratio);
        return false;
    }
    if (a->gpu_memory_limit_gib != -1 && !(a->gpu_memory_limit_gib > 0 && a->gpu_memory_limit_gib < 1 << 20)) {
        fprintf(stderr, "ft %s: --gpu-memory-limit %g: expected GiB > 0\n", cmd, a->gpu_memory_limit_gib);
        return false;
    }
    p->n_threads = (int)a->threads;
    p->n_batch = a->n_batch > 0 ? (int)a->n_batch : a->batch_default;
    p->n_batch_auto = a->n_batch <= 0;
    if (a->memory_ratio > 0) p->memory_ratio = a->memory_ratio;
    if (a->gpu_memory_limit_gib > 0) p->gpu_memory_limit = (size_t)(a->gpu_memory_limit_gib * (double)(1ull << 30));
    p->moe_cache_size = (int)a->moe_cache_size;
    p->kv_reserve_tokens = a->kv_reserve_tokens;
    p->num_tokens = a->num_tokens;
    p->moe_prefill_serial = a->prefill_serial;
    p->weights_memory = a->weights_memory;
    p->bw_profile = a->bw_profile;
    if (a->cuda_graph_max_bs >= 0) p->cuda_graph_max_bs = (int)a->cuda_graph_max_bs;
    p->moe_route_trace = a->route_trace;

    cpu_set_t allowed;
    if (a->threads > 0 && sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && a->threads > CPU_COUNT(&allowed))
        fprintf(stderr, "ft %s: -t %lld: more threads than the %d CPUs ft may run on; they will share them, and a "
                        "thread waiting for its CPU holds the others up\n", cmd, (long long)a->threads,
                CPU_COUNT(&allowed));
    if (a->tp_size_given)
        fprintf(stderr, "ft %s: --tp-size 1: ft runs the model on one GPU (no tensor parallelism)\n", cmd);
    if (a->attn_given)
        fprintf(stderr, "ft %s: --attn %s: ignored; ft uses its own attention kernels (tensor-core flash attention "
                        "for prefill, split-key decode)\n", cmd, a->attn);
    if (a->gpu_flags[0] && p->device == FT_PLACEMENT_CPU)
        fprintf(stderr, "ft %s: %s, so the CPU runs the whole model; ignored (GPU only): %s\n", cmd,
                a->device ? "--device cpu" : "no GPU was found", a->gpu_flags);
    return true;
}

int engine_args_n_ctx(const engine_args *a, int default_ctx, int ctx_cap) {
    int64_t n = a->n_ctx > 0 ? a->n_ctx : default_ctx;
    if (a->num_tokens > 0) {
        // the sequences share the positions: one of them may take them all
        if (a->n_ctx <= 0) n = ctx_cap;
        if (n > a->num_tokens) n = a->num_tokens;
    }
    return (int)FT_MIN(n, (int64_t)1 << 26);
}

void engine_args_usage(FILE *out, const engine_args *a) {
    fprintf(out,
            "  -t, --threads N            CPU threads (default: the physical cores ft may run on;\n"
            "                             one fewer with --device cuda, where they compute cpu\n"
            "                             mode's experts)\n"
            "  -c, --ctx-size N           context per sequence (also --context-length)\n"
            "                             (default: %s)\n"
            "  -b, --batch-size N         prompt tokens per forward pass (also --batch; default 2048 on\n"
            "                             a GPU and 1024 on the CPU where memory allows, else down to %d)\n"
            "  --num-tokens N             KV positions all sequences share (default: sequences x -c); caps\n"
            "                             -c at N (without -c, the context is N up to the model's)\n"
            "  --kv-cache-dtype T         f16 (default) or q8_0\n"
            "  --device D                 cuda or cpu\n"
            "                             (default: %s)\n"
            "  --mmap, --no-mmap          the weights the CPU computes from (all on the CPU device, the\n"
            "                             routed experts in cpu mode): --mmap reads them from the file's\n"
            "                             mapping (less memory, slower decode), --no-mmap copies them into\n"
            "                             memory in huge pages or fails (default: copied when they fit\n"
            "                             the available memory with 1 GiB to spare and the kernel gives\n"
            "                             huge pages, else mapped)\n"
            "GPU memory and MoE experts (CUDA device only):\n"
            "  --memory-ratio F           share of the GPU's free memory ft may use (default 0.9)\n"
            "  --gpu-memory-limit GIB     cap on all ft holds on the GPU, the CUDA context too (plays a smaller card)\n"
            "  --moe-backend B            where routed experts live: fused (all on the GPU), offload (host RAM\n"
            "                             with a GPU expert cache), cpu (computed on the CPU from host RAM,\n"
            "                             the rest on the GPU), hybrid (offload's cache; each decode step's\n"
            "                             misses split between copies and the CPU by measured costs) or auto\n"
            "                             (default: fused when the model fits the budget, else offload)\n"
            "  --moe-cache-size N         offload, hybrid: expert slots (one slot: gate, up and down of one\n"
            "                             expert);\n"
            "                             default: sized from the budget after --kv-reserve-tokens\n"
            "  --moe-pool-layout L        offload: exact (pools of equal geometry, default) or uniform\n"
            "  --moe-cache-policy P       offload, hybrid: which slot a miss takes: frecency (the least used\n"
            "                             lately and overall, default) or lru (the least recently used)\n"
            "  --moe-layer-slots S        offload, hybrid: each layer's share of its pool's slots: fixed (even,\n"
            "                             default) or adaptive (moved between layers at run time by what a\n"
            "                             slot more or fewer would save each)\n"
            "  --profile FILE             the bandwidth profile hybrid splits by and auto chooses a mode by\n"
            "                             (default: this machine's, written by `ft bench bw` into the cache folder)\n"
            "  --kv-reserve-tokens N      offload: KV tokens reserved before the expert cache is sized\n"
            "                             (default: every sequence's whole context)\n"
            "  --disable-moe-prefill-overlap\n"
            "                             offload: prefill streams expert layers without double-buffering\n"
            "  --cuda-graph-max-bs N      largest step (tokens) replayed as a CUDA graph; 0: none (default:\n"
            "                             every step the backend can graph: decode steps, one token of\n"
            "                             each decoding sequence)\n"
            "  --tp-size 1, --attn NAME   FreeToken's flags: accepted with a notice (one GPU; ft's attention)\n",
            a->ctx_help, a->batch_default,
            a->device_cpu_default ? "cpu; cuda when a GPU flag is given and a GPU is found"
                                  : "cuda when a GPU is found, else cpu");
    if (a->extra & ENGINE_ARGS_ROUTE_TRACE)
        fprintf(out, "  --moe-route-trace FILE     offload: replay this route trace (ft trace-gen) instead of the\n"
                     "                             model's routing, for cache benchmarks\n");
}
