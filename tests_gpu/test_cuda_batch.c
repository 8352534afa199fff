// test_cuda_batch.c: the batch engine on the CUDA backend: three sequences joining at
// different steps, prompts in chunks of 16 sharing steps with the others' decode tokens,
// decoded greedily together, against each sequence alone (ft_engine on --device cuda, the same
// chunks). Unlike the CPU (tests/test_batch.c: bit-identical), the GPU's matmul kernels may
// depend on the number of rows in a step, so batched and alone can differ by rounding; and
// these random-weight models amplify one flipped q8 code to ~0.1 in the logits (see
// test_cuda_backend.c). Checked, with the strict configuration of test_cuda_backend.c (q8_0
// weights and cache): at every step until the two runs' tokens split, top probabilities
// within 3e-2; and they split only where either run's two best are within 3e-2. The number
// of bit-identical steps is printed.
#include "gpu_test.h"
#include "../tests/fixtures.h"
#include "probs_compare.h"
#include "../tests/batch_sim.h"

#include "../src/engine/batch.h"
#include "../src/model/synth.h"
#include "../src/moe/placement.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N_SEQ = 3, N_REQ = 4, N_GEN = 12, CHUNK = 16 };

static double top2_gap(const double *p, int n) {
    double a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] > a) {
            b = a;
            a = p[i];
        } else if (p[i] > b) {
            b = p[i];
        }
    }
    return a - b;
}

// arch's model (qwen35moe: linear-attention layers, whose recurrent state each sequence
// carries, beside attention layers).
static void batch_case(const char *arch) {
    ft_synth_params sp = ft_synth_default_params();
    sp.arch = arch;
    if (!strcmp(arch, "qwen35moe")) sp.full_attn_interval = 2;
    sp.n_ctx_train = 256;
    sp.dense_type = FT_TYPE_Q8_0;
    sp.expert_types[0] = FT_TYPE_Q8_0;
    char name[64];
    snprintf(name, sizeof(name), "cuda_batch_%s.gguf", arch);
    ft_model *m = fixture_model(&sp, name);
    REQUIRE(m);
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 128;
    ep.n_batch = CHUNK;
    ep.n_seq = N_SEQ;
    ep.kv_type = FT_TYPE_Q8_0;
    ep.device = FT_PLACEMENT_CUDA;
    int n_vocab = m->hp.n_vocab;
    static const int lens[N_REQ] = {37, 1, 20, 9}, joins[N_REQ] = {0, 0, 2, 4};
    batch_sim_req rq[N_REQ];
    ft_rng rng = ft_rng_init(5);
    for (int r = 0; r < N_REQ; r++) {
        int32_t prompt[BATCH_SIM_MAX_PROMPT];
        for (int i = 0; i < lens[r]; i++) prompt[i] = (int32_t)(ft_rng_next(&rng) % (uint64_t)n_vocab);
        batch_sim_req_init(&rq[r], prompt, lens[r], joins[r], ft_malloc((size_t)N_GEN * n_vocab * sizeof(float)));
    }
    float *alone = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float));
    double *pb = ft_malloc((size_t)n_vocab * sizeof(double)), *pa = ft_malloc((size_t)n_vocab * sizeof(double));

    // batched: decoders first, then whole prompt chunks while they fit (batch_sim.h)
    ft_batch *b = ft_batch_init(m, &ep, &err);
    REQUIRE(b, "%s", err.msg);
    bool ran = batch_sim_run(b, rq, N_REQ, CHUNK, N_GEN, n_vocab, &err);
    ft_batch_free(b);
    REQUIRE(ran, "%s", err.msg);

    // each alone, the same chunks (ft_engine_eval cuts the prompt at multiples of n_batch)
    int n_same_bits = 0, n_cmp = 0, n_split = 0;
    double worst = 0;
    for (int r = 0; r < N_REQ; r++) {
        ft_engine *e = ft_engine_init(m, &ep, &err);
        REQUIRE(e, "%s", err.msg);
        const float *lg = ft_engine_eval(e, rq[r].prompt, rq[r].n_prompt, &err);
        int32_t out[N_GEN];
        for (int g = 0; g < N_GEN && lg; g++) {
            memcpy(alone + (size_t)g * n_vocab, lg, (size_t)n_vocab * sizeof(float));
            out[g] = batch_sim_argmax(lg, n_vocab);
            if (g + 1 < N_GEN) lg = ft_engine_eval(e, &out[g], 1, &err);
        }
        REQUIRE(lg, "%s", err.msg);
        ft_engine_free(e);
        for (int g = 0; g < N_GEN; g++) {
            const float *lb = rq[r].logits + (size_t)g * n_vocab, *la = alone + (size_t)g * n_vocab;
            n_same_bits += !memcmp(lb, la, (size_t)n_vocab * sizeof(float));
            n_cmp++;
            probs_softmax(lb, pb, n_vocab);
            probs_softmax(la, pa, n_vocab);
            double d = 0;
            for (int i = 0; i < n_vocab; i++) d = fmax(d, fabs(pb[i] - pa[i]));
            worst = fmax(worst, d);
            CHECK(d <= 3e-2, "request %d step %d: probabilities differ by %g", r, g, d);
            if (out[g] != rq[r].out[g]) {
                double ga = top2_gap(pa, n_vocab), gb = top2_gap(pb, n_vocab);
                CHECK(ga <= 3e-2 || gb <= 3e-2, "request %d step %d: token %d batched, %d alone; top-2 gaps %g, %g",
                      r, g, rq[r].out[g], out[g], gb, ga);
                n_split++;
                break;
            }
        }
    }
    printf("    %s: %d requests on %d sequences, chunk %d: %d/%d steps bit-identical to alone, max prob diff %.3g, "
           "%d split at a near-tie\n",
           arch, N_REQ, N_SEQ, CHUNK, n_same_bits, n_cmp, worst, n_split);
    for (int r = 0; r < N_REQ; r++) free(rq[r].logits);
    free(alone);
    free(pa);
    free(pb);
    ft_model_free(m);
}

TEST(cuda_batch_matches_alone) {
    GPU_TEST_REQUIRE_DEVICE();
    batch_case("qwen3moe");
    batch_case("qwen35moe");
}

// Greedy: n_gen logits of prompt on b (a prefix from the cache when it has one), the prompt
// cut as the server cuts it (ft_batch_next_chunk: on the GPU a whole chunk from where the
// reused prefix ends). Returns the positions reused, -1 on failure.
static int run_prompt(ft_batch *b, const int32_t *prompt, int n, int n_gen, int n_vocab, float *logits, ft_err *err) {
    int seq = ft_batch_seq_open(b);
    if (seq < 0) return -1;
    int reused = ft_batch_seq_reuse(b, seq, prompt, n);
    for (int at = reused; at < n;) {
        int len = ft_batch_next_chunk(b, at, n - at);
        ft_batch_item it = {seq, prompt + at, len, at + len == n};
        if (!ft_batch_step(b, &it, 1, err)) return -1;
        at += len;
    }
    for (int g = 0; g < n_gen; g++) {
        memcpy(logits + (size_t)g * n_vocab, ft_batch_logits(b, 0), (size_t)n_vocab * sizeof(float));
        if (g + 1 == n_gen) break;
        int32_t t = batch_sim_argmax(ft_batch_logits(b, 0), n_vocab);
        ft_batch_item it = {seq, &t, 1, true};
        if (!ft_batch_step(b, &it, 1, err)) return -1;
    }
    ft_batch_seq_close(b, seq);
    return reused;
}

// A prompt that shares n_shared tokens with an earlier one of n_a, on the GPU, reusing
// want_reused of them from the prefix cache, against the same prompt computed whole: the
// probabilities of every step within the batch test's tolerance, and the block accounting.
// With recurrent layers the state comes from the snapshot taken after the earlier prompt's
// second chunk (the blocks end there too). Past the whole blocks, the leading rows of the block
// where the prompts part are copied on the device (copy_rows), before the prefill and the
// decode steps (CUDA graphs) that read them.
static void prefix_reuse_case(const char *arch, int n_a, int n_shared, int want_reused) {
    ft_synth_params sp = ft_synth_default_params();
    sp.arch = arch;
    if (!strcmp(arch, "qwen35moe")) sp.n_layer = 4; // three DeltaNet layers, then attention
    sp.n_ctx_train = 512;
    sp.dense_type = FT_TYPE_Q8_0;
    sp.expert_types[0] = FT_TYPE_Q8_0;
    char name[64];
    snprintf(name, sizeof(name), "cuda_prefix_%s.gguf", arch);
    ft_model *m = fixture_model(&sp, name);
    REQUIRE(m);
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 256;
    ep.n_batch = 64;
    ep.n_seq = 2;
    ep.kv_type = FT_TYPE_Q8_0;
    ep.device = FT_PLACEMENT_CUDA;
    int n_vocab = m->hp.n_vocab;
    int32_t a[256], p[256];
    ft_rng rng = ft_rng_init(8);
    for (int i = 0; i < n_a; i++) a[i] = (int32_t)(ft_rng_next(&rng) % (uint64_t)n_vocab);
    memcpy(p, a, (size_t)n_shared * sizeof(int32_t));
    for (int i = n_shared; i < 200; i++) p[i] = (int32_t)(ft_rng_next(&rng) % (uint64_t)n_vocab);
    if (p[n_shared] == a[n_shared]) p[n_shared] = (a[n_shared] + 1) % n_vocab; // they part at n_shared
    float *reused = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float)), *whole = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float));
    double *pr = ft_malloc((size_t)n_vocab * sizeof(double)), *pw = ft_malloc((size_t)n_vocab * sizeof(double));
    ep.prefix_cache = true;
    ft_batch *b = ft_batch_init(m, &ep, &err);
    REQUIRE(b, "%s", err.msg);
    CHECK(run_prompt(b, a, n_a, 2, n_vocab, reused, &err) == 0, "%s", err.msg);
    int n_reused = run_prompt(b, p, 200, N_GEN, n_vocab, reused, &err);
    CHECK(n_reused == want_reused, "reused %d, want %d: %s", n_reused, want_reused, err.msg);
    REQUIRE(ft_batch_kv_check(b, &err), "%s", err.msg);
    ft_batch_free(b);
    ep.prefix_cache = false;
    b = ft_batch_init(m, &ep, &err);
    REQUIRE(b, "%s", err.msg);
    CHECK(run_prompt(b, p, 200, N_GEN, n_vocab, whole, &err) == 0, "%s", err.msg);
    ft_batch_free(b);
    double worst = 0;
    int n_same = 0;
    for (int g = 0; g < N_GEN; g++) {
        const float *lr = reused + (size_t)g * n_vocab, *lw = whole + (size_t)g * n_vocab;
        n_same += !memcmp(lr, lw, (size_t)n_vocab * sizeof(float));
        probs_softmax(lr, pr, n_vocab);
        probs_softmax(lw, pw, n_vocab);
        double d = 0;
        for (int i = 0; i < n_vocab; i++) d = fmax(d, fabs(pr[i] - pw[i]));
        worst = fmax(worst, d);
        CHECK(d <= 3e-2, "step %d: probabilities differ by %g", g, d);
        if (batch_sim_argmax(lr, n_vocab) != batch_sim_argmax(lw, n_vocab)) break; // the paths split
    }
    printf("    %s prefix reuse on the GPU: %d positions reused, %d/%d steps bit-identical, max prob diff "
           "%.3g\n",
           arch, n_reused, n_same, N_GEN, worst);
    free(reused);
    free(whole);
    free(pr);
    free(pw);
    ft_model_free(m);
}

TEST(cuda_batch_prefix_reuse) {
    GPU_TEST_REQUIRE_DEVICE();
    // a's third block is not full, so not kept: two whole blocks
    prefix_reuse_case("qwen3moe", 150, 140, 2 * FT_KV_BLOCK);
}

TEST(cuda_batch_prefix_reuse_qwen35moe) {
    GPU_TEST_REQUIRE_DEVICE();
    prefix_reuse_case("qwen35moe", 150, 140, 2 * FT_KV_BLOCK);
    // whole blocks only, to the snapshot after a's second chunk, though a's third block is kept
    prefix_reuse_case("qwen35moe", 250, 150, 2 * FT_KV_BLOCK);
}

// a's blocks 0-2 are kept; p parts from them inside block 2: 1, 22 and 63 of its rows copied
TEST(cuda_batch_prefix_reuse_into_a_block) {
    GPU_TEST_REQUIRE_DEVICE();
    prefix_reuse_case("qwen3moe", 250, 2 * FT_KV_BLOCK + 1, 2 * FT_KV_BLOCK + 1);
    prefix_reuse_case("qwen3moe", 250, 150, 150);
    prefix_reuse_case("qwen3moe", 250, 3 * FT_KV_BLOCK - 1, 3 * FT_KV_BLOCK - 1);
}

// Greedy decoding of seqs sequences (random prompts of n_prompt tokens from seed, n_gen tokens
// each, prefill chunks of chunk) with env "0", then "1" (read at the backend's init): how many
// sequences' logits differ between the two runs; -1 (err set) where a run failed.
static int logits_differ_by_env(ft_model *m, const ft_engine_params *ep, const char *env, int seqs, int n_prompt,
                                int n_gen, int chunk, uint64_t seed, ft_err *err) {
    enum { MAX_SEQS = 64 };
    FT_ASSERT(seqs >= 1 && seqs <= MAX_SEQS && n_prompt >= 1 && n_prompt <= 16);
    const int n_vocab = m->hp.n_vocab;
    float *logits[2][MAX_SEQS];
    bool ok = true;
    for (int run = 0; run < 2; run++) {
        setenv(env, run ? "1" : "0", 1);
        batch_sim_req rq[MAX_SEQS];
        ft_rng rng = ft_rng_init(seed);
        for (int r = 0; r < seqs; r++) {
            int32_t prompt[16];
            for (int i = 0; i < n_prompt; i++) prompt[i] = (int32_t)(ft_rng_next(&rng) % (uint64_t)n_vocab);
            logits[run][r] = ft_malloc((size_t)n_gen * n_vocab * sizeof(float));
            batch_sim_req_init(&rq[r], prompt, n_prompt, 0, logits[run][r]);
        }
        ft_batch *b = ok ? ft_batch_init(m, ep, err) : NULL;
        ok = ok && b && batch_sim_run(b, rq, seqs, chunk, n_gen, n_vocab, err);
        if (b) ft_batch_free(b);
    }
    unsetenv(env);
    int differ = 0;
    for (int r = 0; r < seqs; r++) {
        if (ok) differ += memcmp(logits[0][r], logits[1][r], (size_t)n_gen * n_vocab * sizeof(float)) != 0;
        free(logits[0][r]);
        free(logits[1][r]);
    }
    return ok ? differ : -1;
}

// The default synthetic model with a 256-token context, q8_0 dense weights and q4_K experts
// (the kernels the decode paths under test take), written as name.
static ft_model *q4_k_fixture(const char *name) {
    ft_synth_params sp = ft_synth_default_params();
    sp.n_ctx_train = 256;
    sp.dense_type = FT_TYPE_Q8_0;
    sp.expert_types[0] = FT_TYPE_Q4_K;
    return fixture_model(&sp, name);
}

// 36 sequences decoding together: each decode step's MoE FFN (36 rows) takes ft_cuda_moe_rows,
// the experts grouped by expert; with FT_CUDA_MOE_ROWS=0 the per-pair kernels. The two give the
// same bits (test_cuda_moe_rows.c), so every logit of the two runs is equal.
TEST(cuda_batch_grouped_experts_equal_per_pair) {
    GPU_TEST_REQUIRE_DEVICE();
    enum { SEQS = 36, GEN = 5, PROMPT = 3 };
    ft_model *m = q4_k_fixture("cuda_batch_grouped.gguf");
    REQUIRE(m);
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 32;
    ep.n_batch = 64;
    ep.n_seq = SEQS;
    ep.num_tokens = (int64_t)SEQS * FT_KV_BLOCK; // a KV block for every sequence
    ep.device = FT_PLACEMENT_CUDA;
    ft_err err = {{0}};
    int differ = logits_differ_by_env(m, &ep, "FT_CUDA_MOE_ROWS", SEQS, PROMPT, GEN, 64, 11, &err);
    CHECK(differ >= 0, "%s", err.msg);
    CHECK(differ == 0, "%d of %d sequences' logits differ between the grouped and the per-pair experts", differ, SEQS);
    ft_model_free(m);
}

// FT_CUDA_FUSE_NORM: a decode step's output projection adds itself into the residual, and the
// decode router normalises the FFN's input itself (test_cuda_moe_route.c: the same bits as the
// launches they replace), so greedy decoding with and without it gives equal logits: one
// sequence (the router takes the norm), three together (the projection's add over 3 rows), and
// one sequence with the experts behind the GPU expert cache (offload: the router's output feeds
// the lookup and the next layer's prefetch).
TEST(cuda_fused_norm_equals_launches) {
    GPU_TEST_REQUIRE_DEVICE();
    enum { GEN = 6, PROMPT = 5, MAX_SEQS = 3 };
    ft_model *m = q4_k_fixture("cuda_fused_norm.gguf");
    REQUIRE(m);
    const struct {
        int seqs;
        enum ft_moe_backend mode;
    } cases[] = {{1, FT_MOE_BACKEND_FUSED}, {MAX_SEQS, FT_MOE_BACKEND_FUSED}, {1, FT_MOE_BACKEND_OFFLOAD}};
    for (size_t ci = 0; ci < FT_ARRAY_LEN(cases); ci++) {
        const int seqs = cases[ci].seqs;
        ft_engine_params ep = ft_engine_default_params();
        ep.n_ctx = 64;
        ep.n_batch = 16;
        ep.n_seq = seqs;
        ep.device = FT_PLACEMENT_CUDA;
        ep.moe_backend = cases[ci].mode;
        ft_err err = {{0}};
        int differ = logits_differ_by_env(m, &ep, "FT_CUDA_FUSE_NORM", seqs, PROMPT, GEN, 16, 23, &err);
        CHECK(differ >= 0, "case %zu: %s", ci, err.msg);
        CHECK(differ == 0, "case %zu (%d sequences, %s): %d sequences' logits differ with the fused norm", ci, seqs,
              ft_moe_backend_name(cases[ci].mode), differ);
    }
    ft_model_free(m);
}
