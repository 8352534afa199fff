// test_model.c: the architecture descriptions (src/model/*.c, read by src/model/model.c and
// synth.c): every architecture of the table synthesizes, loads and runs; what ft synth writes
// is exactly what binding binds, checked through every tensor field of the model rather than
// through the description; the tables hold together; fused gate/up experts bind as views and
// run as their split twin does.
#include "fixtures.h"
#include "oracle.h"
#include "test.h"
#include "../src/engine/engine.h"
#include "../src/model/model.h"
#include "../src/model/model_impl.h"
#include "../src/model/synth.h"
#include "../src/moe/geometry.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

// Every weight a model can hold, listed from the structs (not from any description).
static const size_t g_model_fields[] = {offsetof(ft_model, tok_embd), offsetof(ft_model, output_norm),
                                        offsetof(ft_model, output), offsetof(ft_model, rope_freqs)};
static const size_t g_layer_fields[] = {
    offsetof(ft_layer, attn_norm),  offsetof(ft_layer, wq),         offsetof(ft_layer, wk),
    offsetof(ft_layer, wv),         offsetof(ft_layer, bq),         offsetof(ft_layer, bk),
    offsetof(ft_layer, bv),         offsetof(ft_layer, wo),         offsetof(ft_layer, q_norm),
    offsetof(ft_layer, k_norm),     offsetof(ft_layer, attn_gate),  offsetof(ft_layer, ffn_norm),
    offsetof(ft_layer, router),     offsetof(ft_layer, sel_bias),   offsetof(ft_layer, gate_exps),
    offsetof(ft_layer, up_exps),    offsetof(ft_layer, down_exps),  offsetof(ft_layer, gate_shexp),
    offsetof(ft_layer, up_shexp),   offsetof(ft_layer, down_shexp), offsetof(ft_layer, gate_inp_shexp),
    offsetof(ft_layer, ffn_gate),   offsetof(ft_layer, ffn_up),     offsetof(ft_layer, ffn_down),
    offsetof(ft_layer, lin_qkv),    offsetof(ft_layer, lin_z),      offsetof(ft_layer, ssm_conv1d),
    offsetof(ft_layer, ssm_dt),     offsetof(ft_layer, ssm_a),      offsetof(ft_layer, ssm_beta),
    offsetof(ft_layer, ssm_alpha),  offsetof(ft_layer, ssm_ba),     offsetof(ft_layer, ssm_norm),
    offsetof(ft_layer, ssm_out),    offsetof(ft_layer, gate_up_exps), offsetof(ft_layer, bo),
    offsetof(ft_layer, sinks),      offsetof(ft_layer, router_b),   offsetof(ft_layer, gate_exps_b),
    offsetof(ft_layer, up_exps_b),  offsetof(ft_layer, down_exps_b), offsetof(ft_layer, attn_post_norm),
    offsetof(ft_layer, ffn_post_norm_1), offsetof(ft_layer, ffn_pre_norm_2), offsetof(ft_layer, ffn_post_norm_2),
    offsetof(ft_layer, ffn_post_norm), offsetof(ft_layer, router_in_scale), offsetof(ft_layer, down_exps_s),
    offsetof(ft_layer, out_scale),
};

static const ft_tensor *field_tensor(const void *base, size_t off) {
    return (const ft_tensor *)((const char *)base + off);
}

// How many ways the file's tensors and the model's bound weights disagree: a file tensor no
// field binds, or two fields bind (the output tied to the embedding aside), or one bound with
// another type, shape or data; a bound weight the file does not have; a strided view (gate or
// up of fused experts) that is not one half of each matrix of the file tensor it names. The
// first goes to why.
static int binding_mismatches(const ft_model *m, const gguf_file *f, char *why, size_t cap) {
    int64_t n = gguf_n_tensors(f);
    int *bound = calloc((size_t)n, sizeof(int));
    int bad = 0;
    why[0] = 0;
#define MISMATCH(...) (bad++ ? 0 : snprintf(why, cap, __VA_ARGS__))
    for (int l = -1; l < m->hp.n_layer; l++) {
        const void *base = l < 0 ? (const void *)m : (const void *)&m->layers[l];
        size_t n_fields = l < 0 ? FT_ARRAY_LEN(g_model_fields) : FT_ARRAY_LEN(g_layer_fields);
        for (size_t i = 0; i < n_fields; i++) {
            const ft_tensor *t = field_tensor(base, l < 0 ? g_model_fields[i] : g_layer_fields[i]);
            if (!ft_tensor_present(t)) continue;
            if (t == &m->output && t->data == m->tok_embd.data && !gguf_find_tensor(f, "output.weight")) continue;
            const gguf_tensor *g = gguf_find_tensor(f, t->name);
            if (!g) {
                MISMATCH("bound %s, which the file lacks", t->name);
                continue;
            }
            if (t->mat_stride) {
                const uint8_t *base0 = g->data;
                size_t at = (size_t)((const uint8_t *)t->data - base0);
                bool half = g->type == t->type && g->ne[0] == t->ne[0] && g->ne[1] == 2 * t->ne[1] &&
                            g->ne[2] == t->ne[2] && t->mat_stride == 2 * t->mat_bytes &&
                            (at == 0 || at == t->mat_bytes) && t->mat_bytes * 2 * (size_t)t->ne[2] == g->bytes;
                if (!half) MISMATCH("%s: a view of another shape", t->name);
                continue;
            }
            bound[g - gguf_tensor_at(f, 0)]++;
            bool same = g->type == t->type && g->data == t->data;
            for (uint32_t d = 0; d < 3; d++) same = same && g->ne[d] == t->ne[d];
            if (!same)
                MISMATCH("%s bound as %s [%lld, %lld, %lld]", t->name, ft_type_name(t->type), (long long)t->ne[0],
                         (long long)t->ne[1], (long long)t->ne[2]);
        }
    }
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *g = gguf_tensor_at(f, i);
        int l = -1;
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)g->name.len, g->name.ptr);
        sscanf(name, "blk.%d.", &l);
        // an MTP block's tensors are the file's, never the model's
        bool mtp = l >= m->hp.n_layer && l < m->hp.n_layer + m->hp.n_layer_mtp;
        if (bound[i] == (mtp ? 0 : 1)) continue;
        MISMATCH("file tensor %s bound %d times", name, bound[i]);
    }
#undef MISMATCH
    free(bound);
    return bad;
}

// Every option ft synth has, set, where the architecture takes it.
static ft_synth_params all_options(const char *arch) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = arch;
    p.n_layer = 5;
    p.n_expert_types = 2;
    p.expert_types[0] = FT_TYPE_Q4_K;
    p.expert_types[1] = FT_TYPE_Q8_0;
    p.n_expert_down_types = 1;
    p.expert_down_types[0] = FT_TYPE_Q6_K;
    p.n_ff_shexp = strcmp(arch, "glm4moe") ? 128 : 2 * p.n_ff_exp; // (glm4moe's: a count of experts)
    p.qkv_bias = true;
    p.qk_norm = true;
    if (ft_synth_has_mtp(arch)) p.n_mtp = 1;
    if (ft_synth_has_dense_layers(arch)) p.n_dense_lead = 2, p.n_ff_dense = 384;
    p.n_swa = 16;
    p.n_head_swa = 8;
    p.n_rot_swa = 32;
    p.rope_freq_base_swa = 5000.0f;
    p.yarn_factor = 4.0f;
    p.gate_per_element = true;
    p.expert_weights_scale = 2.0f;
    p.swa_pattern = 3;
    p.fused_gate_up = ft_synth_has_fused_gate_up(arch);
    if (!strcmp(arch, "gemma4")) { // (its dense FFN is n_ff_shexp wide)
        p.head_dim_swa = 32;
        p.n_head_kv_swa = 4;
        p.n_kv_shared = 2;
        p.final_softcap = 20.0f;
        p.k_eq_v = true;
        p.expert_down_scale = true;
        p.layer_out_scale = true;
        p.n_rot = 32;
    }
    if (ft_synth_has_linear_attention(arch)) {
        p.ssm_d_conv = 3;
        p.ssm_n_k_heads = 2;
        p.ssm_n_v_heads = 6;
        p.ssm_head_dim = 32;
        p.full_attn_interval = 2;
    }
    return p;
}

// The hyper-parameters ft reads back are the ones ft synth was given.
static void check_hparams(const char *label, const ft_model *m, const ft_synth_params *p) {
    const ft_hparams *hp = &m->hp;
    CHECK(hp->n_layer == p->n_layer && hp->n_embd == p->n_embd && hp->n_ctx_train == p->n_ctx_train, "%s", label);
    CHECK(hp->head_dim == p->head_dim, "%s", label);
    CHECK(hp->n_expert == p->n_expert && hp->n_expert_used == p->n_expert_used, "%s", label);
    CHECK(hp->n_ff_exp == p->n_ff_exp, "%s: experts %d wide, not %d", label, hp->n_ff_exp, p->n_ff_exp);
    CHECK(hp->rms_eps == p->rms_eps && hp->rope.freq_base == p->rope_freq_base, "%s", label);
    CHECK(hp->n_dense_lead == p->n_dense_lead, "%s: %d dense layers", label, hp->n_dense_lead);
    CHECK(hp->n_layer_mtp == p->n_mtp, "%s: %d MTP blocks", label, hp->n_layer_mtp);
    for (int l = 0; l < hp->n_layer; l++) {
        const ft_layer *L = &m->layers[l];
        CHECK(L->is_moe == (l >= p->n_dense_lead), "%s: layer %d", label, l);
        CHECK(L->n_head == p->n_head || L->n_head == p->n_head_swa, "%s: layer %d", label, l);
        // (gemma4's sliding layers may have their own KV heads and head size)
        bool own = L->is_swa && p->n_head_kv_swa, own_size = L->is_swa && p->head_dim_swa;
        CHECK(L->n_head_kv == (own ? p->n_head_kv_swa : p->n_head_kv), "%s: layer %d: %d KV heads", label, l,
              L->n_head_kv);
        CHECK(L->head_dim == (own_size ? p->head_dim_swa : p->head_dim), "%s: layer %d: heads of %d", label, l,
              L->head_dim);
    }
}

// A few tokens through the engine: the layer code of the architecture runs on what was bound.
static void check_runs(const char *label, ft_model *m) {
    ft_engine_params ep = ft_engine_default_params();
    ep.n_threads = 1;
    ep.n_ctx = 16;
    ft_err err = {{0}};
    ft_engine *e = ft_engine_init(m, &ep, &err);
    REQUIRE(e, "%s: %s", label, err.msg);
    int32_t toks[4] = {3, 100, 7, 42};
    const float *logits = ft_engine_eval(e, toks, 4, &err);
    CHECK(logits, "%s: %s", label, err.msg);
    bool finite = logits != NULL, varied = false;
    for (int i = 0; logits && i < m->hp.n_vocab; i++) {
        finite = finite && isfinite(logits[i]);
        varied = varied || logits[i] != logits[0];
    }
    CHECK(finite && varied, "%s: logits finite %d, varied %d", label, finite, varied);
    ft_engine_free(e);
}

// Each architecture of the table, with its defaults and with every option: ft synth writes
// it, ft loads it with the hyper-parameters it was given, binds each tensor of the file once
// into the field it belongs to, and runs it.
TEST(model_every_arch_synthesizes_loads_and_runs) {
    REQUIRE(ft_arch_count() >= 4);
    for (int a = 0; a < ft_arch_count(); a++) {
        const char *arch = ft_arch_at(a)->name;
        for (int variant = 0; variant < 2; variant++) {
            ft_synth_params p = variant ? all_options(arch) : ft_synth_default_params();
            p.arch = arch;
            char label[96];
            snprintf(label, sizeof(label), "%s, %s", arch, variant ? "every option" : "defaults");
            const char *path = test_path("arch_round_trip.gguf");
            ft_err err = {{0}};
            REQUIRE(ft_synth_write(&p, path, &err), "%s: synth: %s", label, err.msg);
            ft_model *m = ft_model_load(path, &err);
            REQUIRE(m, "%s: load: %s", label, err.msg);
            CHECK(m->arch == ft_arch_at(a), "%s", label);
            check_hparams(label, m, &p);
            char why[256];
            CHECK(binding_mismatches(m, m->file, why, sizeof(why)) == 0, "%s: %s", label, why);
            check_runs(label, m);
            ft_model_free(m);
        }
    }
}

// Copies the model src to dst without the tensors named in drop (NULL-terminated), with the
// key `key` set to the u32 key_value, and with extra_tensor (f32, n_extra zeros), when given.
static bool rewrite(const char *src, const char *dst, const char *const *drop, const char *key,
                    uint32_t key_value, const char *extra_tensor, int64_t n_extra) {
    ft_err err = {{0}};
    gguf_file *f = gguf_open(src, &err);
    if (!f) return test_fail(__FILE__, __LINE__, "%s", err.msg), false;
    gguf_writer *w = gguf_writer_init();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) gguf_writer_copy_kv(w, f, i);
    if (key) gguf_writer_set_u32(w, key, key_value);
    bool *keep = calloc((size_t)gguf_n_tensors(f), sizeof(bool));
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
        keep[i] = true;
        for (int d = 0; drop && drop[d]; d++) keep[i] = keep[i] && strcmp(drop[d], name);
        if (keep[i]) gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne);
    }
    const int64_t ne[4] = {n_extra, 1, 1, 1};
    if (extra_tensor) gguf_writer_add_tensor(w, extra_tensor, FT_TYPE_F32, 1, ne);
    bool ok = gguf_writer_begin(w, dst, &err);
    for (int64_t i = 0; ok && i < gguf_n_tensors(f); i++)
        if (keep[i]) ok = gguf_writer_tensor_data(w, gguf_tensor_at(f, i)->data, gguf_tensor_at(f, i)->bytes, &err);
    float *zeros = calloc((size_t)n_extra + 1, sizeof(float));
    if (ok && extra_tensor) ok = gguf_writer_tensor_data(w, zeros, (uint64_t)n_extra * sizeof(float), &err);
    ok = ok && gguf_writer_finish(w, &err);
    if (!ok) test_fail(__FILE__, __LINE__, "%s", err.msg);
    free(zeros);
    free(keep);
    gguf_writer_free(w);
    gguf_close(f);
    return ok;
}

// The check above fails where synth and binding disagree: here a file with a tensor its
// architecture has no place for, next to one it binds where a file has it.
TEST(model_synth_binding_check_can_fail) {
    ft_synth_params p = ft_synth_default_params();
    p.n_layer = 2;
    ft_err err = {{0}};
    const char *path = test_path("arch_extra_src.gguf"), *out = test_path("arch_extra.gguf");
    REQUIRE(ft_synth_write(&p, path, &err), "%s", err.msg);
    REQUIRE(rewrite(path, out, NULL, NULL, 0, "blk.0.attn_sinks.weight", 4));
    const char *bias = test_path("arch_bias.gguf");
    REQUIRE(rewrite(out, bias, NULL, NULL, 0, "blk.0.attn_q.bias", p.n_head * p.head_dim));
    ft_model *m = ft_model_load(bias, &err);
    REQUIRE(m, "%s", err.msg);
    CHECK(ft_tensor_present(&m->layers[0].bq), "qwen3moe binds Q biases a file has");
    char why[256];
    CHECK(binding_mismatches(m, m->file, why, sizeof(why)) == 1, "wanted the one unbound tensor: %s", why);
    CHECK(strstr(why, "blk.0.attn_sinks.weight") && strstr(why, "bound 0 times"), "%s", why);
    ft_model_free(m);
}

// `ft inspect` reads a file against its architecture's description: it marks the tensor and
// the key the architecture does not use, shows the defaults it applies, and lists every
// tensor that keeps the file from loading (ft_model_load names only the first).
TEST(model_inspect_shows_the_file_against_its_description) {
    ft_synth_params p = ft_synth_default_params();
    p.n_layer = 2;
    ft_err err = {{0}};
    const char *src = test_path("inspect_src.gguf");
    REQUIRE(ft_synth_write(&p, src, &err), "%s", err.msg);
    char extra[512], missing[512], cmd[2048];
    snprintf(extra, sizeof(extra), "%s", test_path("inspect_extra.gguf"));
    snprintf(missing, sizeof(missing), "%s", test_path("inspect_missing.gguf"));
    REQUIRE(rewrite(src, extra, NULL, "qwen3moe.attention.sliding_window", 8, "blk.1.attn_sinks.weight", 4));
    const char *drop[] = {"blk.0.ffn_up_exps.weight", "output_norm.weight", NULL};
    REQUIRE(rewrite(src, missing, drop, NULL, 0, NULL, 0));

    static char out[1 << 20];
    snprintf(cmd, sizeof(cmd), "%s inspect --json '%s'", test_ft_bin(), extra);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    REQUIRE(o, "not JSON: %s", je.text);
    CHECK(json_is_true(json_object_get(o, "loads")));
    json_t *unread = json_object_get(o, "hparams_unread");
    CHECK(json_array_size(unread) == 1 && !strcmp(json_string_value(json_array_get(unread, 0)), "attention.sliding_window"));
    json_t *read = json_object_get(o, "hparams_read");
    CHECK(json_integer_value(json_object_get(read, "rope.dimension_count")) == p.head_dim, "the default: the head size");
    CHECK(json_integer_value(json_object_get(read, "attention.head_count")) == p.n_head);
    json_t *ts = json_object_get(o, "tensors");
    int unused = 0;
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *t = json_array_get(ts, i);
        if (json_is_true(json_object_get(t, "used"))) continue;
        unused++;
        CHECK(!strcmp(json_string_value(json_object_get(t, "name")), "blk.1.attn_sinks.weight"));
    }
    CHECK(unused == 1, "%d unused tensors", unused);
    json_decref(o);
    snprintf(cmd, sizeof(cmd), "%s inspect '%s'", test_ft_bin(), extra);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    CHECK(strstr(out, "(ft loads it)") && strstr(out, "(not used by qwen3moe)") && strstr(out, "(not read by ft)"),
          "%s", out);

    snprintf(cmd, sizeof(cmd), "%s inspect --json '%s'", test_ft_bin(), missing);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "a file ft cannot load is still shown: %s", out);
    o = json_loads(out, 0, &je);
    REQUIRE(o, "not JSON: %s", je.text);
    CHECK(json_is_false(json_object_get(o, "loads")));
    json_t *problems = json_object_get(o, "problems");
    CHECK(json_array_size(problems) == 2, "%zu problems", json_array_size(problems));
    CHECK(strstr(json_string_value(json_array_get(problems, 0)), "blk.0.ffn_up_exps.weight: missing"));
    CHECK(strstr(json_string_value(json_array_get(problems, 1)), "output_norm.weight: missing"));
    json_decref(o);
    ft_model *m = ft_model_load(missing, &err);
    CHECK(!m && strstr(err.msg, "tensor blk.0.ffn_up_exps.weight: missing"), "%s", err.msg);
}

// A key out of its row's range, or out of a range set by other keys, or failing a rule of the
// architecture's hook, is refused with a message that names the key and what it should be.
TEST(model_load_names_the_bad_key) {
    static const struct {
        const char *arch, *key;
        uint32_t value;
        const char *msg;
    } cases[] = {
        {"qwen3moe", "qwen3moe.rope.dimension_count", 66, "key qwen3moe.rope.dimension_count = 66: out of range [2, 64]"},
        {"qwen3moe", "qwen3moe.rope.dimension_count", 7, "key qwen3moe.rope.dimension_count 7: must be even"},
        {"qwen3moe", "qwen3moe.attention.head_count_kv", 3, "layer 0 has 4 heads, not a multiple of 3 KV heads"},
        {"qwen3moe", "qwen3moe.expert_used_count", 9, "key qwen3moe.expert_used_count 9 exceeds expert_count 8"},
        {"qwen3moe", "qwen3moe.block_count", 0, "key qwen3moe.block_count = 0: out of range [1, 4096]"},
        {"qwen2moe", "qwen2moe.attention.value_length", 32, "key qwen2moe.attention.value_length 32 differs from key_length 64"},
        {"llama", "llama.rope.dimension_count", 32, "key llama.rope.dimension_count 32: must equal the head size 64"},
        {"laguna", "laguna.leading_dense_block_count", 5, "key laguna.leading_dense_block_count = 5: out of range [0, 4]"},
        {"laguna", "laguna.expert_gating_func", 3, "key laguna.expert_gating_func = 3: only softmax (1) and sigmoid (2)"},
        {"laguna", "laguna.attention.sliding_window_pattern", 0,
         "key laguna.attention.sliding_window_pattern = 0: out of range [1, 4096]"},
        {"glm4moe", "glm4moe.expert_shared_count", 0, "key glm4moe.expert_shared_count = 0: out of range [1, 64]"},
        {"glm4moe", "glm4moe.expert_gating_func", 3, "key glm4moe.expert_gating_func = 3: only softmax (1) and sigmoid (2)"},
        {"glm4moe", "glm4moe.nextn_predict_layers", 4, "key glm4moe.nextn_predict_layers 4: no layers left"},
        // one value for all four sections: 8 of the 32 rotated pairs in the fourth
        {"glm4moe", "glm4moe.rope.dimension_sections", 8,
         "key glm4moe.rope.dimension_sections [8, 8, 8, 8]: M-RoPE whose fourth section holds rotated pairs (8 of "
         "them), which text leaves unturned: not supported"},
        {"gpt-oss", "gpt-oss.rope.dimension_count", 32, "key gpt-oss.rope.dimension_count 32: must equal the head size 64"},
        {"gpt-oss", "gpt-oss.attention.sliding_window", 0, "key gpt-oss.attention.sliding_window = 0: out of range"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        ft_synth_params p = ft_synth_default_params();
        p.arch = cases[i].arch;
        ft_err err = {{0}};
        const char *src = test_path("bad_key_src.gguf"), *dst = test_path("bad_key.gguf");
        REQUIRE(ft_synth_write(&p, src, &err), "%s", err.msg);
        REQUIRE(rewrite(src, dst, NULL, cases[i].key, cases[i].value, NULL, 0));
        ft_model *m = ft_model_load(dst, &err);
        CHECK(!m && strstr(err.msg, cases[i].msg), "%s = %u: %s", cases[i].key, cases[i].value, m ? "loads" : err.msg);
        ft_model_free(m);
    }
    // and a key the file lacks
    const char *src = test_path("bad_key_src.gguf"), *dst = test_path("bad_key.gguf");
    ft_synth_params p = ft_synth_default_params();
    p.arch = "laguna";
    ft_err err = {{0}};
    REQUIRE(ft_synth_write(&p, src, &err), "%s", err.msg);
    gguf_file *f = gguf_open(src, &err);
    REQUIRE(f, "%s", err.msg);
    gguf_writer *w = gguf_writer_init();
    for (int64_t i = 0; i < gguf_n_kv(f); i++)
        if (!gguf_str_eq(gguf_kv_key(f, i), "laguna.leading_dense_block_count")) gguf_writer_copy_kv(w, f, i);
    REQUIRE(gguf_writer_begin(w, dst, &err) && gguf_writer_finish(w, &err), "%s", err.msg);
    gguf_writer_free(w);
    gguf_close(f);
    ft_model *m = ft_model_load(dst, &err);
    CHECK(!m && strstr(err.msg, "missing key laguna.leading_dense_block_count"), "%s", m ? "loads" : err.msg);
    ft_model_free(m);
}

// The key of rewrite_key and its value.
typedef struct {
    const char *key, *str;
    float v;
} key_value;

static void set_key(gguf_writer *w, void *ctx) {
    const key_value *kv = ctx;
    if (kv->str) gguf_writer_set_str(w, kv->key, kv->str);
    else gguf_writer_set_f32(w, kv->key, kv->v);
}

// Copies the model src to dst with the key set to the string str, or (str NULL) to the f32 v, or
// (drop) without the key.
static bool rewrite_key(const char *src, const char *dst, const char *key, const char *str, float v, bool drop) {
    key_value kv = {key, str, v};
    return fixture_gguf_rewrite(src, dst, key, drop ? NULL : set_key, &kv);
}

// gpt-oss as llama.cpp's openai-moe.cpp reads it: layer il slides unless il % pattern is
// pattern - 1 (pattern 2 by default: the even layers), sliding layers on rope.freq_base_swa and
// full ones on rope.freq_base, YaRN on both; softmax-weighted routing and the clamped SwiGLU;
// every op feature a backend may lack; expert_weights_scale, which llama.cpp's gpt-oss ignores,
// refused unless it is 1.
TEST(model_gptoss_layers_rope_and_refusals) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = "gpt-oss";
    p.n_layer = 6;
    p.yarn_factor = 4.0f;
    p.rope_freq_base_swa = 5000.0f;
    ft_err err = {{0}};
    static const int patterns[] = {0, 2, 3}; // 0: not written
    for (size_t pi = 0; pi < FT_ARRAY_LEN(patterns); pi++) {
        int pattern = patterns[pi];
        p.swa_pattern = pattern;
        const char *path = test_path("gptoss_layers.gguf");
        REQUIRE(ft_synth_write(&p, path, &err), "%s", err.msg);
        ft_model *m = ft_model_load(path, &err);
        REQUIRE(m, "%s", err.msg);
        int eff = pattern == 0 ? 2 : pattern; // not written: llama.cpp's 2
        char got[16] = "", want[16] = "";
        for (int l = 0; l < 6; l++) {
            got[l] = m->layers[l].is_swa ? 's' : 'f';
            want[l] = l % eff < eff - 1 ? 's' : 'f';
        }
        CHECK(!strcmp(got, want), "pattern %d: layers %s, want %s", eff, got, want);
        const ft_hparams *hp = &m->hp;
        CHECK(hp->n_swa == 128, "the window ft synth writes by default: %d", hp->n_swa);
        CHECK(hp->rope_swa.freq_base == 5000.0f && hp->rope.freq_base == p.rope_freq_base, "bases %g / %g",
              (double)hp->rope_swa.freq_base, (double)hp->rope.freq_base);
        CHECK(hp->rope.ext_factor == 1.0f && hp->rope_swa.ext_factor == 1.0f && hp->rope_swa.freq_scale == 0.25f &&
                  hp->rope_swa.attn_factor == hp->rope.attn_factor && hp->rope.neox && hp->rope_swa.neox,
              "YaRN on both kinds of layer");
        CHECK(hp->gating == FT_GATING_SOFTMAX_WEIGHT && hp->glu == FT_GLU_SWIGLU_OAI && !hp->norm_w);
        CHECK(ft_model_op_features(m) == (FT_OPS_ATTN_SINKS | FT_OPS_MOE_BIASES | FT_OPS_MOE_SOFTMAX_WEIGHT |
                                          FT_OPS_SWIGLU_OAI), "needs %#x", ft_model_op_features(m));
        CHECK(!ft_tensor_present(&m->layers[0].bq), "Q/K/V biases are optional and ft synth wrote none");
        ft_model_free(m);
    }
    // pattern 1: every layer full
    p.swa_pattern = 1;
    const char *path = test_path("gptoss_layers.gguf");
    REQUIRE(ft_synth_write(&p, path, &err), "%s", err.msg);
    ft_model *m = ft_model_load(path, &err);
    REQUIRE(m, "%s", err.msg);
    for (int l = 0; l < 6; l++) CHECK(!m->layers[l].is_swa, "pattern 1: layer %d slides", l);
    ft_model_free(m);
    // expert_weights_scale: 1 loads, 2 is refused naming the key
    for (int i = 0; i < 2; i++) {
        const char *dst = test_path("gptoss_scale.gguf");
        REQUIRE(rewrite_key(path, dst, "gpt-oss.expert_weights_scale", NULL, i ? 2.0f : 1.0f, false));
        m = ft_model_load(dst, &err);
        if (i) CHECK(!m && strstr(err.msg, "key gpt-oss.expert_weights_scale = 2: llama.cpp's gpt-oss ignores it"),
                     "%s", m ? "loads" : err.msg);
        else CHECK(m, "a scale of 1 is no scale: %s", err.msg);
        ft_model_free(m);
    }
}

// gemma4 as llama.cpp's gemma4.cpp reads it: per-layer sliding flags, each kind's head size, KV
// heads and RoPE (the sliding layers' own base and dims without context scaling; the full
// layers' frequency factors from rope_freqs), the shared-KV layers reading the last layer of
// their kind before them and binding no K/V, V from K's projection where the full layers have no
// attn_v, the embedding scale and logit cap; refused: per-layer token embeddings (E2B/E4B) by key
// and by tensor, attention soft-capping (llama.cpp's gemma4 has none), YaRN, a shared-KV count
// whose sources are of the other kind, NVFP4 weight scales.
TEST(model_gemma4_layers_rope_and_refusals) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = "gemma4";
    p.n_layer = 6;
    p.head_dim = 128;
    p.head_dim_swa = 64;
    p.n_head_kv_swa = 4;
    p.swa_pattern = 3;
    p.n_kv_shared = 3;
    p.n_rot = 64;
    p.n_rot_swa = 32;
    p.rope_freq_base = 1000000.0f;
    p.rope_freq_base_swa = 5000.0f;
    p.final_softcap = 30.0f;
    p.k_eq_v = true;
    ft_err err = {{0}};
    char src[512]; // (test_path's buffers rotate)
    snprintf(src, sizeof(src), "%s", test_path("gemma4_layers.gguf"));
    REQUIRE(ft_synth_write(&p, src, &err), "%s", err.msg);
    ft_model *m = ft_model_load(src, &err);
    REQUIRE(m, "%s", err.msg);
    const ft_hparams *hp = &m->hp;
    static const int kv_from[6] = {0, 1, 2, 1, 1, 2};
    for (int l = 0; l < 6; l++) {
        const ft_layer *L = &m->layers[l];
        bool swa = l % 3 < 2, own = kv_from[l] == l;
        CHECK(L->is_swa == swa && L->head_dim == (swa ? 64 : 128) && L->n_head_kv == (swa ? 4 : 2), "layer %d", l);
        CHECK(L->kv_from == kv_from[l], "layer %d reads layer %d's KV", l, L->kv_from);
        CHECK(ft_tensor_present(&L->wk) == own && ft_tensor_present(&L->k_norm) == own, "layer %d", l);
        CHECK(ft_tensor_present(&L->wv) == (own && swa), "layer %d: attn_v only on the sliding layers", l);
        CHECK(ft_tensor_present(&L->q_norm) && ft_tensor_present(&L->attn_post_norm) && L->is_moe, "layer %d", l);
    }
    CHECK(hp->head_dim == 128 && hp->rope.n_rot == 128 && hp->rope.freq_base == 1000000.0f && hp->rope.neox);
    CHECK(hp->rope_swa.n_rot == 32 && hp->rope_swa.freq_base == 5000.0f && hp->rope_swa.freq_scale == 1.0f &&
          hp->rope_swa.neox, "sliding RoPE: %d dims, base %g", hp->rope_swa.n_rot, (double)hp->rope_swa.freq_base);
    CHECK(hp->embd_scale == 16.0f && hp->logit_softcap == 30.0f, "scales %g %g", (double)hp->embd_scale,
          (double)hp->logit_softcap);
    CHECK(hp->glu == FT_GLU_GELU && hp->gating == FT_GATING_SOFTMAX && hp->norm_w && hp->n_ff_shexp == p.n_ff_exp);
    REQUIRE(ft_tensor_present(&m->rope_freqs) && m->rope_freqs.ne[0] == 64);
    const float *ff = m->rope_freqs.data;
    CHECK(ff[0] == 1.0f && ff[1] == 1.25f && ff[31] != 1e30f && ff[32] == 1e30f && ff[63] == 1e30f,
          "factors %g %g %g %g", (double)ff[0], (double)ff[1], (double)ff[31], (double)ff[32]);
    ft_model_free(m);
    // every layer sliding: no rope_freqs is written, nor needed
    p.swa_pattern = 7;
    p.n_kv_shared = 0;
    const char *all_swa = test_path("gemma4_all_swa.gguf");
    REQUIRE(ft_synth_write(&p, all_swa, &err), "%s", err.msg);
    m = ft_model_load(all_swa, &err);
    REQUIRE(m, "%s", err.msg);
    CHECK(!ft_tensor_present(&m->rope_freqs) && !gguf_find_tensor(m->file, "rope_freqs.weight"));
    ft_model_free(m);
    // without rope.dimension_count_swa the sliding layers rotate the full layers' dims, as in
    // llama.cpp: 128 here, more than their heads of 64 (refused); with heads of 128 accepted
    const char *no_rot = test_path("gemma4_no_rot_swa.gguf");
    REQUIRE(rewrite_key(src, no_rot, "gemma4.rope.dimension_count_swa", NULL, 0, true));
    m = ft_model_load(no_rot, &err);
    CHECK(!m && strstr(err.msg, "key gemma4.rope.dimension_count_swa 128: must be even and at most key_length_swa 64"),
          "%s", m ? "loads" : err.msg);
    ft_model_free(m);
    p.head_dim_swa = 128;
    p.n_rot_swa = 0;
    const char *same = test_path("gemma4_same_heads.gguf");
    REQUIRE(ft_synth_write(&p, same, &err), "%s", err.msg);
    REQUIRE(rewrite_key(same, no_rot, "gemma4.rope.dimension_count_swa", NULL, 0, true));
    m = ft_model_load(no_rot, &err);
    REQUIRE(m, "%s", err.msg);
    CHECK(m->hp.rope_swa.n_rot == 128 && m->hp.rope.n_rot == 128, "sliding layers rotate %d dims",
          m->hp.rope_swa.n_rot);
    ft_model_free(m);
    static const struct {
        const char *key;
        uint32_t value;
        const char *extra;
        const char *msg;
    } cases[] = {
        {"gemma4.embedding_length_per_layer_input", 256, NULL,
         "key gemma4.embedding_length_per_layer_input = 256: per-layer token embeddings (Gemma 4 E2B/E4B) are not "
         "supported"},
        {NULL, 0, "per_layer_token_embd.weight", "tensor per_layer_token_embd.weight: per-layer token embeddings"},
        // layers 4 and 5 shared: 4 (sliding) would read layer 2 (full)
        {"gemma4.attention.shared_kv_layers", 2, NULL,
         "layer 4 (sliding) would read the KV of layer 2 (full), as llama.cpp's rule says"},
        {"gemma4.attention.shared_kv_layers", 5, NULL, "at least two layers must keep their own KV"},
        {NULL, 0, "blk.3.ffn_gate_exps.scale", "tensor blk.3.ffn_gate_exps.scale: weight scales (NVFP4) are not supported"},
        {"gemma4.attention.value_length_swa", 32, NULL, "key gemma4.attention.value_length_swa 32: must equal key_length_swa 64"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        const char *dst = test_path("gemma4_bad.gguf");
        REQUIRE(rewrite(src, dst, NULL, cases[i].key, cases[i].value, cases[i].extra, 8));
        m = ft_model_load(dst, &err);
        CHECK(!m && strstr(err.msg, cases[i].msg), "%s: %s", cases[i].key ? cases[i].key : cases[i].extra,
              m ? "loads" : err.msg);
        ft_model_free(m);
    }
    // attention soft-capping (an f32) and YaRN (a string)
    const char *dst = test_path("gemma4_bad.gguf");
    REQUIRE(rewrite_key(src, dst, "gemma4.attn_logit_softcapping", NULL, 50.0f, false));
    m = ft_model_load(dst, &err);
    CHECK(!m && strstr(err.msg, "key gemma4.attn_logit_softcapping = 50: llama.cpp's gemma4 applies no attention "
                                "soft-capping"), "%s", m ? "loads" : err.msg);
    ft_model_free(m);
    REQUIRE(rewrite_key(src, dst, "gemma4.rope.scaling.type", "yarn", 0, false));
    m = ft_model_load(dst, &err);
    CHECK(!m && strstr(err.msg, "key gemma4.rope.scaling.type = yarn: not supported"), "%s", m ? "loads" : err.msg);
    ft_model_free(m);
}

// The keys of the real Gemma-4-26B-A4B, as llama.cpp's converter wrote them (its vocabulary file
// in llama.cpp's models/ carries the model's metadata without the tensors) and as the loader
// reads them: per-layer KV heads (8 on the sliding layers, 2 on every sixth, full, layer), heads
// of 256 and 512, the full layers rotating all 512 dims (the quarter through rope_freqs) and the
// sliding ones 256 on their own base, the window, the experts, the scales.
TEST(model_gemma4_reads_the_26b_keys) {
    const char *src = oracle_llama_src();
    if (!src) return;
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/ggml-vocab-gemma-4.gguf", src);
    ft_err err = {{0}};
    ft_model mm = {.arch = ft_arch_find("gemma4"), .file = gguf_open(path, &err)}, *m = &mm;
    REQUIRE(m->file, "%s", err.msg);
    REQUIRE(model_read_hparams(m, &err), "%s", err.msg);
    const ft_hparams *hp = &m->hp;
    CHECK(hp->n_layer == 30 && hp->n_embd == 2816 && hp->n_ctx_train == 262144, "%d layers", hp->n_layer);
    CHECK(hp->n_expert == 128 && hp->n_expert_used == 8 && hp->n_ff_exp == 704 && hp->n_ff_shexp == 2112,
          "experts %d/%d of %d, dense FFN %d", hp->n_expert_used, hp->n_expert, hp->n_ff_exp, hp->n_ff_shexp);
    CHECK(hp->head_dim == 512 && hp->rope.n_rot == 512 && hp->rope.freq_base == 1000000.0f, "full: %d, %d dims",
          hp->head_dim, hp->rope.n_rot);
    CHECK(hp->rope_swa.n_rot == 256 && hp->rope_swa.freq_base == 10000.0f && hp->rope_swa.freq_scale == 1.0f,
          "sliding: %d dims, base %g", hp->rope_swa.n_rot, (double)hp->rope_swa.freq_base);
    CHECK(hp->n_swa == 1024 && hp->logit_softcap == 30.0f && hp->embd_scale == sqrtf(2816.0f), "window %d",
          hp->n_swa);
    CHECK(hp->glu == FT_GLU_GELU && hp->gating == FT_GATING_SOFTMAX && hp->norm_w);
    for (int l = 0; l < hp->n_layer; l++) {
        const ft_layer *L = &m->layers[l];
        bool full = l % 6 == 5;
        CHECK(L->is_swa == !full && L->n_head == 16 && L->n_head_kv == (full ? 2 : 8) &&
                  L->head_dim == (full ? 512 : 256) && L->kv_from == l && L->is_moe,
              "layer %d: swa %d, %d KV heads of %d", l, L->is_swa, L->n_head_kv, L->head_dim);
    }
    free(m->layers);
    gguf_close(m->file);
}

static bool layers_overlap(enum ft_layers a, enum ft_layers b) {
    if (a == FT_LAYERS_NONE || b == FT_LAYERS_NONE) return a == b;
    return a == FT_LAYERS_ALL || b == FT_LAYERS_ALL || a == b;
}

// The tables of every architecture hold together: names and fields where the loader and ft
// synth expect them, no two rows filling one field of one layer, and each architecture in the
// list of names.
TEST(model_descriptions_hold_together) {
    for (int a = 0; a < ft_arch_count(); a++) {
        const ft_arch *arch = ft_arch_at(a);
        CHECK(strstr(ft_arch_names(), arch->name) && arch->layer, "%s", arch->name);
        bool seen_block_count = false;
        for (int i = 0; i < arch->n_keys; i++) {
            const ft_arch_key *k = &arch->keys[i];
            seen_block_count = seen_block_count || !strcmp(k->suffix, "block_count");
            for (int j = 0; j < i; j++) CHECK(strcmp(k->suffix, arch->keys[j].suffix), "%s.%s twice", arch->name, k->suffix);
            bool per_layer = k->type == FT_KEY_TYPE_U32_LAYERS && !(k->flags & FT_KEY_UNIFORM);
            if (k->type == FT_KEY_TYPE_U32_LAYERS) CHECK(seen_block_count, "%s.%s before block_count", arch->name, k->suffix);
            if (k->field != FT_KEY_NO_FIELD)
                CHECK(k->field + sizeof(int) <= (per_layer ? sizeof(ft_layer) : sizeof(ft_hparams)), "%s.%s", arch->name,
                      k->suffix);
            CHECK(k->type != FT_KEY_TYPE_STR || k->field == FT_KEY_NO_FIELD, "%s.%s", arch->name, k->suffix);
            CHECK(!k->synth.per_layer || k->type == FT_KEY_TYPE_U32_LAYERS || k->type == FT_KEY_TYPE_BOOL_LAYERS,
                  "%s.%s", arch->name, k->suffix);
            if (k->type == FT_KEY_TYPE_BOOL_LAYERS)
                CHECK(k->field != FT_KEY_NO_FIELD && k->field + sizeof(bool) <= sizeof(ft_layer), "%s.%s", arch->name,
                      k->suffix);
            CHECK(!k->synth.write || k->type != FT_KEY_TYPE_STR || k->synth.str, "%s.%s", arch->name, k->suffix);
        }
        for (int i = 0; i < arch->n_tensors; i++) {
            const ft_arch_tensor *t = &arch->tensors[i];
            const char *pct = strchr(t->name, '%');
            // rows of MTP blocks only, and only those, are never bound
            CHECK((t->layers == FT_LAYERS_MTP) == (t->field == FT_TENSOR_NO_FIELD), "%s: %s", arch->name, t->name);
            if (t->field == FT_TENSOR_NO_FIELD) {
                CHECK(pct && pct[1] == 'd' && !strchr(pct + 1, pct[0]), "%s: %s", arch->name, t->name);
            } else if (t->layers == FT_LAYERS_NONE) {
                CHECK(!pct, "%s: %s", arch->name, t->name);
                CHECK(t->field + sizeof(ft_tensor) <= sizeof(ft_model), "%s: %s", arch->name, t->name);
            } else {
                bool one_layer_slot = pct && pct[1] == 'd' && !strchr(pct + 1, pct[0]);
                CHECK(one_layer_slot, "%s: %s", arch->name, t->name);
                CHECK(t->field + sizeof(ft_tensor) <= sizeof(ft_layer), "%s: %s", arch->name, t->name);
            }
            bool aligned = t->field == FT_TENSOR_NO_FIELD || t->field % _Alignof(ft_tensor) == 0;
            CHECK(aligned, "%s: %s", arch->name, t->name);
            CHECK(t->ne[0] != FT_DIM_NONE, "%s: %s has no shape", arch->name, t->name);
            for (int d = 1; d < 3; d++)
                CHECK(t->ne[d - 1] != FT_DIM_NONE || t->ne[d] == FT_DIM_NONE, "%s: %s", arch->name, t->name);
            for (int d = 0; d < 3; d++) CHECK(t->ne[d] != FT_DIM_ARCH || arch->dim, "%s: %s", arch->name, t->name);
            // a half of fused gate/up experts: gate's or up's field, after the fused row (bound first)
            if (t->flags & (FT_TENSOR_FUSED_GATE | FT_TENSOR_FUSED_UP)) {
                bool gate = t->flags & FT_TENSOR_FUSED_GATE;
                CHECK(t->field == (gate ? offsetof(ft_layer, gate_exps) : offsetof(ft_layer, up_exps)) &&
                          !(t->flags & FT_TENSOR_FUSED_UP && gate), "%s: %s", arch->name, t->name);
                bool after_fused = false;
                for (int j = 0; j < i; j++)
                    after_fused = after_fused || (arch->tensors[j].field == offsetof(ft_layer, gate_up_exps) &&
                                                  arch->tensors[j].layers == t->layers &&
                                                  arch->tensors[j].ne[1] == FT_DIM_FF_EXP_2);
                CHECK(after_fused, "%s: %s before its fused row", arch->name, t->name);
            }
            for (int j = 0; j < i; j++) {
                const ft_arch_tensor *u = &arch->tensors[j];
                CHECK(strcmp(t->name, u->name), "%s: %s twice", arch->name, t->name);
                CHECK(t->field != u->field || t->field == FT_TENSOR_NO_FIELD || !layers_overlap(t->layers, u->layers),
                      "%s: %s and %s fill one field", arch->name, u->name, t->name);
            }
        }
    }
    CHECK(ft_synth_has_dense_layers("laguna") && !ft_synth_has_dense_layers("qwen3moe") &&
          !ft_synth_has_dense_layers("nosucharch"));
    // fused gate/up experts where llama.cpp loads them (its qwen35moe.cpp, qwen3next.cpp), and
    // nowhere else (its qwen3moe, qwen2moe, llama and laguna read split ones only)
    CHECK(ft_synth_has_fused_gate_up("qwen35moe") && ft_synth_has_fused_gate_up("qwen3next"));
    CHECK(!ft_synth_has_fused_gate_up("qwen3moe") && !ft_synth_has_fused_gate_up("qwen2moe") &&
          !ft_synth_has_fused_gate_up("llama") && !ft_synth_has_fused_gate_up("laguna"));
    CHECK(ft_synth_has_mtp("glm4moe") && !ft_synth_has_mtp("qwen3moe") && ft_synth_has_dense_layers("glm4moe"));
}

// Fused gate/up experts (ffn_gate_up_exps): gate_exps and up_exps are views of each expert's
// first and second half there, ft inspect shows the fused tensor as used; a layer with both
// layouts, or neither, is refused naming the tensor (ft inspect lists it as the problem); the
// split layout is refused where the architecture has no fused row.
TEST(model_fused_gate_up_binds_halves_and_refuses_both_or_neither) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = "qwen35moe";
    p.n_layer = 2;
    p.fused_gate_up = true;
    ft_err err = {{0}};
    const char *src = test_path("fused_src.gguf");
    REQUIRE(ft_synth_write(&p, src, &err), "%s", err.msg);
    ft_model *m = ft_model_load(src, &err);
    REQUIRE(m, "%s", err.msg);
    for (int l = 0; l < 2; l++) {
        const ft_layer *L = &m->layers[l];
        const ft_tensor *gu = &L->gate_up_exps;
        REQUIRE(ft_tensor_present(gu) && gu->ne[1] == 2 * p.n_ff_exp, "layer %d", l);
        size_t half = gu->row_bytes * (size_t)p.n_ff_exp;
        CHECK(L->gate_exps.data == gu->data && (uint8_t *)L->up_exps.data == (uint8_t *)gu->data + half, "layer %d", l);
        CHECK(L->gate_exps.ne[1] == p.n_ff_exp && L->up_exps.ne[1] == p.n_ff_exp && L->gate_exps.ne[2] == p.n_expert);
        CHECK(L->gate_exps.mat_bytes == half && ft_tensor_mat_stride(&L->up_exps) == 2 * half);
        CHECK(ft_tensor_mat(&L->up_exps, 3) == (uint8_t *)gu->data + 7 * half, "expert 3's up: the 8th half");
        CHECK(!ft_tensor_packed(&L->gate_exps) && ft_tensor_packed(&L->down_exps));
    }
    ft_model_free(m);
    static char out[1 << 20];
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s inspect --json '%s'", test_ft_bin(), src);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    REQUIRE(o, "not JSON: %s", je.text);
    CHECK(json_is_true(json_object_get(o, "loads")));
    json_t *ts = json_object_get(o, "tensors");
    int fused_used = 0;
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *t = json_array_get(ts, i);
        const char *name = json_string_value(json_object_get(t, "name"));
        CHECK(json_is_true(json_object_get(t, "used")), "%s not used", name);
        fused_used += strstr(name, "ffn_gate_up_exps") != NULL;
    }
    CHECK(fused_used == 2, "%d fused tensors", fused_used);
    json_t *eg = json_object_get(o, "expert_geometry");
    CHECK(json_array_size(eg) == 2 && json_is_true(json_object_get(json_array_get(eg, 1), "gate_up_fused")));
    json_decref(o);

    // both layouts in layer 1 (the split tensor's shape does not matter: its name is enough)
    const char *both = test_path("fused_both.gguf");
    REQUIRE(rewrite(src, both, NULL, NULL, 0, "blk.1.ffn_up_exps.weight", 4));
    m = ft_model_load(both, &err);
    CHECK(!m && strstr(err.msg, "tensor blk.1.ffn_up_exps.weight: the layer has blk.1.ffn_gate_up_exps.weight too"),
          "%s", m ? "loads" : err.msg);
    ft_model_free(m);
    // neither
    const char *drop[] = {"blk.1.ffn_gate_up_exps.weight", NULL};
    const char *neither = test_path("fused_neither.gguf");
    REQUIRE(rewrite(src, neither, drop, NULL, 0, NULL, 0));
    m = ft_model_load(neither, &err);
    CHECK(!m && strstr(err.msg, "tensor blk.1.ffn_gate_exps.weight: missing (nor are the layer's gate and up experts "
                                "fused in blk.1.ffn_gate_up_exps.weight)"), "%s", m ? "loads" : err.msg);
    ft_model_free(m);
    snprintf(cmd, sizeof(cmd), "%s inspect --json '%s'", test_ft_bin(), neither);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    o = json_loads(out, 0, &je);
    REQUIRE(o, "not JSON: %s", je.text);
    json_t *problems = json_object_get(o, "problems");
    CHECK(json_is_false(json_object_get(o, "loads")) && json_array_size(problems) == 2, "%zu problems",
          json_array_size(problems));
    CHECK(strstr(json_string_value(json_array_get(problems, 0)), "blk.1.ffn_gate_exps.weight: missing"));
    CHECK(strstr(json_string_value(json_array_get(problems, 1)), "blk.1.ffn_up_exps.weight: missing"));
    json_decref(o);
    // qwen3moe has no fused row: its fused tensor is unused and its split ones missing
    p.arch = "qwen3moe";
    p.fused_gate_up = false;
    const char *q3 = test_path("fused_qwen3moe_src.gguf"), *q3f = test_path("fused_qwen3moe.gguf");
    REQUIRE(ft_synth_write(&p, q3, &err), "%s", err.msg);
    const char *drop_gate[] = {"blk.0.ffn_gate_exps.weight", NULL};
    REQUIRE(rewrite(q3, q3f, drop_gate, NULL, 0, "blk.0.ffn_gate_up_exps.weight", 4));
    m = ft_model_load(q3f, &err);
    CHECK(!m && strstr(err.msg, "tensor blk.0.ffn_gate_exps.weight: missing"), "%s", m ? "loads" : err.msg);
    ft_model_free(m);
    p.fused_gate_up = true;
    CHECK(!ft_synth_write(&p, q3f, &err) && strstr(err.msg, "--fused-gate-up"), "%s", err.msg);
}

// A fused model and its split twin (the same weights: fixtures.h) give the same logits bit for
// bit on the CPU, over prompts in prefill chunks (GEMM rows) and decode steps.
TEST(model_fused_gate_up_equals_its_split_twin) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = "qwen3next";
    p.n_layer = 4;
    p.fused_gate_up = true;
    p.n_expert_types = 2;
    p.expert_types[0] = FT_TYPE_Q4_K;
    p.expert_types[1] = FT_TYPE_BF16;
    const char *fused = fixture_write(&p, "twin_fused.gguf");
    REQUIRE(fused);
    const char *split = fixture_split_gate_up(fused, "twin_split.gguf");
    REQUIRE(split);
    ft_err err = {{0}};
    ft_model *mf = ft_model_load(fused, &err), *ms = mf ? ft_model_load(split, &err) : NULL;
    REQUIRE(mf && ms, "%s", err.msg);
    CHECK(ft_tensor_present(&mf->layers[0].gate_up_exps) && !ft_tensor_present(&ms->layers[0].gate_up_exps));
    ft_engine_params ep = ft_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = 128;
    ep.n_batch = 32;
    ft_engine *ef = ft_engine_init(mf, &ep, &err), *es = ef ? ft_engine_init(ms, &ep, &err) : NULL;
    REQUIRE(ef && es, "%s", err.msg);
    int32_t toks[70];
    for (int i = 0; i < 70; i++) toks[i] = (int32_t)((i * 7919 + 13) % mf->hp.n_vocab);
    size_t n = (size_t)mf->hp.n_vocab * sizeof(float);
    float *want = malloc(n);
    int steps = 0, differ = 0;
    for (int at = 0; at < 70; steps++) {
        int len = at < 60 ? 30 : 1; // two prefill chunks, then decode steps
        const float *lf = ft_engine_eval(ef, toks + at, len, &err);
        REQUIRE(lf, "%s", err.msg);
        memcpy(want, lf, n);
        const float *ls = ft_engine_eval(es, toks + at, len, &err);
        REQUIRE(ls, "%s", err.msg);
        differ += memcmp(want, ls, n) != 0;
        at += len;
    }
    CHECK(differ == 0, "%d of %d steps differ", differ, steps);
    free(want);
    ft_engine_free(ef);
    ft_engine_free(es);
    ft_model_free(mf);
    ft_model_free(ms);
}

// The evaluation of a few prompt tokens, 0 on a failure (reported).
static const float *eval_tokens(ft_engine *e, const char *label) {
    static const int32_t toks[6] = {3, 100, 7, 42, 250, 9};
    ft_err err = {{0}};
    const float *lg = ft_engine_eval(e, toks, 6, &err);
    if (!lg) test_fail(__FILE__, __LINE__, "%s: %s", label, err.msg);
    return lg;
}

// glm4moe's MTP blocks (nextn_predict_layers, after the trunk) are in the file and nowhere
// else: left out of n_layer, none of their tensors bound, their experts out of the geometry
// the expert banks and cache read; the model computes what its twin without them (the same
// file, the blocks dropped) computes, to the bit.
TEST(model_glm4moe_mtp_blocks_are_not_run) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = "glm4moe";
    p.n_layer = 3;
    p.n_dense_lead = 1;
    p.n_rot = 32;
    p.qkv_bias = true;
    p.n_mtp = 1;
    ft_err err = {{0}};
    const char *src = test_path("glm4moe_mtp.gguf");
    REQUIRE(ft_synth_write(&p, src, &err), "%s", err.msg);
    ft_model *m = ft_model_load(src, &err);
    REQUIRE(m, "%s", err.msg);
    CHECK(m->hp.n_layer == 3 && m->hp.n_layer_mtp == 1);
    CHECK(gguf_find_tensor(m->file, "blk.3.nextn.eh_proj.weight") && gguf_find_tensor(m->file, "blk.3.ffn_up_exps.weight"));
    char why[256];
    CHECK(binding_mismatches(m, m->file, why, sizeof(why)) == 0, "%s", why);
    moe_geometry g;
    REQUIRE(moe_geometry_read(m->file, &g, &err), "%s", err.msg);
    uint64_t all = g.bytes_native;
    CHECK(g.n_layers == 3 && g.layers[2].layer == 3, "the file's expert layers: 1, 2 and the MTP block's");
    moe_geometry_keep_below(&g, m->hp.n_layer);
    CHECK(g.n_layers == 2 && g.layers[1].layer == 2 && g.n_groups == 1 && g.groups[0].n_layers == 2 &&
              g.bytes_native * 3 == all * 2,
          "kept %d layers", g.n_layers);
    moe_geometry_free(&g);

    // the twin: blk.3.* dropped, block_count 3, no nextn_predict_layers
    const char *drop[64];
    char names[64][96];
    int n_drop = 0;
    for (int64_t i = 0; i < gguf_n_tensors(m->file) && n_drop < 63; i++) {
        gguf_str name = gguf_tensor_at(m->file, i)->name;
        if (name.len > 6 && !memcmp(name.ptr, "blk.3.", 6)) {
            snprintf(names[n_drop], sizeof(names[0]), "%.*s", (int)name.len, name.ptr);
            drop[n_drop] = names[n_drop];
            n_drop++;
        }
    }
    drop[n_drop] = NULL;
    CHECK(n_drop == 21, "%d tensors in the MTP block", n_drop);
    const char *mid = test_path("glm4moe_mtp_mid.gguf"), *twin = test_path("glm4moe_mtp_twin.gguf");
    REQUIRE(rewrite(src, mid, drop, "glm4moe.block_count", 3, NULL, 0));
    REQUIRE(rewrite(mid, twin, NULL, "glm4moe.nextn_predict_layers", 0, NULL, 0));
    ft_model *mt = ft_model_load(twin, &err);
    REQUIRE(mt, "%s", err.msg);
    CHECK(mt->hp.n_layer == 3 && mt->hp.n_layer_mtp == 0);
    ft_engine_params ep = ft_engine_default_params();
    ep.n_threads = 1;
    ep.n_ctx = 16;
    ft_engine *e = ft_engine_init(m, &ep, &err), *et = e ? ft_engine_init(mt, &ep, &err) : NULL;
    REQUIRE(e && et, "%s", err.msg);
    const float *a = eval_tokens(e, "with MTP"), *b = eval_tokens(et, "twin");
    CHECK(a && b && !memcmp(a, b, (size_t)m->hp.n_vocab * sizeof(float)), "the logits differ from the twin's");
    ft_engine_free(e);
    ft_engine_free(et);
    ft_model_free(mt);
    ft_model_free(m);
}

// glm4moe's M-RoPE sections (GLM-4.6V): text turns them as plain RoPE where no rotated pair
// falls in the fourth section (ft reads them so, clearing them), or where the first two are not
// both set (llama.cpp then uses plain RoPE itself); otherwise the file is refused naming the
// key (ft synth, which reads back what it writes, refuses to write it). ft synth writes
// sections and MTP blocks only for an architecture that has them. A file with fused Q/K/V
// projections is refused by name.
TEST(model_glm4moe_rope_sections_and_fused_qkv) {
    static const struct {
        int s[4];
        bool loads;
    } cases[] = {
        {{4, 6, 6, 0}, true},  // GLM-4.6V's kind: no fourth section
        {{6, 5, 5, 4}, true},  // a fourth section the 16 rotated pairs never reach
        {{8, 0, 0, 8}, true},  // not M-RoPE (llama.cpp: the second section is empty)
        {{4, 4, 4, 4}, false}, // pairs 12..15 in the fourth section
    };
    ft_err err = {{0}};
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        ft_synth_params p = ft_synth_default_params();
        p.arch = "glm4moe";
        p.n_layer = 2;
        p.n_rot = 32;
        memcpy(p.rope_sections, cases[i].s, sizeof(cases[i].s));
        const char *path = test_path("glm4moe_sections.gguf");
        // (ft synth writes no file ft would refuse: the loader's refusal is model_load_names_the_bad_key's)
        bool written = ft_synth_write(&p, path, &err);
        ft_model *m = written ? ft_model_load(path, &err) : NULL;
        if (cases[i].loads) {
            CHECK(m, "case %zu: %s", i, err.msg);
            if (m) {
                const ft_rope_params *r = &m->hp.rope;
                CHECK(!r->imrope && r->neox && r->n_rot == 32 && !r->sections[0] && !r->sections[1] &&
                          !r->sections[2] && !r->sections[3] && !m->hp.rope_swa.sections[0],
                      "case %zu: plain NeoX RoPE", i);
                check_runs("glm4moe with sections", m);
            }
        } else {
            CHECK(!m && strstr(err.msg, "glm4moe.rope.dimension_sections [4, 4, 4, 4]") &&
                      strstr(err.msg, "(4 of them)"),
                  "case %zu: %s", i, m ? "loads" : err.msg);
        }
        ft_model_free(m);
    }
    ft_synth_params q = ft_synth_default_params();
    q.rope_sections[0] = 4;
    CHECK(!ft_synth_write(&q, test_path("qwen3moe_sections.gguf"), &err) && strstr(err.msg, "--rope-sections"),
          "%s", err.msg);
    q = ft_synth_default_params();
    q.n_mtp = 1;
    CHECK(!ft_synth_write(&q, test_path("qwen3moe_mtp.gguf"), &err) && strstr(err.msg, "--mtp"), "%s", err.msg);

    ft_synth_params p = ft_synth_default_params();
    p.arch = "glm4moe";
    p.n_layer = 2;
    const char *src = test_path("glm4moe_qkv_src.gguf"), *dst = test_path("glm4moe_qkv.gguf");
    REQUIRE(ft_synth_write(&p, src, &err), "%s", err.msg);
    REQUIRE(rewrite(src, dst, NULL, NULL, 0, "blk.0.attn_qkv.weight", 4));
    ft_model *m = ft_model_load(dst, &err);
    CHECK(!m && strstr(err.msg, "fused Q/K/V projections (attn_qkv)"), "%s", m ? "loads" : err.msg);
    ft_model_free(m);
}
