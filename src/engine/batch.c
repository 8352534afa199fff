// batch.c: the multi-sequence forward step (see batch.h).
#include "batch.h"
#include "../kv/kv_pool.h"
#include "../kv/prefix_cache.h"
#include "place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ft_batch {
    const ft_model *m;
    ft_engine_params p;   // resolved; p.n_batch is the prefill chunk
    int max_tok;          // tokens per step: n_batch + n_seq - 1
    ft_backend *be;
    enum ft_moe_backend moe_backend; // as placed
    size_t weights_copied;           // bytes of weights engine_place copied into memory (0: mapped)
    ft_weights *w;        // the model's weights on be
    ft_kv_pool *pool;
    ft_prefix_cache *pc;  // NULL: no prefix cache
    // with a prefix cache, per sequence: the tokens evaluated (n_ctx each), whether each block's
    // rows all came from chunks of the class a prompt's whole chunk takes (only those are kept:
    // see chunk_class), and the leading blocks already handed to the cache
    int32_t *seq_tok;
    bool *block_exact;    // (n_seq, max_blocks)
    int *n_kept;
    // (n_seq) where the prompt chunk that a reused prefix ends inside began, for the sequence's
    // next step (its rows take that whole chunk's kernels); -1: none
    int *chunk0;
    int max_blocks;       // blocks of one context
    int32_t *match;       // (max_blocks) scratch of ft_batch_seq_reuse
    bool snapshots;       // recurrent layers: a prefix is reused with the state snapshot after it
    moe_placement place;
    ft_forward f;
    int *pos;             // (n_seq) positions evaluated; -1: the sequence is not open
    int n_open;
    int32_t *tok;         // (max_tok) the step's tokens, host memory
    ft_segment *seg;      // (n_seq) the step's segments
    bool *row_gemm;       // (max_tok) the kernel class of each row (ft_backend.row_gemm)
    int *out_row;         // (n_seq) row of each item's logits in logits, -1: none
    // a step's run of decode rows of several sequences (ft_forward.seqs), where the backend
    // takes them: their block tables, then their positions, n_seq entries each, in host memory
    // (seqs_host) and copied with one write before each such step into the backend's buffer
    // seqs_dev of the same layout, which seqs points into
    ft_seq_rows seqs;
    void *seqs_host, *seqs_dev;
    size_t seqs_bytes;
    float *logits_dev;    // (n_seq, n_vocab) backend buffer
    float *logits;        // (n_seq, n_vocab) host copy
    bool logits_pinned;   // logits came from the backend's host_alloc
};

// Floats of one sequence's recurrent state over all layers (conv, then delta-rule state, per
// layer in order): the size of a snapshot.
static size_t state_floats(const ft_batch *b) {
    ft_kv_cache *kv = ft_kv_pool_cache(b->pool, 0);
    size_t n = 0;
    for (int l = 0; l < b->m->hp.n_layer; l++) {
        const ft_tensor *c = ft_kv_conv(kv, l), *s = ft_kv_state(kv, l);
        if (c->data) n += c->mat_bytes / sizeof(float);
        if (s->data) n += s->mat_bytes / sizeof(float);
    }
    return n;
}

// Copies a sequence's recurrent state into a snapshot (to) or back from one (from): one of the
// two is set.
static void state_copy(ft_batch *b, int seq, float *to, const float *from) {
    ft_kv_cache *kv = ft_kv_pool_cache(b->pool, seq);
    ft_backend *be = b->be;
    size_t off = 0;
    for (int l = 0; l < b->m->hp.n_layer; l++) {
        ft_tensor *ts[2] = {ft_kv_conv(kv, l), ft_kv_state(kv, l)};
        for (int i = 0; i < 2; i++) {
            if (!ts[i]->data) continue;
            size_t n = ts[i]->mat_bytes / sizeof(float);
            if (to)
                be->ops->read(be, ts[i]->data, to + off, n);
            else if (be->ops->buffer_write_ordered) // in order with the steps, no device-wide wait
                be->ops->buffer_write_ordered(be, ts[i]->data, from + off, n * sizeof(float));
            else
                be->ops->buffer_write(be, ts[i]->data, from + off, n * sizeof(float));
            off += n;
        }
    }
}

// The backend, the plan checked before anything is allocated on it, then the placement and the
// KV caches. Returns false (what was made is freed by ft_batch_free) on failure.
static bool batch_setup(ft_batch *b, ft_err *err) {
    const ft_model *m = b->m;
    const ft_engine_params *p = &b->p;
    ft_backend_params bp = {.device = p->device, .n_threads = p->n_threads, .reference = p->reference,
                            .graph_max_tok = p->cuda_graph_max_bs};
    if (!(b->be = ft_backend_init(&bp, err))) return false;
    if (!engine_fit_context(m, b->be, &b->p, err)) return false;
    b->p.n_batch = engine_prefill_batch(m, b->be, &b->p);
    b->max_tok = engine_step_tokens(p);
    b->max_blocks = ft_kv_blocks_for(p->n_ctx);
    engine_placement pl;
    if (!engine_plan(m, b->be, p, &pl, err)) return false;
    b->moe_backend = pl.mode;
    ft_backend_limits lim = engine_limits(m, p);
    b->be->ops->reserve(b->be, &lim);
    b->w = engine_place(m, b->be, p, &pl, err);
    b->weights_copied = pl.copy_bytes;
    engine_placement_free(&pl);
    if (!b->w) return false;
    int64_t *arrays = ft_malloc(ENGINE_KV_ARRAYS * (size_t)m->hp.n_layer * sizeof(int64_t));
    ft_kv_params kp = engine_kv_params(m, p, arrays);
    b->pool = ft_kv_pool_init(&kp, p->n_seq, b->be, err);
    free(arrays);
    if (!b->pool) return false;
    // a recurrent layer's state follows the whole sequence, not a block: such a model shares a
    // prefix only where a snapshot of that state was kept
    bool recurrent = ft_model_recurrent_heads(m) > 0;
    if (p->prefix_cache && (!recurrent || p->ctx_checkpoints > 0)) {
        b->pc = ft_prefix_cache_init(b->pool);
        if (recurrent) {
            size_t floats = state_floats(b);
            ft_prefix_cache_set_snapshots(b->pc, p->ctx_checkpoints, floats);
            b->snapshots = true;
            FT_LOG_INFO("prefix cache: up to %d snapshots of the recurrent layers' state, %.1f MiB each, in "
                        "host memory",
                        p->ctx_checkpoints, (double)floats * sizeof(float) / (1 << 20));
        }
        b->seq_tok = ft_malloc((size_t)p->n_seq * (size_t)p->n_ctx * sizeof(int32_t));
        b->block_exact = ft_malloc((size_t)p->n_seq * (size_t)b->max_blocks * sizeof(bool));
        b->n_kept = ft_calloc((size_t)p->n_seq, sizeof(int));
        b->chunk0 = ft_malloc((size_t)p->n_seq * sizeof(int));
        b->match = ft_malloc((size_t)b->max_blocks * sizeof(int32_t));
    }
    return true;
}

ft_batch *ft_batch_init(const ft_model *m, const ft_engine_params *params, ft_err *err) {
    const ft_hparams *hp = &m->hp;
    ft_engine_params p = *params;
    if (!ft_engine_params_resolve(m, &p, err)) return NULL;
    ft_batch *b = ft_calloc(1, sizeof(*b));
    b->m = m;
    b->p = p;
    if (!batch_setup(b, err)) {
        ft_batch_free(b);
        return NULL;
    }
    ft_backend *be = b->be;
    p = b->p; // the context as fitted to memory
    b->place = moe_placement_cpu();
    ft_forward_alloc(&b->f, m, b->w, be, b->max_tok);
    b->f.place = &b->place;
    b->pos = ft_malloc((size_t)p.n_seq * sizeof(int));
    for (int i = 0; i < p.n_seq; i++) b->pos[i] = -1;
    b->tok = ft_malloc((size_t)b->max_tok * sizeof(int32_t));
    b->seg = ft_malloc((size_t)p.n_seq * sizeof(ft_segment));
    b->row_gemm = ft_malloc((size_t)b->max_tok * sizeof(bool));
    b->out_row = ft_malloc((size_t)p.n_seq * sizeof(int));
    for (int i = 0; i < p.n_seq; i++) b->out_row[i] = -1;
    b->logits_dev = be->ops->alloc(be, (size_t)p.n_seq * (size_t)hp->n_vocab);
    // (page-locked where the backend offers it: the logits come back every step)
    const size_t logits_bytes = (size_t)p.n_seq * (size_t)hp->n_vocab * sizeof(float);
    b->logits = be->ops->host_alloc ? be->ops->host_alloc(be, logits_bytes) : NULL;
    b->logits_pinned = b->logits != NULL;
    if (!b->logits) b->logits = ft_malloc(logits_bytes);
    if (be->ops->rope_seqs && p.n_seq >= 2) {
        size_t n = (size_t)p.n_seq;
        b->seqs_bytes = n * (sizeof(int32_t *) + sizeof(int32_t));
        b->seqs_dev = be->ops->buffer_alloc(be, b->seqs_bytes);
        if (!b->seqs_dev) {
            ft_err_set(err, "out of device memory for the decode rows' tables");
            ft_batch_free(b);
            return NULL;
        }
        b->seqs_host = ft_calloc(1, b->seqs_bytes);
        b->seqs.blocks = b->seqs_dev;
        b->seqs.pos = (const int32_t *)((const char *)b->seqs_dev + n * sizeof(int32_t *));
    }
    return b;
}

void ft_batch_free(ft_batch *b) {
    if (!b) return;
    // the buffers first, each given back to the backend once no work reads it
    ft_prefix_cache_free(b->pc);
    ft_kv_pool_free(b->pool);
    ft_weights_free(b->w);
    if (b->seqs_dev && b->be->ops->buffer_free) b->be->ops->buffer_free(b->be, b->seqs_dev);
    if (b->logits_pinned) b->be->ops->host_free(b->be, b->logits);
    else free(b->logits);
    b->logits = NULL;
    if (b->be) b->be->ops->free(b->be);
    free(b->pos);
    free(b->tok);
    free(b->seg);
    free(b->row_gemm);
    free(b->out_row);
    free(b->seqs_host);
    free(b->seq_tok);
    free(b->block_exact);
    free(b->n_kept);
    free(b->chunk0);
    free(b->match);
    free(b);
}

int ft_batch_seq_open(ft_batch *b) {
    int seq = ft_kv_pool_acquire(b->pool);
    if (seq < 0) return -1;
    b->pos[seq] = 0;
    b->n_open++;
    if (b->pc) {
        b->n_kept[seq] = 0;
        b->chunk0[seq] = -1;
    }
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

// Whether prompts are cut at multiples of the chunk from their start (ft_batch_next_chunk): on
// the CPU, where batch.h's bit-identity holds.
static bool cuts_aligned(const ft_batch *b) { return b->be->placement == FT_PLACEMENT_CPU; }

// The kernel class the CPU's ops give the rows of a chunk of n tokens: the GEMM from
// FT_GEMM_MIN_COLS rows (backend.h's row_gemm), the tiled attention from FT_ATTN_TILED_MIN_TOK
// (over an f16 cache: a q8_0 one has none). A block whose rows took the class of a whole
// prompt chunk holds the bits any later prompt through it computes; the prefix cache keeps
// only such blocks (and a copy of a kept block's rows is such rows). A prompt reusing them computes
// its first chunk after them with the class of the whole chunk that chunk ends (chunk0), and
// reuses none of its last chunk's rows unless that chunk has the class of a whole one; so,
// cut at multiples of -b, it gets the bits computing it whole would. (On a GPU, whose rows
// match within tolerance only, every row is kept and reused.)
static int chunk_class(const ft_batch *b, int n) {
    return (n >= FT_GEMM_MIN_COLS) + 2 * (b->p.kv_type == FT_TYPE_F16 && n >= FT_ATTN_TILED_MIN_TOK);
}

int ft_batch_seq_reuse(ft_batch *b, int seq, const int32_t *tokens, int n) {
    FT_ASSERT(seq >= 0 && seq < b->p.n_seq && b->pos[seq] == 0);
    if (!b->pc || n < 2) return 0;
    // at most up to the last token, which is evaluated (its logits start the reply) and its row
    // written, which a shared block must not see; and short of the last chunk where that takes
    // other kernels than the cached rows did
    int nb = b->p.n_batch, last0 = (n - 1) / nb * nb;
    bool same = !cuts_aligned(b) || chunk_class(b, n - last0) == chunk_class(b, nb);
    int upto = FT_MIN(same ? n - 1 : last0, b->p.n_ctx);
    int got;
    ft_prefix_part part = {.block = -1};
    if (b->snapshots) {
        // whole blocks only: the recurrent state exists where a snapshot was taken, at a block
        // boundary, and cannot be resumed inside a block
        const float *snap;
        got = ft_prefix_cache_match_snapshot(b->pc, tokens, upto, b->match, b->max_blocks, &snap);
        if (got) state_copy(b, seq, NULL, snap);
    } else {
        got = ft_prefix_cache_match(b->pc, tokens, upto, b->match, b->max_blocks, &part);
    }
    for (int i = 0; i < got; i++) ft_kv_pool_share(b->pool, seq, b->match[i]);
    int reused = got * FT_KV_BLOCK;
    bool *exact = b->block_exact + (size_t)seq * b->max_blocks;
    for (int i = 0; i < got; i++) exact[i] = true;
    if (part.n_tok > 0) {
        // the prompt leaves the cached tokens inside a block: that block's leading rows are
        // copied into one of the sequence's own, which it goes on writing. The reference held
        // meanwhile keeps the pool from reclaiming the cached block for the new one.
        ft_kv_pool_ref(b->pool, part.block);
        if (ft_kv_pool_grow(b->pool, seq, reused + part.n_tok)) {
            ft_kv_copy_block_rows(ft_kv_pool_cache(b->pool, seq), got, part.block, part.n_tok);
            exact[got] = true; // (the rows of a kept block)
            reused += part.n_tok;
        }
        ft_kv_pool_unref(b->pool, part.block);
    }
    memcpy(b->seq_tok + (size_t)seq * b->p.n_ctx, tokens, (size_t)reused * sizeof(int32_t));
    b->n_kept[seq] = got;
    b->chunk0[seq] = cuts_aligned(b) && reused % nb ? reused - reused % nb : -1;
    b->pos[seq] = reused;
    return reused;
}

bool ft_batch_seq_reserve(ft_batch *b, int seq, int n_tok) {
    FT_ASSERT(seq >= 0 && seq < b->p.n_seq && b->pos[seq] >= 0 && n_tok >= 0);
    int want = b->pos[seq] + n_tok;
    if (want > b->p.n_ctx) return false;
    return ft_kv_pool_grow(b->pool, seq, want);
}

// After a step: marks the blocks the item's rows went to (n_chunk: the chunk whose kernels they
// took), and hands the sequence's leading whole blocks that kept the prompt class to the
// prefix cache.
static void keep_blocks(ft_batch *b, const ft_batch_item *it, int pos0, int n_chunk) {
    int seq = it->seq;
    memcpy(b->seq_tok + (size_t)seq * b->p.n_ctx + pos0, it->tokens, (size_t)it->n_tok * sizeof(int32_t));
    bool *exact = b->block_exact + (size_t)seq * b->max_blocks;
    bool same = !cuts_aligned(b) || chunk_class(b, n_chunk) == chunk_class(b, b->p.n_batch);
    for (int blk = pos0 / FT_KV_BLOCK; blk <= (pos0 + it->n_tok - 1) / FT_KV_BLOCK; blk++) {
        if (blk * FT_KV_BLOCK >= pos0) exact[blk] = true; // the block's first rows
        exact[blk] &= same;
    }
    int full = b->pos[seq] / FT_KV_BLOCK, keep = b->n_kept[seq];
    while (keep < full && exact[keep]) keep++;
    if (keep == b->n_kept[seq]) return;
    ft_kv_cache *kv = ft_kv_pool_cache(b->pool, seq);
    const int32_t *tokens = b->seq_tok + (size_t)seq * b->p.n_ctx;
    ft_prefix_cache_insert(b->pc, tokens, ft_kv_block_ids(kv), keep);
    b->n_kept[seq] = keep;
    // the state after a prompt chunk ending on a block boundary, every block before it kept;
    // on the CPU only after a whole chunk, the point a later prompt's chunks (cut at multiples
    // of the chunk) pass through too (decode rows: not, for the copy's cost)
    bool whole = it->n_tok == b->p.n_batch && b->pos[seq] % b->p.n_batch == 0;
    if (b->snapshots && keep * FT_KV_BLOCK == b->pos[seq] && (whole || (!cuts_aligned(b) && it->n_tok > 1))) {
        float *snap = ft_prefix_cache_snapshot_slot(b->pc, tokens, keep);
        if (snap) state_copy(b, seq, snap, NULL);
    }
}

// Checks the items against the sequences' state; programmer errors (a closed sequence, a
// sequence twice, too many tokens for the step) abort, the tokens themselves are input.
static bool check_items(ft_batch *b, const ft_batch_item *items, int n_items, ft_err *err) {
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
    // the blocks for every item's rows, before anything runs (what one item gets stays its own)
    for (int i = 0; i < n_items; i++)
        if (!ft_batch_seq_reserve(b, items[i].seq, items[i].n_tok))
            return ft_err_set(err, "out of KV cache: %lld positions are all in use", (long long)ft_batch_kv_positions(b));
    return true;
}

// The step's first run of two or more consecutive decode rows of distinct sequences (one token
// each, not resuming a chunk), where the backend takes them together: its rows' positions and
// block tables go to the backend (b->seqs) and the forward (ft_forward.seqs). Returns the
// run's length, 0 for none.
static int decode_run(ft_batch *b, int n_items) {
    b->f.seqs = NULL;
    if (!b->seqs_dev) return 0;
    int i0 = 0;
    while (i0 < n_items) {
        int n = 0;
        while (i0 + n < n_items && b->seg[i0 + n].n_tok == 1 && b->seg[i0 + n].n_chunk == 1) n++;
        if (n >= 2) {
            const int32_t **blocks = b->seqs_host;
            int32_t *pos = (int32_t *)(blocks + b->p.n_seq);
            for (int i = 0; i < n; i++) {
                pos[i] = b->seg[i0 + i].pos0;
                blocks[i] = ft_kv_blocks(b->seg[i0 + i].kv);
            }
            ft_backend *be = b->be;
            (be->ops->buffer_write_ordered ? be->ops->buffer_write_ordered : be->ops->buffer_write)(
                be, b->seqs_dev, b->seqs_host, b->seqs_bytes);
            b->seqs.n = n;
            b->f.seqs = &b->seqs;
            b->f.seqs_seg0 = i0;
            return n;
        }
        i0 += n + 1;
    }
    return 0;
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
        int pos0 = b->pos[it->seq], n_chunk = it->n_tok;
        if (b->pc && b->chunk0[it->seq] >= 0) { // the rest of a chunk a reused prefix ends inside
            n_chunk = pos0 + it->n_tok - b->chunk0[it->seq];
            b->chunk0[it->seq] = -1;
        }
        b->seg[i] = (ft_segment){.kv = ft_kv_pool_cache(b->pool, it->seq), .pos0 = pos0, .row0 = rows,
                                 .n_tok = it->n_tok, .n_chunk = n_chunk};
        // a row's kernels follow its own chunk, not what else the step holds
        for (int t = 0; t < it->n_tok; t++) b->row_gemm[rows + t] = n_chunk >= FT_GEMM_MIN_COLS;
        rows += it->n_tok;
    }
    be->row_gemm = b->row_gemm;
    be->chunk_tok = n_items == 1 ? b->seg[0].n_chunk : 0;
    f->n_tok = rows;
    f->seg = b->seg;
    f->n_seg = n_items;
    for (int i = 0; i < n_items; i++) ft_kv_sync(b->seg[i].kv); // new blocks in the tables
    int n_run = decode_run(b, n_items);
    bool all_logits = true;
    for (int i = 0; i < n_items; i++) all_logits &= items[i].logits;
    // A decode step may be recorded once and replayed (CUDA graphs). One sequence's: the
    // backend keys its record by the sequence's cache, whose pointers the ops bake in (a step
    // that resumes a reused prefix's chunk takes that chunk's kernels: not a decode step's
    // ops). Several sequences' decode rows: by b->seqs, whose arrays hold what differs between
    // such steps, where nothing else is per sequence (a recurrent layer's state is).
    bool one = n_items == 1 && b->seg[0].n_chunk == b->seg[0].n_tok;
    bool several = n_run == n_items && all_logits && ft_model_recurrent_heads(m) == 0;
    bool bracket = be->ops->step_begin && (one || several);
    if (bracket)
        be->ops->step_begin(be, rows, one ? b->seg[0].pos0 : 0, one ? (const void *)b->seg[0].kv : &b->seqs, !one);
    be->ops->get_rows(be, &b->w->tok_embd, b->tok, f->x, rows);
    if (hp->embd_scale != 0) be->ops->scale(be, f->x, (size_t)rows * hp->n_embd, hp->embd_scale);
    for (int il = 0; il < hp->n_layer; il++) m->arch->layer(m, f, il);
    for (int i = 0; i < n_items; i++) {
        b->pos[items[i].seq] += items[i].n_tok;
        if (b->pc) keep_blocks(b, &items[i], b->seg[i].pos0, b->seg[i].n_chunk);
    }

    // logits: the last row of each item that wants them, normed into consecutive rows of xn
    // (free once the layers are done; a norm per run of consecutive rows), then one output
    // projection over them
    int n_out = 0;
    for (int i = 0; i < b->p.n_seq; i++) b->out_row[i] = -1;
    for (int i = 0, run = 0; i < n_items; i++) {
        if (!items[i].logits) continue;
        b->out_row[i] = n_out++;
        run++;
        int last = b->seg[i].row0 + items[i].n_tok - 1;
        bool next = i + 1 < n_items && items[i + 1].logits && items[i + 1].n_tok == 1; // its last row is last + 1
        if (next) continue;
        const float *x0 = f->x + (size_t)(last - run + 1) * hp->n_embd;
        be->ops->rms_norm(be, x0, &b->w->output_norm, f->xn + (size_t)(n_out - run) * hp->n_embd, run, hp->n_embd,
                          hp->rms_eps);
        run = 0;
    }
    // each logits row is one sequence's last: the per-row kernels, as for a sequence alone
    for (int r = 0; r < n_out; r++) b->row_gemm[r] = false;
    be->chunk_tok = 0;
    if (n_out > 0) be->ops->matmul(be, &b->w->output, f->xn, b->logits_dev, n_out);
    if (n_out > 0 && hp->logit_softcap != 0)
        be->ops->softcap(be, b->logits_dev, (size_t)n_out * hp->n_vocab, hp->logit_softcap);
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

int ft_batch_next_chunk(const ft_batch *b, int done, int left) {
    FT_ASSERT(done >= 0 && left >= 0);
    int nb = b->p.n_batch;
    return FT_MIN(cuts_aligned(b) ? nb - done % nb : nb, left);
}

int ft_batch_n_seq(const ft_batch *b) { return b->p.n_seq; }
int ft_batch_n_ctx(const ft_batch *b) { return b->p.n_ctx; }
int ft_batch_n_open(const ft_batch *b) { return b->n_open; }
const ft_model *ft_batch_model(const ft_batch *b) { return b->m; }
ft_backend *ft_batch_backend(ft_batch *b) { return b->be; }
enum ft_moe_backend ft_batch_moe_backend(const ft_batch *b) { return b->moe_backend; }
size_t ft_batch_weights_copied(const ft_batch *b) { return b->weights_copied; }
const ft_weights *ft_batch_weights(const ft_batch *b) { return b->w; }

bool ft_batch_moe_stats(ft_batch *b, ft_moe_stats *out) {
    if (!b->be->ops->expert_cache_stats) {
        memset(out, 0, sizeof(*out));
        return false;
    }
    return b->be->ops->expert_cache_stats(b->be, out);
}

bool ft_batch_route_counts(ft_batch *b, uint64_t *out) {
    if (b->m->hp.n_expert <= 0 || !b->be->ops->route_counts) return false;
    b->be->ops->route_counts(b->be, out);
    return true;
}

bool ft_batch_moe_rebuild(ft_batch *b, int n_slots, ft_err *err) {
    if (!b->be->ops->expert_cache_rebuild)
        return ft_err_set(err, "no expert cache: the model was not placed with --moe-backend offload");
    return b->be->ops->expert_cache_rebuild(b->be, n_slots, err);
}

int64_t ft_batch_kv_positions(const ft_batch *b) { return ft_kv_pool_n_blocks(b->pool) * FT_KV_BLOCK; }

void ft_batch_kv_info(const ft_batch *b, ft_batch_kv *out) {
    *out = (ft_batch_kv){
        .blocks = ft_kv_pool_n_blocks(b->pool), .free = ft_kv_pool_n_free(b->pool), .prefix_cache = b->pc != NULL,
        .cached = b->pc ? ft_prefix_cache_n_blocks(b->pc) : 0,
        .evictable = b->pc ? ft_prefix_cache_n_evictable(b->pc) : 0,
    };
}

bool ft_batch_kv_check(const ft_batch *b, ft_err *err) {
    int64_t n = ft_kv_pool_n_blocks(b->pool);
    int32_t *held = ft_calloc((size_t)n, sizeof(int32_t));
    if (b->pc) ft_prefix_cache_count_refs(b->pc, held);
    bool ok = ft_kv_pool_check(b->pool, held, err);
    for (int s = 0; s < b->p.n_seq && ok; s++) {
        if (b->pos[s] < 0) continue;
        int have = ft_kv_n_blocks(ft_kv_pool_cache(b->pool, s)), need = ft_kv_blocks_for(b->pos[s]);
        // a sequence holds the blocks of its positions, and at most those of one step more
        if (have < need || have > ft_kv_blocks_for(b->pos[s] + b->max_tok))
            ok = ft_err_set(err, "sequence %d at position %d holds %d blocks", s, b->pos[s], have);
    }
    free(held);
    return ok;
}

long ft_batch_positions_used(const ft_batch *b) {
    long used = 0;
    for (int i = 0; i < b->p.n_seq; i++)
        if (b->pos[i] > 0) used += b->pos[i];
    return used;
}
