// test_batch.c: the batch engine (src/engine/batch.c). Several sequences joining at different
// steps, their prompts cut into prefill chunks that share steps with the others' decode
// tokens, are decoded greedily in one batch engine and compared with each sequence alone on a
// one-sequence engine (ft_engine, the path `ft run` takes) with the same chunk size: on the
// CPU every op computes each row on its own, with the kernel its own chunk picks (prefill
// chunks of FT_GEMM_MIN_COLS tokens or more the GEMM, AMX where the CPU has it; decode tokens
// and shorter chunks the per-row kernels, whatever else shares the step or an expert), so the
// logits of every step must be bit-identical, and so the greedy tokens (the near-tie rule for
// batched output then holds trivially; tests/server/load.mjs checks it where bits may differ).
//
// Run on the demo model (q8_0 cache; and an f16 cache with prompts over 64 tokens, where
// attention's path depends on the chunk length, so cutting prompts the same way matters) and
// on synthetic models of the other architectures: qwen2moe's biases and gated shared expert;
// laguna's sliding window, YaRN and dense lead layers, with a q8_0 cache whose Hadamard
// rotation runs per segment; and laguna with bf16 experts (AMX-BF16's GEMM) and prompts whose
// last chunk is shorter than FT_GEMM_MIN_COLS.
#include "fixtures.h"
#include "batch_sim.h"
#include "../src/backend/cpu/cpu.h"
#include "../src/engine/batch.h"
#include "../src/kv/kv_pool.h"
#include "../src/model/synth.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>

enum { N_SEQ = 3, N_REQ = 5, N_GEN = 10 };

// Runs the requests through one batch engine of N_SEQ sequences with prefill chunks of chunk
// tokens (batch_sim.h).
static bool run_batched(const ft_model *m, batch_sim_req *rq, int n_req, int chunk, enum ft_type kv, ft_err *err) {
    ft_engine_params ep = ft_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = 128;
    ep.n_seq = N_SEQ;
    ep.n_batch = chunk;
    ep.kv_type = kv;
    ft_batch *b = ft_batch_init(m, &ep, err);
    if (!b) return false;
    bool ok = batch_sim_run(b, rq, n_req, chunk, N_GEN, m->hp.n_vocab, err);
    ft_batch_free(b);
    return ok;
}

// The request alone on a one-sequence engine with the same chunk size (its prompt in one
// ft_engine_eval), then decoding its own greedy tokens. Fills out and logits like run_batched.
static bool run_alone(const ft_model *m, const batch_sim_req *q, int chunk, enum ft_type kv, int32_t *out, float *logits,
                      ft_err *err) {
    ft_engine_params ep = ft_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = 128;
    ep.n_batch = chunk;
    ep.kv_type = kv;
    ft_engine *e = ft_engine_init(m, &ep, err);
    if (!e) return false;
    int n_vocab = m->hp.n_vocab;
    const float *lg = ft_engine_eval(e, q->prompt, q->n_prompt, err);
    for (int g = 0; g < N_GEN && lg; g++) {
        memcpy(logits + (size_t)g * n_vocab, lg, (size_t)n_vocab * sizeof(float));
        out[g] = batch_sim_argmax(lg, n_vocab);
        if (g + 1 < N_GEN) lg = ft_engine_eval(e, &out[g], 1, err);
    }
    ft_engine_free(e);
    return lg != NULL;
}

// lens: the prompt lengths of the N_REQ requests.
static void batch_case(const char *label, const ft_synth_params *sp, int chunk, enum ft_type kv, const int *lens) {
    ft_model *m = fixture_model(sp, "batch.gguf");
    REQUIRE(m);
    ft_err err = {{0}};
    int n_vocab = m->hp.n_vocab;
    // joins spread out so that prefill chunks share steps with decoders and a closed
    // sequence's cache is reused
    static const int joins[N_REQ] = {0, 0, 2, 3, 4};
    batch_sim_req rq[N_REQ];
    ft_rng rng = ft_rng_init(11);
    for (int r = 0; r < N_REQ; r++) {
        int32_t prompt[BATCH_SIM_MAX_PROMPT];
        for (int i = 0; i < lens[r]; i++) prompt[i] = (int32_t)(ft_rng_next(&rng) % (uint64_t)n_vocab);
        batch_sim_req_init(&rq[r], prompt, lens[r], joins[r], ft_malloc((size_t)N_GEN * n_vocab * sizeof(float)));
    }
    float *alone = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float));
    int n_identical = 0, max_chunks = 0;
    if (!run_batched(m, rq, N_REQ, chunk, kv, &err)) {
        test_fail(__FILE__, __LINE__, "%s: batched run: %s", label, err.msg);
        goto done;
    }
    for (int r = 0; r < N_REQ; r++) {
        batch_sim_req *q = &rq[r];
        max_chunks = FT_MAX(max_chunks, q->n_chunks);
        int32_t out[N_GEN];
        if (!run_alone(m, q, chunk, kv, out, alone, &err)) {
            test_fail(__FILE__, __LINE__, "%s: alone: %s", label, err.msg);
            goto done;
        }
        int g = 0;
        while (g < N_GEN && !memcmp(alone + (size_t)g * n_vocab, q->logits + (size_t)g * n_vocab,
                                    (size_t)n_vocab * sizeof(float)))
            g++;
        CHECK(g == N_GEN, "%s: request %d (prompt %d in %d chunks): logits of step %d differ from the request alone",
              label, r, q->n_prompt, q->n_chunks, g);
        CHECK(!memcmp(out, q->out, sizeof(out)), "%s: request %d: greedy tokens differ", label, r);
        n_identical += g == N_GEN;
    }
    printf("    %s: %d requests on %d sequences, chunk %d (prompts in up to %d chunks): %d/%d bit-identical to the "
           "request alone over %d steps (prefill GEMMs on AMX: %s)\n",
           label, N_REQ, N_SEQ, chunk, max_chunks, n_identical, N_REQ, N_GEN, ft_quant_amx() ? "yes" : "no");
done:
    for (int r = 0; r < N_REQ; r++) free(rq[r].logits);
    free(alone);
    ft_model_free(m);
}

TEST(batch_matches_alone) {
    // prompt lengths: several chunks, one token, in between
    static const int lens[N_REQ] = {37, 1, 12, 48, 5};
    ft_synth_params sp = ft_synth_default_params(); // the demo model
    sp.n_ctx_train = 256;
    batch_case("demo qwen3moe", &sp, 16, FT_TYPE_Q8_0, lens);
    // an f16 cache: chunks of 64 queries or more take the tiled attention path (as llama.cpp)
    static const int long_lens[N_REQ] = {70, 3, 66, 80, 9};
    batch_case("demo qwen3moe f16 cache", &sp, 64, FT_TYPE_F16, long_lens);

    sp = ft_synth_default_params();
    sp.arch = "qwen2moe";
    sp.n_layer = 2;
    sp.n_ctx_train = 256;
    sp.qkv_bias = true;
    batch_case("qwen2moe", &sp, 8, FT_TYPE_Q8_0, lens);

    sp = ft_synth_default_params();
    sp.arch = "laguna";
    sp.n_layer = 4;
    sp.n_ctx_train = 256;
    sp.head_dim = 64;
    sp.n_dense_lead = 1;
    sp.n_swa = 8;
    sp.yarn_factor = 4;
    batch_case("laguna swa", &sp, 12, FT_TYPE_Q8_0, lens);

    // q4_K experts in layer 1, bf16 in 2 and 3; last chunks of 2, 3, 2 and 1 tokens take the per-row kernels
    static const int short_tail_lens[N_REQ] = {38, 2, 27, 50, 7};
    fixture_expert_types(&sp, "q4_K,q4_K,bf16", NULL); // (layer 0 is dense)
    batch_case("laguna bf16 experts", &sp, 12, FT_TYPE_F16, short_tail_lens);

    // recurrent layers: each sequence's conv and delta-rule state, carried across its chunks
    // and steps, started afresh when a closed sequence's cache is reused
    sp = ft_synth_default_params();
    sp.arch = "qwen35moe";
    sp.n_layer = 4;
    sp.n_ctx_train = 256;
    batch_case("qwen35moe", &sp, 16, FT_TYPE_Q8_0, lens);
    sp.arch = "qwen3next";
    sp.ssm_n_k_heads = 2;
    sp.ssm_n_v_heads = 6;
    batch_case("qwen3next", &sp, 16, FT_TYPE_Q8_0, lens);
}

// gpt-oss: sliding windows of 8 on every other layer with their own RoPE base, attention sinks,
// the router's and experts' biases, the clamped SwiGLU; mxfp4 and q4_K experts; a q8_0 cache, then
// an f16 cache with prompts over 64 tokens (the tiled attention path, sinks after its blocks).
TEST(batch_matches_alone_gptoss) {
    static const int lens[N_REQ] = {37, 1, 12, 48, 5};
    static const int long_lens[N_REQ] = {70, 3, 66, 80, 9};
    ft_synth_params sp = ft_synth_default_params();
    sp.arch = "gpt-oss";
    sp.n_layer = 4;
    sp.n_ctx_train = 256;
    sp.n_expert_used = 4;
    sp.qkv_bias = true;
    sp.n_swa = 8;
    sp.rope_freq_base_swa = 10000.0f;
    fixture_expert_types(&sp, "mxfp4,q4_K", NULL);
    batch_case("gpt-oss", &sp, 12, FT_TYPE_Q8_0, lens);
    batch_case("gpt-oss f16 cache", &sp, 64, FT_TYPE_F16, long_lens);
}

// gemma4: two sliding layers of every three (windows of 8, heads of 32 and 4 KV heads) and full
// ones (heads of 64, proportional RoPE), the last two layers on the KV of earlier ones, V normed
// without weight, the dense GELU FFN beside the experts with down scales and the router on its own
// input, layer output scales, soft-capped logits; a q8_0 cache, then an f16 cache with prompts
// over 64 tokens.
TEST(batch_matches_alone_gemma4) {
    static const int lens[N_REQ] = {37, 1, 12, 48, 5};
    static const int long_lens[N_REQ] = {70, 3, 66, 80, 9};
    ft_synth_params sp = ft_synth_default_params();
    sp.arch = "gemma4";
    sp.n_layer = 5;
    sp.n_ctx_train = 256;
    sp.head_dim_swa = 32;
    sp.n_head_kv_swa = 4;
    sp.n_swa = 8;
    sp.swa_pattern = 3;
    sp.n_kv_shared = 2;
    sp.n_rot = 32;
    sp.n_ff_shexp = 384;
    sp.final_softcap = 15.0f;
    sp.expert_down_scale = true;
    sp.layer_out_scale = true;
    fixture_expert_types(&sp, "q4_K,mxfp4", NULL);
    batch_case("gemma4", &sp, 12, FT_TYPE_Q8_0, lens);
    batch_case("gemma4 f16 cache", &sp, 64, FT_TYPE_F16, long_lens);
}

// Errors come back before anything runs: the sequence keeps its position; closing frees it.
TEST(batch_step_errors_and_reuse) {
    ft_synth_params sp = ft_synth_default_params();
    sp.n_layer = 1;
    sp.n_ctx_train = 64;
    ft_model *m = fixture_model(&sp, "batch_err.gguf");
    REQUIRE(m);
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_threads = 1;
    ep.n_ctx = 8;
    ep.n_seq = 2;
    ep.n_batch = 1; // a step: one chunk of 1 beside the other sequence's token
    ft_batch *b = ft_batch_init(m, &ep, &err);
    REQUIRE(b, "%s", err.msg);
    CHECK(ft_batch_max_tokens(b) == 2 && ft_batch_chunk(b) == 1 && ft_batch_n_seq(b) == 2 && ft_batch_n_ctx(b) == 8);
    int s0 = ft_batch_seq_open(b), s1 = ft_batch_seq_open(b);
    CHECK(s0 == 0 && s1 == 1 && ft_batch_seq_open(b) == -1, "two sequences, then none: %d %d", s0, s1);
    int32_t good[2] = {3, 4}, bad = m->hp.n_vocab;
    ft_batch_item it[2] = {{s0, good, 2, true}, {s1, &bad, 1, true}};
    CHECK(ft_batch_step(b, it, 1, &err), "two tokens fit the budget of 2: %s", err.msg);
    CHECK(ft_batch_seq_pos(b, s0) == 2);
    it[0].n_tok = 1;
    CHECK(!ft_batch_step(b, it, 2, &err) && strstr(err.msg, "outside the vocabulary"), "bad id: %s", err.msg);
    CHECK(ft_batch_seq_pos(b, s0) == 2 && ft_batch_seq_pos(b, s1) == 0, "nothing ran");
    int32_t many[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int i = 0; i < 3; i++) {
        ft_batch_item one = {s0, many + 2 * i, 2, false};
        CHECK(ft_batch_step(b, &one, 1, &err), "%s", err.msg);
    }
    ft_batch_item over = {s0, many, 1, true};
    CHECK(!ft_batch_step(b, &over, 1, &err) && strstr(err.msg, "context"), "context full: %s", err.msg);
    CHECK(ft_batch_positions_used(b) == 8);
    ft_batch_seq_close(b, s0);
    CHECK(ft_batch_positions_used(b) == 0 && ft_batch_n_open(b) == 1);
    CHECK(ft_batch_seq_open(b) == 0, "the freed cache is taken again");
    ft_batch_free(b);
    ft_batch_free(NULL);
    ft_model_free(m);
}

