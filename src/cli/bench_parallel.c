// bench_parallel.c: see bench_parallel.h.
#include "bench_parallel.h"
#include "bench_common.h"
#include "cli.h"
#include "../backend/kv_block.h"
#include "../engine/batch.h"
#include "../quant/quant.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct parallel_figures {
    int n_seq;
    double prompt_tps[BENCH_MAX_REPS], gen_tps[BENCH_MAX_REPS];
} parallel_figures;

// One run on b: n_seq sequences (ids salted by sequence) prefill, then decode together.
static bool parallel_once(ft_batch *b, int n_seq, int n_prompt, int n_gen, double *prompt_s, double *gen_s,
                          ft_err *err) {
    int n_vocab = ft_batch_model(b)->hp.n_vocab, n_tok = n_prompt + n_gen, chunk = ft_batch_chunk(b);
    int *seq = malloc((size_t)n_seq * sizeof(int)), *done = calloc((size_t)n_seq, sizeof(int));
    int32_t *ids = malloc((size_t)n_seq * (size_t)n_tok * sizeof(int32_t));
    ft_batch_item *items = malloc((size_t)n_seq * sizeof(ft_batch_item));
    bool ok = true;
    for (int s = 0; s < n_seq; s++) {
        seq[s] = ft_batch_seq_open(b);
        FT_ASSERT(seq[s] >= 0);
        for (int i = 0; i < n_tok; i++) ids[(size_t)s * n_tok + i] = bench_token_salted(i, s + 1, n_vocab);
    }
    double t0 = bench_now_s();
    // prefill: whole chunks of the prompts, as many a step as the chunk holds (at least one)
    for (int next = 0; ok && next < n_seq;) {
        int n_items = 0, total = 0;
        for (int s = next; s < n_seq; s++) {
            int take = FT_MIN(chunk, n_prompt - done[s]);
            if (n_items > 0 && total + take > chunk) break;
            items[n_items++] = (ft_batch_item){seq[s], &ids[(size_t)s * n_tok + done[s]], take, done[s] + take == n_prompt};
            total += take;
            if (done[s] + take < n_prompt) break; // the rest of this prompt in the next step
        }
        ok = ft_batch_step(b, items, n_items, err);
        for (int i = 0; ok && i < n_items; i++) {
            int s = next + i;
            done[s] += items[i].n_tok;
        }
        while (next < n_seq && done[next] == n_prompt) next++;
    }
    double t1 = bench_now_s();
    for (int g = 0; ok && g < n_gen; g++) {
        for (int s = 0; s < n_seq; s++) items[s] = (ft_batch_item){seq[s], &ids[(size_t)s * n_tok + n_prompt + g], 1, true};
        ok = ft_batch_step(b, items, n_seq, err);
    }
    double t2 = bench_now_s();
    for (int s = 0; s < n_seq; s++) ft_batch_seq_close(b, seq[s]);
    *prompt_s = t1 - t0;
    *gen_s = t2 - t1;
    free(seq);
    free(done);
    free(ids);
    free(items);
    return ok;
}

int bench_parallel(const ft_model *m, const ft_engine_params *ep, const char *model_path, const int *n_seqs,
                   int n_counts, int n_prompt, int n_gen, int reps, bool json) {
    parallel_figures *fig = calloc((size_t)n_counts, sizeof(parallel_figures));
    ft_err err = {{0}};
    int rc = FT_EXIT_OK, n_batch = 0;
    for (int c = 0; c < n_counts && rc == FT_EXIT_OK; c++) {
        ft_engine_params p = *ep;
        p.n_seq = n_seqs[c];
        p.n_ctx = n_prompt + n_gen;
        p.prefix_cache = false; // every run computes its prompts
        // every sequence's whole context in the pool, rounded to whole blocks (unless --num-tokens)
        if (p.num_tokens == 0)
            p.num_tokens = (int64_t)p.n_seq * ((n_prompt + n_gen + FT_KV_BLOCK - 1) / FT_KV_BLOCK * FT_KV_BLOCK);
        ft_batch *b = ft_batch_init(m, &p, &err);
        if (!b) {
            fprintf(stderr, "ft bench: --parallel %d: %s\n", n_seqs[c], err.msg);
            rc = FT_EXIT_INPUT;
            break;
        }
        n_batch = ft_batch_chunk(b);
        fig[c].n_seq = n_seqs[c];
        double ps, gs;
        // warm-up: fault the weights in, wake the pool, let the device build what it caches
        bool ok = parallel_once(b, n_seqs[c], FT_MIN(n_prompt, 16), FT_MIN(n_gen, 4), &ps, &gs, &err);
        for (int r = 0; ok && r < reps; r++) {
            ok = parallel_once(b, n_seqs[c], n_prompt, n_gen, &ps, &gs, &err);
            fig[c].prompt_tps[r] = ps > 0 ? (double)n_seqs[c] * n_prompt / ps : 0;
            fig[c].gen_tps[r] = gs > 0 ? (double)n_seqs[c] * n_gen / gs : 0;
            if (ok && !json)
                fprintf(stderr, "parallel %d, run %d/%d: prompt %.2f tok/s, decode %.2f tok/s\n", n_seqs[c], r + 1, reps,
                        fig[c].prompt_tps[r], fig[c].gen_tps[r]);
        }
        if (!ok) {
            fprintf(stderr, "ft bench: --parallel %d: %s\n", n_seqs[c], err.msg);
            rc = FT_EXIT_INPUT;
        }
        ft_batch_free(b);
    }
    if (rc == FT_EXIT_OK && json) {
        printf("{\"model\":\"");
        bench_print_json_text(model_path);
        printf("\",\"arch\":\"%s\",\"device\":\"%s\",\"simd\":\"%s\",\"threads\":%d,\"n_prompt\":%d,\"n_gen\":%d,"
               "\"n_batch\":%d,\"reps\":%d,\"parallel\":[",
               m->arch->name, ep->device == FT_PLACEMENT_CUDA ? "cuda" : "cpu", ft_quant_simd_name(), ep->n_threads,
               n_prompt, n_gen, n_batch, reps);
        for (int c = 0; c < n_counts; c++) {
            printf("%s{\"n_seq\":%d,\"prompt_tok_s\":%.3f,\"decode_tok_s\":%.3f,\"prompt_tok_s_runs\":[", c ? "," : "",
                   fig[c].n_seq, bench_median(fig[c].prompt_tps, reps), bench_median(fig[c].gen_tps, reps));
            for (int r = 0; r < reps; r++) printf("%s%.3f", r ? "," : "", fig[c].prompt_tps[r]);
            printf("],\"decode_tok_s_runs\":[");
            for (int r = 0; r < reps; r++) printf("%s%.3f", r ? "," : "", fig[c].gen_tps[r]);
            printf("]}");
        }
        printf("]}\n");
    } else if (rc == FT_EXIT_OK) {
        printf("model      %s (%s, %d layers, %d threads, %s, %s kernels, batch %d)\n", model_path, m->arch->name,
               m->hp.n_layer, ep->n_threads, ep->device == FT_PLACEMENT_CUDA ? "cuda" : "cpu", ft_quant_simd_name(),
               n_batch);
        for (int c = 0; c < n_counts; c++)
            printf("parallel %3d  prompt %3d x %6d tokens %9.2f tok/s  decode %3d x %5d tokens %9.2f tok/s (median of "
                   "%d)\n",
                   fig[c].n_seq, fig[c].n_seq, n_prompt, bench_median(fig[c].prompt_tps, reps), fig[c].n_seq, n_gen,
                   bench_median(fig[c].gen_tps, reps), reps);
    }
    fflush(stdout);
    free(fig);
    return rc;
}
