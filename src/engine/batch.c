// batch.c: the multi-sequence forward step (see batch.h).
#include "batch.h"
#include "../backend/cpu/cpu.h"
#include "../backend/cuda/cuda.h"
#include "../backend/cuda/ft_cuda.h"
#include "../kv/kv_pool.h"
#include "../util/env.h"
#include "place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ft_batch {
    const ft_model *m;
    ft_engine_params p;   // resolved; p.n_batch is the prefill chunk
    int max_tok;          // tokens per step: n_batch + n_seq - 1
    ft_backend *be;
    ft_kv_pool *pool;
    moe_placement place;
    ft_forward f;
    int *pos;             // (n_seq) positions evaluated; -1: the sequence is not open
    int n_open;
    int32_t *tok;         // (max_tok) the step's tokens, host memory
    ft_segment *seg;      // (n_seq) the step's segments
    bool *row_gemm;       // (max_tok) the kernel class of each row (ft_backend.row_gemm)
    int *out_row;         // (n_seq) row of each item's logits in logits, -1: none
    float *logits_dev;    // (n_seq, n_vocab) backend buffer
    float *logits;        // (n_seq, n_vocab) host copy
};

int ft_engine_default_threads(enum ft_placement device) {
    int cores = ft_cpu_physical_cores();
    return device == FT_PLACEMENT_CUDA ? FT_MAX(1, cores - 1) : cores;
}

bool ft_engine_params_resolve(const ft_model *m, ft_engine_params *p, ft_err *err) {
    const ft_hparams *hp = &m->hp;
    if (p->n_ctx <= 0) p->n_ctx = hp->n_ctx_train;
    if (p->n_ctx > hp->n_ctx_train)
        return ft_err_set(err, "context %d exceeds the model's limit of %d tokens", p->n_ctx, hp->n_ctx_train);
    if (p->n_seq <= 0) p->n_seq = 1;
    if (p->n_batch <= 0) p->n_batch = 256;
    p->n_batch = FT_MIN(p->n_batch, p->n_ctx); // a prefill chunk never needs more
    if (p->n_threads <= 0) p->n_threads = ft_engine_default_threads(p->device);
    if (ft_env_flag(FT_ENV_REFERENCE)) p->reference = true;
    return true;
}

static ft_kv_params kv_params(const ft_model *m, const ft_engine_params *p, int64_t *widths) {
    const ft_hparams *hp = &m->hp;
    for (int l = 0; l < hp->n_layer; l++) widths[l] = (int64_t)hp->n_head_kv * hp->head_dim;
    return (ft_kv_params){hp->n_layer, p->n_ctx, p->kv_type, widths, hp->head_dim};
}

bool ft_engine_experts_on_cpu(const ft_model *m) {
    if (m->output.placement != FT_PLACEMENT_CUDA || ft_moe_cache_present(m)) return false; // the cache serves them
    for (int il = 0; il < m->hp.n_layer; il++)
        if (m->layers[il].is_moe) return m->layers[il].gate_exps.placement == FT_PLACEMENT_CPU;
    return false;
}

// Host copies of the routers and selection biases (in the file's mapping after the upload):
// they mark the layers the CPU serves, and with FT_CPU_EXPERTS_ROUTE=host the CPU routes with
// them (by default the GPU routes: cuda_cpu_experts.h says why).
static ft_tensor host_tensor(const ft_model *m, const ft_tensor *t) {
    ft_tensor h = {0};
    if (!ft_tensor_present(t)) return h;
    const gguf_tensor *g = gguf_find_tensor(m->file, t->name);
    FT_ASSERT(g);
    h = *t;
    h.data = (void *)g->data;
    h.placement = FT_PLACEMENT_CPU;
    return h;
}

static void attach_cpu_experts(ft_backend *be, const ft_model *m, const ft_engine_params *p) {
    int n = m->hp.n_layer;
    ft_tensor *routers = ft_calloc((size_t)n, sizeof(ft_tensor)), *bias = ft_calloc((size_t)n, sizeof(ft_tensor));
    ft_tensor *banks[3];
    for (int b = 0; b < 3; b++) banks[b] = ft_calloc((size_t)n, sizeof(ft_tensor));
    for (int il = 0; il < n; il++) {
        const ft_layer *l = &m->layers[il];
        if (!l->is_moe) continue;
        routers[il] = host_tensor(m, &l->router);
        bias[il] = host_tensor(m, &l->sel_bias);
        banks[0][il] = l->gate_exps;
        banks[1][il] = l->up_exps;
        banks[2][il] = l->down_exps;
    }
    // the prefill overlay, as place_cpu counted it in the memory plan
    cuda_cpu_experts_params cp = {.n_layer = n, .routers = routers, .sel_bias = bias, .n_threads = p->n_threads,
                                  .reference = p->reference, .route_gap = &be->min_route_gap,
                                  .gate_exps = banks[0], .up_exps = banks[1], .down_exps = banks[2],
                                  .overlay_buffers = engine_cpu_overlay_buffers(p)};
    ft_backend_cuda_attach_cpu_experts(be, &cp);
    free(routers);
    free(bias);
    for (int b = 0; b < 3; b++) free(banks[b]);
}

ft_batch *ft_batch_init(const ft_model *m, const ft_engine_params *params, ft_err *err) {
    const ft_hparams *hp = &m->hp;
    ft_engine_params p = *params;
    if (!ft_engine_params_resolve(m, &p, err)) return NULL;
    bool cuda = p.device == FT_PLACEMENT_CUDA;
    if (cuda && m->output.placement != FT_PLACEMENT_CUDA)
        return ft_err_set(err, "--device cuda: the model's weights are not on the device (ft_engine_place_model)"), NULL;
    if (!cuda && m->output.placement != FT_PLACEMENT_CPU)
        return ft_err_set(err, "--device cpu: the model's weights were uploaded to the GPU"), NULL;
    ft_backend *be = NULL;
    if (cuda && !(be = ft_backend_cuda_init(0, err))) return NULL;

    int64_t *widths = ft_malloc((size_t)hp->n_layer * sizeof(int64_t));
    ft_kv_params kp = kv_params(m, &p, widths);
    ft_kv_pool *pool = ft_kv_pool_init(&kp, p.n_seq, p.device, err);
    free(widths);
    if (!pool) {
        if (be) be->ops->free(be);
        return NULL;
    }
    if (!be) be = ft_backend_cpu_init(p.n_threads, p.reference);

    ft_batch *b = ft_calloc(1, sizeof(*b));
    b->m = m;
    b->p = p;
    b->be = be;
    b->pool = pool;
    b->max_tok = engine_step_tokens(&p);
    b->place = moe_placement_cpu();
    ft_backend_limits lim = engine_limits(m, &p);
    be->ops->reserve(be, &lim);
    if (cuda && m->offload) ft_backend_cuda_attach_offload(be, m->offload);
    ft_forward_alloc(&b->f, m, be, b->max_tok);
    b->f.place = &b->place;
    if (cuda) ft_backend_cuda_set_graph_max_tok(be, p.cuda_graph_max_bs);
    if (cuda && ft_engine_experts_on_cpu(m)) attach_cpu_experts(be, m, &p);
    b->pos = ft_malloc((size_t)p.n_seq * sizeof(int));
    for (int i = 0; i < p.n_seq; i++) b->pos[i] = -1;
    b->tok = ft_malloc((size_t)b->max_tok * sizeof(int32_t));
    b->seg = ft_malloc((size_t)p.n_seq * sizeof(ft_segment));
    b->row_gemm = ft_malloc((size_t)b->max_tok * sizeof(bool));
    b->out_row = ft_malloc((size_t)p.n_seq * sizeof(int));
    for (int i = 0; i < p.n_seq; i++) b->out_row[i] = -1;
    b->logits_dev = be->ops->alloc(be, (size_t)p.n_seq * (size_t)hp->n_vocab);
    b->logits = ft_malloc((size_t)p.n_seq * (size_t)hp->n_vocab * sizeof(float));
    return b;
}

void ft_batch_free(ft_batch *b) {
    if (!b) return;
    b->be->ops->free(b->be); // before the pool: the backend may still be using device caches
    ft_kv_pool_free(b->pool);
    free(b->pos);
    free(b->tok);
    free(b->seg);
    free(b->row_gemm);
    free(b->out_row);
    free(b->logits);
    free(b);
}

int ft_batch_seq_open(ft_batch *b) {
    int seq = ft_kv_pool_acquire(b->pool);
    if (seq < 0) return -1;
    b->pos[seq] = 0;
    b->n_open++;
    return seq;
}

void ft_batch_seq_close(ft_batch *b, int seq) {
    FT_ASSERT(seq >= 0 && seq < b->p.n_seq && b->pos[seq] >= 0);
    ft_kv_pool_release(b->pool, seq);
    b->pos[seq] = -1;
    b->n_open--;
}

int ft_batch_seq_pos(const ft_batch *b, int seq) {
    FT_ASSERT(seq >= 0 && seq < b->p.n_seq && b->pos[seq] >= 0);
    return b->pos[seq];
}

// Checks the items against the sequences' state; programmer errors (a closed sequence, a
// sequence twice, too many tokens for the step) abort, the tokens themselves are input.
static bool check_items(const ft_batch *b, const ft_batch_item *items, int n_items, ft_err *err) {
    FT_ASSERT(n_items >= 1 && n_items <= b->p.n_seq);
    int total = 0;
    for (int i = 0; i < n_items; i++) {
        const ft_batch_item *it = &items[i];
        FT_ASSERT(it->seq >= 0 && it->seq < b->p.n_seq && b->pos[it->seq] >= 0 && it->n_tok >= 1);
        for (int j = 0; j < i; j++) FT_ASSERT(items[j].seq != it->seq);
        total += it->n_tok;
        if (it->n_tok > b->p.n_ctx - b->pos[it->seq])
            return ft_err_set(err, "%d tokens do not fit in the context: %d of %d positions used", it->n_tok,
                              b->pos[it->seq], b->p.n_ctx);
        for (int t = 0; t < it->n_tok; t++)
            if (it->tokens[t] < 0 || it->tokens[t] >= b->m->hp.n_vocab)
                return ft_err_set(err, "token id %d at %d is outside the vocabulary of %d", it->tokens[t], t,
                                  b->m->hp.n_vocab);
    }
    FT_ASSERT(total <= b->max_tok);
    return true;
}

bool ft_batch_step(ft_batch *b, const ft_batch_item *items, int n_items, ft_err *err) {
    if (!check_items(b, items, n_items, err)) return false;
    const ft_model *m = b->m;
    const ft_hparams *hp = &m->hp;
    ft_backend *be = b->be;
    ft_forward *f = &b->f;

    // pack the tokens, one segment per item
    int rows = 0;
    for (int i = 0; i < n_items; i++) {
        const ft_batch_item *it = &items[i];
        memcpy(b->tok + rows, it->tokens, (size_t)it->n_tok * sizeof(int32_t));
        b->seg[i] = (ft_segment){.kv = ft_kv_pool_cache(b->pool, it->seq), .pos0 = b->pos[it->seq], .row0 = rows,
                                 .n_tok = it->n_tok};
        // a row's kernels follow its own chunk, not what else the step holds
        for (int t = 0; t < it->n_tok; t++) b->row_gemm[rows + t] = it->n_tok >= FT_GEMM_MIN_COLS;
        rows += it->n_tok;
    }
    be->row_gemm = b->row_gemm;
    f->n_tok = rows;
    f->seg = b->seg;
    f->n_seg = n_items;
    // One sequence's one-token step may be recorded once and replayed (CUDA graphs): the
    // backend keys its record by the sequence's cache, whose pointers the ops bake in.
    bool bracket = be->ops->step_begin && n_items == 1;
    if (bracket) be->ops->step_begin(be, rows, b->seg[0].pos0, b->seg[0].kv);
    be->ops->get_rows(be, &m->tok_embd, b->tok, f->x, rows);
    for (int il = 0; il < hp->n_layer; il++) m->arch->layer(m, f, il);
    for (int i = 0; i < n_items; i++) b->pos[items[i].seq] += items[i].n_tok;

    // logits: the last row of each item that wants them, normed into consecutive rows of xn
    // (free once the layers are done), then one output projection over them
    int n_out = 0;
    for (int i = 0; i < b->p.n_seq; i++) b->out_row[i] = -1;
    for (int i = 0; i < n_items; i++) {
        if (!items[i].logits) continue;
        const float *last = f->x + (size_t)(b->seg[i].row0 + items[i].n_tok - 1) * hp->n_embd;
        be->ops->rms_norm(be, last, &m->output_norm, f->xn + (size_t)n_out * hp->n_embd, 1, hp->n_embd,
                          hp->rms_eps);
        b->out_row[i] = n_out++;
    }
    // each logits row is one sequence's last: the per-row kernels, as for a sequence alone
    for (int r = 0; r < n_out; r++) b->row_gemm[r] = false;
    if (n_out > 0) be->ops->matmul(be, &m->output, f->xn, b->logits_dev, n_out);
    if (bracket) be->ops->step_end(be);
    be->row_gemm = NULL;
    if (n_out > 0) be->ops->read(be, b->logits_dev, b->logits, (size_t)n_out * (size_t)hp->n_vocab);
    return true;
}

const float *ft_batch_logits(const ft_batch *b, int i) {
    FT_ASSERT(i >= 0 && i < b->p.n_seq && b->out_row[i] >= 0);
    return b->logits + (size_t)b->out_row[i] * (size_t)b->m->hp.n_vocab;
}

int ft_batch_max_tokens(const ft_batch *b) { return b->max_tok; }
int ft_batch_chunk(const ft_batch *b) { return b->p.n_batch; }
int ft_batch_n_seq(const ft_batch *b) { return b->p.n_seq; }
int ft_batch_n_ctx(const ft_batch *b) { return b->p.n_ctx; }
int ft_batch_n_open(const ft_batch *b) { return b->n_open; }
const ft_model *ft_batch_model(const ft_batch *b) { return b->m; }
ft_backend *ft_batch_backend(ft_batch *b) { return b->be; }

long ft_batch_positions_used(const ft_batch *b) {
    long used = 0;
    for (int i = 0; i < b->p.n_seq; i++)
        if (b->pos[i] > 0) used += b->pos[i];
    return used;
}
