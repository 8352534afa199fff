// cmd_trace_gen.c: `ft trace-gen -o FILE.ftrt [shape] [options]`: writes a route trace (the
// format in src/moe/route_trace.h) whose routing has the popularity skew and temporal reuse of
// real models, for benchmarks to replay with --moe-route-trace.
//
// The shape comes from a model (--model M.gguf: its MoE layers, expert count and top-k) or from
// --layers/--experts/--top-k. By default the generator is calibrated for that shape so that an
// LRU holding 12.5% of a layer's experts hits about 65%, 25% about 80%; --repeat-next and
// --repeat-recent calibrate it instead for measured reuse levels, with per-layer skews
// (--zipf, --zipf-max); --zipf/--reuse/--window alone set the generator by hand.
// --predict-accuracy adds a next-layer predictor's guesses (format version 2); --like names a
// preset of all of these. What the written trace measures is printed: reuse, the skews, the
// LRU's hit rates and their spread over layers, the predictions' accuracy.
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
    "                     generator parameters instead of calibrating them for the shape\n"
    "  --zipf-max S2      heterogeneous layers: skews spread evenly over [--zipf, S2], dealt to\n"
    "                     the layers in a seeded order (--zipf defaults to 0 with it)\n"
    "  --repeat-next F    calibrate the reuse so that a share F of a layer's selections repeat\n"
    "                     the sequence's previous step\n"
    "  --repeat-recent F  and a share F repeat one of its last --recent-window steps\n"
    "  --recent-window W  the window of --repeat-recent (default 8)\n"
    "  --predict-accuracy A\n"
    "                     store a next-layer predictor's guesses, each right with chance A\n"
    "  --like NAME        a preset: qwen3-30b-a3b (48 layers, 128 experts, top-8 unless given;\n"
    "                     skews 0.2-1.6, repeat 0.45 next and 0.80 within 8, predictor 0.85)\n";

// Presets of published routing statistics (figures the issue cites for Qwen3-30B-A3B:
// about 45% of a layer's selections repeat at the next token and 80% within 8; next-layer
// predictability 70-95% depending on the predictor, 0.85 between those).
typedef struct {
    const char *name;
    int n_layers, n_expert, top_k;
    double zipf_lo, zipf_hi, repeat_next, repeat_recent, predict;
    int window;
} trace_preset;

static const trace_preset g_presets[] = {
    {"qwen3-30b-a3b", 48, 128, 8, 0.2, 1.6, 0.45, 0.80, 0.85, 8},
};

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

// Prints what the trace measures: reuse, the LRU's hit rates (in all and their spread over
// layers) and the predictions' accuracy.
static void print_measured(const moe_route_trace *t, const moe_trace_gen_params *p, int window) {
    double next, recent;
    moe_route_trace_reuse(t, -1, window, &next, &recent);
    double lo_n = 1, hi_n = 0;
    for (int li = 0; li < t->n_layers; li++) {
        double n1, nw;
        moe_route_trace_reuse(t, li, window, &n1, &nw);
        lo_n = FT_MIN(lo_n, n1);
        hi_n = FT_MAX(hi_n, n1);
    }
    printf("  reuse: %.3f of the selections repeat the step before (layers %.3f to %.3f), %.3f within %d steps\n",
           next, lo_n, hi_n, recent, window);
    int need = p->n_seq * p->top_k;
    const int fractions[2] = {8, 4};
    int64_t warmup = p->n_steps / 10;
    for (int f = 0; f < 2; f++) {
        int slots = p->n_expert / fractions[f];
        if (slots < need) continue;
        printf("  LRU holding %d of %d experts per layer (%.1f%%): hit rate %.3f", slots, p->n_expert,
               100.0 / fractions[f], moe_route_trace_lru_hit_rate(t, slots, warmup));
        if (t->n_layers > 1 && p->n_steps > warmup) {
            // each layer alone: how differently the layers use the same slots
            moe_route_trace one = *t;
            double lo = 1, hi = 0;
            uint16_t *ids = ft_malloc((size_t)t->n_steps * (size_t)t->n_seq * (size_t)t->top_k * sizeof(uint16_t));
            for (int li = 0; li < t->n_layers; li++) {
                size_t group = (size_t)t->n_seq * (size_t)t->top_k;
                for (int64_t st = 0; st < t->n_steps; st++)
                    memcpy(ids + (size_t)st * group, moe_route_trace_at(t, st, li), group * sizeof(uint16_t));
                one.n_layers = 1;
                one.layers = &t->layers[li];
                one.experts = ids;
                one.predicted = NULL;
                double h = moe_route_trace_lru_hit_rate(&one, slots, warmup);
                lo = FT_MIN(lo, h);
                hi = FT_MAX(hi, h);
            }
            free(ids);
            printf(" (layers %.3f to %.3f)", lo, hi);
        }
        printf("\n");
    }
    if (t->predicted) printf("  predictions: accuracy %.3f\n", moe_route_trace_predict_accuracy(t, -1));
}

int cmd_trace_gen(int argc, char **argv) {
    moe_trace_gen_params p = moe_trace_gen_default_params();
    const char *out = NULL, *model = NULL, *like = NULL;
    bool bad = false, fixed = false, zipf_given = false, shape_given[3] = {false, false, false};
    double repeat_next = -1, repeat_recent = -1;
    int recent_window = 8;
    for (int i = 1; i < argc && !bad; i++) {
        int64_t v;
        double d;
        if (args_flag(argv, i, "-h|--help")) {
            fputs(g_usage, stdout);
            return FT_EXIT_OK;
        }
        if (args_str(argc, argv, &i, "-o|--out", &out, &bad) || args_str(argc, argv, &i, "--model", &model, &bad) ||
            args_str(argc, argv, &i, "--like", &like, &bad))
            continue;
        if (args_int(argc, argv, &i, "--layers", 1, MOE_TRACE_MAX_LAYERS, &v, &bad)) p.n_layers = (int)v, shape_given[0] = true;
        else if (args_int(argc, argv, &i, "--experts", 1, 65535, &v, &bad)) p.n_expert = (int)v, shape_given[1] = true;
        else if (args_int(argc, argv, &i, "--top-k", 1, 65535, &v, &bad)) p.top_k = (int)v, shape_given[2] = true;
        else if (args_int(argc, argv, &i, "--seqs", 1, MOE_TRACE_MAX_SEQ, &v, &bad)) p.n_seq = (int)v;
        else if (args_int(argc, argv, &i, "--steps", 1, INT64_MAX, &v, &bad)) p.n_steps = v;
        else if (args_int(argc, argv, &i, "--seed", 0, INT64_MAX, &v, &bad)) p.seed = (uint64_t)v;
        else if (args_int(argc, argv, &i, "--window", 1, 1000000, &v, &bad)) p.reuse_window = (int)v, fixed = true;
        else if (args_float(argc, argv, &i, "--zipf", &d, &bad)) p.zipf_s = d, zipf_given = true;
        else if (args_float(argc, argv, &i, "--zipf-max", &d, &bad)) p.zipf_max = d;
        else if (args_float(argc, argv, &i, "--reuse", &d, &bad)) p.reuse = d, fixed = true;
        else if (args_float(argc, argv, &i, "--repeat-next", &d, &bad)) repeat_next = d;
        else if (args_float(argc, argv, &i, "--repeat-recent", &d, &bad)) repeat_recent = d;
        else if (args_int(argc, argv, &i, "--recent-window", 1, 1000000, &v, &bad)) recent_window = (int)v;
        else if (args_float(argc, argv, &i, "--predict-accuracy", &d, &bad)) p.predict_accuracy = d;
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
    if (like) { // the preset fills what the command line left out
        const trace_preset *pr = NULL;
        for (size_t i = 0; i < FT_ARRAY_LEN(g_presets); i++)
            if (!strcmp(like, g_presets[i].name)) pr = &g_presets[i];
        if (!pr) {
            fprintf(stderr, "ft trace-gen: --like takes qwen3-30b-a3b, not '%s'\n", like);
            return FT_EXIT_USAGE;
        }
        if (!shape_given[0] && !model) p.n_layers = pr->n_layers;
        if (!shape_given[1] && !model) p.n_expert = pr->n_expert;
        if (!shape_given[2] && !model) p.top_k = pr->top_k;
        if (!zipf_given) p.zipf_s = pr->zipf_lo, zipf_given = true;
        if (p.zipf_max < 0) p.zipf_max = pr->zipf_hi;
        if (repeat_next < 0) repeat_next = pr->repeat_next;
        if (repeat_recent < 0) repeat_recent = pr->repeat_recent;
        if (p.predict_accuracy == 0) p.predict_accuracy = pr->predict;
        recent_window = pr->window;
    }
    bool targets = repeat_next >= 0 || repeat_recent >= 0;
    if (targets && (repeat_next < 0 || repeat_recent < 0 || fixed)) {
        fprintf(stderr, "ft trace-gen: --repeat-next and --repeat-recent go together, without --reuse and --window\n");
        return FT_EXIT_USAGE;
    }
    if (p.zipf_max >= 0 && !zipf_given) p.zipf_s = 0;
    if (!targets && !fixed && (zipf_given || p.zipf_max >= 0)) {
        fprintf(stderr, "ft trace-gen: --zipf and --zipf-max take --reuse (by hand) or --repeat-next and "
                        "--repeat-recent (calibrated)\n");
        return FT_EXIT_USAGE;
    }
    fixed |= zipf_given && !targets;
    int *layers = NULL;
    if (model && !shape_from_model(model, &p, &layers)) return FT_EXIT_INPUT;
    ft_err err = {{0}};
    bool ok = true;
    if (targets) ok = moe_trace_gen_calibrate_reuse(&p, repeat_next, repeat_recent, recent_window, &err);
    else if (!fixed) ok = moe_trace_gen_calibrate(&p, &err);
    if (!ok) {
        fprintf(stderr, "ft trace-gen: %s%s\n", err.msg, targets ? "" : " (give --zipf, --reuse and --window instead)");
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
        printf("%s: %d layers, %d experts, top-%d, %d sequence%s, %lld steps; ", out, p.n_layers, p.n_expert, p.top_k,
               p.n_seq, p.n_seq == 1 ? "" : "s", (long long)p.n_steps);
        if (p.zipf_max >= 0) printf("zipf %.3f to %.3f over the layers", p.zipf_s, p.zipf_max);
        else printf("zipf %.3f", p.zipf_s);
        if (p.reuse_next > 0) printf(", reuse %.3f of the step before", p.reuse_next);
        printf(", reuse %.3f over %d steps", p.reuse, p.reuse_window);
        if (p.predict_accuracy > 0) printf(", predictions right with chance %.3f", p.predict_accuracy);
        printf(", seed %llu\n", (unsigned long long)p.seed);
        if (targets)
            printf("  calibrated for %.3f of the selections repeating the step before and %.3f within %d\n",
                   repeat_next, repeat_recent, recent_window);
        print_measured(&t, &p, targets ? recent_window : 8);
    }
    moe_route_trace_free(&t);
    free(layers);
    return rc;
}
