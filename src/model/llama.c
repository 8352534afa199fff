// llama.c: the llama architecture with experts (Mixtral 8x7B, 8x22B).
//
// Every layer: GQA attention with normal (adjacent-pair) RoPE, then routed experts: softmax
// router, top-k, weights renormalised. Experts are feed_forward_length wide. ft runs llama
// files only with expert_count > 0: the product is for MoE models.
#include "model_impl.h"

static bool load(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    if (!model_hp_common(m, err)) return false;
    hp->rope.neox = hp->rope_swa.neox = false;
    if (hp->rope.n_rot != hp->head_dim)
        return ft_err_set(err, "key llama.rope.dimension_count %d: must equal the head size %d", hp->rope.n_rot,
                          hp->head_dim);
    if (hp->n_expert < 1)
        return ft_err_set(err, "key llama.expert_count: missing or 0 (ft runs llama files with experts only)");
    if (hp->n_ff < 1) return ft_err_set(err, "key llama.feed_forward_length: missing or 0");
    hp->n_ff_exp = hp->n_ff;
    hp->gating = FT_GATING_SOFTMAX;
    hp->norm_w = true;
    if (!model_bind_embd_output(m, err)) return false;
    for (int il = 0; il < hp->n_layer; il++)
        if (!model_bind_attention(m, il, false, err) || !model_bind_experts(m, il, hp->n_ff_exp, err)) return false;
    hp->n_ff = 0;
    return true;
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    model_block_attention(m, f, il, (attn_opts){.qk_norm = false});
    model_block_moe(m, f, il);
}

const ft_arch ft_arch_llama = {"llama", load, layer};
