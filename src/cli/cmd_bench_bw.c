// cmd_bench_bw.c: `ft bench bw`: measures this machine's bandwidth profile (moe/bw_profile.h),
// writes it where the engine reads it and prints it.
#include "cli.h"
#include "args.h"
#include "../backend/bw_measure.h"
#include "../engine/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char DEFAULT_TYPES[] = "q4_K,q5_K,q6_K,q8_0,mxfp4";

static void usage(FILE *out) {
    fprintf(out,
            "usage: ft bench bw [options]\n"
            "Measures what moving and computing an expert costs on this machine and writes it as the\n"
            "bandwidth profile that --moe-backend hybrid (and auto) read: pinned host-to-device copies of\n"
            "one expert, one token's experts on the CPU at the engine's threads and on the GPU per weight\n"
            "type, and one host meeting (GPU to CPU and back). The experts are synthetic (random blocks)\n"
            "and read cold, as a decode step reads its misses. One profile per GPU, CPU and thread count,\n"
            "in the cache folder ($XDG_CACHE_HOME/ft or ~/.cache/ft); a run replaces its figures and keeps\n"
            "the other types' rates.\n\n"
            "  --device cpu|cuda          cuda (default where a GPU is found): every figure; cpu: the\n"
            "                             CPU's rates only\n"
            "  -t, --threads N            CPU threads (default: the engine's for the device)\n"
            "  --types LIST               expert weight types, comma-separated (default %s)\n"
            "  --shape EMBD,FF            the experts' shape (default 2048,768: Qwen3-30B-A3B)\n"
            "  -k, --top-k N              experts a token selects (default 8)\n"
            "  --profile FILE             write (and merge into) FILE instead of the cache folder's\n"
            "  --json                     print the profile as one JSON line on stdout\n",
            DEFAULT_TYPES);
}

// Parses "a,b,c" into types; false with a message on a bad name.
static bool parse_types(const char *list, enum ft_type *types, int *n) {
    *n = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == MOE_BW_MAX_TYPES || !ft_type_from_name(tok, &types[*n])) {
            fprintf(stderr, "ft bench bw: --types %s: '%s' is not a weight type (or too many)\n", list, tok);
            return false;
        }
        for (int i = 0; i < *n; i++)
            if (types[i] == types[*n]) (*n)--; // a repeat
        (*n)++;
    }
    if (*n == 0) fprintf(stderr, "ft bench bw: --types: no type given\n");
    return *n > 0;
}

// s as a JSON string (the names are printable ASCII or UTF-8: quotes and backslashes escaped)
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

static void print_profile(const moe_bw_profile *p, const char *path, bool json) {
    if (json) {
        printf("{\"profile\": ");
        json_str(path);
        printf(", \"gpu\": ");
        json_str(p->gpu);
        printf(", \"cpu\": ");
        json_str(p->cpu);
        printf(", \"threads\": %d, \"copy_fixed_us\": %.3f, \"copy_gbps\": %.3f, \"meet_us\": %.3f, "
               "\"cpu_fixed_us\": %.3f, \"rates\": [",
               p->threads, p->copy_fixed_us, p->copy_gbps, p->meet_us, p->cpu_fixed_us);
        for (int i = 0; i < p->n_rates; i++)
            printf("%s{\"type\": \"%s\", \"cpu_gbps\": %.3f, \"gpu_gbps\": %.3f, \"cpu_fixed_us\": %.3f}",
                   i ? ", " : "", ft_type_name(p->rates[i].type), p->rates[i].cpu_gbps, p->rates[i].gpu_gbps,
                   p->rates[i].cpu_fixed_us);
        printf("]}\n");
        return;
    }
    printf("bandwidth profile %s\n  GPU %s; CPU %s, %d threads\n", path, p->gpu, p->cpu, p->threads);
    if (p->copy_gbps > 0)
        printf("  an expert copied host to device: %.1f us + bytes at %.1f GB/s\n", p->copy_fixed_us,
               p->copy_gbps);
    if (p->meet_us > 0) printf("  one host meeting (GPU to CPU and back): %.1f us\n", p->meet_us);
    printf("  the CPU's fixed cost of a layer's experts: %.1f us at most (per type below)\n", p->cpu_fixed_us);
    printf("  %-8s %14s %14s %16s\n", "type", "CPU GB/s", "GPU GB/s", "CPU fixed us");
    for (int i = 0; i < p->n_rates; i++) {
        const moe_bw_rate *r = &p->rates[i];
        char g[32] = "-", f[32] = "-";
        if (r->gpu_gbps > 0) snprintf(g, sizeof(g), "%.1f", r->gpu_gbps);
        if (r->cpu_fixed_us > 0) snprintf(f, sizeof(f), "%.1f", r->cpu_fixed_us);
        printf("  %-8s %14.1f %14s %16s\n", ft_type_name(r->type), r->cpu_gbps, g, f);
    }
}

// The figures of fresh over old's (same key): fresh's measured ones, old's other rates kept.
static void merge(moe_bw_profile *fresh, const moe_bw_profile *old) {
    for (int i = 0; i < old->n_rates; i++)
        if (!moe_bw_rate_of(fresh, old->rates[i].type)) {
            moe_bw_rate *r = moe_bw_rate_add(fresh, old->rates[i].type);
            if (r) *r = old->rates[i];
        }
    if (fresh->copy_gbps <= 0) fresh->copy_gbps = old->copy_gbps, fresh->copy_fixed_us = old->copy_fixed_us;
    if (fresh->meet_us <= 0) fresh->meet_us = old->meet_us;
}

int cmd_bench_bw(int argc, char **argv) {
    const char *device = NULL, *types_arg = DEFAULT_TYPES, *shape = "2048,768", *path_arg = NULL;
    int64_t threads = 0, top_k = 8;
    bool json = false, bad = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (args_flag(argv, i, "-h|--help")) {
            usage(stdout);
            return FT_EXIT_OK;
        }
        if (args_flag(argv, i, "--json")) {
            json = true;
            continue;
        }
        if (args_str(argc, argv, &i, "--device", &device, &bad) ||
            args_int(argc, argv, &i, "-t|--threads", 1, 1024, &threads, &bad) ||
            args_str(argc, argv, &i, "--types", &types_arg, &bad) ||
            args_str(argc, argv, &i, "--shape", &shape, &bad) ||
            args_int(argc, argv, &i, "-k|--top-k", 2, 32, &top_k, &bad) ||
            args_str(argc, argv, &i, "--profile", &path_arg, &bad))
            continue;
        if (!bad) fprintf(stderr, "ft bench bw: unknown argument '%s' (see --help)\n", argv[i]);
        bad = true;
    }
    if (bad) return FT_EXIT_USAGE;
    ft_bw_request req = {.top_k = (int)top_k};
    if (!device)
        req.device = ft_engine_default_device();
    else if (!ft_engine_device_from_name(device, &req.device)) {
        fprintf(stderr, "ft bench bw: --device %s: expected cpu or cuda\n", device);
        return FT_EXIT_USAGE;
    }
    enum ft_type types[MOE_BW_MAX_TYPES];
    int n_types;
    if (!parse_types(types_arg, types, &n_types)) return FT_EXIT_USAGE;
    char tail;
    if (sscanf(shape, "%d,%d%c", &req.n_embd, &req.n_ff, &tail) != 2 || req.n_embd < 256 || req.n_ff < 256 ||
        req.n_embd > 65536 || req.n_ff > 65536) {
        fprintf(stderr, "ft bench bw: --shape %s: expected EMBD,FF, each 256..65536\n", shape);
        return FT_EXIT_USAGE;
    }
    req.types = types, req.n_types = n_types;
    req.n_threads = threads > 0 ? (int)threads : ft_engine_default_threads(req.device);

    fprintf(stderr, "ft bench bw: measuring %s experts of %d x %d, top-%d, %d threads%s\n", types_arg,
            req.n_embd, req.n_ff, req.top_k, req.n_threads,
            req.device == FT_PLACEMENT_CUDA ? ", and the GPU" : "");
    moe_bw_profile p;
    ft_err err = {{0}};
    if (!ft_backend_measure_bw(&req, &p, &err)) {
        fprintf(stderr, "ft bench bw: %s\n", err.msg);
        return FT_EXIT_INPUT;
    }
    char path[1200], dir[1024];
    if (path_arg)
        snprintf(path, sizeof(path), "%s", path_arg);
    else if (ft_cache_dir(dir, sizeof(dir)))
        moe_bw_profile_path(&p, dir, path, sizeof(path));
    else {
        fprintf(stderr, "ft bench bw: neither HOME nor XDG_CACHE_HOME is set: give --profile FILE\n");
        return FT_EXIT_USAGE;
    }
    moe_bw_profile old;
    if (moe_bw_profile_load(path, &old, NULL) && moe_bw_same_key(&old, &p)) merge(&p, &old);
    if (!moe_bw_profile_save(&p, path, &err)) {
        fprintf(stderr, "ft bench bw: %s\n", err.msg);
        return FT_EXIT_INPUT;
    }
    print_profile(&p, path, json);
    return FT_EXIT_OK;
}
