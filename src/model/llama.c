// llama.c: the llama architecture with experts (Mixtral 8x7B, 8x22B).
//
// Every layer: GQA attention with normal (adjacent-pair) RoPE, then routed experts: softmax
// router, top-k, weights renormalised. Experts are feed_forward_length wide. ft runs llama
// files only with expert_count > 0: the product is for MoE models.
#include "model_impl.h"

static const ft_arch_key keys[] = {
    MODEL_KEYS_SIZES,
    MODEL_KEY_FEED_FORWARD_LENGTH(FT_SYNTH(n_ff_exp)),
    MODEL_KEYS_ATTENTION_EXPERTS,
    MODEL_KEY_HEAD_COUNT(FT_SYNTH(n_head)),
    MODEL_KEY_EXPERT_WEIGHTS_SCALE(FT_NO_SYNTH),
    MODEL_KEYS_ROPE_SCALING_READ_ONLY,
};

static const ft_arch_tensor tensors[] = {
    MODEL_TENSOR_TOKEN_EMBD,
    MODEL_TENSORS_ATTENTION_QKV,
    MODEL_TENSORS_QKV_BIAS_OPTIONAL,
    MODEL_TENSOR_ATTN_OUTPUT,
    MODEL_TENSOR_FFN_NORM,
    MODEL_TENSORS_ROUTED_EXPERTS,
    MODEL_TENSOR_OUTPUT_NORM,
    MODEL_TENSOR_OUTPUT(FT_FAN_DIV(3.0f)),
};

// The experts are feed_forward_length wide; llama.cpp's llama rotates whole heads (it asserts
// rope.dimension_count is the head size).
static bool hparams(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    if (hp->rope.n_rot != hp->head_dim)
        return ft_err_set(err, "key llama.rope.dimension_count %d: must equal the head size %d", hp->rope.n_rot,
                          hp->head_dim);
    if (hp->n_ff < 1) return ft_err_set(err, "key llama.feed_forward_length: missing or 0");
    hp->n_ff_exp = hp->n_ff;
    return true;
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    model_block_attention(m, f, il, (attn_opts){.qk_norm = false});
    model_block_moe(m, f, il);
}

const ft_arch ft_arch_llama = {
    .name = "llama",
    .note = "with experts",
    .keys = keys,
    .n_keys = FT_ARRAY_LEN(keys),
    .tensors = tensors,
    .n_tensors = FT_ARRAY_LEN(tensors),
    .fixed = {.rope.neox = false, .gating = FT_GATING_SOFTMAX, .norm_w = true},
    .hparams = hparams,
    .layer = layer,
};
