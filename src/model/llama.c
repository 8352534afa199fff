// llama.c: the llama architecture with experts (Mixtral 8x7B, 8x22B).
//
// Every layer: GQA attention with normal (adjacent-pair) RoPE, then routed experts: softmax
// router, top-k, weights renormalised. Experts are feed_forward_length wide. ft runs llama
// files only with expert_count > 0: the product is for MoE models.
#include "model_impl.h"

static const ft_arch_key keys[] = {
    MODEL_KEY_CONTEXT_LENGTH,
    MODEL_KEY_EMBEDDING_LENGTH,
    MODEL_KEY_BLOCK_COUNT,
    MODEL_KEY_FEED_FORWARD_LENGTH(FT_SYNTH(n_ff_exp)),
    MODEL_KEY_HEAD_COUNT_KV,
    MODEL_KEY_KEY_LENGTH,
    MODEL_KEY_VALUE_LENGTH,
    MODEL_KEY_RMS_EPS,
    MODEL_KEY_ROPE_FREQ_BASE,
    MODEL_KEY_EXPERT_COUNT,
    MODEL_KEY_EXPERT_USED_COUNT,
    MODEL_KEY_ROPE_DIMENSION_COUNT,
    MODEL_KEY_HEAD_COUNT(FT_SYNTH(n_head)),
    MODEL_KEY_EXPERT_WEIGHTS_SCALE(FT_NO_SYNTH),
    MODEL_KEY_ROPE_SCALING_TYPE(FT_NO_SYNTH),
    MODEL_KEY_ROPE_SCALING_FACTOR(FT_NO_SYNTH),
    MODEL_KEY_ROPE_SCALING_ATTN_FACTOR,
    MODEL_KEY_ROPE_SCALE_LINEAR,
    MODEL_KEY_ROPE_SCALING_ORIG_CTX(FT_NO_SYNTH),
};

static const ft_arch_tensor tensors[] = {
    {"token_embd.weight", FT_LAYERS_NONE, {FT_DIM_EMBD, FT_DIM_VOCAB},
     FT_WTYPE_ANY, 0, MODEL(tok_embd), FT_STD(1.0f)},
    {"blk.%d.attn_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD},
     FT_WTYPE_F32, 0, LAYER(attn_norm), FT_NORM},
    {"blk.%d.attn_q.weight", FT_LAYERS_ALL, {FT_DIM_EMBD, FT_DIM_Q},
     FT_WTYPE_ANY, 0, LAYER(wq), FT_FAN(1.0f)},
    {"blk.%d.attn_k.weight", FT_LAYERS_ALL, {FT_DIM_EMBD, FT_DIM_KV},
     FT_WTYPE_ANY, 0, LAYER(wk), FT_FAN(1.0f)},
    {"blk.%d.attn_v.weight", FT_LAYERS_ALL, {FT_DIM_EMBD, FT_DIM_KV},
     FT_WTYPE_ANY, 0, LAYER(wv), FT_FAN(1.0f)},
    // Mixtral has no attention biases; other llama files may
    {"blk.%d.attn_q.bias", FT_LAYERS_ALL, {FT_DIM_Q},
     FT_WTYPE_F32, FT_TENSOR_OPTIONAL | FT_TENSOR_NO_SYNTH, LAYER(bq), FT_STD(0.1f)},
    {"blk.%d.attn_k.bias", FT_LAYERS_ALL, {FT_DIM_KV},
     FT_WTYPE_F32, FT_TENSOR_OPTIONAL | FT_TENSOR_NO_SYNTH, LAYER(bk), FT_STD(0.1f)},
    {"blk.%d.attn_v.bias", FT_LAYERS_ALL, {FT_DIM_KV},
     FT_WTYPE_F32, FT_TENSOR_OPTIONAL | FT_TENSOR_NO_SYNTH, LAYER(bv), FT_STD(0.1f)},
    {"blk.%d.attn_output.weight", FT_LAYERS_ALL, {FT_DIM_Q, FT_DIM_EMBD},
     FT_WTYPE_ANY, 0, LAYER(wo), FT_FAN(1.0f)},
    {"blk.%d.ffn_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD},
     FT_WTYPE_F32, 0, LAYER(ffn_norm), FT_NORM},
    {"blk.%d.ffn_gate_inp.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_EXPERT},
     FT_WTYPE_ANY_F32, 0, LAYER(router), FT_FAN(1.5f)},
    {"blk.%d.ffn_gate_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP, FT_DIM_EXPERT},
     FT_WTYPE_EXPERT, 0, LAYER(gate_exps), FT_FAN(1.0f)},
    {"blk.%d.ffn_up_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP, FT_DIM_EXPERT},
     FT_WTYPE_EXPERT, 0, LAYER(up_exps), FT_FAN(1.0f)},
    {"blk.%d.ffn_down_exps.weight", FT_LAYERS_MOE, {FT_DIM_FF_EXP, FT_DIM_EMBD, FT_DIM_EXPERT},
     FT_WTYPE_EXPERT_DOWN, 0, LAYER(down_exps), FT_FAN(1.0f)},
    {"output_norm.weight", FT_LAYERS_NONE, {FT_DIM_EMBD},
     FT_WTYPE_F32, 0, MODEL(output_norm), FT_NORM},
    {"output.weight", FT_LAYERS_NONE, {FT_DIM_EMBD, FT_DIM_VOCAB},
     FT_WTYPE_ANY, FT_TENSOR_OPTIONAL, MODEL(output), FT_FAN_DIV(3.0f)},
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
