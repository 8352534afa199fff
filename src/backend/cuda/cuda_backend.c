// cuda_backend.c: the CUDA backend's host side (see cuda.h): life cycle, scratch, and each op
// of ft_backend_ops as launches of the kernels in this folder (cuda_ops.h, ft_cuda.h).
//
// Matmuls quantize the activations once to q8_1 (quantized weights) or pass floats (f32, f16,
// bf16 weights) and run the matvec kernels 8 tokens per launch; from GEMM_MIN_TOK tokens the
// quantized matmuls take the tensor-core GEMM (gemm_q.cu), float weights past 8 tokens the
// tiled float GEMM (gemm_f.cu). moe_ffn routes on the device, so the host never waits: decode
// runs the selected experts through the expert form of the matvec (gate, up and SiLU in one
// launch, down and the weighted sum in another); prefill from GEMM_MIN_TOK groups the tokens by
// expert for the grouped GEMM (moe_gemm.cu). Prefill attention is the tensor-core flash kernel
// (flash_attn.cu), decode attention splits the keys over CTAs (attention.cu). Some ops wait to
// fuse with the next one (above cuda_of); one-token steps replay CUDA graphs ("Steps and
// graphs" below). One calling thread per backend.
#include "cuda.h"
#include "cuda_cpu_experts.h"
#include "cuda_ops.h"
#include "ft_cuda.h"
#include "offload.h"
#include "../../moe/expert_cache.h"
#include "../../moe/hybrid_tune.h"
#include "../../util/env.h"

#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct cuda_backend {
    ft_backend base;
    ft_backend_ops ops;        // base.ops: g_cuda_ops with the features this backend offers
    int dev;
    ft_cuda_stream *stream;
    ft_backend_limits lim;
    bool reserved;
    void **bufs;               // activation buffers handed out by alloc
    int n_bufs, cap_bufs;
    // scratch (device), sized once by reserve; W = max_width rounded up to 32, P = max_tok * n_used
    void *xq;                  // (P, W) q8_1 activations
    void *hq;                  // (P, W) q8_1: the expert GLU's output, written by its kernel
    float *h_gate, *h_up;      // (P, W)
    float *h_out;              // (P, W)
    float *logits;             // (max_tok, max(n_expert, 1))
    int32_t *sel;              // (P) selected experts
    const int32_t *expert_ids; // what the expert kernels index by: sel, or the offload's slots
    ft_offload *offload;       // --moe-backend offload: the GPU expert cache (owned), or NULL
    // its prefetch (FT_MOE_PREFETCH): the predictor's scratch (the next layer's router logits,
    // weights, routing gap and the one-launch router's count), apart from the step's own;
    // prefetch_copies: a layer's prefetch copies at most, 0 when off
    int prefetch_copies;
    float *pf_logits, *pf_w, *pf_gap;
    int *pf_count;
    uint64_t offload_gen;      // its generation when the graphs were captured
    bool token_looked_up;      // a step looked experts up in the cache and its token has not ended
    // hybrid (FT_HYBRID_TUNE): the split's CPU cost corrected by the host's timed CPU ops
    bool hy_tuning;
    moe_hybrid_tune hy_tune;
    moe_hybrid_costs *hy_costs; // (its n_layers) scratch
    int hy_steps, hy_big;       // steps since the start; the layer the printed costs are of
    double hy_printed;          // the scale last printed
    float *sel_w;              // (P) their weights
    float *gap;                // (1) smallest routing gap since the last read
    void *moe_work;            // expert grouping: ft_cuda_moe_gemm_work_bytes(P, n_expert) or moe_rows
    float *attn_part;          // flash-decoding partials (see cuda_ops.h)
    float *gemm_part;          // (GEMM_PART_FLOATS) partial products of GEMMs split over their input
    int *route_count;          // (1) zero: the fused router's count (ft_cuda_router_params)
    unsigned long long *route_counts; // (lim.n_layer, n_expert) the router's selections (route_counts
                                      // op), or NULL without lim.n_layer or experts
    size_t attn_part_floats;
    // host side
    float *staging;            // pinned (max_tok, W): get_rows' dequantized rows
    ft_cuda_event *staging_done;
    bool staging_used;
    float *host_gap;           // pinned (2): [0] = +inf (the reset value), [1] = read back
    // CUDA graphs (see the top)
    bool graphs;               // FT_CUDA_GRAPHS is not "0"
    // Diagnostics, to bisect a numerical difference: FT_CUDA_GEMM=0 keeps every matmul and
    // MoE FFN on the matvec kernels, FT_CUDA_FLASH=0 every attention on attention.cu's.
    int gemm_min_tok;          // GEMM_MIN_TOK, or INT_MAX with FT_CUDA_GEMM=0
    bool moe_rows;             // ft_cuda_moe_rows for a few rows (FT_CUDA_MOE_ROWS)
    bool fuse_norm;            // FT_CUDA_FUSE_NORM: the residual add and the norm fused below
    bool flash;
    bool delta_chunked;        // FT_CUDA_DELTA_CHUNKED: prefill's delta rule in chunks
    size_t ffn_scratch_floats; // of h_gate, h_up and h_out each: P * W
    int graph_max_tok;         // --cuda-graph-max-bs: steps of more tokens run directly; < 0: no cap
    enum step_mode { STEP_DIRECT, STEP_CAPTURE, STEP_REPLAY } mode;
    int step_pos0;             // first position of the step in progress
    int32_t *pos_host;         // pinned (1): the step's first position, copied by the graph
    int32_t *pos_dev;          // (1) device copy
    // the one-token steps captured so far, one per key (a sequence's KV cache: its pointers
    // are baked into the graph), the least recently used replaced when all are taken
    struct step_graph {
        const void *key;
        int n_tok;
        ft_cuda_graph *graph;
        uint64_t sig;          // signature of the captured step's ops
        uint64_t last_used;
    } step_graphs[32];
    int cur_graph;             // the entry of the step in progress
    uint64_t graph_clock;
    uint64_t step_sig;         // signature of the ops of the step in progress
    // what xq holds: the q8_1 form of (xq_tok, xq_cols) floats at xq_src, reused by the next
    // quantized matmul of the same input while no other op ran (wq/wk/wv, gate/up, router and
    // expert gate/up share one input); activation buffers change only through ops
    const float *xq_src;
    int64_t xq_cols;
    int xq_tok;
    // a residual add (add_y += add_x over add_n floats) not yet launched: the next op, if it
    // is the rms_norm of add_y, runs it in its own kernel; any other op launches it first
    float *add_y;
    const float *add_x;
    size_t add_n;
    // per-head rms_norms in place not yet launched (q_norm, k_norm): a rope of the same
    // buffer runs each inside its own kernel (norm_rope.cu); any other op launches them first
    struct pending_norm {
        float *x;
        const float *w;
        int n_rows, n;
        float eps;
    } norms[2];
    int n_norms;
    // quantized matmuls of one input not yet launched (wq, wk, wv): launched together, one
    // kernel for all of them (ft_cuda_matvec_multi), by the first op that does not join them;
    // the bias added to one's output next (gpt-oss's bq, bk, bv) rides in its kernel
    struct pending_matmul {
        const ft_tensor *w;
        const float *x;
        float *y;
        int n_tok;
        const float *bias;
        float *acc; // the residual its output is added into next (cuda_add), or NULL
    } mms[FT_CUDA_MATVEC_MAX_SEG];
    int n_mms;
    // a one-row rms_norm not yet launched (a decode step's FFN norm, its residual add already
    // done): the decode router of its output normalises the row itself (route_on_device); any
    // other op launches it first
    struct pending_row_norm {
        float *x, *y;
        const float *w;
        int n;
        float eps;
    } rnorm;
    bool rnorm_pending;
    // cache rows not yet written (a layer's k): the next set_rows of the same shape (its v)
    // joins them in one launch; any other op launches them first
    struct pending_rows {
        uint32_t type;
        ft_cuda_set_rows_dst dst;
        const int32_t *blocks, *pos_dev;
        ft_cuda_seq_rows seqs; // rows of several sequences (seqs.pos set), or none
        int pos, n_rows;
        int64_t n;
    } rows;
    bool rows_pending;
    // a per-head norm and rope, or a rope alone, not yet launched (q's): the next one of the same
    // shape and rotation (k's) joins it in one launch (norm_rope.cu); any other op launches it first
    // In decode-sized steps the joined q and k wait too: the next set_rows of k's heads (then
    // v's) writes the cache rows in the same launch (kv).
    struct pending_rope {
        ft_cuda_norm_rope_buf buf[2];
        int n_buf;
        int n_tok, head_dim, pos;
        float eps;
        ft_cuda_rope_params rp;
        bool norm; // false: the rope alone
        bool has_kv; // k's cache rows (kv.k) and maybe v's (kv.v.x) ride along
        ft_cuda_kv_rows kv;
    } rope;
    bool rope_pending;
    cuda_cpu_experts *cpu_experts; // --moe-backend cpu (cuda_cpu_experts.h), or NULL
} cuda_backend;

static void flush_add(cuda_backend *c) {
    if (!c->add_y) return;
    ft_cuda_add(c->add_y, c->add_x, c->add_n, c->stream);
    if (c->xq_src == c->add_y) c->xq_src = NULL;
    c->add_y = NULL;
}

static bool xq_fits(const cuda_backend *c, int64_t n, int n_tok);

static void flush_row_norm(cuda_backend *c) {
    if (!c->rnorm_pending) return;
    c->rnorm_pending = false;
    const struct pending_row_norm *r = &c->rnorm;
    bool fuse = xq_fits(c, r->n, 1);
    ft_cuda_rms_norm(r->x, NULL, r->w, r->y, fuse ? c->xq : NULL, 1, r->n, r->eps, c->stream);
    if (fuse) {
        c->xq_src = r->y;
        c->xq_cols = r->n;
        c->xq_tok = 1;
    }
}

static void flush_norms(cuda_backend *c) {
    for (int i = 0; i < c->n_norms; i++) {
        struct pending_norm *q = &c->norms[i];
        ft_cuda_rms_norm(q->x, NULL, q->w, q->x, NULL, q->n_rows, q->n, q->eps, c->stream);
        if (c->xq_src == q->x) c->xq_src = NULL;
    }
    c->n_norms = 0;
}

static void flush_rows(cuda_backend *c) {
    if (!c->rows_pending) return;
    struct pending_rows *r = &c->rows;
    ft_cuda_set_rows(r->type, &r->dst, 1, r->blocks, &r->seqs, r->pos_dev, r->pos, r->n_rows, r->n, c->stream);
    c->rows_pending = false;
}

static void flush_rope(cuda_backend *c) {
    if (!c->rope_pending) return;
    struct pending_rope *r = &c->rope;
    ft_cuda_norm_rope_kv(r->buf, r->n_buf, r->n_tok, r->head_dim, r->eps, r->norm, r->pos, &r->rp,
                         r->has_kv ? &r->kv : NULL, c->stream);
    c->rope_pending = false;
}

static void flush_matmuls(cuda_backend *c);

// Fusion across ops: the ops come one at a time from the architecture code, so a few wait
// until the next op shows whether they can share its kernel (each op's entry launches what
// is waiting otherwise: cuda_of / cuda_op):
//   - decode-sized matmuls of one input and weight type (wq, wk, wv; qwen35moe's float alpha
//     and beta) run as one launch, with the biases added to quantized ones' outputs right
//     after them;
//   - a residual add runs inside the next rms_norm when that normalises its result, or, where
//     it adds a waiting matmul's output, inside that matmul's kernel (acc); the one-row norm
//     after it waits, and the decode router of its output normalises the row itself;
//   - a per-head rms_norm in place (q_norm, k_norm) runs inside the rope of its buffer, and
//     those of q and k in one launch (so do the ropes of q and k where no norm comes first);
//   - the cache rows of k and v (two set_rows of one shape) are written by one launch;
//   - a per-head norm in place followed by an output gate on the same rows (qwen35moe's gated
//     DeltaNet norm) is one launch (ft_cuda_rms_norm_gate);
// and some kernels write the q8_1 form of their output for the matmul that follows (rms_norm,
// decode attention, the output gate, a decode FFN's activation), which then skips its quantize
// launch (xq_src).
//
// Every entry point starts here or at cuda_op: what is pending goes first (an add, matmuls,
// cache rows and a norm+rope are never pending together: each op that makes one pending
// flushes the others; the per-head norms wait beside a norm+rope, on other buffers).
static cuda_backend *cuda_of(ft_backend *be) {
    cuda_backend *c = (cuda_backend *)be;
    flush_row_norm(c);
    flush_norms(c);
    flush_add(c);
    flush_matmuls(c);
    flush_rows(c);
    flush_rope(c);
    return c;
}

// Every op but matmul starts here: it may write any buffer, so xq no longer matches its source.
static cuda_backend *cuda_op(ft_backend *be) {
    cuda_backend *c = cuda_of(be);
    c->xq_src = NULL;
    return c;
}

enum op_id { OP_MATMUL = 1, OP_GET_ROWS, OP_RMS_NORM, OP_ADD, OP_ADD_BIAS, OP_ROPE, OP_HADAMARD, OP_SET_ROWS,
             OP_ATTENTION, OP_GATE_MUL, OP_FFN, OP_MOE_FFN, OP_SIGMOID_GATE_ADD, OP_SPLIT_HEADS, OP_DELTA_NET,
             OP_SCALE, OP_SOFTCAP };

// A float's bits, for a step's signature.
static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static uint64_t sig_mix(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xFF)) * 1099511628211ull; // FNV-1a
    return h;
}

// Notes an op and its arguments (buffers, sizes, position offsets; never absolute positions)
// in the step's signature, and says whether the op enqueues its work now: not while a graph
// replays the step.
static bool op_runs(cuda_backend *c, enum op_id op, const void *a, const void *b, int64_t n0, int64_t n1) {
    if (c->mode == STEP_DIRECT) return true;
    uint64_t h = sig_mix(c->step_sig, (uint64_t)op);
    h = sig_mix(h, (uint64_t)(uintptr_t)a);
    h = sig_mix(h, (uint64_t)(uintptr_t)b);
    h = sig_mix(h, (uint64_t)n0);
    c->step_sig = sig_mix(h, (uint64_t)n1);
    return c->mode == STEP_CAPTURE;
}

// The device position of a graph step, or NULL (positions are plain host values).
static const int32_t *step_pos_dev(const cuda_backend *c) { return c->mode == STEP_DIRECT ? NULL : c->pos_dev; }

// A host position as the kernels take it: relative to *step_pos_dev(c) in a graph step.
// The row count a call of n_tok rows chooses its kernels by: the step's chunk where it resumes
// one (ft_backend.chunk_tok), so its rows get the bits they would computed in the whole chunk.
static int shape_tok(const cuda_backend *c, int n_tok) { return FT_MAX(n_tok, c->base.chunk_tok); }

static int step_rel(const cuda_backend *c, int pos) { return c->mode == STEP_DIRECT ? pos : pos - c->step_pos0; }

// What a position-taking op notes in the step's signature: its offset from the step's first
// position, or for rows of several sequences (seqs) the arrays it reads them from.
static int64_t step_pos_sig(const cuda_backend *c, const ft_seq_rows *seqs, int pos) {
    return seqs ? (int64_t)(uintptr_t)seqs : step_rel(c, pos);
}

// xq = q8_1 of x (n_tok, n_cols), unless it already holds exactly that.
static void quantize_x(cuda_backend *c, const float *x, int64_t n_cols, int n_tok) {
    if (c->xq_src == x && c->xq_cols == n_cols && c->xq_tok == n_tok) return;
    ft_cuda_quantize_q8_1(x, c->xq, n_cols, n_tok, c->stream);
    c->xq_src = x;
    c->xq_cols = n_cols;
    c->xq_tok = n_tok;
}

static int64_t round32(int64_t n) { return (n + 31) / 32 * 32; }

// Can xq hold the q8_1 form of n_tok rows of n floats?
static bool xq_fits(const cuda_backend *c, int64_t n, int n_tok) {
    return c->reserved && n % 32 == 0 && n <= round32(c->lim.max_width) &&
           n_tok <= c->lim.max_tok * FT_MAX(c->lim.n_expert_used, 1);
}

// Scratch of the GEMMs split over their input (ft_cuda_gemm_params.part): 16 MiB, room for the
// splits a decode step of up to a few dozen tokens makes of its projections (a GEMM whose
// splits would not fit takes fewer).
#define GEMM_PART_FLOATS ((size_t)1 << 22)

// Split partials of attention (cuda_ops.h).
static size_t attn_part_floats(const ft_backend_limits *lim) {
    return ft_cuda_attention_part_bound(lim->max_width, lim->max_head_dim);
}

static size_t cuda_scratch_bytes(ft_backend *be, const ft_backend_limits *lim) {
    size_t W = (size_t)round32(lim->max_width), T = (size_t)lim->max_tok;
    size_t P = T * (size_t)FT_MAX(lim->n_expert_used, 1), E = (size_t)FT_MAX(lim->n_expert, 1);
    size_t counts = be->ops->route_counts && lim->n_layer > 0 && lim->n_expert > 0
                        ? (size_t)lim->n_layer * E * sizeof(uint64_t)
                        : 0;
    return 2 * ft_cuda_q8_1_bytes((int64_t)W, (int)P) + 3 * P * W * sizeof(float) + T * E * sizeof(float) +
           P * (sizeof(int32_t) + sizeof(float)) + attn_part_floats(lim) * sizeof(float) +
           ft_cuda_moe_gemm_work_bytes((int)P, (int)E) + counts + GEMM_PART_FLOATS * sizeof(float) + 256 * 12;
}

static void *dev_alloc(size_t n, const char *what) {
    void *p = ft_cuda_malloc(n);
    if (!p) ft_abort(__FILE__, __LINE__, "cuda: out of device memory allocating %zu bytes for %s", n, what);
    return p;
}

static void cuda_reserve(ft_backend *be, const ft_backend_limits *lim) {
    cuda_backend *c = cuda_of(be);
    FT_ASSERT(!c->reserved && lim->max_tok >= 1 && lim->max_width >= 1);
    c->reserved = true;
    c->lim = *lim;
    size_t W = (size_t)round32(lim->max_width), T = (size_t)lim->max_tok;
    size_t P = T * (size_t)FT_MAX(lim->n_expert_used, 1), E = (size_t)FT_MAX(lim->n_expert, 1);
    c->xq = dev_alloc(ft_cuda_q8_1_bytes((int64_t)W, (int)P), "quantized activations");
    c->hq = dev_alloc(ft_cuda_q8_1_bytes((int64_t)W, (int)P), "quantized expert activations");
    c->ffn_scratch_floats = P * W;
    c->h_gate = dev_alloc(P * W * sizeof(float), "ffn scratch");
    c->h_up = dev_alloc(P * W * sizeof(float), "ffn scratch");
    c->h_out = dev_alloc(P * W * sizeof(float), "ffn scratch");
    c->logits = dev_alloc(T * E * sizeof(float), "router logits");
    c->sel = dev_alloc(P * sizeof(int32_t), "routing");
    c->sel_w = dev_alloc(P * sizeof(float), "routing");
    c->gap = dev_alloc(sizeof(float), "routing gap");
    c->moe_work = dev_alloc(FT_MAX(ft_cuda_moe_gemm_work_bytes((int)P, (int)E), ft_cuda_moe_rows_work_bytes((int)P, (int)E)),
                            "expert grouping");
    c->attn_part_floats = attn_part_floats(lim);
    c->attn_part = dev_alloc(c->attn_part_floats * sizeof(float), "attention partials");
    c->gemm_part = dev_alloc(GEMM_PART_FLOATS * sizeof(float), "GEMM partials");
    c->route_count = dev_alloc(sizeof(int), "router count");
    ft_cuda_memset(c->route_count, 0, sizeof(int), c->stream);
    if (c->ops.route_counts && lim->n_layer > 0 && lim->n_expert > 0) {
        size_t n = (size_t)lim->n_layer * (size_t)lim->n_expert * sizeof(unsigned long long);
        c->route_counts = dev_alloc(n, "route counters");
        ft_cuda_memset(c->route_counts, 0, n, c->stream);
    }
    c->staging = ft_cuda_host_alloc(T * W * sizeof(float));
    c->host_gap = ft_cuda_host_alloc(2 * sizeof(float));
    c->host_gap[0] = INFINITY;
    ft_cuda_memcpy_h2d(c->gap, &c->host_gap[0], sizeof(float), c->stream);
    c->staging_done = ft_cuda_event_init();
    c->pos_host = ft_cuda_host_alloc(sizeof(int32_t));
    c->pos_dev = dev_alloc(sizeof(int32_t), "step position");
}

static float *cuda_alloc(ft_backend *be, size_t n) {
    cuda_backend *c = cuda_of(be);
    if (c->n_bufs == c->cap_bufs) {
        c->cap_bufs = c->cap_bufs ? 2 * c->cap_bufs : 16;
        c->bufs = ft_realloc(c->bufs, (size_t)c->cap_bufs * sizeof(*c->bufs));
    }
    size_t bytes = (n ? n : 1) * sizeof(float);
    float *p = dev_alloc(bytes, "an activation buffer");
    ft_cuda_memset(p, 0, bytes, c->stream);
    c->bufs[c->n_bufs++] = p;
    return p;
}

static void cuda_read(ft_backend *be, const float *src, float *dst, size_t n) {
    cuda_backend *c = cuda_of(be);
    cuda_cpu_experts_flush(c->cpu_experts); // the stream may wait for the host's pending layer
    ft_cuda_memcpy_d2h(dst, src, n * sizeof(float), c->stream);
    if (c->reserved) {
        ft_cuda_memcpy_d2h(&c->host_gap[1], c->gap, sizeof(float), c->stream);
        ft_cuda_memcpy_h2d(c->gap, &c->host_gap[0], sizeof(float), c->stream);
    }
    ft_cuda_stream_sync(c->stream);
    if (c->reserved) be->min_route_gap = FT_MIN(be->min_route_gap, c->host_gap[1]);
}

static void cuda_free(ft_backend *be) {
    if (!be) return;
    cuda_backend *c = cuda_of(be);
    cuda_cpu_experts_flush(c->cpu_experts);
    ft_cuda_stream_sync(c->stream);
    for (int i = 0; i < c->n_bufs; i++) ft_cuda_free(c->bufs[i]);
    free(c->bufs);
    ft_cuda_free(c->xq);
    ft_cuda_free(c->hq);
    ft_cuda_free(c->h_gate);
    ft_cuda_free(c->h_up);
    ft_cuda_free(c->h_out);
    ft_cuda_free(c->logits);
    ft_cuda_free(c->sel);
    ft_cuda_free(c->sel_w);
    ft_cuda_free(c->gap);
    ft_cuda_free(c->moe_work);
    ft_cuda_free(c->attn_part);
    ft_cuda_free(c->gemm_part);
    ft_cuda_free(c->route_count);
    ft_cuda_free(c->route_counts);
    ft_cuda_free(c->pf_logits);
    ft_cuda_free(c->pf_w);
    ft_cuda_free(c->pf_gap);
    ft_cuda_free(c->pf_count);
    ft_cuda_host_free(c->staging);
    ft_cuda_host_free(c->host_gap);
    ft_cuda_event_free(c->staging_done);
    ft_cuda_host_free(c->pos_host);
    ft_cuda_free(c->pos_dev);
    for (int i = 0; i < (int)FT_ARRAY_LEN(c->step_graphs); i++) ft_cuda_graph_free(c->step_graphs[i].graph);
    cuda_cpu_experts_free(c->cpu_experts);
    ft_offload_free(c->offload);
    if (c->hy_tuning) moe_hybrid_tune_free(&c->hy_tune);
    free(c->hy_costs);
    ft_cuda_stream_free(c->stream);
    free(c);
}

static void check_on_device(const ft_tensor *t) {
    if (t->placement != FT_PLACEMENT_CUDA)
        ft_abort(__FILE__, __LINE__, "cuda backend: tensor %s is not on the device", t->name);
    if (!ft_tensor_packed(t)) // every copy to the device packs them (ft_weights_place, the overlays)
        ft_abort(__FILE__, __LINE__, "cuda backend: tensor %s: the kernels read matrices mat_bytes apart",
                 t->name);
}

// ---------------------------------------------------------------------------------------------
// Matmul

// From this many tokens the quantized matmuls and the MoE FFN take the tensor-core GEMMs
// (gemm_q.cu, moe_gemm.cu) instead of the matvec kernels (bench/bench_cuda_gemm.cu --tok=N); the
// dense GEMM splits over its input where its tiles alone would leave SMs idle (a decode step of a
// few dozen sequences).
#define GEMM_MIN_TOK 32
// The MoE FFN of a step of several sequences' decode rows (no prompt chunk among them) with
// resident experts takes the GEMM only from this many rows: the per-pair expert kernels beat it
// at 32 rows (H100; bench_cuda_gemm --tok=32 and the batched decode of 32 sequences), the GEMM
// wins at 64.
#define MOE_DECODE_GEMM_MIN_TOK 64

// From this many rows the MoE FFN below the GEMM takes ft_cuda_moe_rows (each selected expert
// read once for all its rows) instead of the per-pair kernels; both give the same bits. Below
// it most experts serve one pair of the step, which the per-pair kernels do faster (their two
// CTAs an SM against one): at 8 sequences the grouped kernels lost, at 32 they won (H100,
// docs/performance.md).
#define MOE_ROWS_MIN_TOK 32

// Can ft_cuda_moe_rows compute this layer's experts?
static bool moe_rows_fit(const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down, const ft_moe_params *p,
                         int64_t n_ff, int n_tok) {
    return ft_cuda_matvec_wants_q8_1(gate->type) && ft_cuda_matvec_wants_q8_1(down->type) && up->type == gate->type &&
           up->mat_bytes == gate->mat_bytes && n_ff % 32 == 0 && (int64_t)n_tok * p->n_expert_used <= 65535 &&
           p->n_expert <= 2048;
}

// Does a call over n_tok rows hold decode rows only (ft_backend.row_gemm: none of a prompt
// chunk's)?
static bool decode_rows(const cuda_backend *c, int n_tok) {
    const bool *rg = c->base.row_gemm;
    if (!rg || c->base.chunk_tok) return false;
    for (int i = 0; i < n_tok; i++)
        if (rg[i]) return false;
    return true;
}

// y (n_tok, n_rows) = x · wᵀ for n_rows x n_cols weights at w (device) of type type.
static void matmul_raw(cuda_backend *c, uint32_t type, const void *w, int64_t n_rows, int64_t n_cols,
                       const float *x, float *y, int n_tok) {
    FT_ASSERT(ft_cuda_matvec_supported(type));
    bool q = ft_cuda_matvec_wants_q8_1(type);
    if (q) quantize_x(c, x, n_cols, n_tok);
    if (q && shape_tok(c, n_tok) >= c->gemm_min_tok && ft_cuda_gemm_supported(type)) {
        ft_cuda_gemm_params gp = {.type = type, .w = w, .n_out = n_rows, .n_in = n_cols, .x = c->xq, .y = y,
                                  .n_tok = n_tok, .part = c->gemm_part, .part_floats = GEMM_PART_FLOATS};
        ft_cuda_gemm(&gp, c->stream);
        if (c->xq_src == y) c->xq_src = NULL;
        return;
    }
    if (!q && shape_tok(c, n_tok) > FT_CUDA_MATVEC_MAX_TOK) {
        // float weights (a router) for a batch: one launch, each weight tile read per 32 tokens
        ft_cuda_matvec_params mp = {.type = type, .w = w, .n_rows = n_rows, .n_cols = n_cols, .x = x, .y = y,
                                    .n_tok = n_tok, .part = c->gemm_part, .part_floats = GEMM_PART_FLOATS};
        ft_cuda_gemm_f(&mp, c->stream);
        if (c->xq_src == y) c->xq_src = NULL;
        return;
    }
    size_t xq_row = ft_cuda_q8_1_bytes(n_cols, 1);
    for (int t0 = 0; t0 < n_tok; t0 += FT_CUDA_MATVEC_MAX_TOK) {
        int nt = FT_MIN(FT_CUDA_MATVEC_MAX_TOK, n_tok - t0);
        ft_cuda_matvec_params mp = {
            .type = type, .w = w, .n_rows = n_rows, .n_cols = n_cols,
            .x = q ? (const void *)((const uint8_t *)c->xq + (size_t)t0 * xq_row) : (const void *)(x + (size_t)t0 * n_cols),
            .y = y + (size_t)t0 * n_rows, .n_tok = nt,
        };
        ft_cuda_matvec(&mp, c->stream);
    }
    if (c->xq_src == y) c->xq_src = NULL; // (never done, but then xq would describe old data)
}

// The matmul op's work, for the ops built from it (they note themselves, not each matmul).
static void matmul_tensor(cuda_backend *c, const ft_tensor *w, const float *x, float *y, int n_tok) {
    FT_ASSERT(c->reserved && n_tok <= c->lim.max_tok && w->ne[2] == 1);
    check_on_device(w);
    if (n_tok == 0) return;
    matmul_raw(c, w->type, w->data, w->ne[1], w->ne[0], x, y, n_tok);
}

static void flush_matmuls(cuda_backend *c) {
    int n = c->n_mms;
    c->n_mms = 0;
    if (n == 0) return;
    const struct pending_matmul *m = c->mms;
    if (n == 1 && m->acc) { // (decode-sized and quantized: cuda_add)
        quantize_x(c, m->x, m->w->ne[0], m->n_tok);
        ft_cuda_matvec_params mp = {.type = m->w->type, .w = m->w->data, .n_rows = m->w->ne[1], .n_cols = m->w->ne[0],
                                    .x = c->xq, .y = m->y, .n_tok = m->n_tok, .bias = m->bias, .acc = m->acc};
        ft_cuda_matvec(&mp, c->stream);
        if (c->xq_src == m->y || c->xq_src == m->acc) c->xq_src = NULL;
        return;
    }
    if (n == 1 && !m->bias) {
        matmul_tensor(c, m->w, m->x, m->y, m->n_tok);
        return;
    }
    bool q = ft_cuda_matvec_wants_q8_1(m->w->type); // else float weights on float x
    if (q) quantize_x(c, m->x, m->w->ne[0], m->n_tok);
    ft_cuda_matvec_params ps[FT_CUDA_MATVEC_MAX_SEG];
    for (int i = 0; i < n; i++)
        ps[i] = (ft_cuda_matvec_params){.type = m[i].w->type, .w = m[i].w->data, .n_rows = m[i].w->ne[1],
                                        .n_cols = m[i].w->ne[0], .x = q ? (const void *)c->xq : (const void *)m->x,
                                        .y = m[i].y, .n_tok = m[i].n_tok, .bias = m[i].bias};
    ft_cuda_matvec_multi(ps, n, c->stream);
}

// Decode-sized quantized matmuls wait (see mms) so that those of one input share a launch.
static void cuda_matmul(ft_backend *be, const ft_tensor *w, const float *x, float *y, int n_tok) {
    cuda_backend *c = (cuda_backend *)be;
    FT_ASSERT(c->reserved && n_tok <= c->lim.max_tok && w->ne[2] == 1);
    check_on_device(w);
    const struct pending_matmul *m0 = &c->mms[0];
    bool join = c->n_mms > 0 && c->n_mms < FT_CUDA_MATVEC_MAX_SEG && m0->x == x && m0->n_tok == n_tok &&
                m0->w->type == w->type && m0->w->ne[0] == w->ne[0] && y != x;
    if (!join) cuda_of(be);
    if (!op_runs(c, OP_MATMUL, w->data, x, (int64_t)(uintptr_t)y, n_tok)) return;
    // (float weights too: qwen35moe's alpha and beta share a launch; their x needs 16-byte rows)
    bool wait = ft_cuda_matvec_wants_q8_1(w->type) ||
                (ft_cuda_matvec_supported(w->type) && (uintptr_t)x % 16 == 0 && w->ne[0] % 4 == 0);
    if (n_tok >= 1 && shape_tok(c, n_tok) <= FT_CUDA_MATVEC_MAX_TOK && wait && y != x)
        c->mms[c->n_mms++] = (struct pending_matmul){w, x, y, n_tok, NULL, NULL};
    else
        matmul_tensor(c, w, x, y, n_tok);
}

// ---------------------------------------------------------------------------------------------
// Element-wise ops

// Rows of the embedding table (host memory) dequantized on the host into pinned staging and
// copied over; the event keeps the next call from overwriting staging before its copy ran.
static void cuda_get_rows(ft_backend *be, const ft_tensor *t, const int32_t *ids, float *y, int n_tok) {
    cuda_backend *c = cuda_op(be);
    FT_ASSERT(c->reserved && n_tok <= c->lim.max_tok && t->ne[0] <= round32(c->lim.max_width));
    if (t->placement != FT_PLACEMENT_CPU)
        ft_abort(__FILE__, __LINE__, "cuda backend: get_rows wants the table %s in host memory", t->name);
    const ft_quant_ops *q = ft_quant_ops_find(t->type);
    // in a graph step, step_begin waited for staging and step_end records its event
    bool enqueue = op_runs(c, OP_GET_ROWS, t->data, y, n_tok, t->ne[0]);
    if (c->mode == STEP_DIRECT && c->staging_used) {
        cuda_cpu_experts_flush(c->cpu_experts); // (never pending here in practice: steps flush)
        ft_cuda_event_sync(c->staging_done);
    }
    for (int i = 0; i < n_tok; i++) {
        FT_ASSERT(ids[i] >= 0 && ids[i] < t->ne[1]);
        q->to_float((const uint8_t *)t->data + (size_t)ids[i] * t->row_bytes, c->staging + (size_t)i * t->ne[0], t->ne[0]);
    }
    if (!enqueue) return;
    ft_cuda_memcpy_h2d(y, c->staging, (size_t)n_tok * (size_t)t->ne[0] * sizeof(float), c->stream);
    if (c->mode != STEP_DIRECT) return;
    ft_cuda_event_record(c->staging_done, c->stream);
    c->staging_used = true;
}

static void cuda_rms_norm(ft_backend *be, const float *x, const ft_tensor *w, float *y, int n_rows, int n,
                          float eps) {
    // a norm without a weight (gemma4's V) multiplies by nothing
    const float *wd = NULL;
    if (ft_tensor_present(w)) {
        FT_ASSERT(w->type == FT_TYPE_F32 && w->ne[0] == n);
        check_on_device(w);
        wd = w->data;
    }
    cuda_backend *c = (cuda_backend *)be;
    // the residual add just before, on this very input, runs inside the norm's kernel
    const float *d = NULL;
    if (c->add_y == x && c->add_n == (size_t)n_rows * (size_t)n) {
        d = c->add_x;
        c->add_y = NULL;
    }
    // a norm in place of short rows (a per-head norm) waits for the rope of its buffer (see
    // norm_rope.cu); the norms already waiting are on other buffers and may wait on
    bool defer = !d && x == y && n <= 256 && c->n_norms < 2;
    for (int i = 0; i < c->n_norms; i++) defer = defer && c->norms[i].x != x;
    if (defer) {
        flush_row_norm(c);
        flush_add(c);
        flush_matmuls(c); // (before xq is dropped: they may read it)
        flush_rows(c);
        flush_rope(c);
        c->xq_src = NULL;
    } else {
        cuda_op(be);
    }
    if (!op_runs(c, OP_RMS_NORM, x, y, n_rows, n)) return;
    if (defer) {
        c->norms[c->n_norms++] = (struct pending_norm){(float *)x, wd, n_rows, n, eps};
        return;
    }
    // one row with no add left to do (a decode step's FFN norm: the add rode in the output
    // projection) waits: the decode router of y may normalise it itself (route_on_device)
    if (c->fuse_norm && !d && n_rows == 1 && x != y && n % 32 == 0 && n <= FT_CUDA_ROUTER_NORM_MAX) {
        c->rnorm = (struct pending_row_norm){(float *)x, y, wd, n, eps};
        c->rnorm_pending = true;
        return;
    }
    // rows that fit xq are quantized in the same kernel, for the matmuls that read y next
    bool fuse = xq_fits(c, n, n_rows);
    ft_cuda_rms_norm((float *)x, d, wd, y, fuse ? c->xq : NULL, n_rows, n, eps, c->stream);
    if (fuse) {
        c->xq_src = y;
        c->xq_cols = n;
        c->xq_tok = n_rows;
    }
}

static void cuda_add(ft_backend *be, float *y, const float *x, size_t n) {
    cuda_backend *c = (cuda_backend *)be;
    // the output of the one matmul waiting (a decode step's output projection) is added into
    // y by its own kernel
    struct pending_matmul *m = c->n_mms == 1 ? &c->mms[0] : NULL;
    bool into = c->fuse_norm && m && m->y == x && !m->acc && y != x && m->n_tok <= FT_CUDA_MATVEC_MAX_TOK &&
                ft_cuda_matvec_wants_q8_1(m->w->type) && (size_t)m->n_tok * (size_t)m->w->ne[1] == n;
    if (into) m->acc = y;
    cuda_op(be);
    if (!op_runs(c, OP_ADD, y, x, (int64_t)n, 0) || into) return;
    c->add_y = y; // launched by the next op (see flush_add)
    c->add_x = x;
    c->add_n = n;
}

static void cuda_add_bias(ft_backend *be, float *y, const ft_tensor *b, int n_rows, int n) {
    FT_ASSERT(b->type == FT_TYPE_F32 && b->ne[0] == n);
    check_on_device(b);
    cuda_backend *c = (cuda_backend *)be;
    // the bias of a matmul still waiting goes into its kernel (and the next matmul of the same
    // input may still join it)
    struct pending_matmul *m = NULL;
    for (int i = 0; i < c->n_mms; i++)
        if (c->mms[i].y == y) m = &c->mms[i];
    bool join = m && !m->bias && m->n_tok == n_rows && m->w->ne[1] == n && ft_cuda_matvec_wants_q8_1(m->w->type);
    if (!join) cuda_op(be);
    if (!op_runs(c, OP_ADD_BIAS, y, b->data, n_rows, n)) return;
    if (join) m->bias = b->data;
    else ft_cuda_add_bias(y, b->data, n_rows, n, c->stream);
}

// The CPU op's YaRN constants (cpu_attn.c), computed here on the host.
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

static bool same_rope(const ft_cuda_rope_params *a, const ft_cuda_rope_params *b) {
    return a->n_rot == b->n_rot && a->neox == b->neox && a->theta_scale == b->theta_scale &&
           a->freq_scale == b->freq_scale && a->ext_factor == b->ext_factor && a->attn_factor == b->attn_factor &&
           a->corr0 == b->corr0 && a->corr1 == b->corr1 && a->pos_dev == b->pos_dev && a->sect_dims == b->sect_dims &&
           !memcmp(a->sections, b->sections, sizeof(a->sections)) && a->freq_factors == b->freq_factors &&
           a->rows.pos == b->rows.pos && a->rows.blocks == b->rows.blocks;
}

// The per-head norm waiting on x over n_rows rows of n (norms), taken out of the list: the op
// that follows it (a rope, an output gate) runs it inside its kernel. The others wait on other
// buffers (at most one waits on each).
static bool take_norm(cuda_backend *c, const float *x, int n_rows, int n, struct pending_norm *out) {
    for (int i = 0; i < c->n_norms; i++) {
        const struct pending_norm *q = &c->norms[i];
        if (q->x != x || q->n_rows != n_rows || q->n != n) continue;
        *out = *q;
        for (int j = i + 1; j < c->n_norms; j++) c->norms[j - 1] = c->norms[j];
        c->n_norms--;
        return true;
    }
    return false;
}

// The device form of rows of several sequences (NULL: none).
static ft_cuda_seq_rows seq_rows_of(const ft_seq_rows *r) {
    return r ? (ft_cuda_seq_rows){r->pos, r->blocks} : (ft_cuda_seq_rows){NULL, NULL};
}

// rope of one sequence's n_tok tokens from pos0, or of several sequences' rows (seqs).
static void rope_of(ft_backend *be, float *x, int n_tok, int n_head, int head_dim, int pos0, const ft_seq_rows *seqs,
                    const ft_rope_params *p) {
    FT_ASSERT(p->n_rot % 2 == 0 && p->n_rot <= head_dim && (!seqs || seqs->n == n_tok));
    const float *ff = NULL;
    if (ft_tensor_present(p->freq_factors)) {
        FT_ASSERT(p->freq_factors->type == FT_TYPE_F32 && p->freq_factors->ne[0] >= p->n_rot / 2);
        check_on_device(p->freq_factors);
        ff = p->freq_factors->data;
    }
    cuda_backend *c = (cuda_backend *)be;
    // the waiting norm of this buffer, if its rows are these heads, runs fused with the rope;
    // one of other rows on it runs first
    struct pending_norm norm = {0};
    if (!take_norm(c, x, n_tok * n_head, head_dim, &norm))
        for (int i = 0; i < c->n_norms; i++)
            if (c->norms[i].x == x) {
                flush_norms(c);
                break;
            }
    flush_row_norm(c);
    flush_add(c);
    flush_matmuls(c);
    flush_rows(c);
    c->xq_src = NULL;
    float lo = floorf(yarn_corr_dim(p->n_rot, p->n_ctx_orig, p->beta_fast, p->freq_base));
    float hi = ceilf(yarn_corr_dim(p->n_rot, p->n_ctx_orig, p->beta_slow, p->freq_base));
    ft_cuda_rope_params rp = {
        .n_rot = p->n_rot, .neox = p->neox, .theta_scale = powf(p->freq_base, -2.0f / p->n_rot),
        .freq_scale = p->freq_scale, .ext_factor = p->ext_factor, .attn_factor = p->attn_factor,
        .corr0 = FT_MAX(0.0f, lo), .corr1 = FT_MIN((float)(p->n_rot - 1), hi),
        .pos_dev = seqs ? NULL : step_pos_dev(c), .sect_dims = p->imrope ? p->sections[0] + p->sections[1] + p->sections[2] + p->sections[3] : 0,
        .sections = {p->sections[0], p->sections[1], p->sections[2]}, .freq_factors = ff,
        .rows = seq_rows_of(seqs),
    };
    // (rows of several sequences: each its own position; the step's offset plays no part)
    int rel = seqs ? 0 : step_rel(c, pos0);
    struct pending_rope r = {
        .buf = {{x, norm.w, n_head}}, .n_buf = 1, .n_tok = n_tok, .head_dim = head_dim, .pos = rel,
        .eps = norm.eps, .rp = rp, .norm = norm.x != NULL,
    };
    // q's (norm+)rope waits for k's (same shape and rotation, another buffer): one launch; a
    // rope alone waits too where norm_rope.cu takes its heads, in decode-sized steps only (its
    // CTA a row is slower than rope.cu's thread a pair for a prompt's thousands of rows)
    struct pending_rope *w = &c->rope;
    bool join = c->rope_pending && w->n_buf == 1 && w->norm == r.norm && w->buf[0].x != x && w->n_tok == n_tok &&
                w->head_dim == head_dim && w->pos == r.pos && w->eps == r.eps && same_rope(&w->rp, &rp);
    if (!join) flush_rope(c);
    if (!op_runs(c, OP_ROPE, x, p, ((int64_t)n_tok << 32) | (uint32_t)n_head, step_pos_sig(c, seqs, pos0))) return;
    if (join) {
        w->buf[1] = r.buf[0];
        w->n_buf = 2;
        // decode-sized: the cache rows may join (cuda_set_rows); a prompt's launch goes now
        if (n_tok > FT_CUDA_MATVEC_MAX_TOK) flush_rope(c);
    } else if (norm.x || (head_dim <= FT_CUDA_NORM_ROPE_MAX_HD && n_tok <= FT_CUDA_MATVEC_MAX_TOK)) {
        c->rope = r; // launched with the next norm+rope or by the next op (flush_rope)
        c->rope_pending = true;
    } else {
        ft_cuda_rope(x, n_tok, n_head, head_dim, rel, &rp, c->stream);
    }
}

static void cuda_rope(ft_backend *be, float *x, int n_tok, int n_head, int head_dim, int pos0,
                      const ft_rope_params *p) {
    rope_of(be, x, n_tok, n_head, head_dim, pos0, NULL, p);
}

static void cuda_rope_seqs(ft_backend *be, float *x, int n_head, int head_dim, const ft_seq_rows *rows,
                           const ft_rope_params *p) {
    rope_of(be, x, rows->n, n_head, head_dim, 0, rows, p);
}

static void cuda_hadamard(ft_backend *be, float *x, int n_rows, int row_len, int n) {
    FT_ASSERT(n > 0 && (n & (n - 1)) == 0 && row_len % n == 0);
    cuda_backend *c = cuda_op(be);
    if (!op_runs(c, OP_HADAMARD, x, NULL, (int64_t)n_rows * row_len, n)) return;
    ft_cuda_hadamard(x, (int64_t)n_rows * row_len / n, n, c->stream);
}

// Whether rows r (k's, then v's) can be written by the waiting joined norm+rope of q and k:
// k's rows are its buffer 1, v's have k's shape, both at its positions (which the launch uses).
static bool rows_join_rope(const cuda_backend *c, const struct pending_rows *r) {
    const struct pending_rope *w = &c->rope;
    if (!c->rope_pending || w->n_buf != 2 || r->n_rows != w->n_tok || r->pos != w->pos ||
        r->pos_dev != w->rp.pos_dev || r->seqs.pos != w->rp.rows.pos || r->seqs.blocks != w->rp.rows.blocks ||
        r->n != (int64_t)w->buf[1].n_head * w->head_dim)
        return false;
    if (r->type != FT_TYPE_F16 && !(r->type == FT_TYPE_Q8_0 && w->head_dim % 32 == 0)) return false;
    if (!w->has_kv) return r->dst.x == w->buf[1].x; // k's
    return !w->kv.v.x && r->type == w->kv.type && r->blocks == w->kv.blocks &&
           r->dst.dst != w->kv.k.dst && r->dst.x != w->buf[0].x && r->dst.x != w->buf[1].x; // v's
}

// set_rows of one sequence's rows from pos0 (through blocks), or of several sequences' (seqs).
static void set_rows_of(ft_backend *be, ft_tensor *cache, const int32_t *blocks, int pos0, const ft_seq_rows *seqs,
                        const float *x, int n_rows) {
    FT_ASSERT(pos0 >= 0 && (blocks || seqs || pos0 + n_rows <= cache->ne[1]) && (!seqs || seqs->n == n_rows));
    check_on_device(cache);
    cuda_backend *c = (cuda_backend *)be;
    int rel = seqs ? 0 : step_rel(c, pos0); // positions past *pos_dev in a graph step (may be negative)
    struct pending_rows r = {
        .type = cache->type, .dst = {cache->data, cache->row_bytes, x}, .blocks = blocks,
        .pos_dev = seqs ? NULL : step_pos_dev(c), .seqs = seq_rows_of(seqs), .pos = rel, .n_rows = n_rows,
        .n = cache->ne[0],
    };
    // decode: k's rows, then v's, ride in the waiting norm+rope's launch (ft_cuda_norm_rope_kv)
    if (rows_join_rope(c, &r)) {
        flush_row_norm(c);
        flush_norms(c);
        flush_add(c);
        flush_matmuls(c);
        flush_rows(c);
        c->xq_src = NULL;
        if (!op_runs(c, OP_SET_ROWS, cache->data, x, n_rows, step_pos_sig(c, seqs, pos0))) return;
        struct pending_rope *w = &c->rope;
        if (!w->has_kv) {
            w->kv = (ft_cuda_kv_rows){.type = r.type, .k = r.dst, .blocks = blocks};
            w->has_kv = true;
            return;
        }
        w->kv.v = r.dst;
        flush_rope(c);
        return;
    }
    // the rows waiting (k) and these (v) in one launch when they share type and shape
    const struct pending_rows *w = &c->rows;
    bool join = c->rows_pending && w->type == r.type && w->n_rows == r.n_rows && w->n == r.n &&
                w->blocks == r.blocks && w->pos_dev == r.pos_dev && w->seqs.pos == r.seqs.pos &&
                w->seqs.blocks == r.seqs.blocks && w->pos == r.pos && w->dst.dst != r.dst.dst;
    if (join) {
        flush_row_norm(c);
        flush_norms(c);
        flush_add(c);
        flush_matmuls(c);
        flush_rope(c);
        c->xq_src = NULL;
    } else {
        cuda_op(be);
    }
    if (!op_runs(c, OP_SET_ROWS, cache->data, x, n_rows, step_pos_sig(c, seqs, pos0))) return;
    if (join) {
        ft_cuda_set_rows_dst d[2] = {w->dst, r.dst};
        ft_cuda_set_rows(r.type, d, 2, r.blocks, &r.seqs, r.pos_dev, r.pos, r.n_rows, r.n, c->stream);
        c->rows_pending = false;
        return;
    }
    c->rows = r; // launched with the next set_rows or by the next op (flush_rows)
    c->rows_pending = true;
}

static void cuda_set_rows(ft_backend *be, ft_tensor *cache, const int32_t *blocks, int pos0, const float *x,
                          int n_rows) {
    set_rows_of(be, cache, blocks, pos0, NULL, x, n_rows);
}

static void cuda_set_rows_seqs(ft_backend *be, ft_tensor *cache, const ft_seq_rows *rows, const float *x) {
    set_rows_of(be, cache, NULL, 0, rows, x, rows->n);
}

// A device-to-device copy on the stream, after what is pending (cuda_op): in order with the
// steps before (which wrote src) and after (which read dst). Only between steps (batch.c calls
// it when a sequence starts on a reused prefix), so no graph ever records it.
static void cuda_copy_rows(ft_backend *be, ft_tensor *cache, int64_t dst, int64_t src, int64_t n_rows) {
    cuda_backend *c = cuda_op(be);
    FT_ASSERT(c->mode == STEP_DIRECT);
    check_on_device(cache);
    FT_ASSERT(n_rows >= 0 && src >= 0 && dst >= 0);
    FT_ASSERT(src + n_rows <= cache->ne[1] && dst + n_rows <= cache->ne[1]);
    FT_ASSERT(dst + n_rows <= src || src + n_rows <= dst);
    if (n_rows == 0) return;
    uint8_t *d = cache->data;
    ft_cuda_memcpy_d2d(d + (size_t)dst * cache->row_bytes, d + (size_t)src * cache->row_bytes,
                       (size_t)n_rows * cache->row_bytes, c->stream);
}

static void cuda_attention(ft_backend *be, const ft_attn_params *p) {
    cuda_backend *c = cuda_op(be);
    const ft_seq_rows *seqs = p->seqs; // rows of several sequences: one query each
    FT_ASSERT(p->head_dim <= c->lim.max_head_dim && (seqs ? seqs->n == p->n_tok : p->pos0 + p->n_tok <= c->lim.max_ctx));
    check_on_device(p->k_cache);
    check_on_device(p->v_cache);
    if (!op_runs(c, OP_ATTENTION, p->q, p->k_cache->data, ((int64_t)p->n_tok << 32) | (uint32_t)p->window,
                 step_pos_sig(c, seqs, p->pos0)))
        return;
    ft_cuda_attn_params ap = {
        .q = p->q, .out = p->out, .k = p->k_cache->data, .v = p->v_cache->data, .blocks = seqs ? NULL : p->blocks,
        .k_type = p->k_cache->type, .v_type = p->v_cache->type,
        .k_row_bytes = p->k_cache->row_bytes, .v_row_bytes = p->v_cache->row_bytes,
        .n_tok = p->n_tok, .pos0 = seqs ? 0 : step_rel(c, p->pos0), .pos_dev = seqs ? NULL : step_pos_dev(c),
        .n_head = p->n_head, .n_head_kv = p->n_head_kv, .head_dim = p->head_dim, .window = p->window,
        .scale = p->scale, .rows = seq_rows_of(seqs),
    };
    if (ft_tensor_present(p->sinks)) {
        check_on_device(p->sinks);
        FT_ASSERT(p->sinks->type == FT_TYPE_F32 && p->sinks->ne[0] >= p->n_head);
        ap.sinks = p->sinks->data;
    }
    size_t need = ft_cuda_attention_part_floats(p->n_tok, seqs != NULL, p->n_head, p->n_head_kv, p->head_dim);
    ap.part = need <= c->attn_part_floats ? c->attn_part : NULL;
    // decode writes the q8_1 form of its output too, for the output projection that follows
    int64_t width = (int64_t)p->n_head * p->head_dim;
    // prefill batches on tensor cores (flash_attn.cu) where it takes the shape (the chunk's, for
    // a step resuming one); decode and the rest on attention.cu's kernels
    ft_cuda_attn_params shape = ap;
    shape.n_tok = shape_tok(c, p->n_tok);
    bool flash = !seqs && c->flash && ft_cuda_flash_attention_fits(&shape);
    bool quantize = !flash && ft_cuda_attention_quantizes(seqs ? 1 : p->n_tok, p->head_dim) &&
                    width <= round32(c->lim.max_width) && p->n_tok <= c->lim.max_tok;
    ap.out_q = quantize ? c->xq : NULL;
    if (flash) ft_cuda_flash_attention(&ap, c->stream);
    else ft_cuda_attention(&ap, c->stream);
    if (quantize) {
        c->xq_src = p->out;
        c->xq_cols = width;
        c->xq_tok = p->n_tok;
    }
}

// The gate writes x's q8_1 form for the output projection that reads it next, and a per-head
// norm of x still waiting (qwen35moe's gated DeltaNet norm) runs in the same kernel.
static void cuda_gate_mul(ft_backend *be, float *x, const float *g, int n_tok, int n_head, int head_dim, int g_width,
                          enum ft_act act) {
    cuda_backend *c = (cuda_backend *)be;
    struct pending_norm norm;
    bool with_norm = take_norm(c, x, n_tok * n_head, head_dim, &norm);
    cuda_op(be);
    if (!op_runs(c, OP_GATE_MUL, x, g, n_tok, (int64_t)g_width * 4 + act)) return;
    int width = n_head * head_dim;
    bool q = xq_fits(c, width, n_tok);
    if (with_norm) {
        ft_cuda_norm_gate gt = {.g = g, .g_width = g_width, .n_head = n_head, .act = (int)act};
        ft_cuda_rms_norm_gate(x, NULL, norm.w, &gt, x, q ? c->xq : NULL, norm.n_rows, norm.n, norm.eps, c->stream);
    } else {
        ft_cuda_gate_mul(x, g, q ? c->xq : NULL, n_tok, n_head, head_dim, g_width, (int)act, c->stream);
    }
    if (q) {
        c->xq_src = x;
        c->xq_cols = width;
        c->xq_tok = n_tok;
    }
}

static void cuda_split_heads(ft_backend *be, const float *x, float *a, float *b, int n_rows, int n_head,
                             int head_dim) {
    cuda_backend *c = cuda_op(be);
    if (!op_runs(c, OP_SPLIT_HEADS, x, a, (int64_t)(uintptr_t)b, ((int64_t)n_rows << 32) | (uint32_t)head_dim)) return;
    ft_cuda_split_heads(x, a, b, n_rows, n_head, head_dim, c->stream);
}

static void cuda_delta_net(ft_backend *be, const ft_delta_params *p) {
    cuda_backend *c = cuda_op(be);
    int C = (2 * p->n_k_heads + p->n_v_heads) * p->head_dim;
    // C <= max_width: the conv's scratch, h_up, holds n_tok rows of C; the chunked rule's
    // workspace is h_gate (the FFN's scratch, free between the FFN ops)
    FT_ASSERT(p->n_tok <= c->lim.max_tok && C <= c->lim.max_width && p->d_conv >= 1 &&
              p->d_conv <= FT_CUDA_DELTA_MAX_CONV);
    FT_ASSERT(p->conv_w->type == FT_TYPE_F32 && p->conv_w->ne[0] == p->d_conv && p->conv_w->ne[1] == C &&
              p->dt->type == FT_TYPE_F32 && p->a->type == FT_TYPE_F32);
    FT_ASSERT(p->conv_state->ne[0] * p->conv_state->ne[1] == (int64_t)(p->d_conv - 1) * C);
    FT_ASSERT(p->state->ne[0] == (int64_t)p->n_v_heads * p->head_dim * p->head_dim);
    check_on_device(p->conv_w);
    check_on_device(p->state);
    if (!op_runs(c, OP_DELTA_NET, p->qkv, p->state->data, p->n_tok, step_rel(c, p->pos0))) return;
    ft_cuda_delta_params dp = {
        .qkv = p->qkv, .scratch = c->h_up, .chunk_ws = c->delta_chunked ? c->h_gate : NULL,
        .chunk_ws_floats = c->ffn_scratch_floats, .alpha = p->alpha, .beta = p->beta, .conv_w = p->conv_w->data, .dt = p->dt->data,
        .a = p->a->data, .conv_state = p->conv_state->data, .state = p->state->data, .out = p->out,
        .n_tok = p->n_tok, .pos0 = step_rel(c, p->pos0), .pos_dev = step_pos_dev(c), .n_k_heads = p->n_k_heads,
        .n_v_heads = p->n_v_heads, .head_dim = p->head_dim, .d_conv = p->d_conv, .k_grouped = p->k_grouped,
        .eps = p->eps,
    };
    ft_cuda_delta_net(&dp, c->stream);
}

// ---------------------------------------------------------------------------------------------
// FFN ops

// Does a decode-sized dense FFN take three launches: gate and up in one (one input, one type),
// the activation writing h's q8_1 form as well, and down reading that? (The experts' fused GLU
// kernel, a CTA per 32 rows, was slower for one shared expert's few rows: too few CTAs.)
static bool ffn_fused(const cuda_backend *c, const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down,
                      int n_tok) {
    return shape_tok(c, n_tok) <= FT_CUDA_MATVEC_MAX_TOK && ft_cuda_matvec_wants_q8_1(gate->type) &&
           up->type == gate->type && up->ne[0] == gate->ne[0] && ft_cuda_matvec_wants_q8_1(down->type) &&
           gate->ne[1] % 32 == 0;
}

static void cuda_ffn(ft_backend *be, const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down,
                     const float *x, float *y, int n_tok, enum ft_glu act) {
    FT_ASSERT(act == FT_GLU_SILU || act == FT_GLU_GELU);
    // cuda_of, not cuda_op: x is only read, so the q8_1 copy of it that the norm before wrote
    // (xq) still serves gate and up (the MoE FFN before a shared expert leaves it too)
    cuda_backend *c = cuda_of(be);
    if (c->xq_src == y || c->xq_src == c->h_gate || c->xq_src == c->h_up) c->xq_src = NULL;
    int64_t n_ff = gate->ne[1];
    FT_ASSERT(n_ff <= c->lim.max_width && up->ne[1] == n_ff && down->ne[0] == n_ff);
    if (!op_runs(c, OP_FFN, gate->data, x, (int64_t)(uintptr_t)y, n_tok)) return;
    const ft_cuda_glu glu = {act == FT_GLU_GELU ? FT_CUDA_GLU_GELU : FT_CUDA_GLU_SILU, 0.0f, 0.0f};
    if (ffn_fused(c, gate, up, down, n_tok)) {
        check_on_device(gate);
        check_on_device(up);
        check_on_device(down);
        quantize_x(c, x, gate->ne[0], n_tok);
        ft_cuda_matvec_params ps[2] = {
            {.type = gate->type, .w = gate->data, .n_rows = n_ff, .n_cols = gate->ne[0], .x = c->xq, .y = c->h_gate, .n_tok = n_tok},
            {.type = up->type, .w = up->data, .n_rows = n_ff, .n_cols = up->ne[0], .x = c->xq, .y = c->h_up, .n_tok = n_tok},
        };
        ft_cuda_matvec_multi(ps, 2, c->stream);
        ft_cuda_glu_act_q(c->h_gate, c->h_up, c->hq, (size_t)n_tok * (size_t)n_ff, &glu, c->stream);
        ft_cuda_matvec_params mp = {.type = down->type, .w = down->data, .n_rows = down->ne[1], .n_cols = n_ff,
                                    .x = c->hq, .y = y, .n_tok = n_tok};
        ft_cuda_matvec(&mp, c->stream);
        return;
    }
    c->xq_src = NULL; // (cuda_op's rule from here on)
    matmul_tensor(c, gate, x, c->h_gate, n_tok);
    matmul_tensor(c, up, x, c->h_up, n_tok);
    ft_cuda_glu_act(c->h_gate, c->h_up, (size_t)n_tok * (size_t)n_ff, &glu, c->stream);
    c->xq_src = NULL;
    matmul_tensor(c, down, c->h_gate, y, n_tok);
}

// One bank of experts for every (token, slot) pair: y row p = W[sel[p]] · x row p / x_div; or a
// fused form (ft_cuda_matvec_ids_params: w_up, sum_w, y_q) when fused is given; fused->x, when
// set, is x's q8_1 form already made (the GLU's y_q), else x is quantized here.
static void expert_matvec(cuda_backend *c, const ft_tensor *w, const float *x, int x_div, float *y, int n_pairs,
                          const ft_cuda_matvec_ids_params *fused) {
    check_on_device(w);
    FT_ASSERT(ft_cuda_matvec_supported(w->type));
    bool q = ft_cuda_matvec_wants_q8_1(w->type);
    const void *xin = q ? (const void *)c->xq : (const void *)x;
    if (fused && fused->x) xin = fused->x;
    else if (q) quantize_x(c, x, w->ne[0], n_pairs / x_div);
    ft_cuda_matvec_ids_params ip = {
        .type = w->type, .w = w->data, .mat_bytes = w->mat_bytes, .n_rows = w->ne[1], .n_cols = w->ne[0],
        .x = xin, .ids = c->expert_ids, .x_div = x_div, .y = y, .n_pairs = n_pairs,
    };
    if (fused) {
        ip.w_up = fused->w_up;
        ip.sum_w = fused->sum_w;
        ip.k = fused->k;
        ip.y_q = fused->y_q;
        ip.ex = fused->ex;
    }
    ft_cuda_matvec_ids(&ip, c->stream);
}

// The decode router's launch for router weights r of input x (fitting ft_cuda_moe_router_fits).
static ft_cuda_router_params router_launch(const cuda_backend *c, const ft_tensor *r, const float *x) {
    return (ft_cuda_router_params){.w_type = r->type, .w = r->data, .x = x, .n_embd = r->ne[0], .count = c->route_count};
}

// Does router weight r (the layer's, or the next layer's for the prefetch) of layer p take the
// one-launch decode router?
static bool decode_router(const ft_tensor *r, const ft_moe_params *p, int n_tok) {
    return ft_cuda_moe_router_fits(r->type, n_tok, p->n_expert, p->n_expert_used) && r->ne[2] == 1 &&
           r->ne[1] == p->n_expert;
}

// Can the decode router of this layer take the waiting one-row norm of its input (norm->y ==
// its x)? Not where the router reads an input of its own, or the CPU reads x (cpu mode, hybrid).
static bool router_takes_norm(const cuda_backend *c, const ft_moe_params *p, const struct pending_row_norm *norm,
                              int n_tok) {
    if (p->router_x || c->cpu_experts || !decode_router(p->router, p, n_tok)) return false;
    ft_cuda_router_params r = router_launch(c, p->router, norm->x);
    return p->router->ne[0] == norm->n && ft_cuda_moe_router_norm_fits(&r);
}

// The layer's routing on the device: c->sel and c->sel_w (n_tok, k), the smallest gap into c->gap.
// With to_cpu (--moe-backend cpu) the decode router's launch also exports x and the routing to
// the CPU experts where it can: returns whether it did. With norm (router_takes_norm), x is the
// norm's output, which the router's launch computes from norm->x (and its q8_1 form into xq).
static bool route_on_device(cuda_backend *c, const ft_moe_params *p, const float *x, int n_tok, bool to_cpu,
                            const struct pending_row_norm *norm) {
    int k = p->n_expert_used;
    // the router reads its own input where the layer has one (gemma4); the export would send
    // that input as the experts', so cuda_moe_ffn does not ask for it there (the meeting does)
    FT_ASSERT(!(to_cpu && p->router_x));
    if (p->router_x) x = p->router_x;
    const float *bias = NULL;
    if (ft_tensor_present(p->sel_bias)) {
        check_on_device(p->sel_bias);
        FT_ASSERT(p->sel_bias->type == FT_TYPE_F32);
        bias = p->sel_bias->data;
    }
    ft_cuda_route_params rp = {
        .logits = c->logits, .bias = bias, .sel = c->sel, .w = c->sel_w, .gap = c->gap,
        .n_tok = n_tok, .n_expert = p->n_expert, .k = k, .softmax = p->gating == FT_GATING_SOFTMAX,
        .norm_w = p->norm_w, .w_scale = p->w_scale, .softmax_weight = p->gating == FT_GATING_SOFTMAX_WEIGHT,
    };
    if (c->route_counts) {
        FT_ASSERT(p->layer >= 0 && p->layer < c->lim.n_layer);
        rp.counts = c->route_counts + (size_t)p->layer * (size_t)c->lim.n_expert;
    }
    if (ft_tensor_present(p->router_bias)) {
        check_on_device(p->router_bias);
        FT_ASSERT(p->router_bias->type == FT_TYPE_F32);
        rp.logit_bias = p->router_bias->data;
    }
    const ft_tensor *router = p->router;
    FT_ASSERT(!norm || (norm->y == x && !to_cpu));
    if (decode_router(router, p, n_tok)) {
        // decode: router matvec and routing in one launch
        check_on_device(router);
        ft_cuda_router_params r = router_launch(c, router, x);
        bool exported = to_cpu && cuda_cpu_experts_router_export(c->cpu_experts, &r);
        if (norm) {
            bool q = xq_fits(c, norm->n, 1);
            r.x = norm->x;
            r.norm = true;
            r.norm_w = norm->w;
            r.norm_eps = norm->eps;
            r.norm_y = norm->y;
            r.norm_yq = q ? c->xq : NULL;
            c->xq_src = q ? norm->y : NULL;
            c->xq_cols = norm->n;
            c->xq_tok = 1;
        }
        ft_cuda_moe_router(&r, &rp, c->stream);
        return exported;
    }
    FT_ASSERT(!norm);
    matmul_tensor(c, router, x, c->logits, n_tok);
    ft_cuda_moe_route(&rp, c->stream);
    return false;
}

// An expert bias tensor's device rows (n per expert, f32), or NULL where the model has none.
static const float *expert_bias(const ft_tensor *b, int64_t n, int n_expert) {
    if (!ft_tensor_present(b)) return NULL;
    check_on_device(b);
    FT_ASSERT(b->type == FT_TYPE_F32 && b->ne[0] == n && b->ne[1] >= n_expert);
    return b->data;
}

// An expert scale tensor's device entries (one per expert, f32), or NULL where it is absent.
static const float *expert_scale(const ft_tensor *s, int n_expert) {
    if (!ft_tensor_present(s)) return NULL;
    check_on_device(s);
    FT_ASSERT(s->type == FT_TYPE_F32 && s->ne[0] >= n_expert);
    return s->data;
}

// The layer's extras for the expert kernels: its activation, biases and down scales, indexed by
// the global expert of each pair (c->sel).
static ft_cuda_expert_extras expert_extras(cuda_backend *c, const ft_moe_params *p, int64_t n_ff, int64_t n_embd) {
    ft_cuda_expert_extras ex = {
        .glu = {.act = p->act == FT_GLU_SWIGLU_OAI ? FT_CUDA_GLU_SWIGLU_OAI
                       : p->act == FT_GLU_GELU     ? FT_CUDA_GLU_GELU
                                                   : FT_CUDA_GLU_SILU,
                .alpha = FT_SWIGLU_OAI_ALPHA, .limit = FT_SWIGLU_OAI_LIMIT},
        .bias_ids = c->sel,
        .gate_bias = expert_bias(p->gate_bias, n_ff, p->n_expert),
        .up_bias = expert_bias(p->up_bias, n_ff, p->n_expert),
        .down_scale = expert_scale(p->down_scale, p->n_expert),
        .down_bias = expert_bias(p->down_bias, n_embd, p->n_expert),
    };
    return ex;
}

// FT_MOE_PREFETCH: 0 turns the prefetch off, N lets a layer's prefetch copy at most N experts;
// unset, MOE_PREFETCH_DEFAULT_COPIES.
static int prefetch_copies_from_env(void) {
    const char *v = ft_env_str(FT_ENV_MOE_PREFETCH);
    if (!v || !*v) return MOE_PREFETCH_DEFAULT_COPIES;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 0 || n > 1024) {
        fprintf(stderr, "FT_MOE_PREFETCH=%s: expected 0 (off) or the most copies a layer's prefetch makes; using %d\n",
                v, MOE_PREFETCH_DEFAULT_COPIES);
        return MOE_PREFETCH_DEFAULT_COPIES;
    }
    return (int)n;
}

// Prefetch: the next MoE layer's router applied to this layer's input guesses that layer's
// experts (one token, a router the one-launch kernel takes: decode), and the offload copies
// the guesses that are not resident while this layer computes (ft_offload_prefetch_begin).
// The guesses use the selection bias but need no weights; the router reads x on the prefetch
// stream, so the caller makes its stream wait for it before x may change.
static void prefetch_next(cuda_backend *c, const ft_moe_params *p, const float *x, int n_tok) {
    const ft_tensor *r = p->next_router;
    int k = p->n_expert_used;
    if (!c->prefetch_copies || !r || n_tok != 1 || !decode_router(r, p, 1) || r->placement != FT_PLACEMENT_CUDA)
        return;
    const float *bias = NULL;
    if (ft_tensor_present(p->next_sel_bias)) {
        check_on_device(p->next_sel_bias);
        FT_ASSERT(p->next_sel_bias->type == FT_TYPE_F32);
        bias = p->next_sel_bias->data;
    }
    int32_t *guess = NULL;
    ft_cuda_stream *ps = ft_offload_prefetch_begin(c->offload, p->next_layer, &guess);
    if (!ps) return;
    ft_cuda_route_params rp = {
        .logits = c->pf_logits, .bias = bias, .sel = guess, .w = c->pf_w, .gap = c->pf_gap, .n_tok = 1,
        .n_expert = p->n_expert, .k = k, .softmax = p->gating == FT_GATING_SOFTMAX,
    };
    ft_cuda_router_params rr = router_launch(c, r, x);
    rr.count = c->pf_count; // (its own count: it runs beside the step's router)
    ft_cuda_moe_router(&rr, &rp, ps);
    ft_offload_prefetch(c->offload, p->next_layer, k, c->prefetch_copies);
}

// Hybrid: the export of a cache step's CPU share, between its lookup and its copies.
typedef struct hybrid_hook_ctx {
    cuda_backend *c;
    const ft_moe_params *p;
    const float *x;
    int n_tok;
} hybrid_hook_ctx;

static void hybrid_after_lookup(void *ctx, const ft_offload_view *v) {
    const hybrid_hook_ctx *h = ctx;
    FT_ASSERT(v->cpu_sel && v->n_cpu);
    cuda_cpu_experts_hybrid_begin(h->c->cpu_experts, h->p, h->x, v->cpu_sel, h->c->sel_w, h->n_tok,
                                  h->c->mode != STEP_DIRECT, h->c->stream);
}

static void cuda_moe_ffn(ft_backend *be, const ft_moe_params *p, const float *x, float *y, int n_tok) {
    // the norm of x waiting (a decode step's FFN norm) runs inside the router's launch where
    // that can take it, else first
    cuda_backend *c = (cuda_backend *)be;
    struct pending_row_norm norm = c->rnorm;
    bool take_norm = c->rnorm_pending && norm.y == x && router_takes_norm(c, p, &norm, n_tok);
    if (take_norm) c->rnorm_pending = false;
    // cuda_of, not cuda_op: x is only read, so the q8_1 copy of it that the norm before wrote
    // (xq) still serves the expert matmuls; every launch below that writes xq says so
    cuda_of(be);
    int64_t n_embd = p->gate_exps->ne[0], n_ff = p->gate_exps->ne[1];
    int k = p->n_expert_used;
    FT_ASSERT(c->reserved && n_tok <= c->lim.max_tok && k <= c->lim.n_expert_used);
    FT_ASSERT(p->n_expert <= c->lim.n_expert && n_ff <= c->lim.max_width && n_embd <= c->lim.max_width);
    // gpt-oss's and gemma4's extras (biases, scales, their activations) ride in every kernel
    // below, and cpu mode and hybrid hand the CPU their host copies (cuda_cpu_experts.c)
    ft_cuda_expert_extras ex = expert_extras(c, p, n_ff, n_embd);
    bool plain = !ex.gate_bias && !ex.up_bias && !ex.down_scale && !ex.down_bias && ex.glu.act == FT_CUDA_GLU_SILU;
    bool gemm_ok = ft_cuda_moe_gemm_supported(p->gate_exps->type, p->up_exps->type, p->down_exps->type);
    bool run = op_runs(c, OP_MOE_FFN, p->gate_exps->data, x, (int64_t)(uintptr_t)y, n_tok);
    if (n_tok == 0) return;
    // --moe-backend cpu: experts in host memory, no expert cache (offload never attaches this);
    // a step for the grouped GEMM runs here, on the layer's experts copied into the overlay
    ft_tensor views[MOE_BANK_COUNT];
    bool cpu_overlay = false;
    if (!c->offload && cuda_cpu_experts_serves(c->cpu_experts, p)) {
        if (!moe_placement_host_overlay(cuda_cpu_experts_overlay_serves(c->cpu_experts, p), shape_tok(c, n_tok),
                                        GEMM_MIN_TOK)) {
            // the GPU routes and the selections travel with x; a replayed graph step still
            // queues the layer's CPU work (its graph holds the routing and the meeting)
            bool gpu_route = cuda_cpu_experts_routes_on_gpu(c->cpu_experts);
            // (a layer routed from an input of its own exports x with the meeting instead)
            bool exported = run && gpu_route && route_on_device(c, p, x, n_tok, !p->router_x, NULL);
            cuda_cpu_experts_moe_ffn(c->cpu_experts, p, x, gpu_route ? c->sel : NULL, gpu_route ? c->sel_w : NULL,
                                     exported, y, n_tok, c->base.row_gemm, c->mode != STEP_DIRECT,
                                     run ? c->stream : NULL);
            return;
        }
        if (!run) return;
        cuda_cpu_experts_overlay_begin(c->cpu_experts, p, c->stream, views);
        cpu_overlay = true;
    }
    // hybrid: a cache step's CPU share is computed by the host after the step's launch, so a
    // replayed graph step still queues it
    // (offload: where the cache serves the step, or the whole layer streams into the overlay)
    bool from_cache = c->offload && p->gate_exps->placement != FT_PLACEMENT_CUDA;
    bool overlay = from_cache &&
                   ft_offload_uses_overlay(c->offload, p->layer, shape_tok(c, n_tok), n_tok * k, gemm_ok,
                                           c->gemm_min_tok);
    bool hybrid = from_cache && c->cpu_experts && !overlay;
    if (hybrid && !run) cuda_cpu_experts_hybrid_begin(c->cpu_experts, p, x, NULL, NULL, n_tok, c->mode != STEP_DIRECT, NULL);
    if (!run) return;
    route_on_device(c, p, x, n_tok, false, take_norm ? &norm : NULL);
    int n_pairs = n_tok * k;
    const int32_t *hybrid_n_cpu = NULL;
    const ft_tensor *gate = p->gate_exps, *up = p->up_exps, *down = p->down_exps;
    c->expert_ids = c->sel;
    if (cpu_overlay) gate = &views[MOE_BANK_GATE], up = &views[MOE_BANK_UP], down = &views[MOE_BANK_DOWN];
    if (from_cache) { // experts in host banks: the cache serves them
        ft_offload_view v;
        hybrid_hook_ctx hc = {c, p, x, n_tok};
        ft_offload_hook hook = {hybrid_after_lookup, &hc};
        ft_offload_layer_begin(c->offload, p->layer, c->sel, n_tok, k, overlay, c->stream, &v, hybrid ? &hook : NULL);
        c->token_looked_up |= !overlay;
        hybrid_n_cpu = v.n_cpu;
        const ft_tensor *banks[MOE_BANK_COUNT] = {gate, up, down};
        for (int b = 0; b < MOE_BANK_COUNT; b++) {
            views[b] = *banks[b];
            views[b].data = (void *)v.w[b];
            views[b].mat_bytes = v.mat_bytes[b];
            views[b].mat_stride = 0; // the slots are packed whatever the host view's stride
            views[b].placement = FT_PLACEMENT_CUDA;
        }
        gate = &views[MOE_BANK_GATE], up = &views[MOE_BANK_UP], down = &views[MOE_BANK_DOWN];
        c->expert_ids = v.ids;
        if (!overlay && !hybrid) prefetch_next(c, p, p->router_x ? p->router_x : x, n_tok);
    }
    // prefill: tokens grouped by expert, each expert's weights read once per tile of its tokens;
    // a step of several sequences' decode rows on resident experts keeps the per-pair kernels up
    // to MOE_DECODE_GEMM_MIN_TOK rows
    int moe_gemm_min = c->gemm_min_tok;
    if (!from_cache && !cpu_overlay && moe_gemm_min != INT_MAX && decode_rows(c, n_tok)) moe_gemm_min = MOE_DECODE_GEMM_MIN_TOK;
    if (!hybrid && shape_tok(c, n_tok) >= moe_gemm_min && ft_cuda_moe_gemm_supported(gate->type, up->type, down->type)) {
        check_on_device(gate);
        check_on_device(up);
        check_on_device(down);
        quantize_x(c, x, n_embd, n_tok);
        ft_cuda_moe_gemm_params mp = {
            .gate_type = gate->type, .down_type = down->type, .gate = gate->data, .up = up->data,
            .down = down->data, .gate_mat_bytes = gate->mat_bytes, .down_mat_bytes = down->mat_bytes,
            .n_embd = n_embd, .n_ff = n_ff, .n_expert = p->n_expert, .n_tok = n_tok, .k = k,
            .sel = c->sel, .sel_w = c->sel_w, .xq = c->xq, .work = c->moe_work,
            .h = c->h_gate, .hq = c->xq, .out = c->h_out, .y = y, .ex = ex,
        };
        ft_cuda_moe_gemm(&mp, c->stream);
        c->xq_src = NULL; // xq now holds h's q8_1
        if (cpu_overlay) cuda_cpu_experts_overlay_end(c->cpu_experts);
        if (from_cache) ft_offload_prefetch_join_guesses(c->offload, c->stream);
        return;
    }
    // a few rows (several sequences' decode): each selected expert read once for all its rows
    if (!hybrid && n_tok >= MOE_ROWS_MIN_TOK && c->moe_rows && moe_rows_fit(gate, up, down, p, n_ff, n_tok)) {
        check_on_device(gate);
        check_on_device(up);
        check_on_device(down);
        quantize_x(c, x, n_embd, n_tok);
        ft_cuda_moe_rows_params rp = {
            .gate_type = gate->type, .down_type = down->type, .gate = gate->data, .up = up->data,
            .down = down->data, .gate_mat_bytes = gate->mat_bytes, .down_mat_bytes = down->mat_bytes,
            .n_embd = n_embd, .n_ff = n_ff, .n_expert = p->n_expert, .n_tok = n_tok, .k = k,
            .sel = c->sel, .ids = c->expert_ids, .sel_w = c->sel_w, .xq = c->xq, .work = c->moe_work,
            .h = c->h_gate, .hq = c->hq, .out = c->h_out, .y = y, .ex = ex,
        };
        ft_cuda_moe_rows(&rp, c->stream);
        if (cpu_overlay) cuda_cpu_experts_overlay_end(c->cpu_experts);
        if (from_cache) ft_offload_prefetch_join_guesses(c->offload, c->stream);
        return;
    }
    // gate and up read token p / k; the quantized copy of x is made once when both want it.
    // Quantized banks of one type take the fused kernels: gate, up and the activation in one
    // launch, and down with the weighted sum in another, the extras inside them (biases and
    // scales by the global expert, c->sel, the weights by slot, expert_ids).
    // With a fused down after it, the GLU kernel also writes h's q8_1 form (into hq: xq is its
    // input), so no quantize launch runs between the two.
    bool sum_fused = ft_cuda_matvec_wants_q8_1(down->type) && k <= FT_CUDA_MATVEC_SUM_MAX_K;
    bool h_quantized = false;
    if (ft_cuda_matvec_wants_q8_1(gate->type) && up->type == gate->type && up->mat_bytes == gate->mat_bytes) {
        check_on_device(up);
        h_quantized = sum_fused && n_ff % 32 == 0;
        ft_cuda_matvec_ids_params glu = {.w_up = up->data, .y_q = h_quantized ? c->hq : NULL, .ex = ex};
        expert_matvec(c, gate, x, k, c->h_gate, n_pairs, &glu);
        if (!h_quantized) c->xq_src = NULL;
    } else {
        expert_matvec(c, gate, x, k, c->h_gate, n_pairs, NULL);
        expert_matvec(c, up, x, k, c->h_up, n_pairs, NULL);
        if (plain) ft_cuda_swiglu(c->h_gate, c->h_up, (size_t)n_pairs * (size_t)n_ff, c->stream);
        else ft_cuda_moe_glu_extras(c->h_gate, c->h_up, &ex, n_pairs, (int)n_ff, c->stream);
        c->xq_src = NULL;
    }
    // (with h's q8_1 in hq, xq still holds x's for a shared expert after this op)
    if (sum_fused) {
        ft_cuda_matvec_ids_params sum = {.sum_w = c->sel_w, .k = k, .x = h_quantized ? c->hq : NULL, .ex = ex};
        expert_matvec(c, down, c->h_gate, 1, y, n_pairs, &sum);
    } else {
        expert_matvec(c, down, c->h_gate, 1, c->h_out, n_pairs, NULL);
        ft_cuda_moe_down_extras(c->h_out, c->expert_ids, &ex, n_pairs, (int)n_embd, c->stream);
        ft_cuda_moe_combine(c->h_out, c->sel_w, y, n_tok, k, (int)n_embd, c->stream);
    }
    if (hybrid) cuda_cpu_experts_hybrid_end(c->cpu_experts, y, hybrid_n_cpu, n_tok, n_embd, c->stream);
    if (from_cache) ft_offload_prefetch_join_guesses(c->offload, c->stream); // (x may change after this op)
}

static void cuda_scale(ft_backend *be, float *x, size_t n, float s) {
    cuda_backend *c = cuda_op(be);
    if (!op_runs(c, OP_SCALE, x, NULL, (int64_t)n, (int64_t)float_bits(s))) return;
    ft_cuda_scale(x, n, s, c->stream);
}

static void cuda_softcap(ft_backend *be, float *x, size_t n, float cap) {
    cuda_backend *c = cuda_op(be);
    if (!op_runs(c, OP_SOFTCAP, x, NULL, (int64_t)n, (int64_t)float_bits(cap))) return;
    ft_cuda_softcap(x, n, cap, c->stream);
}

static void cuda_sigmoid_gate_add(ft_backend *be, const ft_tensor *gate_inp, const float *x, const float *s,
                                  float *y, int n_tok, int n_embd) {
    cuda_backend *c = cuda_op(be);
    FT_ASSERT(gate_inp->ne[0] == n_embd && gate_inp->ne[1] == 1);
    if (!op_runs(c, OP_SIGMOID_GATE_ADD, gate_inp->data, s, (int64_t)(uintptr_t)y, n_tok)) return;
    matmul_tensor(c, gate_inp, x, c->logits, n_tok);
    ft_cuda_sigmoid_scale_add(y, s, c->logits, n_tok, n_embd, c->stream);
}

// ---------------------------------------------------------------------------------------------
// Steps and graphs
//
// CUDA graphs (step_begin/step_end): the first one-token step of a sequence (a key: its KV
// cache) is captured into a graph, and every later one-token step of it replays that graph:
// its ops then only note their arguments (a signature checked against the capture's) and
// get_rows fills the pinned staging the graph copies from.
// One graph serves every position because the position lives in device memory (pos_dev,
// copied from pinned memory by the graph's first node): rope, set_rows and attention take it
// from there, the ops' host positions become offsets from the step's first position, and the
// attention split is chosen on the device. A step of several sequences' decode rows (rope_seqs,
// set_rows_seqs, attention's seqs) is keyed by its ft_seq_rows and its row count: the rows'
// positions and block tables are device arrays the engine rewrites before each step, so one
// graph serves every step of that many rows, whichever sequences they are and wherever they
// stand. Chosen over re-capturing each token and updating
// the executable graph: capture and update cost the host about as much as the launches they
// replace, which is the time a decode step is short of. FT_CUDA_GRAPHS=0 turns graphs off.

static void cuda_step_begin(ft_backend *be, int n_tok, int pos0, const void *key, bool seqs) {
    cuda_backend *c = cuda_of(be);
    FT_ASSERT(c->mode == STEP_DIRECT);
    // hybrid: an unbracketed step's fills, joined outside any capture; its token's end
    if (c->offload) {
        ft_offload_join_fills(c->offload, c->stream);
        ft_offload_join_prefetch(c->offload, c->stream);
        if (c->token_looked_up) ft_offload_end_token(c->offload, c->stream);
        c->token_looked_up = false;
    }
    if (c->offload && ft_offload_generation(c->offload) != c->offload_gen) { // the cache was rebuilt
        for (int i = 0; i < (int)FT_ARRAY_LEN(c->step_graphs); i++) {
            ft_cuda_graph_free(c->step_graphs[i].graph);
            c->step_graphs[i] = (struct step_graph){0};
        }
        c->offload_gen = ft_offload_generation(c->offload);
    }
    // decode steps only (a prompt chunk's kernels take positions from the host); --cuda-graph-max-bs
    // caps the steps captured (0: none); CPU experts take graphs with their flag meeting only
    // (cuda_cpu_experts.h); the expert cache and CPU experts in one-token steps only (theirs are
    // the graphs tested)
    bool decode = seqs || n_tok == 1;
    if (!c->graphs || !c->reserved || !decode || (c->graph_max_tok >= 0 && n_tok > c->graph_max_tok) ||
        (seqs && (c->offload || c->cpu_experts)) ||
        (c->cpu_experts && !cuda_cpu_experts_graphable(c->cpu_experts))) {
        ft_cuda_profile_step_begin(c->stream, false);
        return;
    }
    // the pinned staging and position are rewritten below: the last copies from them ran
    if (c->staging_used) ft_cuda_event_sync(c->staging_done);
    c->step_pos0 = pos0;
    c->step_sig = 14695981039346656037ull;
    *c->pos_host = pos0;
    c->xq_src = NULL;
    int slot = 0;
    bool found = false;
    for (int i = 0; i < (int)FT_ARRAY_LEN(c->step_graphs); i++) {
        struct step_graph *g = &c->step_graphs[i];
        if ((found = g->graph && g->key == key && g->n_tok == n_tok)) {
            slot = i;
            break;
        }
        if (g->last_used < c->step_graphs[slot].last_used) slot = i; // free entries have 0
    }
    struct step_graph *g = &c->step_graphs[slot];
    g->last_used = ++c->graph_clock;
    c->cur_graph = slot;
    if (found) {
        c->mode = STEP_REPLAY;
        if (c->offload) ft_offload_step_replayed(c->offload, c->stream);
        return;
    }
    ft_cuda_graph_free(g->graph);
    g->graph = NULL;
    g->key = key;
    g->n_tok = n_tok;
    c->mode = STEP_CAPTURE;
    ft_cuda_capture_begin(c->stream);
    ft_cuda_profile_step_begin(c->stream, true);
    ft_cuda_memcpy_h2d(c->pos_dev, c->pos_host, sizeof(int32_t), c->stream);
}

// Decode steps a window of the hybrid tuning spans (hybrid_tune.h).
enum { HYBRID_TUNE_STEPS = 16 };

// After a step's CPU work: its one-token CPU ops into the tuning, and at the end of a window the
// corrected costs to the device (between steps: ft_offload_set_hybrid_costs waits for it).
static void hybrid_tune_step(cuda_backend *c) {
    if (!c->hy_tuning) return;
    const moe_expert_banks *hb = ft_offload_host_banks(c->offload);
    for (int i = 0; i < hb->n_layers; i++) {
        uint64_t n, experts, ns;
        cuda_cpu_experts_hybrid_take_ops(c->cpu_experts, hb->layers[i].layer, &n, &experts, &ns);
        moe_hybrid_tune_observe(&c->hy_tune, i, n, experts, (double)ns);
    }
    if (++c->hy_steps % HYBRID_TUNE_STEPS || !moe_hybrid_tune_update(&c->hy_tune, c->hy_costs)) return;
    ft_offload_set_hybrid_costs(c->offload, c->hy_costs);
    double s = c->hy_tune.scale;
    if (fabs(log(s / c->hy_printed)) < log(1.2)) return; // (a line for each move of 20% or more)
    c->hy_printed = s;
    const moe_hybrid_costs *b = &c->hy_costs[c->hy_big];
    fprintf(stderr, "hybrid: the CPU ops timed while decoding took %.2fx their starting price; the split now prices "
                    "an expert on the CPU at %.1f us and its road's fixed cost at %.1f us (layer %d)\n",
            s, b->cpu_ns / 1e3, b->meet_ns / 1e3, hb->layers[c->hy_big].layer);
}

static void cuda_step_end(ft_backend *be) {
    cuda_backend *c = cuda_of(be); // (the pending add joins the capture)
    if (c->offload && c->mode != STEP_REPLAY) { // (in a capture: into the graph)
        ft_offload_join_fills(c->offload, c->stream);
        ft_offload_join_prefetch(c->offload, c->stream);
        if (c->token_looked_up) ft_offload_end_token(c->offload, c->stream); // (self-sizing's rebalance)
        c->token_looked_up = false;
    }
    if (c->mode == STEP_DIRECT) {
        cuda_cpu_experts_flush(c->cpu_experts); // the step's last MoE layer (cuda_cpu_experts.h)
        hybrid_tune_step(c);
        ft_cuda_profile_step_end(NULL);
        return;
    }
    struct step_graph *g = &c->step_graphs[c->cur_graph];
    if (c->mode == STEP_CAPTURE) {
        g->graph = ft_cuda_capture_end(c->stream);
        g->sig = c->step_sig;
        ft_cuda_profile_step_end(g->graph);
    } else if (c->step_sig != g->sig) {
        ft_abort(__FILE__, __LINE__, "cuda: this one-token step's ops differ from the captured graph's "
                                     "(an op sequence that depends on the position?); FT_CUDA_GRAPHS=0 avoids graphs");
    }
    ft_cuda_graph_launch(g->graph, c->stream);
    cuda_cpu_experts_flush(c->cpu_experts); // the graph waits for each layer's CPU work
    hybrid_tune_step(c);
    ft_cuda_profile_replayed(g->graph);
    ft_cuda_event_record(c->staging_done, c->stream);
    c->staging_used = true;
    c->mode = STEP_DIRECT;
    c->xq_src = NULL;
}

// ---------------------------------------------------------------------------------------------
// Memory and the experts kept in host memory

static void cuda_device_info(ft_backend *be, ft_device_info *out) {
    ft_cuda_device_info info;
    memset(out, 0, sizeof(*out));
    if (!ft_cuda_device_get_info(((cuda_backend *)be)->dev, &info)) return;
    snprintf(out->name, sizeof(out->name), "%s", info.name);
    out->cc_major = info.cc_major;
    out->cc_minor = info.cc_minor;
    out->free_mem = info.free_mem;
    out->total_mem = info.total_mem;
    out->process_mem = info.process_mem;
}

static bool cuda_supports_type(ft_backend *be, enum ft_type type) {
    (void)be;
    return ft_cuda_matvec_supported(type);
}

static void *cuda_buffer_alloc(ft_backend *be, size_t n) {
    cuda_backend *c = cuda_of(be);
    void *p = ft_cuda_malloc(n ? n : 1);
    if (p) {
        ft_cuda_memset(p, 0, n, c->stream);
        ft_cuda_stream_sync(c->stream);
    }
    return p;
}

static void *cuda_host_alloc(ft_backend *be, size_t n) { return ft_cuda_host_alloc_or_null(n); }

static void cuda_host_free(ft_backend *be, void *p) {
    if (!p) return;
    cuda_backend *c = cuda_of(be);
    ft_cuda_stream_sync(c->stream); // no copy in flight may still write it
    ft_cuda_host_free(p);
}

static void cuda_buffer_free(ft_backend *be, void *p) {
    if (!p) return;
    cuda_backend *c = cuda_of(be);
    cuda_cpu_experts_flush(c->cpu_experts);
    ft_cuda_stream_sync(c->stream); // no work in flight may still read it
    ft_cuda_free(p);
}

static void cuda_buffer_write(ft_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    ft_cuda_memcpy_h2d(dst, src, n, NULL);
    ft_cuda_device_sync();
}

// From pageable memory the runtime stages src before returning and copies it in stream order.
static void cuda_buffer_write_ordered(ft_backend *be, void *dst, const void *src, size_t n) {
    cuda_backend *c = cuda_op(be); // the pending ops before it
    ft_cuda_memcpy_h2d(dst, src, n, c->stream);
}

static moe_host_allocator cuda_expert_host_allocator(ft_backend *be) {
    (void)be;
    return ft_offload_host_allocator();
}

static bool cuda_expert_cache_init(ft_backend *be, moe_expert_banks *hb, const ft_expert_cache_params *p,
                                   ft_err *err) {
    cuda_backend *c = cuda_of(be);
    FT_ASSERT(c->reserved && !c->offload && !c->cpu_experts);
    ft_offload_params op = {
        .plan = p->plan, .prefill_serial = p->prefill_serial, .trace = p->trace, .victims = p->victims,
        .self_sizing = p->self_sizing};
    ft_offload *o = ft_offload_init(p->geometry, hb, &op, err); // owns hb from here, or freed it
    if (!o) return false;
    ft_offload_print(o, stderr);
    c->offload = o;
    c->prefetch_copies = prefetch_copies_from_env();
    if (c->prefetch_copies) {
        ft_offload_enable_prefetch(o);
        size_t E = (size_t)FT_MAX(c->lim.n_expert, 1);
        c->pf_logits = dev_alloc(E * sizeof(float), "prefetch router logits");
        c->pf_w = dev_alloc(E * sizeof(float), "prefetch routing");
        c->pf_gap = dev_alloc(sizeof(float), "prefetch routing gap");
        c->pf_count = dev_alloc(sizeof(int), "prefetch router count");
        ft_cuda_memset(c->pf_count, 0, sizeof(int), c->stream);
    }
    c->offload_gen = ft_offload_generation(o);
    ft_offload_reserve(o, c->lim.max_tok * FT_MAX(c->lim.n_expert_used, 1));
    return true;
}

static bool cuda_expert_cache_stats(ft_backend *be, ft_moe_stats *out) {
    cuda_backend *c = cuda_of(be);
    memset(out, 0, sizeof(*out));
    if (!c->offload) return false;
    ft_offload_stats(c->offload, out);
    return true;
}

static bool cuda_expert_cache_rebuild(ft_backend *be, int n_slots, ft_err *err) {
    cuda_backend *c = cuda_of(be);
    if (!c->offload) return ft_err_set(err, "no expert cache: the model was not placed with --moe-backend offload");
    if (n_slots < 1) return ft_err_set(err, "moe_cache_size %d: expected at least 1 slot", n_slots);
    return ft_offload_rebuild(c->offload, n_slots, ft_offload_plan(c->offload)->layout, err);
}

// The router's selections so far: the device's counters (route_on_device), plus the CPU router's
// where --moe-backend cpu routes on the host. Not with FT_CUDA_ROUTE_COUNTS=0 (the op is NULL
// then, and the kernels count nothing).
static void cuda_route_counts(ft_backend *be, uint64_t *out) {
    cuda_backend *c = cuda_of(be);
    if (!c->route_counts) return;
    _Static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "the device counters are 64-bit");
    cuda_cpu_experts_flush(c->cpu_experts);
    ft_cuda_memcpy_d2h(out, c->route_counts, (size_t)c->lim.n_layer * (size_t)c->lim.n_expert * sizeof(uint64_t),
                       c->stream);
    ft_cuda_stream_sync(c->stream);
    cuda_cpu_experts_add_route_counts(c->cpu_experts, out);
}

// The hybrid split's costs per MoE layer: FT_HYBRID_COSTS; else the bandwidth profile's, where it
// rates every layer's types (bw_profile.h, `ft bench bw`); else measured here on the largest
// layer and scaled to each by its expert bytes: a copy by the decode copy kernel (n and 1
// experts: the slope), the CPU op for one token on k and 1 of its experts (the slope per
// expert; its intercept joins the meeting's round trip as the road's fixed cost).
static bool profile_costs(const moe_expert_banks *hb, const moe_bw_profile *prof, moe_hybrid_costs *costs) {
    if (!prof) return false;
    for (int i = 0; i < hb->n_layers; i++) {
        enum ft_type t[3];
        uint64_t b[3];
        for (int k = 0; k < MOE_BANK_COUNT; k++) t[k] = hb->layers[i].bank[k].type, b[k] = hb->layers[i].bank[k].expert_bytes;
        if (!moe_bw_hybrid_costs(prof, t, b, &costs[i])) return false;
    }
    return true;
}

static void hybrid_costs(cuda_backend *c, const ft_host_experts_params *p) {
    ft_offload *o = c->offload;
    const moe_expert_banks *hb = ft_offload_host_banks(o);
    int nl = hb->n_layers, big = 0;
    uint64_t *bytes = ft_malloc((size_t)nl * sizeof(uint64_t));
    for (int i = 0; i < nl; i++) {
        bytes[i] = 0;
        for (int b = 0; b < MOE_BANK_COUNT; b++) bytes[i] += hb->layers[i].bank[b].expert_bytes;
        if (bytes[i] > bytes[big]) big = i;
    }
    moe_hybrid_costs *costs = ft_malloc((size_t)nl * sizeof(*costs));
    uint32_t *cpu_fixed = ft_calloc((size_t)nl, sizeof(uint32_t)); // the CPU op's part of each meet_ns
    const char *env = ft_env_str(FT_ENV_HYBRID_COSTS);
    double copy_us, cpu_us, meet_us;
    if (env) {
        if (sscanf(env, "%lf,%lf,%lf", &copy_us, &cpu_us, &meet_us) != 3 || copy_us < 0 || cpu_us < 0 || meet_us < 0 ||
            copy_us > 1e6 || cpu_us > 1e6 || meet_us > 1e6)
            ft_abort(__FILE__, __LINE__, "FT_HYBRID_COSTS=%s: want COPY_US,CPU_US,MEET_US (three numbers >= 0)", env);
        for (int i = 0; i < nl; i++)
            costs[i] = (moe_hybrid_costs){(uint32_t)(copy_us * 1e3), (uint32_t)(cpu_us * 1e3), (uint32_t)(meet_us * 1e3)};
        fprintf(stderr, "hybrid: costs from FT_HYBRID_COSTS for every layer: copy %.1f us, CPU %.1f us an expert, "
                        "meeting %.1f us\n", copy_us, cpu_us, meet_us);
    } else if (profile_costs(hb, p->profile, costs)) {
        fprintf(stderr, "hybrid: costs from the bandwidth profile %s: on layer %d (%.1f MiB an expert) a copy %.1f us, "
                        "the CPU %.1f us an expert, the CPU road's fixed cost %.1f us\n", p->profile_path,
                hb->layers[big].layer, bytes[big] / 1048576.0, costs[big].copy_ns / 1e3, costs[big].cpu_ns / 1e3,
                costs[big].meet_ns / 1e3);
        for (int i = 0; i < nl; i++) {
            enum ft_type t[3];
            uint64_t b[3];
            for (int k = 0; k < MOE_BANK_COUNT; k++) t[k] = hb->layers[i].bank[k].type, b[k] = hb->layers[i].bank[k].expert_bytes;
            cpu_fixed[i] = (uint32_t)(moe_bw_cpu_fixed_us(p->profile, t, b) * 1e3);
        }
    } else {
        int n = FT_MIN(FT_MIN(8, hb->layers[big].n_expert), FT_MAX(c->lim.n_expert_used, 1));
        int block = hb->layers[big].layer;
        double c1 = ft_offload_time_copies(o, big, 1), cn = n > 1 ? ft_offload_time_copies(o, big, n) : c1;
        // The CPU op on 1 and n experts, again after a pause (up to 3 more times) while its
        // intercept exceeds what the n experts take: a fixed cost that large is something else
        // loading the host while it was timed (ft bench bw's rule); the smallest intercept kept.
        double p1 = INFINITY, cpu_s = 0;
        for (int a = 0; a < 4; a++) {
            if (a) nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
            double q1 = cuda_cpu_experts_time_experts(c->cpu_experts, block, 1);
            double qn = n > 1 ? cuda_cpu_experts_time_experts(c->cpu_experts, block, n) : q1;
            double slope = n > 1 ? FT_MAX(qn - q1, 0.0) / (n - 1) : q1;
            if (q1 - slope < p1 - cpu_s) p1 = q1, cpu_s = slope;
            if (p1 - cpu_s <= cpu_s * n) break;
        }
        if (p1 - cpu_s > cpu_s * n)
            fprintf(stderr, "hybrid: the CPU's fixed cost measured %.1f us, more than its %d experts take (%.1f us), "
                            "in four attempts: was the host busy?\n", (p1 - cpu_s) * 1e6, n, cpu_s * n * 1e6);
        double meet = cuda_cpu_experts_meeting_us(c->cpu_experts, block) * 1e-6;
        double copy_s = n > 1 ? FT_MAX(cn - c1, 0.0) / (n - 1) : c1;
        double fixed = meet + FT_MAX(p1 - cpu_s, 0.0);
        for (int i = 0; i < nl; i++) {
            double f = (double)bytes[i] / (double)bytes[big];
            costs[i] = (moe_hybrid_costs){(uint32_t)(copy_s * f * 1e9), (uint32_t)(cpu_s * f * 1e9), (uint32_t)(fixed * 1e9)};
            cpu_fixed[i] = (uint32_t)(FT_MAX(p1 - cpu_s, 0.0) * 1e9);
        }
        copy_us = copy_s * 1e6, cpu_us = cpu_s * 1e6, meet_us = fixed * 1e6;
        fprintf(stderr, "hybrid: measured on layer %d (%.1f MiB an expert): a copy %.1f us (%.1f GB/s), the CPU %.1f us "
                        "an expert (%.1f GB/s), the CPU road's fixed cost %.1f us (meeting %.1f us); scaled to each "
                        "layer by its expert bytes\n", block, bytes[big] / 1048576.0, copy_us,
                copy_us > 0 ? bytes[big] / (copy_us * 1e3) : 0.0, cpu_us, cpu_us > 0 ? bytes[big] / (cpu_us * 1e3) : 0.0,
                meet_us, meet * 1e6);
        fprintf(stderr, "hybrid: %s; `ft bench bw` measures them once for this machine\n",
                p->profile ? "the bandwidth profile lacks this model's expert types" : "no bandwidth profile");
    }
    int k = FT_MAX(c->lim.n_expert_used, 1);
    fprintf(stderr, "hybrid: with %d misses in the largest layer the CPU computes %d of them\n", k,
            moe_hybrid_cpu_share(k, &costs[big]));
    ft_offload_set_hybrid_costs(o, costs);
    if (!env && ft_env_flag(FT_ENV_HYBRID_TUNE)) {
        moe_hybrid_tune_init(&c->hy_tune, nl, costs, cpu_fixed);
        c->hy_tuning = true;
        c->hy_costs = ft_malloc((size_t)nl * sizeof(*c->hy_costs));
        c->hy_big = big;
        c->hy_printed = 1.0;
    }
    free(cpu_fixed);
    free(costs);
    free(bytes);
}

// cpu mode: the CPU computes every routed expert from the params' banks (the model's mapping).
// Hybrid (an expert cache is attached): the CPU computes the misses the split gives it, from
// the cache's host banks (descriptors made here; the params' banks are the mapping's), with
// no prefill overlay (the cache's serves prefill).
static void cuda_host_experts_init(ft_backend *be, const ft_host_experts_params *p) {
    cuda_backend *c = cuda_of(be);
    FT_ASSERT(c->reserved && !c->cpu_experts);
    if (!c->offload) {
        c->cpu_experts = cuda_cpu_experts_init(p, &c->base.min_route_gap, &c->lim);
        return;
    }
    ft_host_experts_params h = *p;
    h.overlay_buffers = 0;
    ft_tensor *banks = ft_calloc(3 * (size_t)p->n_layer, sizeof(ft_tensor));
    h.gate_exps = banks, h.up_exps = banks + p->n_layer, h.down_exps = banks + 2 * p->n_layer;
    const ft_tensor *model[MOE_BANK_COUNT] = {p->gate_exps, p->up_exps, p->down_exps};
    const moe_expert_banks *hb = ft_offload_host_banks(c->offload);
    for (int i = 0; i < hb->n_layers; i++) {
        int L = hb->layers[i].layer;
        FT_ASSERT(L >= 0 && L < p->n_layer);
        for (int b = 0; b < MOE_BANK_COUNT; b++) {
            ft_tensor *t = &banks[(size_t)b * p->n_layer + L];
            const moe_expert_bank *bk = &hb->layers[i].bank[b];
            *t = model[b][L];
            FT_ASSERT(t->type == bk->type && t->mat_bytes == bk->expert_bytes && t->ne[2] == hb->layers[i].n_expert);
            t->data = bk->data;
            t->mat_stride = 0; // the banks' entries are packed
            t->placement = FT_PLACEMENT_CPU;
        }
    }
    c->cpu_experts = cuda_cpu_experts_init(&h, &c->base.min_route_gap, &c->lim);
    free(banks);
    if (!cuda_cpu_experts_graphable(c->cpu_experts)) // (its join spins on the flag meeting's numbers)
        ft_abort(__FILE__, __LINE__, "--moe-backend hybrid needs the flag meeting: unset FT_CPU_EXPERTS_MEETING=event "
                                     "and CUDA_MODULE_LOADING=LAZY");
    hybrid_costs(c, p);
}

static size_t cuda_host_experts_device_bytes(ft_backend *be, const ft_host_experts_params *p, size_t *staging) {
    (void)be;
    size_t buffer = cuda_cpu_experts_buffer_bytes(p->gate_exps, p->up_exps, p->down_exps, p->n_layer);
    *staging = buffer && p->overlay_buffers > 0 ? cuda_cpu_experts_staging_bytes() : 0;
    return (size_t)p->overlay_buffers * buffer;
}

// The op parameters beyond every backend's set that these kernels take: gpt-oss's (attention
// sinks, the experts' biases, softmax-weighted routing, the clamped SwiGLU) and gemma4's (GELU,
// scale and soft-capping, the weightless norm, RoPE frequency factors, per-expert down scales,
// the router's own input). --moe-backend cpu's and hybrid's host experts lack the experts'
// extras: engine_plan refuses those modes for such models.
enum { CUDA_FEATURES = FT_OPS_ALL };

static const ft_backend_ops g_cuda_ops = {
    .name = "cuda",
    .features = CUDA_FEATURES,
    .free = cuda_free,
    .device_info = cuda_device_info,
    .supports_type = cuda_supports_type,
    .scratch_bytes = cuda_scratch_bytes,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .buffer_write = cuda_buffer_write,
    .buffer_write_ordered = cuda_buffer_write_ordered,
    .expert_host_allocator = cuda_expert_host_allocator,
    .expert_cache_init = cuda_expert_cache_init,
    .expert_cache_stats = cuda_expert_cache_stats,
    .expert_cache_rebuild = cuda_expert_cache_rebuild,
    .host_experts_init = cuda_host_experts_init,
    .host_experts_device_bytes = cuda_host_experts_device_bytes,
    .reserve = cuda_reserve,
    .alloc = cuda_alloc,
    .read = cuda_read,
    .matmul = cuda_matmul,
    .get_rows = cuda_get_rows,
    .rms_norm = cuda_rms_norm,
    .add = cuda_add,
    .add_bias = cuda_add_bias,
    .rope = cuda_rope,
    .hadamard = cuda_hadamard,
    .set_rows = cuda_set_rows,
    .copy_rows = cuda_copy_rows,
    .attention = cuda_attention,
    .rope_seqs = cuda_rope_seqs,
    .set_rows_seqs = cuda_set_rows_seqs,
    .gate_mul = cuda_gate_mul,
    .split_heads = cuda_split_heads,
    .delta_net = cuda_delta_net,
    .ffn = cuda_ffn,
    .moe_ffn = cuda_moe_ffn,
    .sigmoid_gate_add = cuda_sigmoid_gate_add,
    .scale = cuda_scale,
    .softcap = cuda_softcap,
    .route_counts = cuda_route_counts,
    .step_begin = cuda_step_begin,
    .step_end = cuda_step_end,
};

int ft_backend_cuda_device_count(void) { return ft_cuda_device_count(); }

unsigned ft_backend_cuda_features(void) { return CUDA_FEATURES; }

ft_backend *ft_backend_cuda_init(const ft_backend_params *p, ft_err *err) {
    int dev = 0;
    if (ft_cuda_device_count() <= dev) {
        ft_err_set(err, "--device cuda: no CUDA device found");
        return NULL;
    }
    ft_cuda_set_device(dev);
    ft_cuda_attention_init();
    ft_cuda_delta_net_init();
    cuda_backend *c = ft_calloc(1, sizeof(*c));
    c->ops = g_cuda_ops;
    // the route counters (FT_CUDA_ROUTE_COUNTS=0: none)
    if (!ft_env_flag(FT_ENV_CUDA_ROUTE_COUNTS)) c->ops.route_counts = NULL;
    c->base.ops = &c->ops;
    c->base.placement = FT_PLACEMENT_CUDA;
    c->base.min_route_gap = INFINITY;
    c->dev = dev;
    c->stream = ft_cuda_stream_init();
    c->graphs = ft_env_flag(FT_ENV_CUDA_GRAPHS);
    c->gemm_min_tok = ft_env_flag(FT_ENV_CUDA_GEMM) ? GEMM_MIN_TOK : INT_MAX;
    c->moe_rows = ft_env_flag(FT_ENV_CUDA_MOE_ROWS);
    c->fuse_norm = ft_env_flag(FT_ENV_CUDA_FUSE_NORM);
    c->flash = ft_env_flag(FT_ENV_CUDA_FLASH);
    c->delta_chunked = ft_env_flag(FT_ENV_CUDA_DELTA_CHUNKED);
    c->graph_max_tok = p->graph_max_tok;
    return &c->base;
}
