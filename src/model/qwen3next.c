// qwen3next.c: Qwen3-Next (Qwen3-Next-80B-A3B), the predecessor of qwen35moe.c with the same
// layers but three differences: plain NeoX RoPE over the first rope.dimension_count dims; beta
// and alpha in one projection (ssm_ba: per key head, its V heads' betas, then their alphas);
// V head h reads K head h / (time_step_rank / group_count). Files with the older fused
// q/k/v/z projection (ssm_in) are refused by name; fused gate/up experts (ffn_gate_up_exps) are
// read as qwen35moe's.
#include "model_impl.h"

static const ft_arch_key keys[] = {
    MODEL_KEYS_HYBRID_QWEN,
    MODEL_KEYS_LINEAR_ATTENTION,
    MODEL_KEYS_ROPE_SCALING_READ_ONLY,
};

static const ft_arch_tensor tensors[] = {
    MODEL_TENSORS_HYBRID_QWEN_LEAD,
    {"blk.%d.ssm_ba.weight", FT_LAYERS_RECURRENT, {FT_DIM_EMBD, FT_DIM_SSM_BA}, FT_WTYPE_ANY_F32, 0,
     LAYER(ssm_ba), FT_FAN(1.0f)},
    MODEL_TENSORS_HYBRID_QWEN_TAIL,
};

static bool hparams(ft_model *m, ft_err *err) {
    if (m->file && gguf_find_tensor(m->file, "blk.0.ssm_in.weight"))
        return ft_err_set(err, "qwen3next file with the older fused ssm_in projection: not supported; convert "
                               "the model again with a current llama.cpp convert_hf_to_gguf.py");
    if (!model_linear_attention_hparams(m, err)) return false;
    m->hp.ssm_k_grouped = true;
    m->hp.rope_swa = m->hp.rope;
    return true;
}

const ft_arch ft_arch_qwen3next = {
    .name = "qwen3next",
    .keys = keys,
    .n_keys = FT_ARRAY_LEN(keys),
    .tensors = tensors,
    .n_tensors = FT_ARRAY_LEN(tensors),
    .fixed = {.rope.neox = true, .gating = FT_GATING_SOFTMAX, .norm_w = true},
    .hparams = hparams,
    .layer = model_layer_hybrid_qwen,
};
