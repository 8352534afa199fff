// laguna.c: poolside Laguna (XS.2, S.2, M.1).
//
// Layer il: GQA attention with per-head Q/K RMSNorm and NeoX RoPE, its query-head count read
// per layer; with a sliding window, 3 of every 4 layers (all but il % 4 == 0) attend only to
// the last n_swa positions and use their own RoPE (base, rotary dims, no YaRN) while full
// layers use YaRN when the file asks. The attention output is multiplied by softplus(g) where
// g is projected from the block's normed input, per head or per element (the gate tensor's
// width says which). FFN: dense in the first n_dense_lead layers; else routed experts with a
// sigmoid router, a score-correction bias used only to select, weights renormalised and
// scaled, plus an always-on shared expert.
#include "model_impl.h"

#include <stdio.h>

static bool load(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    if (!model_hp_common(m, err)) return false;
    hp->rope.neox = true;
    if (hp->n_expert < 1) return ft_err_set(err, "key laguna.expert_count: missing or 0");
    if (!model_hp_int(m, "leading_dense_block_count", &hp->n_dense_lead, true, 0, hp->n_layer, err) ||
        !model_hp_int(m, "expert_feed_forward_length", &hp->n_ff_exp, true, 1, 1 << 20, err))
        return false;
    int gating = 2;
    if (!model_hp_int(m, "expert_gating_func", &gating, false, 0, 4, err)) return false;
    if (gating != 0 && gating != 1 && gating != 2)
        return ft_err_set(err, "key laguna.expert_gating_func = %d: only softmax (1) and sigmoid (2) are supported", gating);
    hp->gating = gating == 1 ? FT_GATING_SOFTMAX : FT_GATING_SIGMOID;
    hp->norm_w = false;
    if (!model_hp_bool(m, "expert_weights_norm", &hp->norm_w, err)) return false;
    if (hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->n_ff_exp;
    if (hp->n_dense_lead > 0 && hp->n_ff < 1) return ft_err_set(err, "key laguna.feed_forward_length: missing or 0");

    // sliding window: optional; with it, layer il is full when il % pattern == 0
    hp->n_swa = 0;
    int pattern = 4;
    if (!model_hp_int(m, "attention.sliding_window", &hp->n_swa, false, 0, 1 << 26, err) ||
        !model_hp_int(m, "attention.sliding_window_pattern", &pattern, false, 1, 4096, err))
        return false;
    ft_rope_params *rs = &hp->rope_swa;
    *rs = hp->rope;
    rs->freq_scale = 1.0f;
    rs->ext_factor = 0.0f;
    rs->attn_factor = 1.0f;
    rs->beta_fast = rs->beta_slow = 0.0f;
    rs->n_ctx_orig = hp->n_ctx_train;
    if (hp->n_swa > 0) {
        if (!model_hp_float(m, "rope.freq_base_swa", &rs->freq_base, false, err) ||
            !model_hp_int(m, "rope.dimension_count_swa", &rs->n_rot, false, 2, hp->head_dim, err))
            return false;
        if (rs->n_rot % 2) return ft_err_set(err, "key laguna.rope.dimension_count_swa %d: must be even", rs->n_rot);
        if (!(rs->freq_base > 0)) return ft_err_set(err, "key laguna.rope.freq_base_swa: must be positive");
    }

    if (!model_bind_embd_output(m, err)) return false;
    int64_t E = hp->n_embd;
    for (int il = 0; il < hp->n_layer; il++) {
        ft_layer *L = &m->layers[il];
        L->is_swa = hp->n_swa > 0 && il % pattern != 0;
        if (!model_bind_attention(m, il, true, err)) return false;
        // the gate's width says per head or per element
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.attn_gate.weight", il);
        const gguf_tensor *g = gguf_find_tensor(m->file, name);
        if (!g) return ft_err_set(err, "tensor %s: missing", name);
        int64_t per_head = L->n_head, per_elem = (int64_t)L->n_head * hp->head_dim;
        if (g->ne[1] != per_head && g->ne[1] != per_elem)
            return ft_err_set(err, "tensor %s: %lld outputs, expected %lld (per head) or %lld (per element)", name,
                              (long long)g->ne[1], (long long)per_head, (long long)per_elem);
        if (!model_bind(m, &L->attn_gate, 0, 2, E, g->ne[1], 0, err, "%s", name)) return false;
        if (il < hp->n_dense_lead) {
            if (!model_bind(m, &L->ffn_norm, BIND_F32, 1, E, 0, 0, err, "blk.%d.ffn_norm.weight", il) ||
                !model_bind(m, &L->ffn_gate, 0, 2, E, hp->n_ff, 0, err, "blk.%d.ffn_gate.weight", il) ||
                !model_bind(m, &L->ffn_up, 0, 2, E, hp->n_ff, 0, err, "blk.%d.ffn_up.weight", il) ||
                !model_bind(m, &L->ffn_down, 0, 2, hp->n_ff, E, 0, err, "blk.%d.ffn_down.weight", il))
                return false;
        } else {
            int64_t S = hp->n_ff_shexp;
            if (!model_bind_experts(m, il, hp->n_ff_exp, err) ||
                !model_bind(m, &L->sel_bias, BIND_F32, 1, hp->n_expert, 0, 0, err, "blk.%d.exp_probs_b.bias", il) ||
                !model_bind(m, &L->gate_shexp, 0, 2, E, S, 0, err, "blk.%d.ffn_gate_shexp.weight", il) ||
                !model_bind(m, &L->up_shexp, 0, 2, E, S, 0, err, "blk.%d.ffn_up_shexp.weight", il) ||
                !model_bind(m, &L->down_shexp, 0, 2, S, E, 0, err, "blk.%d.ffn_down_shexp.weight", il))
                return false;
        }
    }
    if (hp->n_dense_lead == 0) hp->n_ff = 0;
    return true;
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    model_block_attention(m, f, il, (attn_opts){.qk_norm = true});
    if (m->layers[il].is_moe)
        model_block_moe(m, f, il);
    else
        model_block_dense_ffn(m, f, il);
}

const ft_arch ft_arch_laguna = {"laguna", load, layer};
