// glm4moe.c: GLM-4.5, GLM-4.5-Air, GLM-4.6 (Z.ai).
//
// Layer il: GQA attention with Q/K/V biases, per-head Q/K RMSNorm where the file has them
// (GLM-4.5 does, Air does not), NeoX RoPE over the first rope.dimension_count dims (half the
// head); post_attention_norm is the FFN's input norm. FFN: dense in the first
// leading_dense_block_count layers; else routed experts with a sigmoid router whose
// score-correction bias (exp_probs_b) only selects, weights renormalised and scaled, plus
// expert_shared_count experts' width of shared expert added without a gate. The last
// nextn_predict_layers blocks of the file are MTP blocks (multi-token prediction): not run,
// never bound (model_mtp_layers). M-RoPE files (GLM-4.6V, rope.dimension_sections) run where
// their text positions turn every rotated pair as plain RoPE does; others are refused.
#include "model_impl.h"

static int64_t synth_shared_count(const ft_synth_params *p, int il) {
    return p->n_ff_shexp ? p->n_ff_shexp / p->n_ff_exp : 1;
}

static const ft_arch_key keys[] = {
    MODEL_KEYS_SIZES,
    MODEL_KEY_FEED_FORWARD_LENGTH(FT_SYNTH_FN(synth_dense_ff)),
    MODEL_KEYS_ATTENTION_EXPERTS,
    MODEL_KEY_HEAD_COUNT(FT_SYNTH(n_head)),
    {"expert_feed_forward_length", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 1 << 20, HP(n_ff_exp), 0,
     FT_SYNTH(n_ff_exp)},
    // the shared expert is this many routed experts wide (llama.cpp's graph always adds one)
    {"expert_shared_count", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 64, FT_KEY_NO_FIELD, 0,
     FT_SYNTH_FN(synth_shared_count)},
    {"leading_dense_block_count", FT_KEY_TYPE_U32, FT_KEY_HI_LAYERS, 0, 0, HP(n_dense_lead), 0,
     FT_SYNTH(n_dense_lead)},
    // 1 softmax, 2 (or 0) sigmoid
    {"expert_gating_func", FT_KEY_TYPE_U32, 0, 0, 4, FT_KEY_NO_FIELD, 2, FT_SYNTH_VALUE(2)},
    MODEL_KEY_EXPERT_WEIGHTS_SCALE(FT_SYNTH(expert_weights_scale, .value = 2.5)),
    {"expert_weights_norm", FT_KEY_TYPE_BOOL, 0, 0, 0, HP(norm_w), 0, FT_SYNTH_VALUE(1)},
    {"nextn_predict_layers", FT_KEY_TYPE_U32, 0, 0, 64, FT_KEY_NO_FIELD, 0,
     FT_SYNTH(n_mtp, .when = synth_has_mtp)},
    // M-RoPE sections in pairs (GLM-4.6V): see rope_sections
    {"rope.dimension_sections", FT_KEY_TYPE_U32_4, 0, 0, 1 << 16, HP(rope.sections), 0,
     FT_SYNTH_FN(synth_rope_sections, .when = synth_has_rope_sections)},
    MODEL_KEYS_ROPE_SCALING_READ_ONLY,
};

static const ft_arch_tensor tensors[] = {
    MODEL_TENSOR_TOKEN_EMBD,
    MODEL_TENSORS_ATTENTION_QKV,
    MODEL_TENSORS_QKV_BIAS,
    MODEL_TENSOR_ATTN_OUTPUT,
    MODEL_TENSORS_QK_NORM_OPTIONAL,
    {"blk.%d.post_attention_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(ffn_norm), FT_NORM},
    MODEL_TENSORS_DENSE_FFN,
    MODEL_TENSORS_ROUTED_EXPERTS,
    MODEL_TENSOR_SELECTION_BIAS,
    MODEL_TENSORS_SHARED_EXPERT,
    // an MTP block's own tensors besides a layer's (the ones llama.cpp's loader requires, and the
    // final norm it may carry), never bound
    {"blk.%d.nextn.eh_proj.weight", FT_LAYERS_MTP, {FT_DIM_EMBD_2, FT_DIM_EMBD}, FT_WTYPE_ANY, 0,
     FT_TENSOR_NO_FIELD, FT_FAN(1.0f)},
    {"blk.%d.nextn.enorm.weight", FT_LAYERS_MTP, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, FT_TENSOR_NO_FIELD, FT_NORM},
    {"blk.%d.nextn.hnorm.weight", FT_LAYERS_MTP, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, FT_TENSOR_NO_FIELD, FT_NORM},
    {"blk.%d.nextn.shared_head_norm.weight", FT_LAYERS_MTP, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, FT_TENSOR_NO_FIELD,
     FT_NORM},
    MODEL_TENSOR_OUTPUT_NORM,
    MODEL_TENSOR_OUTPUT(FT_FAN_DIV(3.0f)),
};

// M-RoPE (rope.dimension_sections, in pairs): llama.cpp uses it when the first two sections are
// set, and for text puts the t, h and w axes at the token's position and the fourth at 0, so
// rotated pair i turns as plain RoPE does unless i % (the sections summed) falls in the fourth
// section, where it does not turn. Plain RoPE is then exact unless a rotated pair reaches the
// fourth section (GLM-4.6V's sections leave it empty); such files are refused.
static bool rope_sections(ft_model *m, ft_err *err) {
    ft_rope_params *r = &m->hp.rope;
    const int *s = r->sections;
    bool mrope = s[0] > 0 && s[1] > 0;
    int pairs = r->n_rot / 2, first_fourth = s[0] + s[1] + s[2];
    if (mrope && s[3] > 0 && pairs > first_fourth)
        return ft_err_set(err,
                          "key glm4moe.rope.dimension_sections [%d, %d, %d, %d]: M-RoPE whose fourth section holds "
                          "rotated pairs (%d of them), which text leaves unturned: not supported",
                          s[0], s[1], s[2], s[3], pairs - first_fourth);
    for (int i = 0; i < 4; i++) r->sections[i] = 0; // plain NeoX RoPE from here on
    m->hp.rope_swa = *r;
    return true;
}

// The gating function, the shared expert's width, the MTP blocks and RoPE's sections.
static bool hparams(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    if (gguf_find_tensor(m->file, "blk.0.attn_qkv.weight"))
        return ft_err_set(err, "glm4moe file with fused Q/K/V projections (attn_qkv): not supported (ft reads "
                               "attn_q, attn_k and attn_v as llama.cpp's converter writes them)");
    int64_t gating, shared;
    model_key_int(m, "expert_gating_func", &gating);
    if (gating != 0 && gating != 1 && gating != 2)
        return ft_err_set(err, "key glm4moe.expert_gating_func = %d: only softmax (1) and sigmoid (2) are supported",
                          (int)gating);
    hp->gating = gating == 1 ? FT_GATING_SOFTMAX : FT_GATING_SIGMOID;
    model_key_int(m, "expert_shared_count", &shared);
    hp->n_ff_shexp = hp->n_ff_exp * (int)shared;
    return model_mtp_layers(m, err) && rope_sections(m, err);
}

// ft synth writes the shared expert's width as a count of routed experts.
static bool synth_check(const ft_synth_params *p, ft_err *err) {
    if (p->n_ff_shexp % p->n_ff_exp)
        return ft_err_set(err, "glm4moe needs --shared-ff (%d) a multiple of --ff (%d): its files give the shared "
                               "expert as a count of experts", p->n_ff_shexp, p->n_ff_exp);
    return true;
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    model_block_attention(m, f, il, (attn_opts){.qk_norm_if_present = true});
    if (m->layers[il].is_moe)
        model_block_moe(m, f, il);
    else
        model_block_dense_ffn(m, f, il);
}

const ft_arch ft_arch_glm4moe = {
    .name = "glm4moe",
    .keys = keys,
    .n_keys = FT_ARRAY_LEN(keys),
    .tensors = tensors,
    .n_tensors = FT_ARRAY_LEN(tensors),
    .fixed = {.rope.neox = true, .gating = FT_GATING_SIGMOID},
    .hparams = hparams,
    .synth_check = synth_check,
    .layer = layer,
};
