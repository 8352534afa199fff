// gptoss.c: OpenAI gpt-oss (gpt-oss-20b, gpt-oss-120b), general.architecture "gpt-oss".
//
// Every layer: GQA attention with Q/K/V biases (optional), NeoX RoPE with YaRN as the file says
// on every layer, attention sinks (a learned logit per head in each softmax's denominator) and
// a bias on the output projection; sliding-window layers (attention.sliding_window_pattern,
// default 2: layer il slides unless il % pattern == pattern - 1, so even layers slide) take
// their own RoPE base (rope.freq_base_swa, else the full layers'). FFN: post_attention_norm,
// then routed experts only: a router with a bias, the top k of its logits weighted by their
// softmax (no renormalisation, no scale), per-expert biases
// on gate, up and down, and the clamped SwiGLU (ft_glu's SWIGLU_OAI). As llama.cpp's
// openai-moe.cpp builds it.
#include "model_impl.h"


enum { SWA_PATTERN = 2 }; // attention.sliding_window_pattern's default

// ft synth's scales of the experts: gate and up biases of BIAS_SCALE, so the SwiGLU's clamps act
// (on about 0.5% of gate and 1% of up elements), and the down projection scaled by DOWN_SCALE
// against the (up + 1) factor, so the layers' outputs keep the residual's scale and the
// next-token distributions are not degenerate
#define BIAS_SCALE 2.5f
#define DOWN_SCALE 0.25f

// Layer il slides unless it is the last of each pattern layers (llama.cpp's set_swa_pattern; 0:
// every layer slides).
static bool swa_layer(int64_t pattern, int il) { return pattern == 0 || il % pattern < pattern - 1; }

static bool synth_swa_base(const ft_synth_params *p) { return p->rope_freq_base_swa != 0; }
static bool synth_swa_pattern(const ft_synth_params *p) { return p->swa_pattern != 0; }
static bool synth_yarn(const ft_synth_params *p) { return p->yarn_factor > 0; }

static int64_t synth_yarn_orig_ctx(const ft_synth_params *p, int il) {
    return (int64_t)(p->n_ctx_train / p->yarn_factor);
}

static const ft_arch_key keys[] = {
    MODEL_KEYS_SIZES,
    // the experts' width, as the converter writes it (not read: every layer has experts)
    MODEL_KEY_FEED_FORWARD_LENGTH(FT_SYNTH(n_ff_exp)),
    MODEL_KEYS_ATTENTION_EXPERTS,
    MODEL_KEY_HEAD_COUNT(FT_SYNTH(n_head)),
    {"expert_feed_forward_length", FT_KEY_TYPE_U32_LAYERS, FT_KEY_REQUIRED | FT_KEY_UNIFORM, 1, 1 << 20,
     HP(n_ff_exp), 0, FT_SYNTH(n_ff_exp)},
    // llama.cpp's gpt-oss does not read it (its experts' weights are unscaled): read to refuse
    // a file that sets one, rather than guess which is meant
    {"expert_weights_scale", FT_KEY_TYPE_F32, 0, 0, 0, FT_KEY_NO_FIELD, 0, FT_NO_SYNTH},
    {"attention.sliding_window", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 1 << 26, HP(n_swa), 0,
     FT_SYNTH(n_swa, .value = 128)},
    {"attention.sliding_window_pattern", FT_KEY_TYPE_U32, 0, 0, 4096, FT_KEY_NO_FIELD, SWA_PATTERN,
     FT_SYNTH(swa_pattern, .when = synth_swa_pattern)},
    // RoPE base of the sliding-window layers; default: the full layers'
    {"rope.freq_base_swa", FT_KEY_TYPE_F32, FT_KEY_DERIVED, 0, 0, FT_KEY_NO_FIELD, 0,
     FT_SYNTH(rope_freq_base_swa, .when = synth_swa_base)},
    MODEL_KEY_ROPE_SCALING_TYPE(FT_SYNTH_STR("yarn", .when = synth_yarn)),
    MODEL_KEY_ROPE_SCALING_FACTOR(FT_SYNTH(yarn_factor, .when = synth_yarn)),
    MODEL_KEY_ROPE_SCALING_ORIG_CTX(FT_SYNTH_FN(synth_yarn_orig_ctx, .when = synth_yarn)),
    MODEL_KEY_ROPE_SCALING_ATTN_FACTOR,
    MODEL_KEY_ROPE_SCALE_LINEAR,
};

// ft synth's scales: biases of a few tenths on the projections; gate and up biases of one unit,
// so the clamps of the SwiGLU act on some elements; sinks of about the scores' size, so they
// take a visible share of each softmax.
static const ft_arch_tensor tensors[] = {
    MODEL_TENSOR_TOKEN_EMBD,
    MODEL_TENSORS_ATTENTION_QKV,
    MODEL_TENSORS_QKV_BIAS,
    MODEL_TENSOR_ATTN_OUTPUT,
    {"blk.%d.attn_output.bias", FT_LAYERS_ALL, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(bo), FT_STD(0.1f)},
    {"blk.%d.attn_sinks.weight", FT_LAYERS_ALL, {FT_DIM_HEADS}, FT_WTYPE_F32, 0, LAYER(sinks), FT_STD(1.0f)},
    // the FFN block's input norm
    {"blk.%d.post_attention_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(ffn_norm),
     FT_NORM},
    {"blk.%d.ffn_gate_inp.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_EXPERT}, FT_WTYPE_ANY_F32, 0, LAYER(router),
     FT_FAN(1.5f)},
    {"blk.%d.ffn_gate_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP, FT_DIM_EXPERT}, FT_WTYPE_EXPERT, 0,
     LAYER(gate_exps), FT_FAN(1.0f)},
    {"blk.%d.ffn_up_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP, FT_DIM_EXPERT}, FT_WTYPE_EXPERT, 0,
     LAYER(up_exps), FT_FAN(1.0f)},
    {"blk.%d.ffn_down_exps.weight", FT_LAYERS_MOE, {FT_DIM_FF_EXP, FT_DIM_EMBD, FT_DIM_EXPERT}, FT_WTYPE_EXPERT_DOWN,
     0, LAYER(down_exps), FT_FAN(DOWN_SCALE)},
    {"blk.%d.ffn_gate_inp.bias", FT_LAYERS_MOE, {FT_DIM_EXPERT}, FT_WTYPE_F32, 0, LAYER(router_b),
     FT_STD(0.5f)},
    {"blk.%d.ffn_gate_exps.bias", FT_LAYERS_MOE, {FT_DIM_FF_EXP, FT_DIM_EXPERT}, FT_WTYPE_F32, 0,
     LAYER(gate_exps_b), FT_STD(BIAS_SCALE)},
    {"blk.%d.ffn_up_exps.bias", FT_LAYERS_MOE, {FT_DIM_FF_EXP, FT_DIM_EXPERT}, FT_WTYPE_F32, 0,
     LAYER(up_exps_b), FT_STD(BIAS_SCALE)},
    {"blk.%d.ffn_down_exps.bias", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_EXPERT}, FT_WTYPE_F32, 0,
     LAYER(down_exps_b), FT_STD(0.1f)},
    MODEL_TENSOR_OUTPUT_NORM,
    // required (llama.cpp loads no gpt-oss file without it)
    {"output.weight", FT_LAYERS_NONE, {FT_DIM_EMBD, FT_DIM_VOCAB}, FT_WTYPE_ANY, 0, MODEL(output),
     FT_FAN(3.0f)},
};

// The heads' size is RoPE's dims (llama.cpp sizes Q, K, V and scales the scores by the rotary
// dims), the sliding-window layers and their RoPE: the full layers' (YaRN included) with their
// own base.
static bool hparams(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    if (hp->rope.n_rot != hp->head_dim)
        return ft_err_set(err, "key gpt-oss.rope.dimension_count %d: must equal the head size %d", hp->rope.n_rot,
                          hp->head_dim);
    float scale;
    if (model_key_float(m, "expert_weights_scale", &scale) && scale != 0 && scale != 1)
        return ft_err_set(err, "key gpt-oss.expert_weights_scale = %g: llama.cpp's gpt-oss ignores it (unscaled "
                               "experts) and ft will not guess which the file means", (double)scale);
    float base;
    if (model_key_float(m, "rope.freq_base_swa", &base)) hp->rope_swa.freq_base = base;
    if (!(hp->rope_swa.freq_base > 0)) return ft_err_set(err, "key gpt-oss.rope.freq_base_swa: must be positive");
    int64_t pattern;
    model_key_int(m, "attention.sliding_window_pattern", &pattern);
    for (int il = 0; il < hp->n_layer; il++) m->layers[il].is_swa = swa_layer(pattern, il);
    return true;
}

// gpt-oss's heads rotate whole (the loader refuses other rotary dims): say it in ft synth's terms.
static bool synth_check(const ft_synth_params *p, ft_err *err) {
    if (p->n_rot && p->n_rot != p->head_dim)
        return ft_err_set(err, "gpt-oss rotates whole heads: --rot must equal --head-dim (%d)", p->head_dim);
    return true;
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    model_block_attention(m, f, il, (attn_opts){.qk_norm = false});
    model_block_moe(m, f, il);
}

const ft_arch ft_arch_gptoss = {
    .name = "gpt-oss",
    .keys = keys,
    .n_keys = FT_ARRAY_LEN(keys),
    .tensors = tensors,
    .n_tensors = FT_ARRAY_LEN(tensors),
    .fixed = {.rope.neox = true, .gating = FT_GATING_SOFTMAX_WEIGHT, .glu = FT_GLU_SWIGLU_OAI, .norm_w = false},
    .hparams = hparams,
    .synth_check = synth_check,
    .layer = layer,
};
