// qwen3moe.c: Qwen3 MoE (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder).
//
// Every layer: GQA attention with per-head RMSNorm of Q and K before NeoX RoPE, then routed
// experts: softmax router, top-k, weights renormalised to sum to 1. No shared expert.
#include "model_impl.h"

static bool load(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    if (!model_hp_common(m, err)) return false;
    hp->rope.neox = hp->rope_swa.neox = true;
    if (hp->n_expert < 1) return ft_err_set(err, "key qwen3moe.expert_count: missing or 0");
    if (hp->n_ff_exp == 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (hp->n_ff_exp < 1) return ft_err_set(err, "key qwen3moe.expert_feed_forward_length: missing or 0");
    hp->n_ff = 0;
    hp->gating = FT_GATING_SOFTMAX;
    hp->norm_w = true;
    if (!model_bind_embd_output(m, err)) return false;
    for (int il = 0; il < hp->n_layer; il++)
        if (!model_bind_attention(m, il, true, err) || !model_bind_experts(m, il, hp->n_ff_exp, err)) return false;
    return true;
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    model_block_attention(m, f, il, (attn_opts){.qk_norm = true});
    model_block_moe(m, f, il);
}

const ft_arch ft_arch_qwen3moe = {"qwen3moe", load, layer};
