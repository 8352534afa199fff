// blocks.c: the pieces of a transformer layer, shared by the architecture files and written
// only against the backend ops (so they run wherever the tensors are placed).
#include "model_impl.h"

#include <math.h>

// The batch's segments: f->seg, or the single sequence the shorthand fields describe.
static const ft_segment *segments(const ft_forward *f, ft_segment *one, int *n_seg) {
    if (f->n_seg > 0) {
        *n_seg = f->n_seg;
        return f->seg;
    }
    *one = (ft_segment){.kv = f->kv, .pos0 = f->pos0, .row0 = 0, .n_tok = f->n_tok};
    *n_seg = 1;
    return one;
}

void model_block_attention(const ft_model *m, ft_forward *f, int il, attn_opts o) {
    const ft_hparams *hp = &m->hp;
    const ft_layer *L = &f->w->layers[il];
    ft_backend *be = f->be;
    const ft_backend_ops *ops = be->ops;
    int n = f->n_tok, hd = L->head_dim, nh = L->n_head, nkv = L->n_head_kv, src = L->kv_from;
    size_t qw = (size_t)nh * hd, kvw = (size_t)nkv * hd;
    bool own_kv = src == il; // else it reads layer src's cache (gemma4's shared KV)

    // row-wise over the whole batch: projections, biases, Q/K/V norms
    ops->rms_norm(be, f->x, &L->attn_norm, f->xn, n, hp->n_embd, hp->rms_eps);
    if (o.q_gated) {
        ops->matmul(be, &L->wq, f->xn, f->wide, n);
        ops->split_heads(be, f->wide, f->q, f->gate, n, nh, hd);
    } else {
        ops->matmul(be, &L->wq, f->xn, f->q, n);
    }
    if (own_kv) {
        ops->matmul(be, &L->wk, f->xn, f->k, n);
        if (ft_tensor_present(&L->wv)) ops->matmul(be, &L->wv, f->xn, f->v, n);
        else FT_ASSERT(o.v_norm); // V from K's projection, normed into its own buffer below
    }
    if (ft_tensor_present(&L->bq)) ops->add_bias(be, f->q, &L->bq, n, nh * hd);
    if (own_kv && ft_tensor_present(&L->bk)) ops->add_bias(be, f->k, &L->bk, n, nkv * hd);
    if (own_kv && ft_tensor_present(&L->bv)) ops->add_bias(be, f->v, &L->bv, n, nkv * hd);
    if (o.qk_norm || (o.qk_norm_if_present && ft_tensor_present(&L->q_norm)))
        ops->rms_norm(be, f->q, &L->q_norm, f->q, n * nh, hd, hp->rms_eps);
    // (before K's own norm: without attn_v, V is K's projection)
    if (own_kv && o.v_norm)
        ops->rms_norm(be, ft_tensor_present(&L->wv) ? f->v : f->k, NULL, f->v, n * nkv, hd, hp->rms_eps);
    if (own_kv && (o.qk_norm || (o.qk_norm_if_present && ft_tensor_present(&L->k_norm))))
        ops->rms_norm(be, f->k, &L->k_norm, f->k, n * nkv, hd, hp->rms_eps);

    // per sequence: positions, its cache, attention over its own keys; the decode rows of
    // several sequences (f->seqs) in one call of each op
    ft_rope_params rp = L->is_swa ? hp->rope_swa : hp->rope;
    if (!L->is_swa && ft_tensor_present(&f->w->rope_freqs)) rp.freq_factors = &f->w->rope_freqs;
    ft_segment one;
    int n_seg;
    const ft_segment *seg = segments(f, &one, &n_seg);
    for (int s = 0; s < n_seg; s++) {
        const ft_segment *sg = &seg[s];
        const ft_seq_rows *seqs = f->seqs && s == f->seqs_seg0 ? f->seqs : NULL;
        int ns = seqs ? seqs->n : sg->n_tok;
        float *q = f->q + (size_t)sg->row0 * qw, *k = f->k + (size_t)sg->row0 * kvw;
        float *v = f->v + (size_t)sg->row0 * kvw, *attn = f->attn + (size_t)sg->row0 * qw;
        if (seqs) {
            ops->rope_seqs(be, q, nh, hd, seqs, &rp);
            if (own_kv) ops->rope_seqs(be, k, nkv, hd, seqs, &rp);
        } else {
            ops->rope(be, q, ns, nh, hd, sg->pos0, &rp);
            if (own_kv) ops->rope(be, k, ns, nkv, hd, sg->pos0, &rp);
        }
        // (the rotations are the store's, the same for every sequence on it)
        int rot_k = ft_kv_rot_k(sg->kv, src), rot_v = ft_kv_rot_v(sg->kv, src);
        if (rot_k) {
            ops->hadamard(be, q, ns, (int)qw, rot_k);
            if (own_kv) ops->hadamard(be, k, ns, (int)kvw, rot_k);
        }
        if (rot_v && own_kv) ops->hadamard(be, v, ns, (int)kvw, rot_v);
        const int32_t *blocks = ft_kv_blocks(sg->kv);
        if (own_kv && seqs) {
            ops->set_rows_seqs(be, ft_kv_k(sg->kv, il), seqs, k);
            ops->set_rows_seqs(be, ft_kv_v(sg->kv, il), seqs, v);
        } else if (own_kv) {
            ops->set_rows(be, ft_kv_k(sg->kv, il), blocks, sg->pos0, k, ns);
            ops->set_rows(be, ft_kv_v(sg->kv, il), blocks, sg->pos0, v, ns);
        }
        ft_attn_params ap = {
            .q = q, .out = attn, .k_cache = ft_kv_k(sg->kv, src), .v_cache = ft_kv_v(sg->kv, src), .blocks = blocks,
            .n_tok = ns, .n_chunk = seqs ? 0 : sg->n_chunk, .pos0 = seqs ? 0 : sg->pos0, .n_head = nh, .n_head_kv = nkv,
            .head_dim = hd, .window = L->is_swa ? hp->n_swa : 0, .scale = o.scale ? o.scale : 1.0f / sqrtf((float)hd),
            .sinks = &L->sinks, .seqs = seqs,
        };
        ops->attention(be, &ap);
        if (rot_v) ops->hadamard(be, attn, ns, (int)qw, rot_v);
        if (seqs) s += seqs->n - 1; // (the segments it covered)
    }

    // row-wise again: output gate, output projection, post-norm, residual
    if (o.q_gated) {
        ops->gate_mul(be, f->attn, f->gate, n, nh, hd, (int)qw, FT_ACT_SIGMOID);
    } else if (ft_tensor_present(&L->attn_gate)) {
        // laguna: the gate is projected from the block's normed input, not the attention output
        ops->matmul(be, &L->attn_gate, f->xn, f->gate, n);
        ops->gate_mul(be, f->attn, f->gate, n, nh, hd, (int)L->attn_gate.ne[1], FT_ACT_SOFTPLUS);
    }
    ops->matmul(be, &L->wo, f->attn, f->out, n);
    if (ft_tensor_present(&L->bo)) ops->add_bias(be, f->out, &L->bo, n, hp->n_embd);
    if (o.post_norm) ops->rms_norm(be, f->out, &L->attn_post_norm, f->out, n, hp->n_embd, hp->rms_eps);
    ops->add(be, f->x, f->out, (size_t)n * hp->n_embd);
}

void model_block_delta_net(const ft_model *m, ft_forward *f, int il) {
    const ft_hparams *hp = &m->hp;
    const ft_layer *L = &f->w->layers[il];
    ft_backend *be = f->be;
    const ft_backend_ops *ops = be->ops;
    int n = f->n_tok, hd = hp->ssm_head_dim, H = hp->ssm_n_v_heads;
    size_t C = (size_t)L->lin_qkv.ne[1], V = (size_t)H * hd;
    float *alpha = f->ab, *beta = f->ab + (size_t)n * H;

    // row-wise: the projections
    ops->rms_norm(be, f->x, &L->attn_norm, f->xn, n, hp->n_embd, hp->rms_eps);
    ops->matmul(be, &L->lin_qkv, f->xn, f->wide, n);
    ops->matmul(be, &L->lin_z, f->xn, f->gate, n);
    if (ft_tensor_present(&L->ssm_ba)) {
        // qwen3next: per key head, its V heads' betas, then their alphas
        float *ba = f->ab + (size_t)2 * n * H;
        ops->matmul(be, &L->ssm_ba, f->xn, ba, n);
        ops->split_heads(be, ba, beta, alpha, n, hp->ssm_n_k_heads, H / hp->ssm_n_k_heads);
    } else {
        ops->matmul(be, &L->ssm_alpha, f->xn, alpha, n);
        ops->matmul(be, &L->ssm_beta, f->xn, beta, n);
    }

    // per sequence: the conv and the delta rule on its own state
    ft_segment one;
    int n_seg;
    const ft_segment *seg = segments(f, &one, &n_seg);
    for (int s = 0; s < n_seg; s++) {
        const ft_segment *sg = &seg[s];
        ft_delta_params dp = {
            .qkv = f->wide + (size_t)sg->row0 * C, .alpha = alpha + (size_t)sg->row0 * H,
            .beta = beta + (size_t)sg->row0 * H, .conv_w = &L->ssm_conv1d, .dt = &L->ssm_dt, .a = &L->ssm_a,
            .conv_state = ft_kv_conv(sg->kv, il), .state = ft_kv_state(sg->kv, il),
            .out = f->attn + (size_t)sg->row0 * V, .n_tok = sg->n_tok, .pos0 = sg->pos0,
            .n_k_heads = hp->ssm_n_k_heads, .n_v_heads = H, .head_dim = hd, .d_conv = hp->ssm_d_conv,
            .k_grouped = hp->ssm_k_grouped, .eps = hp->rms_eps,
        };
        ops->delta_net(be, &dp);
    }

    // row-wise: the gated norm per head, the output projection, the residual
    ops->rms_norm(be, f->attn, &L->ssm_norm, f->attn, n * H, hd, hp->rms_eps);
    ops->gate_mul(be, f->attn, f->gate, n, H, hd, (int)V, FT_ACT_SILU);
    ops->matmul(be, &L->ssm_out, f->attn, f->out, n);
    ops->add(be, f->x, f->out, (size_t)n * hp->n_embd);
}

int model_next_moe_block(const ft_model *m, const ft_forward *f, int il) {
    int next = il + 1; // the trunk only: MTP blocks never run
    while (next < m->hp.n_layer && !ft_tensor_present(&f->w->layers[next].router)) next++;
    return next < m->hp.n_layer ? next : -1;
}

void model_block_moe(const ft_model *m, ft_forward *f, int il) {
    const ft_hparams *hp = &m->hp;
    const ft_layer *L = &f->w->layers[il];
    ft_backend *be = f->be;
    const ft_backend_ops *ops = be->ops;
    int n = f->n_tok;

    ops->rms_norm(be, f->x, &L->ffn_norm, f->xn, n, hp->n_embd, hp->rms_eps);
    int next = model_next_moe_block(m, f, il);
    const ft_layer *N = next >= 0 ? &f->w->layers[next] : NULL;
    ft_moe_params mp = {
        .layer = il, .router = &L->router, .router_bias = &L->router_b, .sel_bias = &L->sel_bias,
        .gate_exps = &L->gate_exps, .up_exps = &L->up_exps, .down_exps = &L->down_exps,
        .gate_bias = &L->gate_exps_b, .up_bias = &L->up_exps_b, .down_bias = &L->down_exps_b, .act = hp->glu,
        .n_expert = hp->n_expert,
        .n_expert_used = hp->n_expert_used, .gating = hp->gating, .norm_w = hp->norm_w,
        .w_scale = hp->w_scale, .place = moe_placement_expert, .place_ctx = f->place,
        .next_layer = next, .next_router = N ? &N->router : NULL, .next_sel_bias = N ? &N->sel_bias : NULL,
    };
    ops->moe_ffn(be, &mp, f->xn, f->out, n);
    if (ft_tensor_present(&L->gate_shexp)) {
        ops->ffn(be, &L->gate_shexp, &L->up_shexp, &L->down_shexp, f->xn, f->out2, n, FT_GLU_SILU);
        if (ft_tensor_present(&L->gate_inp_shexp))
            ops->sigmoid_gate_add(be, &L->gate_inp_shexp, f->xn, f->out2, f->out, n, hp->n_embd);
        else
            ops->add(be, f->out, f->out2, (size_t)n * hp->n_embd);
    }
    ops->add(be, f->x, f->out, (size_t)n * hp->n_embd);
}

void model_block_dense_ffn(const ft_model *m, ft_forward *f, int il) {
    const ft_hparams *hp = &m->hp;
    const ft_layer *L = &f->w->layers[il];
    ft_backend *be = f->be;
    be->ops->rms_norm(be, f->x, &L->ffn_norm, f->xn, f->n_tok, hp->n_embd, hp->rms_eps);
    be->ops->ffn(be, &L->ffn_gate, &L->ffn_up, &L->ffn_down, f->xn, f->out, f->n_tok, FT_GLU_SILU);
    be->ops->add(be, f->x, f->out, (size_t)f->n_tok * hp->n_embd);
}

void model_layer_hybrid_qwen(const ft_model *m, ft_forward *f, int il) {
    if (m->layers[il].is_recurrent)
        model_block_delta_net(m, f, il);
    else
        model_block_attention(m, f, il, (attn_opts){.qk_norm = true, .q_gated = true});
    model_block_moe(m, f, il);
}
