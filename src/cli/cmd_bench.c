// cmd_bench.c: `ft bench [-m FILE.gguf] [-p 512] [-n 128] [-d 0] [-t N] [-r REPS] [--json]`: prompt
// and decode speed of the engine, the median over REPS runs, against the memory roofline.
//
// Each run starts from an empty sequence, evaluates d deterministic token ids (the depth,
// untimed: llama-bench's -d), then a prompt of p more in one ft_engine_eval call (prefill,
// timed) and then n more ids one at a time (decode, timed).
// No tokenizer and no sampling: the ids are a fixed function of the position, so ft and
// llama.cpp (bench/llama_bench.mjs) can be fed the same ones. An untimed warm-up run first
// faults the mapped weights in.
//
// The roofline: decode at batch 1 reads every dense weight and top-k experts per MoE layer once
// per token, so bytes_per_token (from the tensors' sizes; the token-embedding table counts one
// row, the KV cache is left out) over the machine's memory read bandwidth, measured in the same
// run with a threaded read of a buffer far larger than the caches, bounds decode speed.
#include "cli.h"
#include "args.h"
#include "bench_common.h"
#include "bench_parallel.h"
#include "cli_model.h"
#include "../backend/cpu/cpu.h"
#include "../engine/engine.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static void bench_usage(FILE *out) {
    fprintf(out,
            "usage: ft bench [-m FILE.gguf] [options]\n"
            "       ft bench bw [options]   (this machine's bandwidth profile: ft bench bw --help)\n"
            "Measures prompt (prefill) and decode speed over several runs and prints the medians, the\n"
            "model's bytes read per decoded token and the fraction of the measured memory bandwidth\n"
            "that decode reaches. Token ids are deterministic (no tokenizer). Without -m, uses the\n"
            "demo model (random weights) in ~/.cache/ft.\n\n"
            "  -m, --model FILE           the model\n"
            "  -p, --n-prompt N           prompt tokens (default 512)\n"
            "  -n, --n-gen N              decoded tokens after the prompt (default 128)\n"
            "  -d, --n-depth N            tokens already in the context before the prompt, prefilled\n"
            "                             untimed (llama-bench's -d; default 0): the prompt is timed\n"
            "                             at depth N, decode at depth N + p\n"
            "  -r, --reps N               timed runs; figures are their median (default 3)\n"
            "  --json                     one JSON line on stdout instead of the table\n"
            "  --parallel N[,N...]        instead: N sequences decoding together (llama-batched-bench's -npl):\n"
            "                             each prefills its own -p prompt, then -n steps decode one token of\n"
            "                             every sequence; prints the prompts' and the aggregate decode tok/s\n"
            "  --resident-tok-s T         offload: decode speed of the model fully resident on the GPU, for\n"
            "                             the transfer bound (default: measured with --moe-backend fused and\n"
            "                             no --gpu-memory-limit when the model fits the GPU whole)\n");
    engine_args a = engine_args_init("bench", ENGINE_ARGS_ROUTE_TRACE);
    engine_args_usage(out, &a);
    fprintf(out, "With an expert cache (--moe-backend offload) it also prints the decode's hit rate, misses and\n"
                 "host-to-device bytes per pool, the copies' GB/s, and decode against the transfer bound\n"
                 "1 / (missed bytes per token / copy GB/s + time per token fully resident).\n");
}

// The id of the token at position i (bench_common.h), as llama_bench.mjs feeds llama.cpp.
static int32_t bench_token(int i, int n_vocab) { return bench_token_salted(i, 0, n_vocab); }

// ---------------------------------------------------------------------------------------------
// Bytes per decoded token

static size_t tensor_bytes(const ft_tensor *t) {
    if (!ft_tensor_present(t)) return 0;
    return t->row_bytes * (size_t)t->ne[1] * (size_t)(t->ne[2] > 1 ? t->ne[2] : 1);
}

// A decoded token reads one row of the embedding table, every other dense weight, and for each
// MoE layer n_expert_used of the n_expert matrices of gate, up and down.
static size_t bytes_per_token(const ft_model *m) {
    size_t b = m->tok_embd.row_bytes + tensor_bytes(&m->output_norm) + tensor_bytes(&m->output);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const ft_layer *l = &m->layers[il];
        const ft_tensor *dense[] = {&l->attn_norm, &l->wq, &l->wk, &l->wv, &l->bq, &l->bk, &l->bv,
                                    &l->wo, &l->q_norm, &l->k_norm, &l->attn_gate, &l->ffn_norm,
                                    &l->router, &l->sel_bias, &l->gate_shexp, &l->up_shexp,
                                    &l->down_shexp, &l->gate_inp_shexp, &l->ffn_gate, &l->ffn_up,
                                    &l->ffn_down};
        for (size_t i = 0; i < sizeof(dense) / sizeof(dense[0]); i++) b += tensor_bytes(dense[i]);
        const ft_tensor *exps[] = {&l->gate_exps, &l->up_exps, &l->down_exps};
        for (size_t i = 0; i < 3; i++)
            if (ft_tensor_present(exps[i])) b += exps[i]->mat_bytes * (size_t)m->hp.n_expert_used;
    }
    return b;
}

// ---------------------------------------------------------------------------------------------
// Memory read bandwidth

typedef struct {
    const uint64_t *p;
    size_t n;         // words
    uint64_t sum;     // kept so the reads are not optimised away
    pthread_barrier_t *bar;
    double t0, t1;
} bw_slice;

// Sums n words with 256-bit loads: four independent accumulators keep enough loads in flight
// for one core to approach its share of the bandwidth (a scalar loop stays far below it).
__attribute__((target("avx2"))) static uint64_t bw_sum_avx2(const uint64_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
    }
    uint64_t lanes[4], sum = 0;
    _mm256_storeu_si256((__m256i *)lanes, _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    for (int k = 0; k < 4; k++) sum += lanes[k];
    for (; i < n; i++) sum += p[i];
    return sum;
}

static uint64_t bw_sum(const uint64_t *p, size_t n) {
    uint64_t a[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += p[i + k];
    for (; i < n; i++) a[0] += p[i];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

static void *bw_read(void *arg) {
    bw_slice *s = arg;
    bool avx2 = __builtin_cpu_supports("avx2");
    pthread_barrier_wait(s->bar);
    s->t0 = bench_now_s();
    s->sum = avx2 ? bw_sum_avx2(s->p, s->n) : bw_sum(s->p, s->n);
    s->t1 = bench_now_s();
    return NULL;
}

// The best of a few passes of n_threads threads reading disjoint slices of a 1 GiB buffer (far
// beyond any cache), in GB/s (1e9 bytes). Returns 0 when the buffer cannot be had.
static double measure_mem_bw(int n_threads) {
    const size_t bytes = (size_t)1 << 30, words = bytes / sizeof(uint64_t);
    uint64_t *buf = aligned_alloc((size_t)2 << 20, bytes);
    if (!buf) return 0;
    madvise(buf, bytes, MADV_HUGEPAGE); // fewer TLB misses; a hint, so its failure is harmless
    for (size_t i = 0; i < words; i++) buf[i] = i; // fault every page in before timing
    bw_slice s[64];
    pthread_t th[64];
    if (n_threads > 64) n_threads = 64;
    double best = 0;
    uint64_t sink = 0;
    for (int pass = 0; pass < 4; pass++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)n_threads);
        size_t per = words / (size_t)n_threads;
        for (int t = 0; t < n_threads; t++) {
            s[t] = (bw_slice){.p = buf + (size_t)t * per, .n = t + 1 == n_threads ? words - (size_t)t * per : per,
                              .bar = &bar};
            if (t > 0) pthread_create(&th[t], NULL, bw_read, &s[t]);
        }
        bw_read(&s[0]);
        double t0 = s[0].t0, t1 = s[0].t1;
        for (int t = 1; t < n_threads; t++) {
            pthread_join(th[t], NULL);
            if (s[t].t0 < t0) t0 = s[t].t0;
            if (s[t].t1 > t1) t1 = s[t].t1;
        }
        for (int t = 0; t < n_threads; t++) sink += s[t].sum;
        pthread_barrier_destroy(&bar);
        double gbs = (double)bytes / (t1 - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    free(buf);
    if (sink == 42) fprintf(stderr, " "); // keeps the sums alive
    return best;
}

// ---------------------------------------------------------------------------------------------
// The runs

// One run: n_depth tokens untimed, then prefill n_prompt tokens, then decode n_gen one by one.
// With an expert cache, adds what its counters saw during the decode to *moe_dec (read outside
// the timed windows). Returns false and sets *err.
static bool bench_once(ft_engine *e, const int32_t *ids, int n_depth, int n_prompt, int n_gen, double *prompt_s,
                       double *gen_s, ft_moe_stats *moe_dec, ft_err *err) {
    ft_engine_reset(e);
    if (n_depth > 0) {
        if (!ft_engine_eval(e, ids, n_depth, err)) return false;
        ids += n_depth;
    }
    double t0 = bench_now_s();
    if (n_prompt > 0 && !ft_engine_eval(e, ids, n_prompt, err)) return false;
    double t1 = bench_now_s();
    ft_moe_stats before = {0}, after = {0};
    bool moe = moe_dec && ft_engine_moe_stats(e, &before);
    double t1b = bench_now_s();
    for (int i = 0; i < n_gen; i++)
        if (!ft_engine_eval(e, &ids[n_prompt + i], 1, err)) return false;
    double t2 = bench_now_s();
    if (moe && ft_engine_moe_stats(e, &after)) {
        ft_moe_stats_sub(&after, &before);
        if (moe_dec->n_layers == 0) ft_moe_stats_copy(moe_dec, &after);
        else ft_moe_stats_add(moe_dec, &after);
    }
    ft_moe_stats_free(&before);
    ft_moe_stats_free(&after);
    *prompt_s = t1 - t0;
    *gen_s = t2 - t1b;
    return true;
}

// The decode speed of the same model fully resident on the GPU (--moe-backend fused, no
// --gpu-memory-limit): the transfer bound's time per token. Returns 0 and says why on stderr
// when the model does not fit the device whole.
static double resident_decode_tok_s(const ft_model *m, const ft_engine_params *ep, const int32_t *ids, int n_depth,
                                    int n_prompt, int n_gen, int reps) {
    ft_engine_params fp = *ep;
    fp.moe_backend = FT_MOE_BACKEND_FUSED;
    fp.gpu_memory_limit = 0;
    fp.moe_route_trace = NULL;
    ft_err err = {{0}};
    ft_engine *e = NULL;
    double tps[BENCH_MAX_REPS], ps, gs, med = 0;
    fprintf(stderr, "bench: the resident reference (--moe-backend fused, no memory cap) for the transfer bound:\n");
    if (!(e = ft_engine_init(m, &fp, &err))) goto out;
    if (!bench_once(e, ids, 0, n_prompt < 64 ? n_prompt : 64, n_gen < 4 ? n_gen : 4, &ps, &gs, NULL, &err)) goto out;
    for (int r = 0; r < reps; r++) {
        if (!bench_once(e, ids, n_depth, n_prompt, n_gen, &ps, &gs, NULL, &err)) goto out;
        tps[r] = gs > 0 ? (double)n_gen / gs : 0;
    }
    med = bench_median(tps, reps);
    fprintf(stderr, "bench: resident decode %.2f tok/s\n", med);
out:
    if (med == 0)
        fprintf(stderr, "bench: no resident reference (%s); give its decode speed with --resident-tok-s\n", err.msg);
    ft_engine_free(e);
    return med;
}

int cmd_bench(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "bw") == 0) return cmd_bench_bw(argc - 1, argv + 1);
    const char *model_path = NULL;
    int64_t n_prompt = 512, n_gen = 128, n_depth = 0, reps = 3;
    double resident_tps = 0;
    bool json = false, bad = false;
    const char *parallel = NULL;
    int n_par = 0, par[BENCH_MAX_PARALLEL];
    engine_args ea = engine_args_init("bench", ENGINE_ARGS_ROUTE_TRACE);
    for (int i = 1; i < argc && !bad; i++) {
        if (args_flag(argv, i, "-h|--help")) {
            bench_usage(stdout);
            return FT_EXIT_OK;
        }
        if (args_flag(argv, i, "--json")) {
            json = true;
            continue;
        }
        if (engine_args_take(&ea, argc, argv, &i, &bad) ||
            args_str(argc, argv, &i, "-m|--model", &model_path, &bad) ||
            args_int(argc, argv, &i, "-p|--n-prompt", 0, 1 << 20, &n_prompt, &bad) ||
            args_int(argc, argv, &i, "-n|--n-gen", 0, 1 << 20, &n_gen, &bad) ||
            args_int(argc, argv, &i, "-d|--n-depth", 0, 1 << 20, &n_depth, &bad) ||
            args_int(argc, argv, &i, "-r|--reps", 1, BENCH_MAX_REPS, &reps, &bad))
            continue;
        if (args_str(argc, argv, &i, "--parallel", &parallel, &bad)) {
            for (const char *c = parallel; !bad && *c;) {
                char *end;
                long v = strtol(c, &end, 10);
                if (end == c || v < 1 || v > 4096 || n_par == BENCH_MAX_PARALLEL || (*end && *end != ',') ||
                    (*end == ',' && !end[1])) {
                    fprintf(stderr, "ft bench: --parallel %s: expected up to %d counts of 1..4096, comma-separated\n",
                            parallel, BENCH_MAX_PARALLEL);
                    bad = true;
                    break;
                }
                par[n_par++] = (int)v;
                c = *end ? end + 1 : end;
            }
            continue;
        }
        if (args_float(argc, argv, &i, "--resident-tok-s", &resident_tps, &bad)) {
            if (!bad && !(resident_tps > 0)) {
                fprintf(stderr, "ft bench: --resident-tok-s %g: expected tok/s > 0\n", resident_tps);
                bad = true;
            }
            continue;
        }
        fprintf(stderr, "ft bench: unexpected argument '%s' (see ft bench --help)\n", argv[i]);
        return FT_EXIT_USAGE;
    }
    if (bad) return FT_EXIT_USAGE;
    if (n_prompt + n_gen == 0) {
        fprintf(stderr, "ft bench: nothing to measure: -p and -n are both 0\n");
        return FT_EXIT_USAGE;
    }
    ft_engine_params ep = ft_engine_default_params();
    if (!engine_args_apply(&ea, &ep)) return FT_EXIT_USAGE;
    cli_model cm;
    if (!cli_model_open("bench", model_path, false, &cm)) return FT_EXIT_INPUT;
    if (!model_path) model_path = cm.demo;
    const ft_model *m = cm.m;
    cli_model_pick_device(&ea, &cm, &ep);
    const char *device_name = ep.device == FT_PLACEMENT_CUDA ? "cuda" : "cpu";
    ft_err err = {{0}};
    int rc = FT_EXIT_INPUT;
    ft_engine *e = NULL;
    int32_t *ids = NULL;
    ft_moe_stats moe_dec = {0}; // the expert cache's counters over the timed decodes
    int n_tok = (int)(n_depth + n_prompt + n_gen);
    if (ep.n_threads <= 0) ep.n_threads = ft_engine_default_threads(ep.device);
    if (n_par > 0) {
        if (n_depth > 0) {
            fprintf(stderr, "ft bench: -d is not taken with --parallel\n");
            rc = FT_EXIT_USAGE;
            goto done;
        }
        if (n_tok > m->hp.n_ctx_train) {
            fprintf(stderr, "ft bench: -p %d + -n %d exceeds the model's context of %d tokens\n", (int)n_prompt,
                    (int)n_gen, m->hp.n_ctx_train);
            goto done;
        }
        cli_show_startup(&ep, NULL);
        rc = bench_parallel(m, &ep, model_path, par, n_par, (int)n_prompt, (int)n_gen, (int)reps, json);
        goto done;
    }
    ep.n_ctx = engine_args_n_ctx(&ea, n_tok, n_tok);
    ep.n_batch = FT_MIN(ep.n_batch, n_tok);
    if (ep.n_ctx == 0) goto done;
    if (ep.n_ctx < n_tok) {
        fprintf(stderr, "ft bench: -d %d + -p %d + -n %d needs %d positions; the context is %d (-c, --num-tokens)\n",
                (int)n_depth, (int)n_prompt, (int)n_gen, n_tok, ep.n_ctx);
        goto done;
    }
    if (ep.n_ctx > m->hp.n_ctx_train) {
        fprintf(stderr, "ft bench: -d %d + -p %d + -n %d exceeds the model's context of %d tokens\n", (int)n_depth,
                (int)n_prompt, (int)n_gen, m->hp.n_ctx_train);
        goto done;
    }
    ids = malloc((size_t)n_tok * sizeof(int32_t));
    for (int i = 0; i < n_tok; i++) ids[i] = bench_token(i, m->hp.n_vocab);
    // the resident reference runs first, on its own engine, and gives its memory back
    bool offload = ep.device == FT_PLACEMENT_CUDA &&
                   (ep.moe_backend == FT_MOE_BACKEND_OFFLOAD || ep.moe_backend == FT_MOE_BACKEND_HYBRID);
    if (offload && resident_tps == 0 && n_gen > 0)
        resident_tps = resident_decode_tok_s(m, &ep, ids, (int)n_depth, (int)n_prompt, (int)n_gen, (int)reps);
    cli_show_startup(&ep, NULL);
    if (!(e = ft_engine_init(m, &ep, &err))) {
        fprintf(stderr, "ft bench: %s\n", err.msg);
        goto done;
    }

    // warm-up: fault the weights in (a short prefill routes to most experts) and wake the pool
    double ps, gs, prompt_tps[BENCH_MAX_REPS], gen_tps[BENCH_MAX_REPS];
    int wp = (int)(n_prompt < 64 ? n_prompt : 64), wg = (int)(n_gen < 4 ? n_gen : 4);
    if (!bench_once(e, ids, 0, wp, wg, &ps, &gs, NULL, &err)) goto eval_failed;
    for (int r = 0; r < reps; r++) {
        if (!bench_once(e, ids, (int)n_depth, (int)n_prompt, (int)n_gen, &ps, &gs, &moe_dec, &err)) goto eval_failed;
        prompt_tps[r] = ps > 0 ? (double)n_prompt / ps : 0;
        gen_tps[r] = gs > 0 ? (double)n_gen / gs : 0;
        if (!json)
            fprintf(stderr, "run %d/%d: prompt %.2f tok/s, decode %.2f tok/s\n", r + 1, (int)reps, prompt_tps[r],
                    gen_tps[r]);
    }
    double prompt_med = bench_median(prompt_tps, (int)reps), gen_med = bench_median(gen_tps, (int)reps);
    size_t bpt = bytes_per_token(m);
    double bw = ep.device == FT_PLACEMENT_CPU ? measure_mem_bw(ep.n_threads) : 0;
    double roof_tps = bw > 0 ? bw * 1e9 / (double)bpt : 0;
    double frac = roof_tps > 0 ? gen_med / roof_tps : 0;
    // the transfer bound of an expert cache: each token's missed bytes at the copies' measured
    // bandwidth on top of the time per token fully resident
    bool moe = moe_dec.n_layers > 0;
    double dec_tokens = (double)reps * (double)n_gen;
    double miss_bpt = moe && dec_tokens > 0 ? (double)moe_dec.total.bytes_copied / dec_tokens : 0;
    double copy_gbps = moe ? ft_moe_copy_gbps(&moe_dec.total) : 0;
    double bound_tps = 0;
    if (moe && resident_tps > 0)
        bound_tps = 1.0 / ((copy_gbps > 0 ? miss_bpt / (copy_gbps * 1e9) : 0) + 1.0 / resident_tps);

    if (json) {
        printf("{\"model\":\"");
        bench_print_json_text(model_path);
        printf("\",\"arch\":\"%s\",\"device\":\"%s\",\"simd\":\"%s\",\"threads\":%d,\"n_prompt\":%d,"
               "\"n_gen\":%d,\"n_depth\":%d,\"n_batch\":%d,\"reps\":%d,\"n_vocab\":%d,\"prompt_tok_s\":%.3f,\"decode_tok_s\":%.3f,"
               "\"prompt_tok_s_runs\":[",
               m->arch->name, device_name, ft_quant_simd_name(), ep.n_threads, (int)n_prompt, (int)n_gen,
               (int)n_depth, ft_engine_n_batch(e), (int)reps, m->hp.n_vocab, prompt_med, gen_med);
        for (int r = 0; r < reps; r++) printf("%s%.3f", r ? "," : "", prompt_tps[r]);
        printf("],\"decode_tok_s_runs\":[");
        for (int r = 0; r < reps; r++) printf("%s%.3f", r ? "," : "", gen_tps[r]);
        printf("],\"bytes_per_token\":%zu,\"mem_bw_gbs\":%.3f,\"roofline_tok_s\":%.3f,\"roofline_frac\":%.4f,"
               "\"weights_copied_bytes\":%zu",
               bpt, bw, roof_tps, frac, ft_engine_weights_copied(e));
        if (moe) {
            const ft_moe_counts *t = &moe_dec.total;
            printf(",\"moe_cache\":{\"slots\":%d,\"layout\":\"%s\",\"bytes\":%llu,\"decode_hit_rate\":%.4f,"
                   "\"decode_misses_per_token\":%.2f,\"decode_cpu_experts_per_token\":%.2f,"
                   "\"decode_h2d_bytes_per_token\":%.0f,\"copy_gbs\":%.3f,"
                   "\"resident_tok_s\":%.3f,\"transfer_bound_tok_s\":%.3f,\"transfer_bound_frac\":%.4f,"
                   "\"decode_predict_accuracy\":%.4f,\"decode_prefetches_per_token\":%.2f,"
                   "\"decode_prefetch_used\":%.4f,\"decode_prefetch_bytes_per_token\":%.0f,\"pools\":[",
                   moe_dec.n_slots, moe_dec.uniform ? "uniform" : "exact", (unsigned long long)moe_dec.cache_bytes,
                   ft_moe_hit_rate(t), dec_tokens > 0 ? (double)t->misses / dec_tokens : 0,
                   dec_tokens > 0 ? (double)t->cpu_computed / dec_tokens : 0, miss_bpt, copy_gbps,
                   resident_tps, bound_tps, bound_tps > 0 ? gen_med / bound_tps : 0, ft_moe_predict_accuracy(t),
                   dec_tokens > 0 ? (double)t->prefetched / dec_tokens : 0, ft_moe_prefetch_used(t),
                   dec_tokens > 0 ? (double)t->prefetch_bytes / dec_tokens : 0);
            for (int p = 0; p < moe_dec.n_pools; p++) {
                const ft_moe_counts *c = &moe_dec.pools[p];
                printf("%s{\"layers\":%d,\"slots\":%d,\"selections\":%llu,\"hits\":%llu,\"misses\":%llu,"
                       "\"cpu_computed\":%llu,\"h2d_bytes\":%llu,\"copy_gbs\":%.3f}", p ? "," : "",
                       moe_dec.pool_layers[p], moe_dec.pool_slots[p], (unsigned long long)c->selections,
                       (unsigned long long)c->hits, (unsigned long long)c->misses, (unsigned long long)c->cpu_computed,
                       (unsigned long long)c->bytes_copied, ft_moe_copy_gbps(c));
            }
            printf("],\"layers\":[");
            for (int i = 0; i < moe_dec.n_layers; i++) {
                const ft_moe_counts *c = &moe_dec.layers[i];
                printf("%s{\"layer\":%d,\"pool\":%d,\"slots\":%d,\"selections\":%llu,\"hits\":%llu,\"misses\":%llu,"
                       "\"cpu_computed\":%llu,\"h2d_bytes\":%llu,\"prefetch_copies\":%llu,\"prefetch_used\":%llu,"
                       "\"prefetch_h2d_bytes\":%llu,\"prefetch_wasted_h2d_bytes\":%llu}",
                       i ? "," : "", moe_dec.layer_block[i], moe_dec.layer_pool[i],
                       moe_dec.layer_slots ? moe_dec.layer_slots[i] : -1, (unsigned long long)c->selections,
                       (unsigned long long)c->hits, (unsigned long long)c->misses, (unsigned long long)c->cpu_computed,
                       (unsigned long long)c->bytes_copied, (unsigned long long)c->prefetched,
                       (unsigned long long)c->prefetch_used, (unsigned long long)c->prefetch_bytes,
                       (unsigned long long)ft_moe_prefetch_wasted_bytes(c));
            }
            printf("]}");
        }
        printf("}\n");
    } else {
        printf("model      %s (%s, %d layers, %d threads, %s, %s kernels, batch %d)\n", model_path, m->arch->name,
               m->hp.n_layer, ep.n_threads, device_name, ft_quant_simd_name(), ft_engine_n_batch(e));
        if (n_depth > 0)
            printf("prompt     %6d tokens  %9.2f tok/s  (median of %d, after %d tokens)\n", (int)n_prompt,
                   prompt_med, (int)reps, (int)n_depth);
        else
            printf("prompt     %6d tokens  %9.2f tok/s  (median of %d)\n", (int)n_prompt, prompt_med, (int)reps);
        printf("decode     %6d tokens  %9.2f tok/s  (median of %d)\n", (int)n_gen, gen_med, (int)reps);
        printf("bytes/tok  %.1f MiB (dense weights + top-%d experts)\n", (double)bpt / (1 << 20),
               m->hp.n_expert_used);
        if (bw > 0)
            printf("mem bw     %.2f GB/s (read, %d threads) -> roofline %.2f tok/s, decode at %.1f%%\n", bw,
                   ep.n_threads, roof_tps, 100 * frac);
        if (moe) {
            printf("decode through the expert cache (%d timed runs):\n", (int)reps);
            ft_moe_stats_print(&moe_dec, (int)dec_tokens, stdout);
            if (bound_tps > 0)
                printf("transfer bound 1 / (%.2f MiB/token / %.1f GB/s + 1 / %.2f tok/s resident) = %.2f tok/s, "
                       "decode at %.1f%%\n", miss_bpt / 1048576.0, copy_gbps, resident_tps, bound_tps,
                       100 * gen_med / bound_tps);
            else
                printf("transfer bound: no resident time per token (--resident-tok-s)\n");
        }
    }
    fflush(stdout);
    rc = FT_EXIT_OK;
    goto done;
eval_failed:
    fprintf(stderr, "ft bench: %s\n", err.msg);
done:
    ft_moe_stats_free(&moe_dec);
    free(ids);
    ft_engine_free(e);
    cli_model_close(&cm);
    return rc;
}
