// cmd_trace_gen.c: `ft trace-gen -o FILE.ftrt [shape] [options]`: writes a route trace (the
// format in src/moe/route_trace.h) whose routing has the popularity skew and temporal reuse of
// real models, for benchmarks to replay with --moe-route-trace.
//
// The shape comes from a model (--model M.gguf: its MoE layers, expert count and top-k) or from
// --layers/--experts/--top-k. Unless --zipf/--reuse/--window are given, the generator is
// calibrated for that shape (an LRU holding 12.5% of a layer's experts hits about 65%, 25%
// about 80%). The hit rates the written trace gives the expert cache's LRU are printed.
#include "cli.h"
#include "args.h"
#include "../gguf/gguf.h"
#include "../moe/geometry.h"
#include "../moe/route_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_usage =
    "usage: ft trace-gen -o FILE.ftrt [--model M.gguf | --layers N --experts E --top-k K] [options]\n"
    "Writes a route trace with skewed expert popularity and temporal reuse.\n"
    "  -o, --out FILE     the trace file to write\n"
    "  --model M.gguf     take the MoE layers, expert count and top-k from a model\n"
    "  --layers N         MoE layers (blocks 0 .. N-1; default 40)\n"
    "  --experts E        experts per layer (default 256)\n"
    "  --top-k K          experts each sequence selects per layer (default 10)\n"
    "  --seqs R           sequences decoded together (default 1)\n"
    "  --steps S          decode steps (default 1000)\n"
    "  --seed N           random seed (default 1)\n"
    "  --zipf S --reuse R --window W\n"
    "                     generator parameters instead of calibrating them for the shape\n";

// Reads the shape of a model's routing: its MoE blocks, expert count and top-k.
static bool shape_from_model(const char *path, moe_trace_gen_params *p, int **layers) {
    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    if (!f) {
        fprintf(stderr, "ft trace-gen: %s\n", err.msg);
        return false;
    }
    moe_geometry g;
    bool ok = moe_geometry_read(f, &g, &err);
    gguf_str arch = {"", 0};
    gguf_get_str(f, "general.architecture", &arch);
    char key[128];
    // the MTP blocks after the trunk (nextn_predict_layers) route nothing ft runs
    int64_t n_block, n_mtp;
    snprintf(key, sizeof(key), "%.*s.nextn_predict_layers", (int)(arch.len < 64 ? arch.len : 64), arch.ptr);
    if (ok && gguf_get_int(f, key, &n_mtp) && n_mtp > 0) {
        snprintf(key, sizeof(key), "%.*s.block_count", (int)(arch.len < 64 ? arch.len : 64), arch.ptr);
        if (gguf_get_int(f, key, &n_block) && n_block > n_mtp) moe_geometry_keep_below(&g, (int)(n_block - n_mtp));
    }
    if (!ok) fprintf(stderr, "ft trace-gen: %s: %s\n", path, err.msg);
    else if (g.n_layers == 0) {
        fprintf(stderr, "ft trace-gen: %s has no routed experts\n", path);
        ok = false;
    }
    snprintf(key, sizeof(key), "%.*s.expert_used_count", (int)(arch.len < 64 ? arch.len : 64), arch.ptr);
    int64_t k = 0;
    if (ok && (!gguf_get_int(f, key, &k) || k < 1 || k > g.layers[0].n_expert)) {
        fprintf(stderr, "ft trace-gen: %s: key %s is missing or out of range\n", path, key);
        ok = false;
    }
    for (int i = 1; ok && i < g.n_layers; i++)
        if (g.layers[i].n_expert != g.layers[0].n_expert) {
            fprintf(stderr, "ft trace-gen: %s: layers with different expert counts are not supported\n", path);
            ok = false;
        }
    if (ok) {
        *layers = malloc((size_t)g.n_layers * sizeof(int));
        for (int i = 0; i < g.n_layers; i++) (*layers)[i] = g.layers[i].layer;
        p->layers = *layers;
        p->n_layers = g.n_layers;
        p->n_expert = g.layers[0].n_expert;
        p->top_k = (int)k;
    }
    if (g.layers) moe_geometry_free(&g);
    gguf_close(f);
    return ok;
}

int cmd_trace_gen(int argc, char **argv) {
    moe_trace_gen_params p = moe_trace_gen_default_params();
    const char *out = NULL, *model = NULL;
    bool bad = false, fixed = false;
    for (int i = 1; i < argc && !bad; i++) {
        int64_t v;
        double d;
        if (args_flag(argv, i, "-h|--help")) {
            fputs(g_usage, stdout);
            return FT_EXIT_OK;
        }
        if (args_str(argc, argv, &i, "-o|--out", &out, &bad) || args_str(argc, argv, &i, "--model", &model, &bad))
            continue;
        if (args_int(argc, argv, &i, "--layers", 1, MOE_TRACE_MAX_LAYERS, &v, &bad)) p.n_layers = (int)v;
        else if (args_int(argc, argv, &i, "--experts", 1, 65535, &v, &bad)) p.n_expert = (int)v;
        else if (args_int(argc, argv, &i, "--top-k", 1, 65535, &v, &bad)) p.top_k = (int)v;
        else if (args_int(argc, argv, &i, "--seqs", 1, MOE_TRACE_MAX_SEQ, &v, &bad)) p.n_seq = (int)v;
        else if (args_int(argc, argv, &i, "--steps", 1, INT64_MAX, &v, &bad)) p.n_steps = v;
        else if (args_int(argc, argv, &i, "--seed", 0, INT64_MAX, &v, &bad)) p.seed = (uint64_t)v;
        else if (args_int(argc, argv, &i, "--window", 1, 1000000, &v, &bad)) p.reuse_window = (int)v, fixed = true;
        else if (args_float(argc, argv, &i, "--zipf", &d, &bad)) p.zipf_s = d, fixed = true;
        else if (args_float(argc, argv, &i, "--reuse", &d, &bad)) p.reuse = d, fixed = true;
        else {
            fprintf(stderr, "ft trace-gen: unexpected argument '%s' (see ft trace-gen --help)\n", argv[i]);
            return FT_EXIT_USAGE;
        }
    }
    if (bad) return FT_EXIT_USAGE;
    if (!out) {
        fputs(g_usage, stderr);
        return FT_EXIT_USAGE;
    }
    int *layers = NULL;
    if (model && !shape_from_model(model, &p, &layers)) return FT_EXIT_INPUT;
    ft_err err = {{0}};
    if (!fixed && !moe_trace_gen_calibrate(&p, &err)) {
        fprintf(stderr, "ft trace-gen: %s (give --zipf, --reuse and --window instead)\n", err.msg);
        free(layers);
        return FT_EXIT_INPUT;
    }
    moe_route_trace t;
    if (!moe_trace_generate(&p, &t, &err)) {
        fprintf(stderr, "ft trace-gen: %s\n", err.msg);
        free(layers);
        return FT_EXIT_INPUT;
    }
    int rc = FT_EXIT_OK;
    if (!moe_route_trace_write(&t, out, &err)) {
        fprintf(stderr, "ft trace-gen: %s\n", err.msg);
        rc = FT_EXIT_INPUT;
    } else {
        printf("%s: %d layers, %d experts, top-%d, %d sequence%s, %lld steps; zipf %.3f, reuse %.3f over %d "
               "steps, seed %llu\n",
               out, p.n_layers, p.n_expert, p.top_k, p.n_seq, p.n_seq == 1 ? "" : "s", (long long)p.n_steps,
               p.zipf_s, p.reuse, p.reuse_window, (unsigned long long)p.seed);
        int need = p.n_seq * p.top_k;
        const int fractions[2] = {8, 4};
        for (int f = 0; f < 2; f++) {
            int slots = p.n_expert / fractions[f];
            if (slots < need) continue;
            int64_t warmup = p.n_steps / 10;
            printf("  LRU holding %d of %d experts per layer (%.1f%%): hit rate %.3f\n", slots, p.n_expert,
                   100.0 / fractions[f], moe_route_trace_lru_hit_rate(&t, slots, warmup));
        }
    }
    moe_route_trace_free(&t);
    free(layers);
    return rc;
}
