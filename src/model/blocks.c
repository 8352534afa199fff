// blocks.c: the pieces of a transformer layer, shared by the architecture files and written
// only against the backend ops (so they run wherever the tensors are placed).
#include "model_impl.h"

#include <math.h>

void model_block_attention(const ft_model *m, ft_forward *f, int il, attn_opts o) {
    const ft_hparams *hp = &m->hp;
    const ft_layer *L = &m->layers[il];
    ft_backend *be = f->be;
    const ft_backend_ops *ops = be->ops;
    int n = f->n_tok, hd = hp->head_dim, nh = L->n_head, nkv = hp->n_head_kv;

    ops->rms_norm(be, f->x, &L->attn_norm, f->xn, n, hp->n_embd, hp->rms_eps);
    ops->matmul(be, &L->wq, f->xn, f->q, n);
    ops->matmul(be, &L->wk, f->xn, f->k, n);
    ops->matmul(be, &L->wv, f->xn, f->v, n);
    if (ft_tensor_present(&L->bq)) ops->add_bias(be, f->q, &L->bq, n, nh * hd);
    if (ft_tensor_present(&L->bk)) ops->add_bias(be, f->k, &L->bk, n, nkv * hd);
    if (ft_tensor_present(&L->bv)) ops->add_bias(be, f->v, &L->bv, n, nkv * hd);
    if (o.qk_norm) {
        ops->rms_norm(be, f->q, &L->q_norm, f->q, n * nh, hd, hp->rms_eps);
        ops->rms_norm(be, f->k, &L->k_norm, f->k, n * nkv, hd, hp->rms_eps);
    }
    const ft_rope_params *rp = L->is_swa ? &hp->rope_swa : &hp->rope;
    ops->rope(be, f->q, n, nh, hd, f->pos0, rp);
    ops->rope(be, f->k, n, nkv, hd, f->pos0, rp);
    int rot_k = ft_kv_rot_k(f->kv), rot_v = ft_kv_rot_v(f->kv);
    if (rot_k) {
        ops->hadamard(be, f->q, n, nh * hd, rot_k);
        ops->hadamard(be, f->k, n, nkv * hd, rot_k);
    }
    if (rot_v) ops->hadamard(be, f->v, n, nkv * hd, rot_v);
    ops->set_rows(be, ft_kv_k(f->kv, il), f->pos0, f->k, n);
    ops->set_rows(be, ft_kv_v(f->kv, il), f->pos0, f->v, n);

    ft_attn_params ap = {
        .q = f->q, .out = f->attn, .k_cache = ft_kv_k(f->kv, il), .v_cache = ft_kv_v(f->kv, il),
        .n_tok = n, .pos0 = f->pos0, .n_head = nh, .n_head_kv = nkv, .head_dim = hd,
        .window = L->is_swa ? hp->n_swa : 0, .scale = 1.0f / sqrtf((float)hd),
    };
    ops->attention(be, &ap);
    if (rot_v) ops->hadamard(be, f->attn, n, nh * hd, rot_v);
    if (ft_tensor_present(&L->attn_gate)) {
        // laguna: the gate is projected from the block's normed input, not the attention output
        ops->matmul(be, &L->attn_gate, f->xn, f->gate, n);
        ops->softplus_gate(be, f->attn, f->gate, n, nh, hd, (int)L->attn_gate.ne[1]);
    }
    ops->matmul(be, &L->wo, f->attn, f->out, n);
    ops->add(be, f->x, f->out, (size_t)n * hp->n_embd);
}

void model_block_moe(const ft_model *m, ft_forward *f, int il) {
    const ft_hparams *hp = &m->hp;
    const ft_layer *L = &m->layers[il];
    ft_backend *be = f->be;
    const ft_backend_ops *ops = be->ops;
    int n = f->n_tok;

    ops->rms_norm(be, f->x, &L->ffn_norm, f->xn, n, hp->n_embd, hp->rms_eps);
    ft_moe_params mp = {
        .layer = il, .router = &L->router, .sel_bias = &L->sel_bias, .gate_exps = &L->gate_exps,
        .up_exps = &L->up_exps, .down_exps = &L->down_exps, .n_expert = hp->n_expert,
        .n_expert_used = hp->n_expert_used, .gating = hp->gating, .norm_w = hp->norm_w,
        .w_scale = hp->w_scale, .place = moe_placement_expert, .place_ctx = f->place,
    };
    ops->moe_ffn(be, &mp, f->xn, f->out, n);
    if (ft_tensor_present(&L->gate_shexp)) {
        ops->ffn(be, &L->gate_shexp, &L->up_shexp, &L->down_shexp, f->xn, f->out2, n);
        if (ft_tensor_present(&L->gate_inp_shexp))
            ops->sigmoid_gate_add(be, &L->gate_inp_shexp, f->xn, f->out2, f->out, n, hp->n_embd);
        else
            ops->add(be, f->out, f->out2, (size_t)n * hp->n_embd);
    }
    ops->add(be, f->x, f->out, (size_t)n * hp->n_embd);
}

void model_block_dense_ffn(const ft_model *m, ft_forward *f, int il) {
    const ft_hparams *hp = &m->hp;
    const ft_layer *L = &m->layers[il];
    ft_backend *be = f->be;
    be->ops->rms_norm(be, f->x, &L->ffn_norm, f->xn, f->n_tok, hp->n_embd, hp->rms_eps);
    be->ops->ffn(be, &L->ffn_gate, &L->ffn_up, &L->ffn_down, f->xn, f->out, f->n_tok);
    be->ops->add(be, f->x, f->out, (size_t)f->n_tok * hp->n_embd);
}
