// qwen35moe.c: Qwen3.5 / Qwen3.6 MoE (Qwen3.5-35B-A3B, 122B-A10B, 397B-A17B).
//
// Layer il is a gated DeltaNet linear-attention layer unless (il + 1) % full_attention_interval
// is 0; those have softmax attention with per-head Q/K RMSNorm, interleaved multi-axis RoPE over
// the first rope.dimension_count dims (text: every axis at the token's position) and a sigmoid
// output gate from a doubled Q projection. Every layer then has routed experts (softmax, top-k,
// renormalised) and a shared expert behind a sigmoid gate; post_attention_norm is the FFN's
// input norm. MTP layers (nextn_predict_layers, the last blocks) are not run.
#include "model_impl.h"

// RoPE's sections in pairs: llama.cpp's default proportions [11, 11, 10, 0] over n_rot / 2
static int64_t synth_sections(const ft_synth_params *p, int i) {
    int pairs = (p->n_rot ? p->n_rot : p->head_dim) / 2, s1 = pairs * 11 / 32, s2 = pairs * 10 / 32;
    int s[4] = {pairs - s1 - s2, s1, s2, 0};
    return s[i];
}

static int64_t synth_ssm_head(const ft_synth_params *p, int il) {
    (void)il;
    return p->ssm_head_dim ? p->ssm_head_dim : p->head_dim;
}

static int64_t synth_inner(const ft_synth_params *p, int il) {
    return (p->ssm_n_v_heads ? p->ssm_n_v_heads : 4) * synth_ssm_head(p, il);
}

static const ft_arch_key keys[] = {
    MODEL_KEYS_SIZES,
    MODEL_KEY_FEED_FORWARD_LENGTH(FT_SYNTH_FN(synth_ff_used_experts)),
    MODEL_KEYS_ATTENTION_EXPERTS,
    MODEL_KEY_HEAD_COUNT(FT_SYNTH(n_head)),
    MODEL_KEY_EXPERT_FEED_FORWARD_LENGTH,
    MODEL_KEY_EXPERT_SHARED_FEED_FORWARD_LENGTH,
    MODEL_KEY_EXPERT_WEIGHTS_SCALE(FT_NO_SYNTH),
    {"rope.dimension_sections", FT_KEY_TYPE_U32_4, FT_KEY_REQUIRED, 0, 1 << 16, HP(rope.sections), 0,
     FT_SYNTH_FN(synth_sections)},
    {"ssm.conv_kernel", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 64, HP(ssm_d_conv), 0, FT_SYNTH(ssm_d_conv, .value = 4)},
    {"ssm.state_size", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 2, 4096, HP(ssm_head_dim), 0, FT_SYNTH_FN(synth_ssm_head)},
    {"ssm.group_count", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 4096, HP(ssm_n_k_heads), 0,
     FT_SYNTH(ssm_n_k_heads, .value = 2)},
    {"ssm.time_step_rank", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 4096, HP(ssm_n_v_heads), 0,
     FT_SYNTH(ssm_n_v_heads, .value = 4)},
    // n_v_heads x state_size (checked)
    {"ssm.inner_size", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 1 << 24, FT_KEY_NO_FIELD, 0, FT_SYNTH_FN(synth_inner)},
    {"full_attention_interval", FT_KEY_TYPE_U32, 0, 1, 4096, FT_KEY_NO_FIELD, 4,
     FT_SYNTH(full_attn_interval, .value = 4)},
    {"nextn_predict_layers", FT_KEY_TYPE_U32, 0, 0, 64, FT_KEY_NO_FIELD, 0, FT_NO_SYNTH},
    MODEL_KEYS_ROPE_SCALING_READ_ONLY,
};

static const ft_arch_tensor tensors[] = {
    MODEL_TENSOR_TOKEN_EMBD,
    {"blk.%d.attn_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(attn_norm), FT_NORM},
    // the FFN block's input norm
    {"blk.%d.post_attention_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(ffn_norm), FT_NORM},
    // softmax attention layers
    {"blk.%d.attn_q.weight", FT_LAYERS_ATTN, {FT_DIM_EMBD, FT_DIM_Q_GATED}, FT_WTYPE_ANY, 0, LAYER(wq),
     FT_FAN(1.0f)},
    {"blk.%d.attn_k.weight", FT_LAYERS_ATTN, {FT_DIM_EMBD, FT_DIM_KV}, FT_WTYPE_ANY, 0, LAYER(wk), FT_FAN(1.0f)},
    {"blk.%d.attn_v.weight", FT_LAYERS_ATTN, {FT_DIM_EMBD, FT_DIM_KV}, FT_WTYPE_ANY, 0, LAYER(wv), FT_FAN(1.0f)},
    {"blk.%d.attn_output.weight", FT_LAYERS_ATTN, {FT_DIM_Q, FT_DIM_EMBD}, FT_WTYPE_ANY, 0, LAYER(wo),
     FT_FAN(1.0f)},
    {"blk.%d.attn_q_norm.weight", FT_LAYERS_ATTN, {FT_DIM_HEAD}, FT_WTYPE_F32, 0, LAYER(q_norm), FT_NORM},
    {"blk.%d.attn_k_norm.weight", FT_LAYERS_ATTN, {FT_DIM_HEAD}, FT_WTYPE_F32, 0, LAYER(k_norm), FT_NORM},
    // gated DeltaNet layers
    {"blk.%d.attn_qkv.weight", FT_LAYERS_RECURRENT, {FT_DIM_EMBD, FT_DIM_LIN_QKV}, FT_WTYPE_ANY, 0, LAYER(lin_qkv),
     FT_FAN(1.0f)},
    {"blk.%d.attn_gate.weight", FT_LAYERS_RECURRENT, {FT_DIM_EMBD, FT_DIM_LIN_V}, FT_WTYPE_ANY, 0, LAYER(lin_z),
     FT_FAN(1.0f)},
    // taps of a few tenths: each conv output mixes its inputs, keeping their scale
    {"blk.%d.ssm_conv1d.weight", FT_LAYERS_RECURRENT, {FT_DIM_SSM_CONV, FT_DIM_LIN_QKV}, FT_WTYPE_F32, 0,
     LAYER(ssm_conv1d), FT_STD(0.3f, .mean = 0.25f)},
    {"blk.%d.ssm_dt.bias", FT_LAYERS_RECURRENT, {FT_DIM_SSM_HEADS}, FT_WTYPE_F32, 0, LAYER(ssm_dt), FT_STD(0.5f)},
    // -exp(A_log): negative, so the state decays
    {"blk.%d.ssm_a", FT_LAYERS_RECURRENT, {FT_DIM_SSM_HEADS}, FT_WTYPE_F32, 0, LAYER(ssm_a),
     FT_STD(0.1f, .mean = -0.5f)},
    {"blk.%d.ssm_beta.weight", FT_LAYERS_RECURRENT, {FT_DIM_EMBD, FT_DIM_SSM_HEADS}, FT_WTYPE_ANY_F32, 0,
     LAYER(ssm_beta), FT_FAN(1.0f)},
    {"blk.%d.ssm_alpha.weight", FT_LAYERS_RECURRENT, {FT_DIM_EMBD, FT_DIM_SSM_HEADS}, FT_WTYPE_ANY_F32, 0,
     LAYER(ssm_alpha), FT_FAN(1.0f)},
    {"blk.%d.ssm_norm.weight", FT_LAYERS_RECURRENT, {FT_DIM_SSM_HEAD}, FT_WTYPE_F32, 0, LAYER(ssm_norm), FT_NORM},
    {"blk.%d.ssm_out.weight", FT_LAYERS_RECURRENT, {FT_DIM_LIN_V, FT_DIM_EMBD}, FT_WTYPE_ANY, 0, LAYER(ssm_out),
     FT_FAN(1.0f)},
    MODEL_TENSORS_ROUTED_EXPERTS,
    {"blk.%d.ffn_gate_inp_shexp.weight", FT_LAYERS_MOE, {FT_DIM_EMBD}, FT_WTYPE_ANY_F32, 0, LAYER(gate_inp_shexp),
     FT_FAN(1.0f)},
    MODEL_TENSORS_SHARED_EXPERT,
    MODEL_TENSOR_OUTPUT_NORM,
    MODEL_TENSOR_OUTPUT(FT_FAN_DIV(3.0f)),
};

static bool hparams(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    int64_t nextn = 0, interval = 4, inner = 0;
    model_key_int(m, "nextn_predict_layers", &nextn);
    model_key_int(m, "full_attention_interval", &interval);
    model_key_int(m, "ssm.inner_size", &inner);
    // the trunk: the MTP blocks come after it and stay unbound (not run, not read)
    if (nextn >= hp->n_layer) return ft_err_set(err, "key qwen35moe.nextn_predict_layers %lld: no layers left",
                                                (long long)nextn);
    hp->n_layer -= (int)nextn;
    if (hp->n_ff_exp == 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (hp->n_ff_exp < 1) return ft_err_set(err, "key qwen35moe.expert_feed_forward_length: missing or 0");
    if (hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->n_ff;
    if (hp->ssm_n_v_heads % hp->ssm_n_k_heads)
        return ft_err_set(err, "key qwen35moe.ssm.time_step_rank %d: not a multiple of ssm.group_count %d",
                          hp->ssm_n_v_heads, hp->ssm_n_k_heads);
    if (inner != (int64_t)hp->ssm_n_v_heads * hp->ssm_head_dim)
        return ft_err_set(err, "key qwen35moe.ssm.inner_size %lld: expected time_step_rank x state_size = %d",
                          (long long)inner, hp->ssm_n_v_heads * hp->ssm_head_dim);
    int pairs = 0;
    for (int i = 0; i < 4; i++) pairs += hp->rope.sections[i];
    if (pairs < 1 || 2 * pairs > hp->head_dim)
        return ft_err_set(err, "key qwen35moe.rope.dimension_sections: %d pairs in all, expected 1 to %d", pairs,
                          hp->head_dim / 2);
    hp->rope.imrope = true;
    hp->rope_swa = hp->rope;
    for (int l = 0; l < hp->n_layer; l++) m->layers[l].is_recurrent = (l + 1) % interval != 0;
    return true;
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    if (m->layers[il].is_recurrent)
        model_block_delta_net(m, f, il);
    else
        model_block_attention(m, f, il, (attn_opts){.qk_norm = true, .q_gated = true});
    model_block_moe(m, f, il);
}

const ft_arch ft_arch_qwen35moe = {
    .name = "qwen35moe",
    .keys = keys,
    .n_keys = FT_ARRAY_LEN(keys),
    .tensors = tensors,
    .n_tensors = FT_ARRAY_LEN(tensors),
    .fixed = {.rope.neox = true, .gating = FT_GATING_SOFTMAX, .norm_w = true},
    .hparams = hparams,
    .layer = layer,
};
