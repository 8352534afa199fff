// qwen2moe.c: Qwen2 MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B).
//
// Every layer: GQA attention with optional Q/K/V biases and NeoX RoPE (no Q/K norm), then
// routed experts whose softmax top-k weights are NOT renormalised, plus a shared expert whose
// output is scaled by a sigmoid gate computed from the same input.
#include "model_impl.h"

static bool load(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    if (!model_hp_common(m, err)) return false;
    hp->rope.neox = hp->rope_swa.neox = true;
    if (hp->n_expert < 1) return ft_err_set(err, "key qwen2moe.expert_count: missing or 0");
    if (hp->n_ff_exp == 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (hp->n_ff_exp < 1) return ft_err_set(err, "key qwen2moe.expert_feed_forward_length: missing or 0");
    if (hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->n_ff;
    if (hp->n_ff_shexp < 1) return ft_err_set(err, "key qwen2moe.expert_shared_feed_forward_length: missing or 0");
    hp->n_ff = 0;
    hp->gating = FT_GATING_SOFTMAX;
    hp->norm_w = false;
    if (!model_bind_embd_output(m, err)) return false;
    int64_t E = hp->n_embd, S = hp->n_ff_shexp;
    for (int il = 0; il < hp->n_layer; il++) {
        ft_layer *L = &m->layers[il];
        if (!model_bind_attention(m, il, false, err) || !model_bind_experts(m, il, hp->n_ff_exp, err) ||
            !model_bind(m, &L->gate_inp_shexp, 0, 1, E, 0, 0, err, "blk.%d.ffn_gate_inp_shexp.weight", il) ||
            !model_bind(m, &L->gate_shexp, 0, 2, E, S, 0, err, "blk.%d.ffn_gate_shexp.weight", il) ||
            !model_bind(m, &L->up_shexp, 0, 2, E, S, 0, err, "blk.%d.ffn_up_shexp.weight", il) ||
            !model_bind(m, &L->down_shexp, 0, 2, S, E, 0, err, "blk.%d.ffn_down_shexp.weight", il))
            return false;
    }
    return true;
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    model_block_attention(m, f, il, (attn_opts){.qk_norm = false});
    model_block_moe(m, f, il);
}

const ft_arch ft_arch_qwen2moe = {"qwen2moe", load, layer};
