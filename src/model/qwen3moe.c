// qwen3moe.c: Qwen3 MoE (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder).
//
// Every layer: GQA attention with per-head RMSNorm of Q and K before NeoX RoPE, then routed
// experts: softmax router, top-k, weights renormalised to sum to 1. No shared expert.
#include "model_impl.h"

static const ft_arch_key keys[] = {
    MODEL_KEYS_SIZES,
    MODEL_KEY_FEED_FORWARD_LENGTH(FT_SYNTH_FN(synth_ff_used_experts)),
    MODEL_KEYS_ATTENTION_EXPERTS,
    MODEL_KEY_HEAD_COUNT(FT_SYNTH(n_head)),
    MODEL_KEY_EXPERT_FEED_FORWARD_LENGTH,
    MODEL_KEY_EXPERT_WEIGHTS_SCALE(FT_NO_SYNTH),
    MODEL_KEYS_ROPE_SCALING_READ_ONLY,
};

static const ft_arch_tensor tensors[] = {
    MODEL_TENSOR_TOKEN_EMBD,
    MODEL_TENSORS_ATTENTION_QKV,
    MODEL_TENSORS_QKV_BIAS_OPTIONAL,
    MODEL_TENSOR_ATTN_OUTPUT,
    MODEL_TENSORS_QK_NORM,
    MODEL_TENSOR_FFN_NORM,
    MODEL_TENSORS_ROUTED_EXPERTS,
    MODEL_TENSOR_OUTPUT_NORM,
    MODEL_TENSOR_OUTPUT(FT_FAN(3.0f)),
};

// The expert width: expert_feed_forward_length, or feed_forward_length (all the experts a
// token uses) over the experts used when the file leaves it out.
static bool hparams(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    if (hp->n_ff_exp == 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (hp->n_ff_exp < 1) return ft_err_set(err, "key qwen3moe.expert_feed_forward_length: missing or 0");
    return true;
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    model_block_attention(m, f, il, (attn_opts){.qk_norm = true});
    model_block_moe(m, f, il);
}

const ft_arch ft_arch_qwen3moe = {
    .name = "qwen3moe",
    .keys = keys,
    .n_keys = FT_ARRAY_LEN(keys),
    .tensors = tensors,
    .n_tensors = FT_ARRAY_LEN(tensors),
    .fixed = {.rope.neox = true, .gating = FT_GATING_SOFTMAX, .norm_w = true},
    .hparams = hparams,
    .layer = layer,
};
