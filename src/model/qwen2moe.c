// qwen2moe.c: Qwen2 MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B).
//
// Every layer: GQA attention with optional Q/K/V biases and NeoX RoPE (no Q/K norm), then
// routed experts whose softmax top-k weights are NOT renormalised, plus a shared expert whose
// output is scaled by a sigmoid gate computed from the same input.
#include "model_impl.h"

static const ft_arch_key keys[] = {
    MODEL_KEYS_SIZES,
    MODEL_KEY_FEED_FORWARD_LENGTH(FT_SYNTH_FN(synth_ff_used_experts)),
    MODEL_KEYS_ATTENTION_EXPERTS,
    MODEL_KEY_HEAD_COUNT(FT_SYNTH(n_head)),
    MODEL_KEY_EXPERT_FEED_FORWARD_LENGTH,
    MODEL_KEY_EXPERT_SHARED_FEED_FORWARD_LENGTH,
    MODEL_KEY_EXPERT_WEIGHTS_SCALE(FT_NO_SYNTH),
    MODEL_KEYS_ROPE_SCALING_READ_ONLY,
};

static const ft_arch_tensor tensors[] = {
    MODEL_TENSOR_TOKEN_EMBD,
    MODEL_TENSORS_ATTENTION_QKV,
    MODEL_TENSORS_QKV_BIAS,
    MODEL_TENSOR_ATTN_OUTPUT,
    MODEL_TENSOR_FFN_NORM,
    MODEL_TENSORS_ROUTED_EXPERTS,
    MODEL_TENSOR_SHARED_EXPERT_GATE,
    MODEL_TENSORS_SHARED_EXPERT,
    MODEL_TENSOR_OUTPUT_NORM,
    MODEL_TENSOR_OUTPUT(FT_FAN_DIV(3.0f)),
};

// Expert widths left out of the file: feed_forward_length over the experts used for the
// routed ones, feed_forward_length itself for the shared one.
static bool hparams(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    if (hp->n_ff_exp == 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (hp->n_ff_exp < 1) return ft_err_set(err, "key qwen2moe.expert_feed_forward_length: missing or 0");
    if (hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->n_ff;
    if (hp->n_ff_shexp < 1) return ft_err_set(err, "key qwen2moe.expert_shared_feed_forward_length: missing or 0");
    return true;
}

// llama.cpp's qwen2moe expects attn_q and attn_output as wide as the embedding, whatever the
// heads and key_length say.
static bool synth_check(const ft_synth_params *p, ft_err *err) {
    if (p->n_head * p->head_dim != p->n_embd)
        return ft_err_set(err, "qwen2moe needs --heads x --head-dim (%d) = --embd (%d)", p->n_head * p->head_dim,
                          p->n_embd);
    return true;
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    model_block_attention(m, f, il, (attn_opts){.qk_norm = false});
    model_block_moe(m, f, il);
}

const ft_arch ft_arch_qwen2moe = {
    .name = "qwen2moe",
    .keys = keys,
    .n_keys = FT_ARRAY_LEN(keys),
    .tensors = tensors,
    .n_tensors = FT_ARRAY_LEN(tensors),
    .fixed = {.rope.neox = true, .gating = FT_GATING_SOFTMAX, .norm_w = false},
    .hparams = hparams,
    .synth_check = synth_check,
    .layer = layer,
};
