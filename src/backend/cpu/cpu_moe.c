// cpu_moe.c: the FFN ops on the CPU: routed experts (moe_ffn), the dense gated FFN and
// the sigmoid-gated shared expert. They run on the backend's pool and use its scratch: one
// calling thread per backend. moe_ffn's steps are above cpu_moe_ffn.
#include "cpu_impl.h"
#include "../../util/env.h"

#include <immintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static void softmax_row(const float *x, float *y, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = FT_MAX(mx, x[i]);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        y[i] = expf(x[i] - mx);
        sum += y[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) y[i] *= inv;
}

// Indices of the k largest of v[0..n), largest first (the first index among equals), marking
// them in taken (n flags, cleared by the caller). Returns the largest value left unselected
// (-INFINITY when k = n).
static float top_k(const float *v, int n, int k, bool *taken, int32_t *out) {
    for (int j = 0; j <= k && j < n; j++) {
        int best = -1;
        float bv = -INFINITY;
        for (int i = 0; i < n; i++)
            if (!taken[i] && (best < 0 || v[i] > bv)) {
                best = i;
                bv = v[i];
            }
        if (j == k) return bv;
        out[j] = best;
        taken[best] = true;
    }
    return -INFINITY;
}

// Routes every token: c->logits (n_tok, n_expert) to c->sel and c->sel_w (see ft_moe_params).
static void route(cpu_backend *c, const ft_moe_params *p, int n_tok) {
    int ne = p->n_expert, k = p->n_expert_used;
    const float *bias = ft_tensor_present(p->sel_bias) ? p->sel_bias->data : NULL;
    const float *rbias = ft_tensor_present(p->router_bias) ? p->router_bias->data : NULL;
    float probs[1024], score[1024]; // score: what selects (probs + the selection bias)
    bool taken[1024];
    FT_ASSERT(ne <= (int)FT_ARRAY_LEN(probs));
    for (int t = 0; t < n_tok; t++) {
        float *lg = c->logits + (size_t)t * ne;
        if (rbias) // an f32 add, as llama.cpp's ggml_add of the router's bias
            for (int i = 0; i < ne; i++) lg[i] += rbias[i];
        switch (p->gating) {
        case FT_GATING_SOFTMAX: softmax_row(lg, probs, ne); break;
        case FT_GATING_SIGMOID:
            for (int i = 0; i < ne; i++) probs[i] = 1.0f / (1.0f + expf(-lg[i]));
            break;
        case FT_GATING_SOFTMAX_WEIGHT: memcpy(probs, lg, (size_t)ne * sizeof(float)); break;
        }
        for (int i = 0; i < ne; i++) score[i] = bias ? probs[i] + bias[i] : probs[i];
        int32_t *sel = c->sel + (size_t)t * k;
        float *w = c->sel_w + (size_t)t * k;
        memset(taken, 0, sizeof(taken));
        float next = top_k(score, ne, k, taken, sel);
        if (k < ne) c->base.min_route_gap = FT_MIN(c->base.min_route_gap, score[sel[k - 1]] - next);
        float sum = 0;
        for (int j = 0; j < k; j++) w[j] = probs[sel[j]];
        // the selected logits' softmax, in selection order (llama.cpp's soft_max over the k)
        if (p->gating == FT_GATING_SOFTMAX_WEIGHT) softmax_row(w, w, k);
        for (int j = 0; j < k; j++) sum += w[j];
        if (p->norm_w) {
            sum = FT_MAX(sum, 6.103515625e-5f); // llama.cpp's guard: the smallest f16 normal
            for (int j = 0; j < k; j++) w[j] /= sum;
        }
        if (p->w_scale != 0.0f && p->w_scale != 1.0f)
            for (int j = 0; j < k; j++) w[j] *= p->w_scale;
    }
}

// Counting sort of (token, slot) pairs by expert into exp_off / grp_tok / grp_of / active.
// Within an expert the tokens that take the GEMM (ft_backend.row_gemm) come first, exp_gemm[e]
// of them, then the others, each part in token order.
static int group(cpu_backend *c, const ft_moe_params *p, int n_tok) {
    int ne = p->n_expert, k = p->n_expert_used;
    memset(c->exp_off, 0, ((size_t)ne + 1) * sizeof(int32_t));
    memset(c->exp_gemm, 0, (size_t)ne * sizeof(int32_t));
    for (int i = 0; i < n_tok * k; i++) c->exp_off[c->sel[i] + 1]++;
    for (int e = 0; e < ne; e++) c->exp_off[e + 1] += c->exp_off[e];
    int n_active = 0;
    for (int e = 0; e < ne; e++)
        if (c->exp_off[e + 1] > c->exp_off[e]) c->active[n_active++] = e;
    int32_t cursor[1024];
    FT_ASSERT(ne <= (int)FT_ARRAY_LEN(cursor));
    memcpy(cursor, c->exp_off, (size_t)ne * sizeof(int32_t));
    for (int pass = 0; pass < 2; pass++) // the GEMM's tokens, then the others
        for (int t = 0; t < n_tok; t++) {
            bool gemm = ft_row_gemm(c->base.row_gemm, t, n_tok);
            if (gemm != (pass == 0)) continue;
            for (int j = 0; j < k; j++) {
                int e = c->sel[t * k + j], g = cursor[e]++;
                c->grp_tok[g] = t;
                c->grp_of[t * k + j] = g;
                c->exp_gemm[e] += gemm;
            }
        }
    return n_active;
}

typedef struct {
    cpu_backend *c;
    int n_active;
    int64_t n_out, n_in;
    // up to two banks computed in the same pass (gate and up), each with its input rows in
    // grouped order (row g of xq: grouped row g)
    const ft_tensor *w[2];
    const uint8_t *xq[2];
    float *y[2];    // (grouped rows, n_out)
    const float *bias[2]; // (n_expert, n_out) f32: row e added to expert e's rows of y[b], or NULL
    const float *scale;   // (n_expert) f32: expert e's rows of y[0] times entry e before the bias, or NULL
    int n_banks;
    bool silu_gate; // y[0] = act(y[0], y[1]) over each piece once both banks have it
    enum ft_glu act;
    // chunk_rows > 0: the rows are claimed in chunks of chunk_rows, chunks_per_expert per
    // active expert, next_chunk[a] expert a's first one not yet claimed; where ready is set, an
    // expert's chunks wait for ready[a] (its input rows written by the job before, in the same
    // pool job). 0: static shares (exp_worker).
    int chunk_rows, chunks_per_expert;
    _Atomic int *next_chunk;
    const _Atomic int *ready;
    // With y_xq set: rows_left[a] counts active expert a's rows not yet done, and the thread
    // that does the last ones quantizes the expert's rows of y[0] to y_vdt into the same rows
    // of y_xq (the expert's input rows there, which nothing reads any more), then sets
    // y_ready[a].
    enum ft_type y_vdt;
    uint8_t *y_xq;
    _Atomic int64_t *rows_left;
    _Atomic int *y_ready;
    // With sum_y set (chunks only: down at decode): sum_left[r] counts the active experts whose
    // chunk r is not done yet, and the thread that does the last of them writes rows [o0, o1)
    // of chunk r of the op's output, each token's weighted sum over its slots (sum_rows).
    float *sum_y;
    _Atomic int *sum_left;
    int n_tok, k;
} exp_job;

// Weight bytes of one chunk of a one-bank job (down): a thread's stream runs long past the
// rows the matvec reads cold (it prefetches 8 rows ahead, so a chunk's first 8 rows are
// unprefetched), and the last chunks even out the threads' finishing times. Gate and up keep
// static shares: a piece of them starts two streams, and chunks of them were slower
// (bench_cpu_moe's figures: docs/performance.md). -DFT_EXP_CHUNK_BYTES=N tries other sizes.
#ifdef FT_EXP_CHUNK_BYTES
enum { EXP_CHUNK_BYTES = FT_EXP_CHUNK_BYTES };
#else
enum { EXP_CHUNK_BYTES = 32 << 10 };
#endif

static void sum_rows(const cpu_backend *c, float *y, int n_tok, int k, int64_t n_embd, int64_t o0, int64_t o1);

// Rows [o0, o1) of active expert a, every bank: the expert's GEMM tokens (exp_gemm) over all
// the rows in one call, the others in tiles of 16 rows over those tokens; then SiLU(gate) * up
// over these rows where the job asks for it, and the quantization of the expert's rows of y[0]
// where these were its last (y_xq).
static void exp_rows(exp_job *j, int a, int64_t o0, int64_t o1) {
    cpu_backend *c = j->c;
    if (o1 <= o0) return;
    int e = c->active[a], g0 = c->exp_off[e], cnt = c->exp_off[e + 1] - g0;
    for (int b = 0; b < j->n_banks; b++) {
        const ft_tensor *w = j->w[b];
        const uint8_t *we = ft_tensor_mat(w, e); // a fused gate/up view's experts are strided
        const uint8_t *xq = j->xq[b] + (size_t)g0 * c->xq_row;
        float *y = j->y[b] + (size_t)g0 * j->n_out;
        // the GEMM packs its tokens per call: one call whatever their count
        int ng = cpu_has_gemm(c, w->type) ? c->exp_gemm[e] : 0;
        if (ng > 0)
            cpu_dot_tile(c, w->type, true, j->n_in, we + (size_t)o0 * w->row_bytes, w->row_bytes, (int)(o1 - o0), xq,
                         c->xq_row, ng, y + o0, (size_t)j->n_out);
        if (ng < cnt)
            for (int64_t ob = o0; ob < o1; ob += 16)
                cpu_dot_tile(c, w->type, false, j->n_in, we + (size_t)ob * w->row_bytes, w->row_bytes,
                             (int)FT_MIN(16, o1 - ob), xq + (size_t)ng * c->xq_row, c->xq_row, cnt - ng,
                             y + (size_t)ng * j->n_out + ob, (size_t)j->n_out);
    }
    // the expert's scale (gemma4's down) on these rows, a multiply after the product as llama.cpp's
    // mul of its gathered scale
    if (j->scale)
        for (int g = g0; g < g0 + cnt; g++) {
            float *y = j->y[0] + (size_t)g * j->n_out, s = j->scale[e];
            for (int64_t o = o0; o < o1; o++) y[o] *= s;
        }
    // the expert's biases (gpt-oss) on these rows, an f32 add after the product as llama.cpp's add_id
    for (int b = 0; b < j->n_banks; b++)
        if (j->bias[b]) {
            const float *be = j->bias[b] + (size_t)e * j->n_out;
            for (int g = g0; g < g0 + cnt; g++) {
                float *y = j->y[b] + (size_t)g * j->n_out;
                for (int64_t o = o0; o < o1; o++) y[o] += be[o];
            }
        }
    if (j->silu_gate)
        for (int g = g0; g < g0 + cnt; g++) {
            float *gate = j->y[0] + (size_t)g * j->n_out, *up = j->y[1] + (size_t)g * j->n_out;
            if (j->act == FT_GLU_SILU) // (the common case, without the switch per element)
                for (int64_t o = o0; o < o1; o++) gate[o] = cpu_silu(gate[o]) * up[o];
            else
                for (int64_t o = o0; o < o1; o++) gate[o] = cpu_glu(j->act, gate[o], up[o]);
        }
    // acq_rel: the thread that sees the count reach zero sees every other thread's rows
    if (j->y_xq && atomic_fetch_sub_explicit(&j->rows_left[a], o1 - o0, memory_order_acq_rel) == o1 - o0) {
        for (int g = g0; g < g0 + cnt; g++)
            cpu_quantize_row(j->y_vdt, j->y[0] + (size_t)g * j->n_out, j->y_xq + (size_t)g * c->xq_row, j->n_out);
        atomic_store_explicit(&j->y_ready[a], 1, memory_order_release);
    }
    // acq_rel again: the thread that finishes chunk o0 / chunk_rows last sees every expert's rows
    if (j->sum_y &&
        atomic_fetch_sub_explicit(&j->sum_left[o0 / j->chunk_rows], 1, memory_order_acq_rel) == 1)
        sum_rows(c, j->sum_y, j->n_tok, j->k, j->n_out, o0, o1);
}

// Claims the next chunk, looking from active expert `from` on, so a thread keeps streaming
// one expert's rows while it has chunks: returns the expert and sets *k to the chunk's number
// within it, or -1 when every chunk is claimed. While the only chunks left wait for their
// expert's input (ready), it spins, yielding now and then in case the thread it waits for is
// not running (a machine busier than its cores).
static int claim_chunk(exp_job *j, int from, int *k) {
    for (int spins = 1;; spins++) {
        bool left = false;
        for (int i = 0; i < j->n_active; i++) {
            int a = (from + i) % j->n_active;
            _Atomic int *next = &j->next_chunk[a];
            if (atomic_load_explicit(next, memory_order_relaxed) >= j->chunks_per_expert) continue;
            left = true;
            // acquire: the rows the expert's input thread wrote before it set the flag
            if (j->ready && !atomic_load_explicit(&j->ready[a], memory_order_acquire)) continue;
            if ((*k = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) < j->chunks_per_expert) return a;
        }
        if (!left) return -1;
        _mm_pause();
        if (spins % 4096 == 0) sched_yield();
    }
}

// Chunks claimed until none is left, from active expert `from` on.
static void chunk_worker(exp_job *j, int from) {
    for (int a = from, k; (a = claim_chunk(j, a, &k)) >= 0;) {
        int64_t o0 = (int64_t)k * j->chunk_rows;
        exp_rows(j, a, o0, FT_MIN(o0 + j->chunk_rows, j->n_out));
    }
}

// Thread ith's static share of the active experts' rows: the work, (expert, row) in order, each
// row weighing its expert's token count, is split into nth contiguous shares of about equal
// weight (a share's GEMM call packs its tokens once; a share streams each bank in one run).
// Returns the last active expert of the share. Every output is the same kernel's on the same
// rows in a share or in a chunk (cpu_dot_tile's outputs do not depend on the rows or tokens
// beside them), and the thread that computed rows of gate and up applies SiLU(gate) * up to
// them, so no serial pass over the hidden rows follows.
static int static_share(exp_job *j, int ith, int nth) {
    cpu_backend *c = j->c;
    int64_t total = (int64_t)c->exp_off[c->active[j->n_active - 1] + 1] * j->n_out; // token-rows
    int64_t w0 = total * ith / nth, w1 = total * (ith + 1) / nth, seen = 0;
    int last = 0;
    for (int a = 0; a < j->n_active && seen < w1; a++) {
        int e = c->active[a], cnt = c->exp_off[e + 1] - c->exp_off[e];
        int64_t span = (int64_t)cnt * j->n_out;
        if (seen + span > w0) {
            // rows [o0, o1) of this expert: those whose weight falls in [w0, w1)
            int64_t o0 = seen >= w0 ? 0 : (w0 - seen + cnt - 1) / cnt;
            int64_t o1 = seen + span <= w1 ? j->n_out : (w1 - seen + cnt - 1) / cnt;
            exp_rows(j, a, o0, o1);
            last = a;
        }
        seen += span;
    }
    return last;
}

static void exp_worker(void *ctx, int ith, int nth) {
    exp_job *j = ctx;
    if (j->chunk_rows > 0)
        chunk_worker(j, j->n_active * ith / nth);
    else
        static_share(j, ith, nth);
}

// Gate/up and down of a step without GEMM tokens in one pool job: a thread that finishes its
// share of gate and up goes on to down's chunks of the experts whose hidden rows are ready,
// starting from its own last expert, so the threads that stream faster take more of down and
// no thread waits at a barrier between the two.
typedef struct {
    exp_job *gate_up, *down;
} experts_job;

static void experts_worker(void *ctx, int ith, int nth) {
    experts_job *f = ctx;
    chunk_worker(f->down, static_share(f->gate_up, ith, nth));
}

// True where some active expert's tokens take the GEMM in one of the job's banks.
static bool exp_has_gemm(const exp_job *j) {
    const cpu_backend *c = j->c;
    bool gemm = false;
    for (int b = 0; b < j->n_banks; b++)
        if (cpu_has_gemm(c, j->w[b]->type))
            for (int a = 0; a < j->n_active; a++) gemm |= c->exp_gemm[c->active[a]] > 0;
    return gemm;
}

// Sets the job's split: a one-bank job without GEMM tokens in chunks, else in static shares;
// a job that quantizes y[0] for the next (y_xq) only without GEMM tokens (else y_xq is
// cleared: with them (prefill) an expert's many rows would be quantized by one thread).
static void exp_prepare(exp_job *j) {
    bool gemm = exp_has_gemm(j);
    j->chunk_rows = 0;
    if (!gemm && j->n_banks == 1) {
        // a multiple of the 16-row tile, the nearest to EXP_CHUNK_BYTES
        int64_t rows = 16 * FT_MAX((int64_t)1, ((int64_t)EXP_CHUNK_BYTES / (int64_t)j->w[0]->row_bytes + 8) / 16);
        j->chunk_rows = (int)FT_MIN(rows, j->n_out);
        j->chunks_per_expert = (int)((j->n_out + j->chunk_rows - 1) / j->chunk_rows);
        for (int a = 0; a < j->n_active; a++) atomic_init(&j->next_chunk[a], 0);
    }
    if (j->chunk_rows == 0) j->sum_y = NULL;
    if (j->sum_y)
        for (int r = 0; r < j->chunks_per_expert; r++) atomic_init(&j->sum_left[r], j->n_active);
    if (gemm) j->y_xq = NULL;
    if (j->y_xq)
        for (int a = 0; a < j->n_active; a++) {
            atomic_init(&j->rows_left[a], j->n_out);
            atomic_init(&j->y_ready[a], 0);
        }
}

// FT_CPU_MOE_ONE_JOB=0 runs gate/up and down as two pool jobs even where one would do (for
// the benchmark's comparison); read once.
static bool one_job_enabled(void) {
    static _Atomic int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        v = ft_env_flag(FT_ENV_CPU_MOE_ONE_JOB);
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

// Gate/up (with SiLU) then down over the pool: in one job where gate/up quantizes the hidden
// rows itself and down goes in chunks (no GEMM tokens: decode), else as two jobs with the
// hidden rows (rows grouped rows) quantized between them where gate/up could not.
static void experts_run(cpu_backend *c, exp_job *gu, exp_job *dn, int rows) {
    exp_prepare(gu);
    exp_prepare(dn);
    if (gu->y_xq && dn->chunk_rows > 0 && one_job_enabled()) {
        dn->ready = gu->y_ready;
        experts_job f = {gu, dn};
        cpu_run(c, experts_worker, &f);
        return;
    }
    cpu_run(c, exp_worker, gu);
    if (!gu->y_xq) cpu_quantize_rows(c, gu->y_vdt, gu->y[0], gu->n_out, rows, c->xq, c->xq_row);
    cpu_run(c, exp_worker, dn);
}

// Copies row grp_tok[g] of c->xq_tok (rows of n elements of vdt, in token order) to row g of
// dst for each of the rows grouped rows.
static void copy_grouped(cpu_backend *c, enum ft_type vdt, int64_t n, int rows, uint8_t *dst) {
    size_t bytes = ft_row_bytes(vdt, n);
    for (int g = 0; g < rows; g++)
        memcpy(dst + (size_t)g * c->xq_row, c->xq_tok + (size_t)c->grp_tok[g] * c->xq_row, bytes);
}

// Quantizes x (n_tok rows of n) to vdt in token order into c->xq_tok, then copies them into
// grouped order into dst.
static void quantize_grouped(cpu_backend *c, enum ft_type vdt, const float *x, int64_t n, int n_tok,
                             int rows, uint8_t *dst) {
    cpu_quantize_rows(c, vdt, x, n, n_tok, c->xq_tok, c->xq_row);
    copy_grouped(c, vdt, n, rows, dst);
}

// An f32 router's logits and the quantization of x to vdt for gate and up (into c->xq_tok,
// token order) in one job. The router reads x as it is (an f32 matmul's activations are x's
// floats) and takes the matmul's tile kernel on the same rows, so the logits are the matmul's.
typedef struct {
    cpu_backend *c;
    const ft_tensor *router;
    const float *x;
    int n_tok;
    enum ft_type vdt;
} router_job;

// Quantizing one token costs about as much as this many router rows (both stream a row of
// n_embd floats; with the AVX2 quantizer of cpu_quant.c, about one: docs/performance.md).
enum { ROUTER_ROWS_PER_QUANT = 1 };

// The first router row of thread i of nth when thread 0 also quantizes the token: the shares
// of n_out + ROUTER_ROWS_PER_QUANT rows' work, thread 0's less the quantization.
static int64_t router_row0(int64_t n_out, int i, int nth) {
    if (i == 0) return 0;
    if (i >= nth) return n_out;
    int64_t per = (n_out + ROUTER_ROWS_PER_QUANT + nth - 1) / nth;
    return FT_MIN(FT_MAX((int64_t)i * per - ROUTER_ROWS_PER_QUANT, (int64_t)0), n_out);
}

// One token: thread 0 quantizes it and takes fewer router rows than the others; more tokens:
// each thread a share of both.
static void router_worker(void *ctx, int ith, int nth) {
    const router_job *j = ctx;
    cpu_backend *c = j->c;
    const ft_tensor *w = j->router;
    int64_t n = w->ne[0], n_out = w->ne[1], t0 = 0, t1 = 0, o0, o1;
    if (j->n_tok == 1) {
        t1 = ith == 0;
        o0 = router_row0(n_out, ith, nth);
        o1 = router_row0(n_out, ith + 1, nth);
    } else {
        ft_pool_split(j->n_tok, ith, nth, &t0, &t1);
        ft_pool_split(n_out, ith, nth, &o0, &o1);
    }
    for (int64_t t = t0; t < t1; t++) cpu_quantize_row(j->vdt, j->x + t * n, c->xq_tok + (size_t)t * c->xq_row, n);
    for (int64_t ob = o0; ob < o1; ob += 16)
        cpu_dot_tile(c, w->type, false, n, (const uint8_t *)w->data + (size_t)ob * w->row_bytes, w->row_bytes,
                     (int)FT_MIN(16, o1 - ob), (const uint8_t *)j->x, (size_t)n * sizeof(float), j->n_tok,
                     c->logits + ob, (size_t)n_out);
}

// y (n floats) = the sum over slots j < k of w[j] * rows[j], each element's terms added in slot
// order, a product then a sum (as llama.cpp adds them); four elements at a time in a vector
// the compiler keeps in a register across the slots.
static void weighted_sum(float *y, const float *const *rows, const float *w, int k, int64_t n) {
    typedef float v4 __attribute__((vector_size(16)));
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        v4 o, acc;
        memcpy(&o, rows[0] + i, sizeof(o));
        acc = o * w[0];
        for (int j = 1; j < k; j++) {
            memcpy(&o, rows[j] + i, sizeof(o));
            acc += o * w[j];
        }
        memcpy(y + i, &acc, sizeof(acc));
    }
    for (; i < n; i++) {
        float s = rows[0][i] * w[0];
        for (int j = 1; j < k; j++) s += rows[j][i] * w[j];
        y[i] = s;
    }
}

// Rows [o0, o1) of each token's output: the weighted sum over its slots' rows of h_out.
static void sum_rows(const cpu_backend *c, float *y, int n_tok, int k, int64_t n_embd, int64_t o0, int64_t o1) {
    const float *slot_rows[256];
    FT_ASSERT(k <= (int)FT_ARRAY_LEN(slot_rows));
    for (int t = 0; t < n_tok; t++) {
        for (int j = 0; j < k; j++) slot_rows[j] = c->h_out + (size_t)c->grp_of[t * k + j] * n_embd + o0;
        weighted_sum(y + (size_t)t * n_embd + o0, slot_rows, c->sel_w + (size_t)t * k, k, o1 - o0);
    }
}

static enum ft_type vdt_of(enum ft_type t) { return ft_quant_ops_find(t)->vec_dot_type; }

// A bank's per-expert bias as rows of n_out floats (one per expert), or NULL where it is absent.
static const float *expert_bias(const ft_tensor *b, int64_t n_out, int n_expert) {
    if (!ft_tensor_present(b)) return NULL;
    FT_ASSERT(b->type == FT_TYPE_F32 && b->ne[0] == n_out && b->ne[1] == n_expert);
    return b->data;
}

// The per-expert scales of down (one float per expert), or NULL where they are absent.
static const float *expert_scale(const ft_tensor *s, int n_expert) {
    if (!ft_tensor_present(s)) return NULL;
    FT_ASSERT(s->type == FT_TYPE_F32 && s->ne[0] == n_expert && s->ne[1] == 1);
    return s->data;
}

// moe_ffn, in steps:
//   1. router logits for all tokens (one matmul, over router_x where the layer routes from an
//      input of its own; an f32 router's reading x in a job that also quantizes the tokens for
//      gate and up), gating (softmax or sigmoid), top-k on
//      gating + selection bias, weights renormalised and scaled as the layer asks; or the
//      routing as the caller gives it (ft_moe_params.sel: the GPU's, in --moe-backend cpu);
//   2. group the (token, slot) pairs by expert (a counting sort), so each expert's weights
//      are read once for all its tokens and unselected experts are never touched; where this
//      op routed, add each expert's count to the block's route counters (route_counts);
//   3. gate and up for every active expert's rows over the pool, their biases where the layer
//      has them and the activation (SiLU(gate) * up, or gpt-oss's clamped SwiGLU) in the same
//      job, quantize to the down bank's vec_dot_type (in that job too without GEMM tokens),
//      down over the pool; each expert's weights
//      meet all its tokens in tiles (cpu_dot_tile), the work split by token-rows (down without
//      GEMM tokens in chunks the threads claim, else in static shares; without GEMM tokens
//      gate/up and down are one pool job, down's chunks of an expert taken as soon as its
//      hidden rows are ready); the tokens of a prefill
//      chunk take the GEMM and the others the tile kernels (ft_backend.row_gemm), so a token's
//      result never depends on how many others its expert got;
//      down's scale and bias applied to each expert's rows by the thread that computed them;
//   4. per token, the weighted sum over its slots in slot order (as llama.cpp adds them): where
//      down goes in chunks, by the thread that finishes a chunk's rows last over the experts,
//      so no serial pass over the k rows (written by other cores) follows the job.
void cpu_moe_ffn(ft_backend *be, const ft_moe_params *p, const float *x, float *y, int n_tok) {
    cpu_backend *c = cpu_of(be);
    int64_t n_embd = p->gate_exps->ne[0], n_ff = p->gate_exps->ne[1];
    int k = p->n_expert_used;
    FT_ASSERT(c->reserved && n_tok <= c->lim.max_tok && k <= c->lim.n_expert_used);
    FT_ASSERT(p->n_expert <= c->lim.n_expert && n_ff <= c->lim.max_width);

    // the routing: given, or the router's logits (where it is f32 without a GEMM, in one job
    // with the quantization of gate's input) and route()
    enum ft_type vg = vdt_of(p->gate_exps->type), vu = vdt_of(p->up_exps->type);
    bool x_quantized = false;
    if (p->sel) {
        FT_ASSERT(p->sel_w);
        memcpy(c->sel, p->sel, (size_t)n_tok * (size_t)k * sizeof(int32_t));
        memcpy(c->sel_w, p->sel_w, (size_t)n_tok * (size_t)k * sizeof(float));
        for (int i = 0; i < n_tok * k; i++) FT_ASSERT(c->sel[i] >= 0 && c->sel[i] < p->n_expert);
    } else {
        if (p->router_x) {
            be->ops->matmul(be, p->router, p->router_x, c->logits, n_tok);
        } else if (p->router->type == FT_TYPE_F32 && !cpu_has_gemm(c, FT_TYPE_F32)) {
            FT_ASSERT(p->router->ne[0] == n_embd && p->router->ne[1] == p->n_expert);
            router_job rj = {c, p->router, x, n_tok, vg};
            cpu_run(c, router_worker, &rj);
            x_quantized = true;
        } else {
            be->ops->matmul(be, p->router, x, c->logits, n_tok);
        }
        route(c, p, n_tok);
    }
    int n_active = group(c, p, n_tok);
    if (!p->sel && c->route_counts) { // the router's selections, one count per (token, slot)
        FT_ASSERT(p->layer >= 0 && p->layer < c->lim.n_layer);
        uint64_t *cnt = c->route_counts + (size_t)p->layer * (size_t)c->lim.n_expert;
        for (int a = 0; a < n_active; a++) {
            int e = c->active[a];
            cnt[e] += (uint64_t)(c->exp_off[e + 1] - c->exp_off[e]);
        }
    }
    for (int a = 0; a < n_active; a++) {
        // The placement hook: src/moe/ decides where each selected expert runs. This backend
        // computes the ones placed on the CPU, which today is every one it is asked about.
        enum ft_placement where = p->place ? p->place(p->place_ctx, p->layer, c->active[a]) : FT_PLACEMENT_CPU;
        FT_ASSERT(where == FT_PLACEMENT_CPU);
    }

    // gate and up read each grouped row's token, quantized once per token and copied into
    // grouped order so every expert's tokens are consecutive rows (a tile's columns)
    int rows = n_tok * k;
    if (x_quantized)
        copy_grouped(c, vg, n_embd, rows, c->xq);
    else
        quantize_grouped(c, vg, x, n_embd, n_tok, rows, c->xq);
    if (vu != vg) quantize_grouped(c, vu, x, n_embd, n_tok, rows, c->xq2);
    _Atomic int64_t rows_left[1024];
    _Atomic int hidden_ready[1024], down_next[1024], sum_left[1024];
    FT_ASSERT(n_active <= (int)FT_ARRAY_LEN(rows_left));
    exp_job gu = {.c = c, .n_active = n_active, .n_out = n_ff, .n_in = n_embd, .w = {p->gate_exps, p->up_exps},
                  .xq = {c->xq, vu != vg ? c->xq2 : c->xq}, .y = {c->h_gate, c->h_up},
                  .bias = {expert_bias(p->gate_bias, n_ff, p->n_expert), expert_bias(p->up_bias, n_ff, p->n_expert)},
                  .n_banks = 2, .silu_gate = true, .act = p->act, .y_vdt = vdt_of(p->down_exps->type), .y_xq = c->xq, .rows_left = rows_left,
                  .y_ready = hidden_ready};
    exp_job dn = {.c = c, .n_active = n_active, .n_out = n_embd, .n_in = n_ff, .w = {p->down_exps, NULL},
                  .xq = {c->xq, NULL}, .y = {c->h_out, NULL},
                  .bias = {expert_bias(p->down_bias, n_embd, p->n_expert), NULL},
                  .scale = expert_scale(p->down_scale, p->n_expert), .n_banks = 1, .next_chunk = down_next,
                  .sum_y = y, .sum_left = sum_left, .n_tok = n_tok, .k = k};
    FT_ASSERT((n_embd + 15) / 16 <= (int64_t)FT_ARRAY_LEN(sum_left)); // down's chunks per expert
    experts_run(c, &gu, &dn, rows);
    // the weighted sums, unless down's chunks did them
    if (!dn.sum_y) sum_rows(c, y, n_tok, k, n_embd, 0, n_embd);
}

void cpu_ffn(ft_backend *be, const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down,
             const float *x, float *y, int n_tok, enum ft_glu act) {
    cpu_backend *c = cpu_of(be);
    int64_t n_ff = gate->ne[1];
    FT_ASSERT(n_ff <= c->lim.max_width && up->ne[1] == n_ff && down->ne[0] == n_ff);
    FT_ASSERT(act == FT_GLU_SILU || act == FT_GLU_GELU);
    be->ops->matmul(be, gate, x, c->h_gate, n_tok);
    be->ops->matmul(be, up, x, c->h_up, n_tok);
    for (size_t i = 0; i < (size_t)n_tok * (size_t)n_ff; i++) c->h_gate[i] = cpu_glu(act, c->h_gate[i], c->h_up[i]);
    be->ops->matmul(be, down, c->h_gate, y, n_tok);
}

void cpu_sigmoid_gate_add(ft_backend *be, const ft_tensor *gate_inp, const float *x,
                          const float *s, float *y, int n_tok, int n_embd) {
    cpu_backend *c = cpu_of(be);
    FT_ASSERT(gate_inp->ne[0] == n_embd && gate_inp->ne[1] == 1);
    be->ops->matmul(be, gate_inp, x, c->logits, n_tok);
    for (int t = 0; t < n_tok; t++) {
        float g = c->logits[t];
        float sg = cpu_silu(g) / g; // sigmoid, computed as llama.cpp does for qwen2moe
        for (int i = 0; i < n_embd; i++) y[(size_t)t * n_embd + i] += s[(size_t)t * n_embd + i] * sg;
    }
}
