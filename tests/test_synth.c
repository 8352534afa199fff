// test_synth.c: synthetic models (src/model/synth.c), random rows (src/quant/random.c) and
// expert geometry (src/moe/geometry.c), checked against independent truths: the block
// arithmetic of each format, llama.cpp loading and evaluating the files.
#include "oracle.h"
#include "test.h"
#include "../src/gguf/gguf.h"
#include "../src/model/synth.h"
#include "../src/moe/geometry.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const enum ft_type g_weight_types[] = {
    FT_TYPE_F32, FT_TYPE_F16, FT_TYPE_BF16, FT_TYPE_Q4_0, FT_TYPE_Q4_1, FT_TYPE_Q5_0,
    FT_TYPE_Q5_1, FT_TYPE_Q8_0, FT_TYPE_Q2_K, FT_TYPE_Q3_K, FT_TYPE_Q4_K, FT_TYPE_Q5_K,
    FT_TYPE_Q6_K, FT_TYPE_IQ4_NL, FT_TYPE_IQ4_XS, FT_TYPE_MXFP4,
};

// Random rows of every type have about the requested spread, a mean near zero, and finite values.
TEST(synth_random_rows_have_requested_scale) {
    enum { N = 256 * 64 };
    float *vals = malloc(N * sizeof(float));
    void *row = malloc(N * 4);
    for (size_t k = 0; k < FT_ARRAY_LEN(g_weight_types); k++) {
        enum ft_type t = g_weight_types[k];
        ft_rng rng = ft_rng_init(7 + k);
        const float want = 0.02f;
        ft_quant_random_row(t, &rng, want, row, N);
        ft_quant_ops_find(t)->to_float(row, vals, N);
        double s = 0, s2 = 0;
        bool finite = true;
        for (int i = 0; i < N; i++) {
            finite &= isfinite(vals[i]);
            s += vals[i];
            s2 += (double)vals[i] * vals[i];
        }
        double mean = s / N, std = sqrt(s2 / N - mean * mean);
        CHECK(finite, "%s: non-finite value", ft_type_name(t));
        // mxfp4 scales are powers of two: up to a factor sqrt(2) off by design
        double tol = t == FT_TYPE_MXFP4 ? 0.45 : 0.25;
        CHECK(fabs(std / want - 1) < tol, "%s: std %g, wanted %g", ft_type_name(t), std, want);
        CHECK(fabs(mean) < 0.25 * want, "%s: mean %g for std %g", ft_type_name(t), mean, want);
    }
    free(vals);
    free(row);
}

static ft_synth_params small_params(void) {
    ft_synth_params p = ft_synth_default_params();
    p.n_layer = 2;
    p.n_embd = 256;
    p.n_ff_exp = 256;
    p.n_expert = 4;
    return p;
}

TEST(synth_writes_a_qwen3moe_ft_reads) {
    ft_synth_params p = small_params();
    ft_err err = {{0}};
    const char *path = test_path("synth_small.gguf");
    REQUIRE(ft_synth_write(&p, path, &err), "%s", err.msg);
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    gguf_str arch;
    CHECK(gguf_get_str(f, "general.architecture", &arch) && gguf_str_eq(arch, "qwen3moe"));
    int64_t v;
    CHECK(gguf_get_int(f, "qwen3moe.block_count", &v) && v == 2);
    CHECK(gguf_get_int(f, "qwen3moe.expert_count", &v) && v == 4);
    enum gguf_value_type et;
    uint64_t n_vocab = 0;
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n_vocab) && et == GGUF_VALUE_TYPE_STRING);
    CHECK(n_vocab > 256, "built-in vocabulary has %llu tokens", (unsigned long long)n_vocab);
    CHECK(gguf_n_tensors(f) == 1 + 12 * 2 + 2, "%lld tensors", (long long)gguf_n_tensors(f));
    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    REQUIRE(emb);
    CHECK(emb->type == FT_TYPE_Q8_0 && emb->ne[0] == 256 && emb->ne[1] == (int64_t)n_vocab);
    const gguf_tensor *down = gguf_find_tensor(f, "blk.1.ffn_down_exps.weight");
    REQUIRE(down);
    CHECK(down->n_dims == 3 && down->ne[0] == 256 && down->ne[1] == 256 && down->ne[2] == 4);
    CHECK(down->type == FT_TYPE_Q4_K);
    // norm weights sit around 1
    const gguf_tensor *norm = gguf_find_tensor(f, "blk.0.attn_norm.weight");
    REQUIRE(norm && norm->type == FT_TYPE_F32);
    const float *nw = norm->data;
    CHECK(nw[0] > 0.7f && nw[0] < 1.3f && nw[255] > 0.7f && nw[255] < 1.3f);
    gguf_close(f);
}

TEST(synth_is_deterministic_per_seed) {
    ft_synth_params p = small_params();
    ft_err err = {{0}};
    const char *a = test_path("det_a.gguf"), *b = test_path("det_b.gguf"), *c = test_path("det_c.gguf");
    REQUIRE(ft_synth_write(&p, a, &err), "%s", err.msg);
    REQUIRE(ft_synth_write(&p, b, &err), "%s", err.msg);
    p.seed = 43;
    REQUIRE(ft_synth_write(&p, c, &err), "%s", err.msg);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
    CHECK(test_run(cmd, NULL, 0) == 0, "same seed, different files");
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, c);
    CHECK(test_run(cmd, NULL, 0) == 1, "different seeds, same file");
}

TEST(synth_rejects_bad_shapes) {
    ft_synth_params p = small_params();
    p.n_embd = 100; // not a multiple of q4_K's 256
    ft_err err = {{0}};
    CHECK(!ft_synth_write(&p, test_path("bad.gguf"), &err));
    CHECK(strstr(err.msg, "not a multiple") != NULL, "message: %s", err.msg);
    p = small_params();
    p.arch = "nosucharch";
    CHECK(!ft_synth_write(&p, test_path("bad.gguf"), &err));
    CHECK(strstr(err.msg, "nosucharch") != NULL, "message: %s", err.msg);
    p = small_params();
    p.n_expert_used = 9;
    CHECK(!ft_synth_write(&p, test_path("bad.gguf"), &err));
    p = small_params(); // linear-attention shapes on an architecture without such layers
    p.ssm_n_v_heads = 4;
    CHECK(!ft_synth_write(&p, test_path("bad.gguf"), &err));
    CHECK(strstr(err.msg, "linear-attention") != NULL, "message: %s", err.msg);
    p = small_params();
    p.arch = "qwen35moe";
    p.ssm_n_k_heads = 2;
    p.ssm_n_v_heads = 3; // not a multiple of the key heads
    CHECK(!ft_synth_write(&p, test_path("bad.gguf"), &err));
    CHECK(strstr(err.msg, "not a multiple") != NULL, "message: %s", err.msg);
    enum ft_type types[4];
    CHECK(ft_synth_parse_types("q4_K,bogus", types, 4, &err) < 0 && strstr(err.msg, "bogus"));
    CHECK(ft_synth_parse_types("q4_K,BF16,q6_k", types, 4, &err) == 3 && types[1] == FT_TYPE_BF16 &&
          types[2] == FT_TYPE_Q6_K);
}

// Bytes of one expert computed from the format's block size, independently of geometry.c.
static uint64_t expert_bytes(enum ft_type t, int64_t in, int64_t out) {
    const ft_type_traits *tr = ft_type_traits_find(t);
    return (uint64_t)out * (uint64_t)(in / tr->block_elems) * (uint64_t)tr->block_bytes;
}

TEST(synth_mixed_types_form_geometry_groups) {
    ft_synth_params p = small_params();
    p.n_layer = 5;
    ft_err err = {{0}};
    // Q4_K gate/up with Q6_K down in layers 0-2 and 4, BF16 everywhere in layer 3
    REQUIRE(ft_synth_parse_types("q4_K,q4_K,q4_K,bf16,q4_K", p.expert_types, FT_SYNTH_MAX_LAYERS, &err) == 5);
    p.n_expert_types = 5;
    REQUIRE(ft_synth_parse_types("q6_K,q6_K,q6_K,bf16,q6_K", p.expert_down_types, FT_SYNTH_MAX_LAYERS, &err) == 5);
    p.n_expert_down_types = 5;
    const char *path = test_path("mixed.gguf");
    REQUIRE(ft_synth_write(&p, path, &err), "%s", err.msg);
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    moe_geometry g;
    REQUIRE(moe_geometry_read(f, &g, &err), "%s", err.msg);
    uint64_t q4 = expert_bytes(FT_TYPE_Q4_K, 256, 256), q6 = expert_bytes(FT_TYPE_Q6_K, 256, 256),
             bf = expert_bytes(FT_TYPE_BF16, 256, 256);
    CHECK(g.n_layers == 5);
    CHECK(g.n_groups == 2, "%d groups", g.n_groups);
    if (g.n_groups == 2) {
        CHECK(g.groups[0].n_layers == 4 && g.groups[0].layers[0] == 0 && g.groups[0].layers[3] == 4);
        CHECK(g.groups[0].bytes[0] == q4 && g.groups[0].bytes[1] == q4 && g.groups[0].bytes[2] == q6);
        CHECK(g.groups[1].n_layers == 1 && g.groups[1].layers[0] == 3);
        CHECK(g.groups[1].bytes[0] == bf && g.groups[1].bytes[2] == bf);
    }
    CHECK(g.bytes_native == 4 * (4 * (2 * q4 + q6)) + 4 * (3 * bf));
    CHECK(g.bytes_padded == 5 * 4 * (3 * bf)); // bf16 is the widest of every bank
    moe_geometry_free(&g);
    gguf_close(f);
}

// llama.cpp loads a synthetic model and finds next-token distributions that are neither flat
// nor degenerate, with the built-in vocabulary and with a real one.
static void check_llama_distribution(const char *path, const char *input) {
    char args[1024], out[8192];
    snprintf(args, sizeof(args), "'%s' %s --top 5", path, input);
    if (!oracle_llama_eval(args, out, sizeof(out))) return;
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    REQUIRE(o, "bad JSON from llama_eval: %s (%s)", je.text, out);
    json_t *top = json_object_get(o, "top");
    json_int_t n_vocab = json_integer_value(json_object_get(o, "n_vocab"));
    REQUIRE(json_array_size(top) == 5, "%s", out);
    double p0 = json_real_value(json_array_get(json_array_get(top, 0), 1));
    CHECK(p0 > 5.0 / (double)n_vocab, "flat: top probability %g over %lld tokens", p0, (long long)n_vocab);
    CHECK(p0 < 0.95, "degenerate: top probability %g", p0);
    json_decref(o);
}

TEST(synth_loads_in_llama_cpp) {
    if (!oracle_node_available()) return;
    ft_synth_params p = small_params();
    ft_err err = {{0}};
    const char *path = test_path("llama_builtin.gguf");
    REQUIRE(ft_synth_write(&p, path, &err), "%s", err.msg);
    check_llama_distribution(path, "--text 'the model and the expert'");

    char vocab[1024];
    snprintf(vocab, sizeof(vocab), "%s/vocab/ggml-vocab-qwen2.gguf", test_shared_dir());
    p.vocab_from = vocab;
    p.n_expert_types = 2;
    p.expert_types[0] = FT_TYPE_Q4_K;
    p.expert_types[1] = FT_TYPE_BF16;
    path = test_path("llama_qwen2.gguf");
    REQUIRE(ft_synth_write(&p, path, &err), "%s", err.msg);
    check_llama_distribution(path, "--text 'Hello world'");
}

// ft synth's gpt-oss flags write the keys and tensors they name (read back by ft inspect), and
// flags an architecture does not take are refused naming those that do.
TEST(synth_cli_gptoss_flags) {
    static char out[1 << 16];
    char cmd[2048];
    const char *path = test_path("cli_gptoss.gguf");
    snprintf(cmd, sizeof(cmd),
             "'%s' synth '%s' --arch gpt-oss --layers 3 --swa 8 --swa-pattern 3 --swa-rope-base 5000 --rope-base "
             "150000 --yarn 4 --qkv-bias --expert-types mxfp4 2>&1 && '%s' inspect '%s' 2>&1",
             test_ft_bin(), path, test_ft_bin(), path);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    static const char *const want[] = {
        "gpt-oss.attention.sliding_window                     8",
        "gpt-oss.attention.sliding_window_pattern             3",
        "gpt-oss.rope.freq_base_swa                           5000",
        "gpt-oss.rope.freq_base                               150000",
        "gpt-oss.rope.scaling.type                            \"yarn\"",
        "blk.2.attn_q.bias",
        "blk.2.attn_sinks.weight",
        "blk.2.ffn_down_exps.bias",
        "mxfp4",
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(want); i++) CHECK(strstr(out, want[i]), "no '%s' in:\n%s", want[i], out);
    static const struct {
        const char *args, *msg;
    } bad[] = {
        {"--arch qwen3moe --swa 8", "--swa and --swa-rope-base are for laguna, gpt-oss and gemma4"},
        {"--arch qwen3moe --yarn 2", "--yarn is for laguna and gpt-oss"},
        {"--arch laguna --swa-pattern 3", "--swa-pattern is for gpt-oss and gemma4"},
        {"--arch gpt-oss --expert-weights-scale 2", "--expert-weights-scale is for laguna and glm4moe"},
        {"--arch qwen3moe --qkv-bias", "--qkv-bias is for qwen2moe, glm4moe and gpt-oss"},
        {"--arch gpt-oss --rot 32", "gpt-oss rotates whole heads"},
        {"--arch gpt-oss --yarn 0.5", "--yarn must be a finite number above 1"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(bad); i++) {
        snprintf(cmd, sizeof(cmd), "'%s' synth '%s' %s 2>&1", test_ft_bin(), test_path("cli_bad.gguf"), bad[i].args);
        int rc = test_run(cmd, out, sizeof(out));
        CHECK(rc != 0 && strstr(out, bad[i].msg), "%s: exit %d, %s", bad[i].args, rc, out);
    }
}

// ft synth's gemma4 flags write the keys and tensors they name (read back by ft inspect): the
// sliding layers' pattern, window, RoPE base, head size and KV heads, shared KV (the last layers
// without K), the full layers without attn_v, rope_freqs, the per-expert down scales, the layer
// output scales, fused gate/up experts, the final soft-cap; its flags are refused elsewhere and
// a shared-KV count that leaves fewer than two layers their own KV is refused.
TEST(synth_cli_gemma4_flags) {
    static char out[1 << 16];
    char cmd[2048];
    const char *path = test_path("cli_gemma4.gguf");
    snprintf(cmd, sizeof(cmd),
             "'%s' synth '%s' --arch gemma4 --layers 4 --swa 8 --swa-pattern 2 --swa-rope-base 5000 --rope-base "
             "1000000 --head-dim 128 --swa-head-dim 64 --swa-kv-heads 4 --rot 32 --kv-shared 2 --final-softcap 30 "
             "--k-eq-v --expert-down-scale --layer-out-scale --fused-gate-up --shared-ff 384 --expert-types q4_K,mxfp4 "
             "2>&1 && '%s' inspect '%s' 2>&1",
             test_ft_bin(), path, test_ft_bin(), path);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    static const char *const want[] = {
        "gemma4.attention.sliding_window                      8",
        "gemma4.attention.sliding_window_pattern              [4 bool: true, false, true, false]",
        "gemma4.attention.head_count_kv                       [4 uint32: 4, 2, 4, 2]",
        "gemma4.attention.key_length_swa                      64",
        "gemma4.rope.freq_base_swa                            5000",
        "gemma4.attention.shared_kv_layers                    2",
        "gemma4.final_logit_softcapping                       30",
        "gemma4.feed_forward_length                           384",
        "rope_freqs.weight                      f32     [64]",
        "blk.0.attn_v.weight",
        "blk.1.attn_k.weight",
        "blk.0.ffn_gate_up_exps.weight        q4_K",
        "blk.3.ffn_gate_up_exps.weight        mxfp4",
        "blk.2.ffn_down_exps.scale",
        "blk.3.layer_output_scale.weight",
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(want); i++) CHECK(strstr(out, want[i]), "no '%s' in:\n%s", want[i], out);
    static const char *const absent[] = {"blk.1.attn_v.weight", "blk.2.attn_k.weight", "blk.3.attn_k.weight",
                                         "blk.0.ffn_gate_exps.weight"};
    for (size_t i = 0; i < FT_ARRAY_LEN(absent); i++) CHECK(!strstr(out, absent[i]), "'%s' written", absent[i]);
    static const struct {
        const char *args, *msg;
    } bad[] = {
        {"--arch qwen3moe --kv-shared 2", "--swa-head-dim, --swa-kv-heads, --kv-shared, --final-softcap, --k-eq-v, "
                                          "--expert-down-scale and --layer-out-scale are for gemma4"},
        {"--arch gpt-oss --swa-rot 32", "--swa-rot is for laguna and gemma4"},
        {"--arch gemma4 --yarn 2", "--yarn is for laguna and gpt-oss"},
        {"--arch gemma4 --layers 4 --kv-shared 3", "--kv-shared 3: at least two of the 4 layers must keep their own KV"},
        {"--arch gemma4 --heads 4 --swa-kv-heads 3", "--heads 4 is not a multiple of the sliding layers' KV heads 3"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(bad); i++) {
        snprintf(cmd, sizeof(cmd), "'%s' synth '%s' %s 2>&1", test_ft_bin(), test_path("cli_bad.gguf"), bad[i].args);
        int rc = test_run(cmd, out, sizeof(out));
        CHECK(rc != 0 && strstr(out, bad[i].msg), "%s: exit %d, %s", bad[i].args, rc, out);
    }
}

// The one --qkv-bias writes Q/K/V biases for each architecture that takes it, and none without
// it; glm4moe's --expert-weights-scale is written as given.
TEST(synth_cli_qkv_bias_archs) {
    static char out[1 << 16];
    char cmd[2048];
    static const char *const archs[] = {"qwen2moe", "glm4moe", "gpt-oss"};
    for (size_t i = 0; i < FT_ARRAY_LEN(archs); i++)
        for (int bias = 0; bias < 2; bias++) {
            const char *path = test_path("cli_qkv_bias.gguf");
            snprintf(cmd, sizeof(cmd), "'%s' synth '%s' --arch %s --layers 2 %s 2>&1 && '%s' inspect '%s' 2>&1",
                     test_ft_bin(), path, archs[i], bias ? "--qkv-bias" : "", test_ft_bin(), path);
            REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
            bool has = strstr(out, "blk.1.attn_q.bias") && strstr(out, "blk.1.attn_k.bias") &&
                       strstr(out, "blk.1.attn_v.bias");
            CHECK(has == (bias == 1) && (bias || !strstr(out, "attn_q.bias")), "%s %s:\n%s", archs[i],
                  bias ? "--qkv-bias" : "without --qkv-bias", out);
        }
    const char *path = test_path("cli_glm_scale.gguf");
    snprintf(cmd, sizeof(cmd), "'%s' synth '%s' --arch glm4moe --layers 2 --expert-weights-scale 1.5 2>&1 && '%s' "
             "inspect '%s' 2>&1", test_ft_bin(), path, test_ft_bin(), path);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    CHECK(strstr(out, "glm4moe.expert_weights_scale                         1.5"), "%s", out);
}
