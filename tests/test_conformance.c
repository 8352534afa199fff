// test_conformance.c: qwen3moe against llama.cpp on small synthetic models, covering every
// expert quant type (two gate/up types and two down types per model, so types also mix per
// layer and per bank), f16 and q8_0 KV caches, and dense weights of a few types.
#include "test_conformance.h"
#include "test.h"
#include "oracle.h"
#include "../src/gguf/gguf.h"

#include <jansson.h>

static void run_types(const char *label, enum ft_type gu0, enum ft_type gu1, enum ft_type dn0,
                      enum ft_type dn1, enum ft_type dense, enum ft_type kv) {
    ft_synth_params p = conf_small_params("qwen3moe");
    p.n_expert_types = 2;
    p.expert_types[0] = gu0;
    p.expert_types[1] = gu1;
    p.n_expert_down_types = 2;
    p.expert_down_types[0] = dn0;
    p.expert_down_types[1] = dn1;
    p.dense_type = dense;
    conf_opts o = conf_default_opts();
    o.kv_type = kv;
    conf_check(label, &p, &o);
}

TEST(conformance_qwen3moe_float_q4_0) {
    run_types("qwen3moe_f32_f16_bf16_q4_0", FT_TYPE_F32, FT_TYPE_F16, FT_TYPE_BF16, FT_TYPE_Q4_0, FT_TYPE_Q8_0,
              FT_TYPE_F16);
}

TEST(conformance_qwen3moe_legacy_quants) {
    run_types("qwen3moe_q4_1_q5_0_q5_1_q8_0", FT_TYPE_Q4_1, FT_TYPE_Q5_0, FT_TYPE_Q5_1, FT_TYPE_Q8_0, FT_TYPE_Q8_0,
              FT_TYPE_F16);
}

TEST(conformance_qwen3moe_k_quants) {
    run_types("qwen3moe_q2_K_q3_K_q4_K_q5_K", FT_TYPE_Q2_K, FT_TYPE_Q3_K, FT_TYPE_Q4_K, FT_TYPE_Q5_K, FT_TYPE_Q8_0,
              FT_TYPE_F16);
}

TEST(conformance_qwen3moe_q6_K_iq4_mxfp4) {
    run_types("qwen3moe_q6_K_iq4_nl_iq4_xs_mxfp4", FT_TYPE_Q6_K, FT_TYPE_IQ4_NL, FT_TYPE_IQ4_XS, FT_TYPE_MXFP4,
              FT_TYPE_Q8_0, FT_TYPE_F16);
}

TEST(conformance_qwen3moe_kv_q8_0) {
    run_types("qwen3moe_kv_q8_0", FT_TYPE_Q4_K, FT_TYPE_Q4_K, FT_TYPE_Q6_K, FT_TYPE_Q6_K, FT_TYPE_Q8_0,
              FT_TYPE_Q8_0);
}

// `ft probs` end to end (tokenizer, engine, CLI) against llama.cpp on the same text: a
// qwen3moe with the built-in BPE vocabulary, and a Mixtral-style llama with the SentencePiece
// vocabulary of ../shared/vocab (BOS added as its metadata asks).
static void probs_cli_check(const char *label, ft_synth_params *p, const char *text) {
    if (!oracle_node_available()) return;
    char path[600];
    snprintf(path, sizeof(path), "%s.gguf", test_path(label));
    ft_err err = {{0}};
    REQUIRE(ft_synth_write(p, path, &err), "%s", err.msg);
    char cmd[8192], ours[8192], ref[65536];
    snprintf(cmd, sizeof(cmd), "%s probs -m '%s' -p '%s' --top 10 -t 2 --kv-cache-dtype q8_0", test_ft_bin(), path, text);
    REQUIRE(test_run(cmd, ours, sizeof(ours)) == 0, "%s", cmd);
    json_error_t je;
    json_t *a = json_loads(ours, 0, &je);
    REQUIRE(a, "not JSON: %s", ours);
    // tokenization: llama.cpp's, except that node-llama-cpp's text mode never adds BOS
    snprintf(cmd, sizeof(cmd), "'%s' --text '%s' --special --top 1", path, text);
    REQUIRE(oracle_llama_eval(cmd, ref, sizeof(ref)));
    json_t *b = json_loads(ref, 0, &je);
    REQUIRE(b, "oracle output: %s", ref);
    json_t *ta_tok = json_object_get(a, "tokens"), *tb_tok = json_object_get(b, "tokens");
    int64_t bos = -1;
    gguf_file *gf = gguf_open(path, &err);
    if (gf) gguf_get_int(gf, "tokenizer.ggml.bos_token_id", &bos);
    gguf_close(gf);
    size_t skip = json_array_size(ta_tok) == json_array_size(tb_tok) + 1 &&
                  json_integer_value(json_array_get(ta_tok, 0)) == bos;
    bool same = json_array_size(ta_tok) == json_array_size(tb_tok) + skip;
    for (size_t i = 0; same && i < json_array_size(tb_tok); i++)
        same = json_integer_value(json_array_get(ta_tok, i + skip)) == json_integer_value(json_array_get(tb_tok, i));
    CHECK(same, "%s: tokenization differs: %s vs %s", label, ours, ref);
    json_decref(b);
    // probabilities: llama.cpp on ft's tokens
    char ids[4096];
    size_t len = 0;
    for (size_t i = 0; i < json_array_size(ta_tok); i++)
        len += (size_t)snprintf(ids + len, sizeof(ids) - len, "%s%lld", i ? "," : "",
                                (long long)json_integer_value(json_array_get(ta_tok, i)));
    snprintf(cmd, sizeof(cmd), "'%s' --tokens %s --top 10 --kv-type q8_0", path, ids);
    REQUIRE(oracle_llama_eval(cmd, ref, sizeof(ref)));
    b = json_loads(ref, 0, &je);
    REQUIRE(b, "oracle output: %s", ref);
    json_t *ta = json_object_get(a, "top"), *tb = json_object_get(b, "top");
    REQUIRE(json_array_size(ta) == 10 && json_array_size(tb) == 10);
    double worst = 0;
    for (size_t i = 0; i < 10; i++) {
        int id = (int)json_integer_value(json_array_get(json_array_get(tb, i), 0));
        double pr = json_real_value(json_array_get(json_array_get(tb, i), 1)), mine = -1;
        for (size_t j = 0; j < 10; j++)
            if (json_integer_value(json_array_get(json_array_get(ta, j), 0)) == id)
                mine = json_number_value(json_array_get(json_array_get(ta, j), 1));
        if (mine < 0) mine = 0; // outside ft's top 10: counts as the whole difference
        worst = fmax(worst, fabs(mine - pr));
    }
    CHECK(worst <= CONF_TOL, "%s: worst difference %g", label, worst);
    fprintf(stderr, "    %s: worst top-10 probability difference %.5f\n", label, worst);
    json_decref(a);
    json_decref(b);
}

TEST(conformance_probs_cli_text) {
    ft_synth_params p = conf_small_params("qwen3moe");
    probs_cli_check("probs_qwen3moe_bpe", &p, "hello world, the model is a cache");
    char vocab[512];
    snprintf(vocab, sizeof(vocab), "%s/vocab/ggml-vocab-llama-spm.gguf", test_shared_dir());
    FILE *f = fopen(vocab, "rb");
    if (!f) {
        test_skip("%s not found", vocab);
        return;
    }
    fclose(f);
    p = conf_small_params("llama");
    p.vocab_from = vocab;
    probs_cli_check("probs_llama_spm", &p, "Hello world! The expert cache is warm.");
}
