// bench_offload.c: decode and prefill speed of --moe-backend offload against fused, with the
// expert cache's figures (hit rate, host-to-device GB/s, missed MiB per token) and the
// transfer bound 1 / (missed bytes per token / copy bandwidth + resident time per token).
//
//   bench_offload laguna OUT.gguf MOE_LAYERS BF16_LAYERS
//       writes a Laguna-S-shaped model (hidden 3072, 256 experts, top-10, expert FFN 1024, one
//       leading dense layer) with MOE_LAYERS MoE layers, the last BF16_LAYERS of them bf16,
//       the others q4_K (the Qwen2 vocabulary from .gpuvocab when present)
//   bench_offload run MODEL [--fused] [--slots N] [--uniform] [--trace F] [--limit GIB]
//                 [--serial] [-p N] [-n N] [--resident-tps X]
//       one configuration: pp (tok/s), tg (tok/s: random tokens, one at a time) and the
//       cache's figures over the decode;
//       with --resident-tps (the fused tg of the same model) also the transfer bound.
// Built by hand on the GPU machine by bench/offload_bench.sh (docs/development.md).
#include "../src/backend/cuda/offload.h"
#include "../src/engine/engine.h"
#include "../src/model/synth.h"
#include "../src/util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmd_laguna(int argc, char **argv) {
    if (argc < 5) return fprintf(stderr, "usage: bench_offload laguna OUT MOE_LAYERS BF16_LAYERS\n"), 2;
    int n_moe = atoi(argv[3]), n_bf16 = atoi(argv[4]);
    ft_synth_params sp = ft_synth_default_params();
    sp.arch = "laguna";
    sp.name = "bench laguna-s shape";
    sp.n_layer = 1 + n_moe;
    sp.n_dense_lead = 1;
    sp.n_embd = 3072;
    sp.n_head = 24;
    sp.n_head_kv = 4;
    sp.head_dim = 128;
    sp.n_expert = 256;
    sp.n_expert_used = 10;
    sp.n_ff_exp = 1024;
    sp.n_ff_shexp = 1024;
    sp.n_ctx_train = 4096;
    sp.dense_type = FT_TYPE_Q8_0;
    sp.n_expert_types = sp.n_layer;
    for (int L = 0; L < sp.n_layer; L++) sp.expert_types[L] = L >= sp.n_layer - n_bf16 ? FT_TYPE_BF16 : FT_TYPE_Q4_K;
    FILE *v = fopen(".gpuvocab/ggml-vocab-qwen2.gguf", "rb");
    if (v) {
        fclose(v);
        sp.vocab_from = ".gpuvocab/ggml-vocab-qwen2.gguf";
    }
    ft_err err = {{0}};
    if (!ft_synth_write(&sp, argv[2], &err)) return fprintf(stderr, "synth: %s\n", err.msg), 1;
    return 0;
}

static int cmd_run(int argc, char **argv) {
    const char *path = argv[2], *trace = NULL;
    bool fused = false, uniform = false, serial = false;
    int slots = 0, n_prompt = 512, n_gen = 128;
    double limit_gib = 0, resident_tps = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--fused")) fused = true;
        else if (!strcmp(argv[i], "--uniform")) uniform = true;
        else if (!strcmp(argv[i], "--serial")) serial = true;
        else if (!strcmp(argv[i], "--slots") && i + 1 < argc) slots = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc) trace = argv[++i];
        else if (!strcmp(argv[i], "--limit") && i + 1 < argc) limit_gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) n_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--resident-tps") && i + 1 < argc) resident_tps = atof(argv[++i]);
        else return fprintf(stderr, "bench_offload run: unknown option %s\n", argv[i]), 2;
    }
    ft_err err = {{0}};
    ft_model *m = ft_model_load(path, &err);
    if (!m) return fprintf(stderr, "%s\n", err.msg), 1;
    ft_engine_params ep = ft_engine_default_params();
    ep.device = FT_PLACEMENT_CUDA;
    ep.n_ctx = n_prompt + n_gen + 8;
    ep.n_batch = n_prompt;
    ep.gpu_memory_limit = (size_t)(limit_gib * 1073741824.0);
    ep.moe_backend = fused ? FT_MOE_BACKEND_FUSED : FT_MOE_BACKEND_OFFLOAD;
    ep.moe_cache_size = slots;
    ep.moe_pool_layout = uniform;
    ep.moe_prefill_serial = serial;
    ep.moe_route_trace = trace;
    double t0 = ft_time_s();
    if (!ft_engine_place_model(m, &ep, &err)) return fprintf(stderr, "place: %s\n", err.msg), 1;
    fprintf(stderr, "placed in %.1f s\n", ft_time_s() - t0);
    ft_engine *e = ft_engine_init(m, &ep, &err);
    if (!e) return fprintf(stderr, "%s\n", err.msg), 1;
    int n_vocab = m->hp.n_vocab;
    int32_t *prompt = malloc((size_t)n_prompt * sizeof(int32_t));
    uint64_t x = 12345;
    for (int i = 0; i < n_prompt; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)((x >> 33) % (uint64_t)n_vocab);
    }
    // a warm-up request first (graphs captured, cache warm), then the measured one
    double pp = 0, tg = 0;
    ft_offload_counts c0 = {0}, c1 = {0};
    for (int rep = 0; rep < 2; rep++) {
        ft_engine_reset(e);
        double a = ft_time_s();
        const float *l = ft_engine_eval(e, prompt, n_prompt, &err);
        if (!l) return fprintf(stderr, "%s\n", err.msg), 1;
        double b = ft_time_s();
        if (m->offload) ft_offload_read_counts(m->offload, NULL, NULL, &c0);
        double c = ft_time_s();
        // decode tokens drawn at random, not the argmax: a random-weight model's greedy decode
        // falls into short loops whose repeated routing a cache hits far more than real text
        // would (the first run of this bench measured 98.6% at a 25% cache that way)
        for (int s = 0; s < n_gen; s++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int32_t t = (int32_t)((x >> 33) % (uint64_t)n_vocab);
            l = ft_engine_eval(e, &t, 1, &err);
            if (!l) return fprintf(stderr, "%s\n", err.msg), 1;
        }
        double d = ft_time_s();
        if (m->offload) ft_offload_read_counts(m->offload, NULL, NULL, &c1);
        pp = n_prompt / (b - a);
        tg = n_gen / (d - c);
    }
    if (!m->offload) {
        printf("fused: pp%d %.1f tok/s, tg%d %.1f tok/s\n", n_prompt, pp, n_gen, tg);
    } else {
        const moe_cache_plan *pl = ft_offload_plan(m->offload);
        uint64_t sel = c1.selections - c0.selections, hits = c1.hits - c0.hits, bytes = c1.bytes_copied - c0.bytes_copied,
                 ns = c1.copy_ns - c0.copy_ns;
        double gbps = ns ? (double)bytes / (double)ns : 0, mib_tok = bytes / 1048576.0 / n_gen;
        printf("offload N %d %s%s%s: pp%d %.1f tok/s, tg%d %.1f tok/s, hit rate %.3f, %.1f MiB missed per token, "
               "copies %.1f GB/s",
               pl->n_slots, pl->layout == MOE_POOL_LAYOUT_UNIFORM ? "uniform" : "exact", serial ? " serial" : "",
               trace ? " trace" : "", n_prompt, pp, n_gen, tg, sel ? (double)hits / (double)sel : 0.0, mib_tok, gbps);
        if (resident_tps > 0 && gbps > 0) {
            double bound = 1.0 / ((double)bytes / n_gen / (gbps * 1e9) + 1.0 / resident_tps);
            printf(", transfer bound %.1f tok/s (%.0f%% of it)", bound, 100.0 * tg / bound);
        }
        printf("\n");
    }
    free(prompt);
    ft_engine_free(e);
    ft_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "laguna")) return cmd_laguna(argc, argv);
    if (argc >= 3 && !strcmp(argv[1], "run")) return cmd_run(argc, argv);
    fprintf(stderr, "usage: bench_offload laguna OUT MOE_LAYERS BF16_LAYERS | run MODEL [options]\n");
    return 2;
}
