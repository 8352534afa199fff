// cmd_replay.c: `ft replay TRACE.ftrt [--model M.gguf] [cache size] [options] [--json]`: replays a
// route trace through the expert cache's C reference (src/moe/cache_replay.h) and sets the
// policies side by side on the same trace and slots: the LRU of fixed ranges, self-sizing layers,
// both again with frecency victims, Belady's optimum for fixed ranges and for slots shared by a
// pool's layers; with a trace that carries predictions, the LRU with prefetch (predicted, used,
// wasted, accuracy). Per layer with --per-layer (always in --json). No GPU and no model weights
// are needed: the geometry comes from the model's header (--model) or, without one, every traced
// layer is one geometry.
#include "cli.h"
#include "args.h"
#include "../gguf/gguf.h"
#include "../moe/cache_plan.h"
#include "../moe/cache_replay.h"
#include "../moe/geometry.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_usage =
    "usage: ft replay TRACE.ftrt [--model M.gguf] [--slots-per-layer S | --moe-cache-size N] [options]\n"
    "Replays a route trace (ft trace-gen) through the expert cache's C reference: the LRU of fixed\n"
    "ranges, self-sizing layers (the engine's --moe-layer-slots adaptive), both with frecency\n"
    "victims (the engine's default), and Belady's optimum on the same slots; prefetch where the\n"
    "trace carries predictions.\n"
    "  --model M.gguf         the model's expert geometry and pools (else one geometry, copies only)\n"
    "  --slots-per-layer S    a cache of S x MoE layers slots (default: an eighth of the experts)\n"
    "  --moe-cache-size N     a cache of N slots, priced as --moe-cache-size\n"
    "  --moe-pool-layout L    exact (default) or uniform\n"
    "  --warmup N             trace steps not counted (default a tenth)\n"
    "  --ghost G              self-sizing: shadow tags per layer (default 32)\n"
    "  --period P             self-sizing: tokens between rebalances (default 32)\n"
    "  --max-moves K          self-sizing: slot moves per pool and rebalance (default 32)\n"
    "  --min-gain M           self-sizing: margin of a move's gain over its loss (default 1)\n"
    "  --prefetch-copies N    prefetch: copies a layer's step at most, best guesses first (default 1,\n"
    "                         the engine's)\n"
    "  --per-layer            a line per layer\n"
    "  --json                 one JSON object on one line (per layer included)\n";

typedef struct {
    const char *name;
    moe_replay_result r;
} arm;

static double hit_rate(const moe_cache_stats *s) {
    return s->selections ? (double)s->hits / (double)s->selections : 0.0;
}

// Reads a model's MoE geometry (the MTP blocks after the trunk left out).
static bool model_geometry(const char *path, moe_geometry *g) {
    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    if (!f) {
        fprintf(stderr, "ft replay: %s\n", err.msg);
        return false;
    }
    bool ok = moe_geometry_read(f, g, &err);
    if (!ok) fprintf(stderr, "ft replay: %s: %s\n", path, err.msg);
    gguf_str arch = {"", 0};
    gguf_get_str(f, "general.architecture", &arch);
    char key[128];
    int64_t n_block, n_mtp;
    snprintf(key, sizeof(key), "%.*s.nextn_predict_layers", (int)(arch.len < 64 ? arch.len : 64), arch.ptr);
    if (ok && gguf_get_int(f, key, &n_mtp) && n_mtp > 0) {
        snprintf(key, sizeof(key), "%.*s.block_count", (int)(arch.len < 64 ? arch.len : 64), arch.ptr);
        if (gguf_get_int(f, key, &n_block) && n_block > n_mtp) moe_geometry_keep_below(g, (int)(n_block - n_mtp));
    }
    gguf_close(f);
    if (ok && g->n_layers == 0) {
        fprintf(stderr, "ft replay: %s has no routed experts\n", path);
        moe_geometry_free(g);
        ok = false;
    }
    return ok;
}

static json_t *stats_json(const moe_cache_stats *s, int64_t steps) {
    return json_pack("{s:f, s:I, s:I, s:I, s:f, s:I}", "hit_rate", hit_rate(s), "selections", (json_int_t)s->selections,
                     "hits", (json_int_t)s->hits, "misses", (json_int_t)s->misses, "misses_per_step",
                     steps ? (double)s->misses / (double)steps : 0.0, "bytes_copied", (json_int_t)s->bytes_copied);
}

int cmd_replay(int argc, char **argv) {
    const char *trace_path = NULL, *model = NULL, *layout = NULL;
    bool bad = false, json = false, per_layer = false;
    int64_t slots_per_layer = 0, n_slots = 0, warmup = -1;
    int pf_copies = MOE_PREFETCH_DEFAULT_COPIES;
    moe_cache_policy_params sizing = moe_cache_sizing_default_params();
    for (int i = 1; i < argc && !bad; i++) {
        int64_t v;
        if (args_flag(argv, i, "-h|--help")) {
            fputs(g_usage, stdout);
            return FT_EXIT_OK;
        }
        if (args_flag(argv, i, "--json")) json = true;
        else if (args_flag(argv, i, "--per-layer")) per_layer = true;
        else if (args_str(argc, argv, &i, "--model", &model, &bad)) {}
        else if (args_str(argc, argv, &i, "--moe-pool-layout", &layout, &bad)) {}
        else if (args_int(argc, argv, &i, "--slots-per-layer", 1, 65535, &v, &bad)) slots_per_layer = v;
        else if (args_int(argc, argv, &i, "--moe-cache-size", 1, INT32_MAX, &v, &bad)) n_slots = v;
        else if (args_int(argc, argv, &i, "--warmup", 0, INT64_MAX, &v, &bad)) warmup = v;
        else if (args_int(argc, argv, &i, "--ghost", 1, 64, &v, &bad)) sizing.ghost_depth = (int)v;
        else if (args_int(argc, argv, &i, "--period", 1, 1000000, &v, &bad)) sizing.period = (int)v;
        else if (args_int(argc, argv, &i, "--max-moves", 0, 65535, &v, &bad)) sizing.max_moves = (int)v;
        else if (args_int(argc, argv, &i, "--min-gain", 0, 1000000, &v, &bad)) sizing.min_gain = (int)v;
        else if (args_int(argc, argv, &i, "--prefetch-copies", 1, 65535, &v, &bad)) pf_copies = (int)v;
        else if (argv[i][0] == '-' || trace_path) {
            fprintf(stderr, "ft replay: unexpected argument '%s' (see ft replay --help)\n", argv[i]);
            return FT_EXIT_USAGE;
        } else trace_path = argv[i];
    }
    if (bad) return FT_EXIT_USAGE;
    if (!trace_path || (slots_per_layer && n_slots) ||
        (layout && strcmp(layout, "exact") && strcmp(layout, "uniform"))) {
        fputs(g_usage, stderr);
        return FT_EXIT_USAGE;
    }
    ft_err err = {{0}};
    moe_route_trace t;
    if (!moe_route_trace_read(trace_path, &t, &err)) {
        fprintf(stderr, "ft replay: %s\n", err.msg);
        return FT_EXIT_INPUT;
    }
    moe_geometry g = {0};
    if (model) {
        if (!model_geometry(model, &g)) {
            moe_route_trace_free(&t);
            return FT_EXIT_INPUT;
        }
    } else { // every traced layer one geometry of one byte a bank: one pool, figures in copies
        moe_layer_geometry *lg = ft_calloc((size_t)t.n_layers, sizeof(*lg));
        for (int li = 0; li < t.n_layers; li++)
            lg[li] = (moe_layer_geometry){.layer = t.layers[li], .n_expert = t.n_expert, .bytes = {1, 1, 1}};
        moe_geometry_from_layers(lg, t.n_layers, &g);
        free(lg);
    }
    moe_cache_plan_params pp = moe_cache_plan_default_params();
    pp.top_k = t.top_k;
    pp.n_running = t.n_seq;
    if (!model) pp.view_align = 1;
    if (layout && !strcmp(layout, "uniform")) pp.layout = MOE_POOL_LAYOUT_UNIFORM;
    if (!n_slots) n_slots = (slots_per_layer ? slots_per_layer : FT_MAX(1, t.n_expert / 8)) * (int64_t)g.n_layers;
    pp.n_slots = (int)FT_MIN(n_slots, INT32_MAX);
    if (warmup < 0) warmup = t.n_steps / 10;
    moe_cache_plan plan = {0};
    int rc = FT_EXIT_INPUT;
    enum { LRU, SIZING, FREC, FREC_SIZING, BELADY_FIXED, BELADY_POOL, PREFETCH, N_ARMS };
    arm arms[N_ARMS] = {{"LRU, fixed ranges", {0}},    {"self-sizing layers", {0}},
                        {"frecency, fixed ranges", {0}}, {"frecency, self-sizing", {0}},
                        {"Belady, fixed ranges", {0}}, {"Belady, pool-wide", {0}},
                        {"LRU with prefetch", {0}}};
    if (!moe_cache_plan_make(&g, &pp, &plan, &err)) {
        fprintf(stderr, "ft replay: %s\n", err.msg);
        goto done;
    }
    moe_replay_params rp = moe_replay_default_params();
    rp.warmup = warmup;
    bool ok = moe_cache_replay_params(&plan, &g, &t, &rp, &arms[LRU].r, &err);
    rp.policy = sizing;
    ok = ok && moe_cache_replay_params(&plan, &g, &t, &rp, &arms[SIZING].r, &err);
    rp.policy = moe_cache_policy_default_params();
    rp.policy.victims = MOE_VICTIMS_FRECENCY;
    ok = ok && moe_cache_replay_params(&plan, &g, &t, &rp, &arms[FREC].r, &err);
    rp.policy = sizing;
    rp.policy.victims = MOE_VICTIMS_FRECENCY;
    ok = ok && moe_cache_replay_params(&plan, &g, &t, &rp, &arms[FREC_SIZING].r, &err);
    ok = ok && moe_cache_replay_belady(&plan, &g, &t, warmup, false, &arms[BELADY_FIXED].r, &err);
    ok = ok && moe_cache_replay_belady(&plan, &g, &t, warmup, true, &arms[BELADY_POOL].r, &err);
    if (ok && t.predicted) {
        rp = moe_replay_default_params();
        rp.warmup = warmup;
        rp.prefetch = true;
        rp.prefetch_copies = pf_copies;
        ok = moe_cache_replay_params(&plan, &g, &t, &rp, &arms[PREFETCH].r, &err);
    }
    if (!ok) {
        fprintf(stderr, "ft replay: %s\n", err.msg);
        goto done;
    }
    int total_slots = 0;
    for (int k = 0; k < plan.n_pools; k++) total_slots += plan.pools[k].n_slots;
    int n_arms = t.predicted ? N_ARMS : PREFETCH;
    int64_t steps = arms[LRU].r.steps;
    moe_replay_result *pf = t.predicted ? &arms[PREFETCH].r : NULL;
    uint64_t guessed = 0, right = 0, fetched = 0, used = 0, used_b = 0, wasted_b = 0;
    for (int li = 0; pf && li < t.n_layers; li++) {
        guessed += pf->layers[li].guessed;
        right += pf->layers[li].guessed_right;
        fetched += pf->layers[li].prefetched;
        used += pf->layers[li].prefetch_used;
        used_b += pf->layers[li].prefetch_used_bytes;
        wasted_b += pf->layers[li].prefetch_wasted_bytes;
    }
    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "trace", json_pack("{s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:b}", "path", trace_path,
                                                  "layers", t.n_layers, "experts", t.n_expert, "top_k", t.top_k,
                                                  "sequences", t.n_seq, "steps", (json_int_t)t.n_steps, "warmup",
                                                  (json_int_t)warmup, "predictions", t.predicted != NULL));
        json_object_set_new(o, "cache", json_pack("{s:i, s:i, s:i, s:s, s:b}", "moe_cache_size", plan.n_slots,
                                                  "slots", total_slots, "pools", plan.n_pools, "layout",
                                                  plan.layout == MOE_POOL_LAYOUT_EXACT ? "exact" : "uniform",
                                                  "model", model != NULL));
        json_object_set_new(o, "self_sizing", json_pack("{s:i, s:i, s:i, s:i, s:I}", "ghost", sizing.ghost_depth,
                                                        "period", sizing.period, "max_moves", sizing.max_moves,
                                                        "min_gain", sizing.min_gain, "moves",
                                                        (json_int_t)arms[SIZING].r.moves));
        static const char *const keys[N_ARMS] = {"lru",          "self_sizing", "frecency",    "frecency_self_sizing",
                                                 "belady_fixed", "belady_pool", "lru_prefetch"};
        json_t *pol = json_object();
        for (int a = 0; a < n_arms; a++) json_object_set_new(pol, keys[a], stats_json(&arms[a].r.total, steps));
        json_object_set_new(o, "policies", pol);
        if (pf)
            json_object_set_new(o, "prefetch", json_pack("{s:f, s:I, s:I, s:I, s:I, s:I}", "accuracy",
                                                         guessed ? (double)right / (double)guessed : 0.0, "guessed",
                                                         (json_int_t)guessed, "prefetched", (json_int_t)fetched, "used",
                                                         (json_int_t)used, "used_bytes", (json_int_t)used_b,
                                                         "wasted_bytes", (json_int_t)wasted_b));
        json_t *layers = json_array();
        for (int li = 0; li < t.n_layers; li++) {
            json_t *l = json_pack("{s:i, s:i, s:i, s:i}", "layer", t.layers[li], "pool", arms[LRU].r.layers[li].pool,
                                  "slots_fixed", arms[LRU].r.layers[li].slots, "slots_self_sizing",
                                  arms[SIZING].r.layers[li].slots);
            for (int a = 0; a < n_arms; a++)
                json_object_set_new(l, keys[a], json_real(hit_rate(&arms[a].r.layers[li].stats)));
            if (pf) {
                const moe_replay_layer *pl = &pf->layers[li];
                json_object_set_new(l, "prefetch", json_pack("{s:f, s:I, s:I, s:I, s:I}", "accuracy",
                                                             pl->guessed ? (double)pl->guessed_right / (double)pl->guessed : 0.0,
                                                             "prefetched", (json_int_t)pl->prefetched, "used",
                                                             (json_int_t)pl->prefetch_used, "used_bytes",
                                                             (json_int_t)pl->prefetch_used_bytes, "wasted_bytes",
                                                             (json_int_t)pl->prefetch_wasted_bytes));
            }
            json_array_append_new(layers, l);
        }
        json_object_set_new(o, "layers", layers);
        char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        printf("replay of %s: %d layers, %d experts, top-%d, %d sequence%s, %lld steps (the first %lld not counted)%s\n",
               trace_path, t.n_layers, t.n_expert, t.top_k, t.n_seq, t.n_seq == 1 ? "" : "s", (long long)t.n_steps,
               (long long)warmup, t.predicted ? ", with predictions" : "");
        printf("cache: %d slots (--moe-cache-size %d, %s layout) in %d pool%s, %.1f per layer (%.1f%% of the experts)%s\n",
               total_slots, plan.n_slots, plan.layout == MOE_POOL_LAYOUT_EXACT ? "exact" : "uniform", plan.n_pools,
               plan.n_pools == 1 ? "" : "s", (double)total_slots / g.n_layers,
               100.0 * total_slots / ((double)g.n_layers * t.n_expert), model ? "" : "; no model: copies only");
        printf("self-sizing: %d shadow tags per layer, a rebalance every %d tokens, at most %d moves, margin %d\n",
               sizing.ghost_depth, sizing.period, sizing.max_moves, sizing.min_gain);
        for (int a = 0; a < n_arms; a++) {
            const moe_cache_stats *s = &arms[a].r.total;
            printf("  %-22s hit rate %.4f  %7.2f copies/step", arms[a].name, hit_rate(s),
                   (double)s->misses / (double)steps);
            if (model) printf("  %8.1f MiB/step", (double)s->bytes_copied / (double)steps / 1048576.0);
            if (a == SIZING || a == FREC_SIZING)
                printf("  (%llu slot moves)", (unsigned long long)arms[a].r.moves);
            if (a == PREFETCH) printf("  (demand misses; prefetch copies below)");
            printf("\n");
        }
        double lru = hit_rate(&arms[LRU].r.total), ss = hit_rate(&arms[SIZING].r.total);
        double fs = hit_rate(&arms[FREC_SIZING].r.total), bf = hit_rate(&arms[BELADY_FIXED].r.total);
        double bp = hit_rate(&arms[BELADY_POOL].r.total);
        printf("  self-sizing against the LRU: %+.2f points; Belady pool-wide above self-sizing: %.2f points, above "
               "the LRU %.2f\n", 100 * (ss - lru), 100 * (bp - ss), 100 * (bp - lru));
        printf("  frecency with self-sizing against the LRU: %+.2f points; Belady above it: %.2f points (fixed "
               "ranges), %.2f (pool-wide)\n", 100 * (fs - lru), 100 * (bf - fs), 100 * (bp - fs));
        if (pf)
            printf("  prefetch (at most %d copies a layer's step): accuracy %.4f (%llu guesses); %.2f prefetch "
                   "copies/step: %.2f used, %.2f wasted (%.1f%% used)\n",
                   pf_copies, guessed ? (double)right / (double)guessed : 0.0, (unsigned long long)guessed,
                   (double)fetched / (double)steps, (double)used / (double)steps,
                   (double)(fetched - used) / (double)steps, fetched ? 100.0 * (double)used / (double)fetched : 0.0);
        if (pf && model)
            printf("            %.1f MiB used and %.1f MiB wasted per step\n", (double)used_b / (double)steps / 1048576.0,
                   (double)wasted_b / (double)steps / 1048576.0);
        if (per_layer) {
            printf("  %6s %5s %6s %6s %8s %8s %8s %8s %8s %8s", "layer", "pool", "slots", "sized", "LRU", "sizing",
                   "frec.", "f.sizing", "B.fixed", "B.pool");
            if (pf) printf(" %8s %8s %8s", "+pref.", "accur.", "used");
            printf("\n");
            for (int li = 0; li < t.n_layers; li++) {
                printf("  %6d %5d %6d %6d", t.layers[li], arms[LRU].r.layers[li].pool, arms[LRU].r.layers[li].slots,
                       arms[SIZING].r.layers[li].slots);
                for (int a = 0; a < n_arms; a++) printf(" %8.4f", hit_rate(&arms[a].r.layers[li].stats));
                if (pf) {
                    const moe_replay_layer *pl = &pf->layers[li];
                    printf(" %8.4f %8.4f", pl->guessed ? (double)pl->guessed_right / (double)pl->guessed : 0.0,
                           pl->prefetched ? (double)pl->prefetch_used / (double)pl->prefetched : 0.0);
                }
                printf("\n");
            }
        }
    }
    rc = FT_EXIT_OK;
done:
    for (int a = 0; a < N_ARMS; a++) moe_replay_result_free(&arms[a].r);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
    moe_route_trace_free(&t);
    return rc;
}
