// synth.c: writing synthetic models (see synth.h).
//
// A model is planned as a list of tensors (name, type, shape, value scale), the plan is
// checked (block divisibility) before anything is written, then the header goes out and each
// tensor's data is generated row by row and streamed, so memory use is one tensor at most.
#include "synth.h"
#include "synth_vocab.h"
#include "../gguf/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[96];
    enum ft_type type;
    uint32_t n_dims;
    int64_t ne[3];
    float std;  // standard deviation of the values
    float mean; // added to float values (norm weights sit around 1)
} tensor_plan;

typedef struct {
    tensor_plan *items;
    int n, cap;
} plan;

static void plan_add(plan *p, enum ft_type type, float std, float mean, uint32_t n_dims,
                     int64_t ne0, int64_t ne1, int64_t ne2, const char *fmt, ...)
    __attribute__((format(printf, 9, 10)));

static void plan_add(plan *p, enum ft_type type, float std, float mean, uint32_t n_dims,
                     int64_t ne0, int64_t ne1, int64_t ne2, const char *fmt, ...) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->items = ft_realloc(p->items, (size_t)p->cap * sizeof(*p->items));
    }
    tensor_plan *t = &p->items[p->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
    t->type = type;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->std = std;
    t->mean = mean;
}

ft_synth_params ft_synth_default_params(void) {
    ft_synth_params p = {
        .arch = "qwen3moe",
        .name = "ft demo (random weights)",
        .n_layer = 4,
        .n_embd = 256,
        .n_head = 4,
        .n_head_kv = 2,
        .head_dim = 64,
        .n_expert = 8,
        .n_expert_used = 2,
        .n_ff_exp = 256,
        .n_ctx_train = 4096,
        .rope_freq_base = 1000000.0f,
        .rms_eps = 1e-6f,
        .dense_type = FT_TYPE_Q8_0,
        .n_expert_types = 1,
        .expert_types = {FT_TYPE_Q4_K},
        .seed = 42,
    };
    return p;
}

static enum ft_type layer_type(const enum ft_type *types, int n, int layer) {
    return types[layer < n ? layer : n - 1];
}

// qwen3moe: GQA with per-head Q/K RMSNorm, NeoX RoPE, softmax router, all layers MoE.
static void plan_qwen3moe(const ft_synth_params *p, int64_t n_vocab, plan *out) {
    int64_t E = p->n_embd, Dq = (int64_t)p->n_head * p->head_dim,
            Dkv = (int64_t)p->n_head_kv * p->head_dim, F = p->n_ff_exp;
    float s_embd = 1.0f / sqrtf((float)E);
    plan_add(out, p->dense_type, 1.0f, 0, 2, E, n_vocab, 1, "token_embd.weight");
    for (int l = 0; l < p->n_layer; l++) {
        enum ft_type et = layer_type(p->expert_types, p->n_expert_types, l);
        enum ft_type dt = p->n_expert_down_types
                              ? layer_type(p->expert_down_types, p->n_expert_down_types, l)
                              : et;
        plan_add(out, FT_TYPE_F32, 0.05f, 1.0f, 1, E, 1, 1, "blk.%d.attn_norm.weight", l);
        plan_add(out, p->dense_type, s_embd, 0, 2, E, Dq, 1, "blk.%d.attn_q.weight", l);
        plan_add(out, p->dense_type, s_embd, 0, 2, E, Dkv, 1, "blk.%d.attn_k.weight", l);
        plan_add(out, p->dense_type, s_embd, 0, 2, E, Dkv, 1, "blk.%d.attn_v.weight", l);
        plan_add(out, p->dense_type, 1.0f / sqrtf((float)Dq), 0, 2, Dq, E, 1,
                 "blk.%d.attn_output.weight", l);
        plan_add(out, FT_TYPE_F32, 0.05f, 1.0f, 1, p->head_dim, 1, 1, "blk.%d.attn_q_norm.weight", l);
        plan_add(out, FT_TYPE_F32, 0.05f, 1.0f, 1, p->head_dim, 1, 1, "blk.%d.attn_k_norm.weight", l);
        plan_add(out, FT_TYPE_F32, 0.05f, 1.0f, 1, E, 1, 1, "blk.%d.ffn_norm.weight", l);
        // router logits of a few units: some experts clearly preferred, not one always
        plan_add(out, FT_TYPE_F32, 1.5f * s_embd, 0, 2, E, p->n_expert, 1, "blk.%d.ffn_gate_inp.weight", l);
        plan_add(out, et, s_embd, 0, 3, E, F, p->n_expert, "blk.%d.ffn_gate_exps.weight", l);
        plan_add(out, et, s_embd, 0, 3, E, F, p->n_expert, "blk.%d.ffn_up_exps.weight", l);
        plan_add(out, dt, 1.0f / sqrtf((float)F), 0, 3, F, E, p->n_expert, "blk.%d.ffn_down_exps.weight", l);
    }
    plan_add(out, FT_TYPE_F32, 0.05f, 1.0f, 1, E, 1, 1, "output_norm.weight");
    // logits with a spread of a few units over the vocabulary
    plan_add(out, p->dense_type, 3.0f * s_embd, 0, 2, E, n_vocab, 1, "output.weight");
}


// The attention tensors every architecture here shares; q_norm adds qwen3-style Q/K norms.
static void plan_attention(const ft_synth_params *p, plan *out, int l, int n_head, bool q_norm, bool bias) {
    int64_t E = p->n_embd, Dq = (int64_t)n_head * p->head_dim, Dkv = (int64_t)p->n_head_kv * p->head_dim;
    float s_embd = 1.0f / sqrtf((float)E);
    plan_add(out, FT_TYPE_F32, 0.05f, 1.0f, 1, E, 1, 1, "blk.%d.attn_norm.weight", l);
    plan_add(out, p->dense_type, s_embd, 0, 2, E, Dq, 1, "blk.%d.attn_q.weight", l);
    plan_add(out, p->dense_type, s_embd, 0, 2, E, Dkv, 1, "blk.%d.attn_k.weight", l);
    plan_add(out, p->dense_type, s_embd, 0, 2, E, Dkv, 1, "blk.%d.attn_v.weight", l);
    if (bias) {
        plan_add(out, FT_TYPE_F32, 0.1f, 0, 1, Dq, 1, 1, "blk.%d.attn_q.bias", l);
        plan_add(out, FT_TYPE_F32, 0.1f, 0, 1, Dkv, 1, 1, "blk.%d.attn_k.bias", l);
        plan_add(out, FT_TYPE_F32, 0.1f, 0, 1, Dkv, 1, 1, "blk.%d.attn_v.bias", l);
    }
    plan_add(out, p->dense_type, 1.0f / sqrtf((float)Dq), 0, 2, Dq, E, 1, "blk.%d.attn_output.weight", l);
    if (q_norm) {
        plan_add(out, FT_TYPE_F32, 0.05f, 1.0f, 1, p->head_dim, 1, 1, "blk.%d.attn_q_norm.weight", l);
        plan_add(out, FT_TYPE_F32, 0.05f, 1.0f, 1, p->head_dim, 1, 1, "blk.%d.attn_k_norm.weight", l);
    }
}

// ffn_norm, router and the three banks of layer l with its per-layer types.
static void plan_experts(const ft_synth_params *p, plan *out, int l) {
    int64_t E = p->n_embd, F = p->n_ff_exp;
    float s_embd = 1.0f / sqrtf((float)E);
    enum ft_type et = layer_type(p->expert_types, p->n_expert_types, l);
    enum ft_type dt = p->n_expert_down_types ? layer_type(p->expert_down_types, p->n_expert_down_types, l) : et;
    plan_add(out, FT_TYPE_F32, 0.05f, 1.0f, 1, E, 1, 1, "blk.%d.ffn_norm.weight", l);
    plan_add(out, FT_TYPE_F32, 1.5f * s_embd, 0, 2, E, p->n_expert, 1, "blk.%d.ffn_gate_inp.weight", l);
    plan_add(out, et, s_embd, 0, 3, E, F, p->n_expert, "blk.%d.ffn_gate_exps.weight", l);
    plan_add(out, et, s_embd, 0, 3, E, F, p->n_expert, "blk.%d.ffn_up_exps.weight", l);
    plan_add(out, dt, 1.0f / sqrtf((float)F), 0, 3, F, E, p->n_expert, "blk.%d.ffn_down_exps.weight", l);
}

// A SiLU-gated FFN of width F named blk.l.ffn_{gate,up,down}<suffix>.weight, dense-typed.
static void plan_ffn(const ft_synth_params *p, plan *out, int l, int64_t F, const char *suffix) {
    int64_t E = p->n_embd;
    float s_embd = 1.0f / sqrtf((float)E);
    plan_add(out, p->dense_type, s_embd, 0, 2, E, F, 1, "blk.%d.ffn_gate%s.weight", l, suffix);
    plan_add(out, p->dense_type, s_embd, 0, 2, E, F, 1, "blk.%d.ffn_up%s.weight", l, suffix);
    plan_add(out, p->dense_type, 1.0f / sqrtf((float)F), 0, 2, F, E, 1, "blk.%d.ffn_down%s.weight", l, suffix);
}

static void plan_output(const ft_synth_params *p, int64_t n_vocab, plan *out) {
    int64_t E = p->n_embd;
    plan_add(out, FT_TYPE_F32, 0.05f, 1.0f, 1, E, 1, 1, "output_norm.weight");
    plan_add(out, p->dense_type, 3.0f / sqrtf((float)E), 0, 2, E, n_vocab, 1, "output.weight");
}

static int shexp_width(const ft_synth_params *p) { return p->n_ff_shexp ? p->n_ff_shexp : p->n_ff_exp; }

// qwen2moe: no Q/K norm, optional Q/K/V biases, a shared expert with a sigmoid gate.
static void plan_qwen2moe(const ft_synth_params *p, int64_t n_vocab, plan *out) {
    int64_t E = p->n_embd;
    plan_add(out, p->dense_type, 1.0f, 0, 2, E, n_vocab, 1, "token_embd.weight");
    for (int l = 0; l < p->n_layer; l++) {
        plan_attention(p, out, l, p->n_head, false, p->qkv_bias);
        plan_experts(p, out, l);
        plan_add(out, FT_TYPE_F32, 1.0f / sqrtf((float)E), 0, 1, E, 1, 1, "blk.%d.ffn_gate_inp_shexp.weight", l);
        plan_ffn(p, out, l, shexp_width(p), "_shexp");
    }
    plan_output(p, n_vocab, out);
}

// llama with experts (Mixtral): plain attention, experts feed_forward_length wide.
static void plan_llama(const ft_synth_params *p, int64_t n_vocab, plan *out) {
    plan_add(out, p->dense_type, 1.0f, 0, 2, p->n_embd, n_vocab, 1, "token_embd.weight");
    for (int l = 0; l < p->n_layer; l++) {
        plan_attention(p, out, l, p->n_head, false, false);
        plan_experts(p, out, l);
    }
    plan_output(p, n_vocab, out);
}

static bool laguna_is_swa(const ft_synth_params *p, int l) { return p->n_swa > 0 && l % 4 != 0; }

// laguna: leading dense layers, a softplus output gate, a sigmoid router with a selection
// bias, a shared expert; sliding-window layers (3 of 4) with their own head count.
static void plan_laguna(const ft_synth_params *p, int64_t n_vocab, plan *out) {
    int64_t E = p->n_embd;
    plan_add(out, p->dense_type, 1.0f, 0, 2, E, n_vocab, 1, "token_embd.weight");
    for (int l = 0; l < p->n_layer; l++) {
        int heads = laguna_is_swa(p, l) && p->n_head_swa ? p->n_head_swa : p->n_head;
        plan_attention(p, out, l, heads, true, false);
        int64_t G = p->gate_per_element ? (int64_t)heads * p->head_dim : heads;
        plan_add(out, p->dense_type, 1.0f / sqrtf((float)E), 0, 2, E, G, 1, "blk.%d.attn_gate.weight", l);
        if (l < p->n_dense_lead) {
            plan_add(out, FT_TYPE_F32, 0.05f, 1.0f, 1, E, 1, 1, "blk.%d.ffn_norm.weight", l);
            plan_ffn(p, out, l, p->n_ff_dense ? p->n_ff_dense : 2 * p->n_ff_exp, "");
        } else {
            plan_experts(p, out, l);
            plan_add(out, FT_TYPE_F32, 0.2f, 0, 1, p->n_expert, 1, 1, "blk.%d.exp_probs_b.bias", l);
            plan_ffn(p, out, l, shexp_width(p), "_shexp");
        }
    }
    plan_output(p, n_vocab, out);
}

static void write_hparams_common(const ft_synth_params *p, gguf_writer *w, int n_ff) {
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof(key), "%s." suffix, p->arch), key)
    gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)p->n_ctx_train);
    gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)p->n_embd);
    gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)p->n_layer);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)n_ff);
    gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)p->n_head_kv);
    gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)p->head_dim);
    gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)p->head_dim);
    gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), p->rms_eps);
    gguf_writer_set_f32(w, KEY("rope.freq_base"), p->rope_freq_base);
    gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)p->n_expert);
    gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)p->n_expert_used);
    if (p->n_rot) gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)p->n_rot);
#undef KEY
}

static void write_hparams_qwen3moe(const ft_synth_params *p, gguf_writer *w) {
    write_hparams_common(p, w, p->n_ff_exp * p->n_expert_used);
    gguf_writer_set_u32(w, "qwen3moe.attention.head_count", (uint32_t)p->n_head);
    gguf_writer_set_u32(w, "qwen3moe.expert_feed_forward_length", (uint32_t)p->n_ff_exp);
}

static void write_hparams_qwen2moe(const ft_synth_params *p, gguf_writer *w) {
    write_hparams_common(p, w, p->n_ff_exp * p->n_expert_used);
    gguf_writer_set_u32(w, "qwen2moe.attention.head_count", (uint32_t)p->n_head);
    gguf_writer_set_u32(w, "qwen2moe.expert_feed_forward_length", (uint32_t)p->n_ff_exp);
    gguf_writer_set_u32(w, "qwen2moe.expert_shared_feed_forward_length", (uint32_t)shexp_width(p));
}

static void write_hparams_llama(const ft_synth_params *p, gguf_writer *w) {
    write_hparams_common(p, w, p->n_ff_exp);
    gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)p->n_head);
}

static void write_hparams_laguna(const ft_synth_params *p, gguf_writer *w) {
    write_hparams_common(p, w, p->n_ff_dense ? p->n_ff_dense : 2 * p->n_ff_exp);
    uint32_t heads[FT_SYNTH_MAX_LAYERS];
    for (int l = 0; l < p->n_layer; l++)
        heads[l] = (uint32_t)(laguna_is_swa(p, l) && p->n_head_swa ? p->n_head_swa : p->n_head);
    gguf_writer_set_arr(w, "laguna.attention.head_count", GGUF_VALUE_TYPE_UINT32, heads, (uint64_t)p->n_layer);
    gguf_writer_set_u32(w, "laguna.expert_feed_forward_length", (uint32_t)p->n_ff_exp);
    gguf_writer_set_u32(w, "laguna.expert_shared_feed_forward_length", (uint32_t)shexp_width(p));
    gguf_writer_set_u32(w, "laguna.leading_dense_block_count", (uint32_t)p->n_dense_lead);
    gguf_writer_set_u32(w, "laguna.expert_gating_func", 2); // sigmoid
    gguf_writer_set_bool(w, "laguna.expert_weights_norm", true);
    gguf_writer_set_f32(w, "laguna.expert_weights_scale", p->expert_weights_scale ? p->expert_weights_scale : 2.5f);
    if (p->n_swa > 0) {
        gguf_writer_set_u32(w, "laguna.attention.sliding_window", (uint32_t)p->n_swa);
        gguf_writer_set_f32(w, "laguna.rope.freq_base_swa", p->rope_freq_base_swa ? p->rope_freq_base_swa : 10000.0f);
        gguf_writer_set_u32(w, "laguna.rope.dimension_count_swa", (uint32_t)(p->n_rot_swa ? p->n_rot_swa : p->head_dim));
    }
    if (p->yarn_factor > 0) {
        gguf_writer_set_str(w, "laguna.rope.scaling.type", "yarn");
        gguf_writer_set_f32(w, "laguna.rope.scaling.factor", p->yarn_factor);
        gguf_writer_set_u32(w, "laguna.rope.scaling.original_context_length",
                            (uint32_t)(p->n_ctx_train / p->yarn_factor));
    }
}

typedef struct {
    const char *name;
    void (*plan)(const ft_synth_params *p, int64_t n_vocab, plan *out);
    void (*write_hparams)(const ft_synth_params *p, gguf_writer *w);
} synth_arch;

static const synth_arch g_archs[] = {
    {"qwen3moe", plan_qwen3moe, write_hparams_qwen3moe},
    {"qwen2moe", plan_qwen2moe, write_hparams_qwen2moe},
    {"llama", plan_llama, write_hparams_llama},
    {"laguna", plan_laguna, write_hparams_laguna},
};

static bool check_params(const ft_synth_params *p, ft_err *err) {
    if (p->n_layer < 1 || p->n_layer > FT_SYNTH_MAX_LAYERS)
        return ft_err_set(err, "--layers must be 1..%d, got %d", FT_SYNTH_MAX_LAYERS, p->n_layer);
    if (p->n_embd < 1 || p->n_head < 1 || p->n_head_kv < 1 || p->head_dim < 1 || p->n_ff_exp < 1)
        return ft_err_set(err, "--embd, --heads, --kv-heads, --head-dim and --ff must be positive");
    if (p->n_head % p->n_head_kv)
        return ft_err_set(err, "--heads %d is not a multiple of --kv-heads %d", p->n_head, p->n_head_kv);
    if (p->n_expert < 1 || p->n_expert_used < 1 || p->n_expert_used > p->n_expert)
        return ft_err_set(err, "--top-k must be 1..--experts (%d), got %d", p->n_expert, p->n_expert_used);
    if (p->n_expert_types < 1) return ft_err_set(err, "no expert type given");
    if (p->n_head_swa && p->n_head_swa % p->n_head_kv)
        return ft_err_set(err, "sliding-window heads %d are not a multiple of --kv-heads %d", p->n_head_swa, p->n_head_kv);
    if (p->n_dense_lead < 0 || p->n_dense_lead > p->n_layer)
        return ft_err_set(err, "leading dense layers must be 0..%d, got %d", p->n_layer, p->n_dense_lead);
    if ((p->n_dense_lead || p->n_ff_dense) && strcmp(p->arch, "laguna"))
        return ft_err_set(err, "--dense-lead and --dense-ff are laguna's (the %s writer has no dense layers)", p->arch);
    if ((p->n_rot && (p->n_rot % 2 || p->n_rot > p->head_dim)) || (p->n_rot_swa && (p->n_rot_swa % 2 || p->n_rot_swa > p->head_dim)))
        return ft_err_set(err, "rotary dims must be even and at most --head-dim %d", p->head_dim);
    if (!strcmp(p->arch, "qwen2moe") && p->n_head * p->head_dim != p->n_embd)
        return ft_err_set(err, "qwen2moe needs --heads x --head-dim (%d) = --embd (%d)", p->n_head * p->head_dim, p->n_embd);
    return true;
}

static bool check_plan(const plan *pl, ft_err *err) {
    for (int i = 0; i < pl->n; i++) {
        const tensor_plan *t = &pl->items[i];
        const ft_quant_ops *ops = ft_quant_ops_find(t->type);
        if (!ops || !ops->vec_dot)
            return ft_err_set(err, "tensor '%s': type %s cannot hold weights", t->name, ft_type_name(t->type));
        int be = ft_type_traits_find(t->type)->block_elems;
        if (t->ne[0] % be)
            return ft_err_set(err, "tensor '%s': row length %lld is not a multiple of %s's block of %d",
                              t->name, (long long)t->ne[0], ft_type_name(t->type), be);
    }
    return true;
}

// Copies every tokenizer.* key of a vocabulary GGUF. Returns the token count, or -1.
static int64_t copy_vocab(const char *path, gguf_writer *w, ft_err *err) {
    gguf_file *vf = gguf_open(path, err);
    if (!vf) return -1;
    uint64_t n_tokens = 0;
    enum gguf_value_type et;
    if (!gguf_get_arr(vf, "tokenizer.ggml.tokens", &et, &n_tokens) || et != GGUF_VALUE_TYPE_STRING ||
        n_tokens == 0) {
        gguf_close(vf);
        ft_err_set(err, "%s: no tokenizer.ggml.tokens string array: not a vocabulary", path);
        return -1;
    }
    for (int64_t i = 0; i < gguf_n_kv(vf); i++) {
        gguf_str k = gguf_kv_key(vf, i);
        if (k.len >= 10 && !memcmp(k.ptr, "tokenizer.", 10)) gguf_writer_copy_kv(w, vf, i);
    }
    gguf_close(vf);
    return (int64_t)n_tokens;
}

bool ft_synth_write(const ft_synth_params *p, const char *path, ft_err *err) {
    const synth_arch *arch = NULL;
    for (size_t i = 0; i < FT_ARRAY_LEN(g_archs); i++)
        if (!strcmp(g_archs[i].name, p->arch)) arch = &g_archs[i];
    if (!arch) return ft_err_set(err, "--arch %s: unknown (ft synth knows: qwen3moe, qwen2moe, llama, laguna)", p->arch);
    if (!check_params(p, err)) return false;

    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", p->arch);
    gguf_writer_set_str(w, "general.name", p->name);
    gguf_writer_set_u32(w, "general.alignment", GGUF_DEFAULT_ALIGNMENT);
    arch->write_hparams(p, w);
    int64_t n_vocab = p->vocab_from ? copy_vocab(p->vocab_from, w, err) : synth_vocab_write_builtin(w);
    plan pl = {0};
    bool ok = n_vocab > 0;
    if (ok) {
        arch->plan(p, n_vocab, &pl);
        ok = check_plan(&pl, err);
    }
    for (int i = 0; ok && i < pl.n; i++)
        gguf_writer_add_tensor(w, pl.items[i].name, pl.items[i].type, pl.items[i].n_dims, pl.items[i].ne);
    ok = ok && gguf_writer_begin(w, path, err);

    // One buffer as large as the largest tensor, reused.
    size_t max_bytes = 0;
    for (int i = 0; ok && i < pl.n; i++) {
        const tensor_plan *t = &pl.items[i];
        size_t b = ft_row_bytes(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2]);
        if (b > max_bytes) max_bytes = b;
    }
    uint8_t *buf = ok ? ft_malloc(max_bytes) : NULL;
    ft_rng rng = ft_rng_init(p->seed);
    double t0 = ft_time_s(), last = t0;
    uint64_t written = 0;
    for (int i = 0; ok && i < pl.n; i++) {
        const tensor_plan *t = &pl.items[i];
        size_t row = ft_row_bytes(t->type, t->ne[0]);
        int64_t rows = t->ne[1] * t->ne[2];
        for (int64_t r = 0; r < rows; r++) {
            uint8_t *dst = buf + (size_t)r * row;
            ft_quant_random_row(t->type, &rng, t->std, dst, t->ne[0]);
            if (t->mean != 0) {
                FT_ASSERT(t->type == FT_TYPE_F32);
                for (int64_t j = 0; j < t->ne[0]; j++) ((float *)dst)[j] += t->mean;
            }
        }
        ok = gguf_writer_tensor_data(w, buf, row * (size_t)rows, err);
        written += row * (size_t)rows;
        if (ft_time_s() - last > 2.0) {
            last = ft_time_s();
            FT_LOG_INFO("synth: %d/%d tensors, %.1f MiB", i + 1, pl.n, written / 1048576.0);
        }
    }
    ok = ok && gguf_writer_finish(w, err);
    if (ok)
        FT_LOG_INFO("synth: wrote %s: %s, %d layers, %lld tokens, %.1f MiB in %.1f s", path, p->arch,
                    p->n_layer, (long long)n_vocab, written / 1048576.0, ft_time_s() - t0);
    free(buf);
    free(pl.items);
    gguf_writer_free(w);
    return ok;
}

int ft_synth_parse_types(const char *list, enum ft_type *types, int max, ft_err *err) {
    int n = 0;
    const char *s = list;
    while (*s) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char name[32];
        if (len == 0 || len >= sizeof(name)) {
            ft_err_set(err, "bad type list '%s'", list);
            return -1;
        }
        memcpy(name, s, len);
        name[len] = 0;
        if (n == max) {
            ft_err_set(err, "type list '%s' has more than %d entries", list, max);
            return -1;
        }
        if (!ft_type_from_name(name, &types[n])) {
            ft_err_set(err, "unknown type '%s' in '%s'", name, list);
            return -1;
        }
        n++;
        s = e ? e + 1 : s + len;
    }
    if (n == 0) ft_err_set(err, "empty type list");
    return n ? n : -1;
}
