// qwen35moe.c: Qwen3.5 / Qwen3.6 MoE (Qwen3.5-35B-A3B, 122B-A10B, 397B-A17B).
//
// Layer il is a gated DeltaNet linear-attention layer unless (il + 1) % full_attention_interval
// is 0; those have softmax attention with per-head Q/K RMSNorm, interleaved multi-axis RoPE over
// the first rope.dimension_count dims (text: every axis at the token's position) and a sigmoid
// output gate from a doubled Q projection. Every layer then has routed experts (softmax, top-k,
// renormalised) and a shared expert behind a sigmoid gate; post_attention_norm is the FFN's
// input norm. V head h of a DeltaNet layer reads K head h % group_count (the converter orders
// the V heads so). MTP layers (nextn_predict_layers, the last blocks) are not run. A layer's
// gate and up experts may come fused in one ffn_gate_up_exps (MODEL_TENSORS_ROUTED_EXPERTS_GATE_UP).
#include "model_impl.h"

// RoPE's sections in pairs: llama.cpp's default proportions [11, 11, 10, 0] over n_rot / 2
static int64_t synth_sections(const ft_synth_params *p, int i) {
    int pairs = (p->n_rot ? p->n_rot : p->head_dim) / 2, s1 = pairs * 11 / 32, s2 = pairs * 10 / 32;
    int s[4] = {pairs - s1 - s2, s1, s2, 0};
    return s[i];
}

static const ft_arch_key keys[] = {
    MODEL_KEYS_HYBRID_QWEN,
    {"rope.dimension_sections", FT_KEY_TYPE_U32_4, FT_KEY_REQUIRED, 0, 1 << 16, HP(rope.sections), 0,
     FT_SYNTH_FN(synth_sections)},
    MODEL_KEYS_LINEAR_ATTENTION,
    MODEL_KEYS_ROPE_SCALING_READ_ONLY,
};

static const ft_arch_tensor tensors[] = {
    MODEL_TENSORS_HYBRID_QWEN_LEAD,
    {"blk.%d.ssm_beta.weight", FT_LAYERS_RECURRENT, {FT_DIM_EMBD, FT_DIM_SSM_HEADS}, FT_WTYPE_ANY_F32, 0,
     LAYER(ssm_beta), FT_FAN(1.0f)},
    {"blk.%d.ssm_alpha.weight", FT_LAYERS_RECURRENT, {FT_DIM_EMBD, FT_DIM_SSM_HEADS}, FT_WTYPE_ANY_F32, 0,
     LAYER(ssm_alpha), FT_FAN(1.0f)},
    MODEL_TENSORS_HYBRID_QWEN_TAIL,
};

static bool hparams(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    if (!model_linear_attention_hparams(m, err)) return false;
    int pairs = 0;
    for (int i = 0; i < 4; i++) pairs += hp->rope.sections[i];
    if (pairs < 1 || 2 * pairs > hp->head_dim)
        return ft_err_set(err, "key qwen35moe.rope.dimension_sections: %d pairs in all, expected 1 to %d", pairs,
                          hp->head_dim / 2);
    hp->rope.imrope = true;
    hp->rope_swa = hp->rope;
    return true;
}

const ft_arch ft_arch_qwen35moe = {
    .name = "qwen35moe",
    .keys = keys,
    .n_keys = FT_ARRAY_LEN(keys),
    .tensors = tensors,
    .n_tensors = FT_ARRAY_LEN(tensors),
    .fixed = {.rope.neox = true, .gating = FT_GATING_SOFTMAX, .norm_w = true},
    .hparams = hparams,
    .layer = model_layer_hybrid_qwen,
};
