// laguna.c: poolside Laguna (XS.2, S.2, M.1).
//
// Layer il: GQA attention with per-head Q/K RMSNorm and NeoX RoPE, its query-head count read
// per layer; with a sliding window, 3 of every 4 layers (all but il % 4 == 0) attend only to
// the last n_swa positions and use their own RoPE (base, rotary dims, no YaRN) while full
// layers use YaRN when the file asks. The attention output is multiplied by softplus(g) where
// g is projected from the block's normed input, per head or per element (the gate tensor's
// width says which). FFN: dense in the first n_dense_lead layers; else routed experts with a
// sigmoid router, a score-correction bias used only to select, weights renormalised and
// scaled, plus an always-on shared expert.
#include "model_impl.h"

enum { SWA_PATTERN = 4 }; // attention.sliding_window_pattern's default

// With a sliding window, layer il is a full-attention one every pattern layers from layer 0.
static bool swa_layer(int n_swa, int64_t pattern, int il) { return n_swa > 0 && il % pattern != 0; }

static bool synth_swa(const ft_synth_params *p) { return p->n_swa > 0; }
static bool synth_yarn(const ft_synth_params *p) { return p->yarn_factor > 0; }

static int64_t synth_heads(const ft_synth_params *p, int il) {
    return swa_layer(p->n_swa, SWA_PATTERN, il) && p->n_head_swa ? p->n_head_swa : p->n_head;
}

static int64_t synth_yarn_orig_ctx(const ft_synth_params *p, int il) {
    return (int64_t)(p->n_ctx_train / p->yarn_factor);
}

static const ft_arch_key keys[] = {
    MODEL_KEYS_SIZES,
    MODEL_KEY_FEED_FORWARD_LENGTH(FT_SYNTH_FN(synth_dense_ff)),
    MODEL_KEYS_ATTENTION_EXPERTS,
    MODEL_KEY_HEAD_COUNT(FT_SYNTH_FN(synth_heads, .per_layer = true)),
    {"expert_feed_forward_length", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 1 << 20, HP(n_ff_exp), 0,
     FT_SYNTH(n_ff_exp)},
    // default: expert_feed_forward_length
    MODEL_KEY_EXPERT_SHARED_FEED_FORWARD_LENGTH,
    {"leading_dense_block_count", FT_KEY_TYPE_U32, FT_KEY_REQUIRED | FT_KEY_HI_LAYERS, 0, 0, HP(n_dense_lead),
     0, FT_SYNTH(n_dense_lead)},
    // 1 softmax, 2 (or 0) sigmoid
    {"expert_gating_func", FT_KEY_TYPE_U32, 0, 0, 4, FT_KEY_NO_FIELD, 2, FT_SYNTH_VALUE(2)},
    {"expert_weights_norm", FT_KEY_TYPE_BOOL, 0, 0, 0, HP(norm_w), 0, FT_SYNTH_VALUE(1)},
    MODEL_KEY_EXPERT_WEIGHTS_SCALE(FT_SYNTH(expert_weights_scale, .value = 2.5)),
    // 0: every layer attends to all positions
    {"attention.sliding_window", FT_KEY_TYPE_U32, 0, 0, 1 << 26, HP(n_swa), 0,
     FT_SYNTH(n_swa, .when = synth_swa)},
    // RoPE of the sliding-window layers; defaults: the full layers'
    {"rope.freq_base_swa", FT_KEY_TYPE_F32, FT_KEY_DERIVED, 0, 0, FT_KEY_NO_FIELD, 0,
     FT_SYNTH(rope_freq_base_swa, .value = 10000, .when = synth_swa)},
    {"rope.dimension_count_swa", FT_KEY_TYPE_U32, FT_KEY_HI_HEAD_DIM | FT_KEY_DERIVED, 2, 0, FT_KEY_NO_FIELD,
     0, FT_SYNTH_OR(n_rot_swa, head_dim, .when = synth_swa)},
    MODEL_KEY_ROPE_SCALING_TYPE(FT_SYNTH_STR("yarn", .when = synth_yarn)),
    MODEL_KEY_ROPE_SCALING_FACTOR(FT_SYNTH(yarn_factor, .when = synth_yarn)),
    MODEL_KEY_ROPE_SCALING_ORIG_CTX(FT_SYNTH_FN(synth_yarn_orig_ctx, .when = synth_yarn)),
    {"attention.sliding_window_pattern", FT_KEY_TYPE_U32, 0, 1, 4096, FT_KEY_NO_FIELD, SWA_PATTERN,
     FT_NO_SYNTH},
    MODEL_KEY_ROPE_SCALING_ATTN_FACTOR,
    MODEL_KEY_ROPE_SCALE_LINEAR,
};

static const ft_arch_tensor tensors[] = {
    MODEL_TENSOR_TOKEN_EMBD,
    MODEL_TENSORS_ATTENTION_QKV,
    MODEL_TENSORS_QKV_BIAS_OPTIONAL,
    MODEL_TENSOR_ATTN_OUTPUT,
    MODEL_TENSORS_QK_NORM,
    // per head or per element: see gate_width
    {"blk.%d.attn_gate.weight", FT_LAYERS_ALL, {FT_DIM_EMBD, FT_DIM_ARCH},
     FT_WTYPE_ANY, 0, LAYER(attn_gate), FT_FAN(1.0f)},
    MODEL_TENSOR_FFN_NORM,
    MODEL_TENSORS_DENSE_FFN,
    MODEL_TENSORS_ROUTED_EXPERTS,
    MODEL_TENSOR_SELECTION_BIAS,
    MODEL_TENSORS_SHARED_EXPERT,
    MODEL_TENSOR_OUTPUT_NORM,
    MODEL_TENSOR_OUTPUT(FT_FAN_DIV(3.0f)),
};

// The output gate's width: one value per head or one per element of the attention output.
// A file says which by the tensor's width, ft synth by gate_per_element.
static int64_t gate_width(const ft_model *m, const ft_arch_tensor *t, int il, const gguf_tensor *g,
                          const ft_synth_params *p, ft_err *err) {
    int64_t per_head = m->layers[il].n_head, per_elem = per_head * m->hp.head_dim;
    if (p) return p->gate_per_element ? per_elem : per_head;
    if (g->ne[1] == per_head || g->ne[1] == per_elem) return g->ne[1];
    char name[128];
    model_tensor_name(t, il, name, sizeof(name));
    ft_err_set(err, "tensor %s: %lld outputs, expected %lld (per head) or %lld (per element)", name,
               (long long)g->ne[1], (long long)per_head, (long long)per_elem);
    return -1;
}

// The gating function, the shared expert's default width, and the sliding-window layers with
// their own RoPE: plain (no YaRN) with its own base and rotary dims.
static bool hparams(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    int64_t gating, pattern;
    model_key_int(m, "expert_gating_func", &gating);
    if (gating != 0 && gating != 1 && gating != 2)
        return ft_err_set(err, "key laguna.expert_gating_func = %d: only softmax (1) and sigmoid (2) are supported",
                          (int)gating);
    hp->gating = gating == 1 ? FT_GATING_SOFTMAX : FT_GATING_SIGMOID;
    if (hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->n_ff_exp;

    ft_rope_params *rs = &hp->rope_swa;
    *rs = hp->rope;
    rs->freq_scale = 1.0f;
    rs->ext_factor = 0.0f;
    rs->attn_factor = 1.0f;
    rs->beta_fast = rs->beta_slow = 0.0f;
    rs->n_ctx_orig = hp->n_ctx_train;
    if (hp->n_swa > 0) {
        float base;
        int64_t n_rot;
        if (model_key_float(m, "rope.freq_base_swa", &base)) rs->freq_base = base;
        if (model_key_int(m, "rope.dimension_count_swa", &n_rot)) rs->n_rot = (int)n_rot;
        if (rs->n_rot % 2) return ft_err_set(err, "key laguna.rope.dimension_count_swa %d: must be even", rs->n_rot);
        if (!(rs->freq_base > 0)) return ft_err_set(err, "key laguna.rope.freq_base_swa: must be positive");
    }
    model_key_int(m, "attention.sliding_window_pattern", &pattern);
    for (int il = 0; il < hp->n_layer; il++) m->layers[il].is_swa = swa_layer(hp->n_swa, pattern, il);
    return true;
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    model_block_attention(m, f, il, (attn_opts){.qk_norm = true});
    if (m->layers[il].is_moe)
        model_block_moe(m, f, il);
    else
        model_block_dense_ffn(m, f, il);
}

const ft_arch ft_arch_laguna = {
    .name = "laguna",
    .keys = keys,
    .n_keys = FT_ARRAY_LEN(keys),
    .tensors = tensors,
    .n_tensors = FT_ARRAY_LEN(tensors),
    .fixed = {.rope.neox = true},
    .hparams = hparams,
    .dim = gate_width,
    .layer = layer,
};
