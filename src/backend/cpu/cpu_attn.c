// cpu_attn.c: RoPE, KV-cache writes, attention and the attention output gate on the CPU.
#include "cpu_impl.h"

#include "../../quant/fp16.h"

#include <string.h>

static inline float f16_round(float x) { return ft_fp16_to_fp32(ft_fp32_to_fp16(x)); }

// ---------------------------------------------------------------------------------------------
// RoPE, as ggml computes it: the angle of pair i is pos * base^(-2i/n_rot), built by repeated
// multiplication in float, divided by the pair's frequency factor where there are some; YaRN
// mixes interpolated and extrapolated angles over a ramp between its correction dims and scales
// the magnitude.

static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

static void rope_angles(const ft_rope_params *p, int pos, float *cos_sin) {
    float theta_scale = powf(p->freq_base, -2.0f / p->n_rot);
    float lo = floorf(yarn_corr_dim(p->n_rot, p->n_ctx_orig, p->beta_fast, p->freq_base));
    float hi = ceilf(yarn_corr_dim(p->n_rot, p->n_ctx_orig, p->beta_slow, p->freq_base));
    float corr0 = FT_MAX(0.0f, lo), corr1 = FT_MIN((float)(p->n_rot - 1), hi);
    float theta_extrap = (float)pos;
    int sect_dims = p->sections[0] + p->sections[1] + p->sections[2] + p->sections[3];
    const float *ff = NULL;
    if (ft_tensor_present(p->freq_factors)) {
        FT_ASSERT(p->freq_factors->type == FT_TYPE_F32 && p->freq_factors->ne[0] >= p->n_rot / 2);
        ff = p->freq_factors->data;
    }
    for (int i0 = 0; i0 < p->n_rot; i0 += 2) {
        // imrope for text: the t, h and w axes all sit at pos, the fourth at 0
        float extrap = theta_extrap;
        if (p->imrope && sect_dims > 0) {
            int sector = (i0 / 2) % sect_dims;
            bool at_pos = (sector % 3 == 0 && sector < 3 * p->sections[0]) ||
                          (sector % 3 == 1 && sector < 3 * p->sections[1]) ||
                          (sector % 3 == 2 && sector < 3 * p->sections[2]);
            if (!at_pos) extrap = 0.0f;
        }
        if (ff) extrap /= ff[i0 / 2];
        float theta = p->freq_scale * extrap, mscale = p->attn_factor;
        if (p->ext_factor != 0.0f) {
            float y = (i0 / 2 - corr0) / FT_MAX(0.001f, corr1 - corr0);
            float ramp_mix = (1 - FT_MIN(1.0f, FT_MAX(0.0f, y))) * p->ext_factor;
            theta = theta * (1 - ramp_mix) + extrap * ramp_mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / p->freq_scale);
        }
        cos_sin[i0] = cosf(theta) * mscale;
        cos_sin[i0 + 1] = sinf(theta) * mscale;
        theta_extrap *= theta_scale;
    }
}

typedef struct {
    const cpu_backend *c;
    float *x;
    int n_head, head_dim, pos0;
    const ft_rope_params *p;
} rope_job;

static void rope_rows(void *ctx, int64_t t0, int64_t t1, int ith) {
    const rope_job *j = ctx;
    const ft_rope_params *p = j->p;
    float *cs = j->c->attn_ws + (size_t)ith * j->c->attn_ws_per_thread; // n_rot floats: cos and sin of each pair
    for (int64_t t = t0; t < t1; t++) {
        rope_angles(p, j->pos0 + (int)t, cs);
        for (int h = 0; h < j->n_head; h++) {
            float *v = j->x + ((size_t)t * j->n_head + h) * j->head_dim;
            int half = p->n_rot / 2;
            for (int i0 = 0; i0 < p->n_rot; i0 += 2) {
                // NeoX rotates (i, i + n_rot/2); the original layout rotates (2i, 2i+1)
                int a = p->neox ? i0 / 2 : i0, b = p->neox ? i0 / 2 + half : i0 + 1;
                float x0 = v[a], x1 = v[b], cos_t = cs[i0], sin_t = cs[i0 + 1];
                v[a] = x0 * cos_t - x1 * sin_t;
                v[b] = x0 * sin_t + x1 * cos_t;
            }
        }
    }
}

void cpu_rope(ft_backend *be, float *x, int n_tok, int n_head, int head_dim, int pos0,
              const ft_rope_params *p) {
    cpu_backend *c = cpu_of(be);
    FT_ASSERT(p->n_rot % 2 == 0 && p->n_rot <= head_dim && head_dim <= c->lim.max_head_dim);
    FT_ASSERT((size_t)p->n_rot <= c->attn_ws_per_thread);
    rope_job j = {c, x, n_head, head_dim, pos0, p};
    cpu_run_rows(c, n_tok, (int64_t)n_head * p->n_rot, rope_rows, &j);
}

// ---------------------------------------------------------------------------------------------
// Walsh-Hadamard rotation: scale by 1/sqrt(n), then butterflies of span 1, 2, 4, ... (the
// order llama.cpp uses, so results agree to the bit).

typedef struct {
    float *x;
    int n;
} hadamard_job;

static void hadamard_rows(void *ctx, int64_t c0, int64_t c1, int ith) {
    (void)ith;
    const hadamard_job *j = ctx;
    const int n = j->n;
    float scale = 1.0f / sqrtf((float)n);
    for (int64_t c = c0; c < c1; c++) {
        float *v = j->x + c * n;
        for (int i = 0; i < n; i++) v[i] *= scale;
        for (int len = 1; len < n; len <<= 1)
            for (int i = 0; i < n; i += 2 * len)
                for (int k = i; k < i + len; k++) {
                    float a = v[k], b = v[k + len];
                    v[k] = a + b;
                    v[k + len] = a - b;
                }
    }
}

void cpu_hadamard(ft_backend *be, float *x, int n_rows, int row_len, int n) {
    FT_ASSERT(n > 0 && (n & (n - 1)) == 0 && row_len % n == 0);
    hadamard_job j = {x, n};
    cpu_run_rows(cpu_of(be), (int64_t)n_rows * row_len / n, n, hadamard_rows, &j);
}

// ---------------------------------------------------------------------------------------------
// KV cache writes

typedef struct {
    ft_tensor *cache;
    const int32_t *blocks;
    int pos0;
    const float *x;
} set_rows_job;

static void set_rows_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const set_rows_job *j = ctx;
    const ft_tensor *cache = j->cache;
    for (int64_t r = r0; r < r1; r++) {
        int64_t row = ft_kv_row(j->blocks, j->pos0 + (int)r);
        FT_ASSERT(row >= 0 && row < cache->ne[1]);
        cpu_quantize_row(cache->type, j->x + (size_t)r * cache->ne[0],
                         (uint8_t *)cache->data + (size_t)row * cache->row_bytes, cache->ne[0]);
    }
}

void cpu_set_rows(ft_backend *be, ft_tensor *cache, const int32_t *blocks, int pos0, const float *x, int n_rows) {
    FT_ASSERT(pos0 >= 0);
    set_rows_job j = {cache, blocks, pos0, x};
    cpu_run_rows(cpu_of(be), n_rows, cache->ne[0], set_rows_rows, &j);
}

// Several sequences' decode rows (ft_seq_rows; its arrays are host memory here): row by row, as
// the ops take one sequence's rows, so that a batch gives each sequence its bits alone.
void cpu_rope_seqs(ft_backend *be, float *x, int n_head, int head_dim, const ft_seq_rows *rows,
                   const ft_rope_params *p) {
    for (int i = 0; i < rows->n; i++) cpu_rope(be, x + (size_t)i * n_head * head_dim, 1, n_head, head_dim, rows->pos[i], p);
}

void cpu_set_rows_seqs(ft_backend *be, ft_tensor *cache, const ft_seq_rows *rows, const float *x) {
    for (int i = 0; i < rows->n; i++)
        cpu_set_rows(be, cache, rows->blocks[i], rows->pos[i], x + (size_t)i * cache->ne[0], 1);
}

void cpu_copy_rows(ft_backend *be, ft_tensor *cache, int64_t dst, int64_t src, int64_t n_rows) {
    (void)be;
    FT_ASSERT(n_rows >= 0 && src >= 0 && dst >= 0);
    FT_ASSERT(src + n_rows <= cache->ne[1] && dst + n_rows <= cache->ne[1]);
    FT_ASSERT(dst + n_rows <= src || src + n_rows <= dst);
    uint8_t *d = cache->data;
    size_t rb = cache->row_bytes;
    memcpy(d + (size_t)dst * rb, d + (size_t)src * rb, (size_t)n_rows * rb);
}

// ---------------------------------------------------------------------------------------------
// Attention: one (token, head) per work item, in the steps of llama.cpp's CPU flash attention
// (so rounding agrees with it, which the conformance tests need):
//   1. the query is converted to the key type's vec_dot_type (f16, or q8_0 for a q8_0 cache)
//      and scored with the same dot product as a matmul, times the scale;
//   2. an online softmax over the visible keys in position order, rescaling the running sum
//      of values when the maximum grows; with an f16 cache that sum is stored in f16;
//   3. with attention sinks, the head's sink joins the denominator (cpu_attn_sink);
//   4. the sum divided by the softmax denominator.
// Batches of 64 or more queries over an f16 cache take llama.cpp's tiled path instead: q.k
// and the running sums in f32.

typedef struct {
    cpu_backend *c;
    const ft_attn_params *p;
    bool tiled; // f32 scores and accumulation (llama.cpp's tiled path)
} attn_job;

static void attn_worker(void *ctx, int ith, int nth) {
    attn_job *j = ctx;
    const ft_attn_params *p = j->p;
    cpu_backend *c = j->c;
    const ft_quant_ops *kq = ft_quant_ops_find(p->k_cache->type);
    const ft_quant_ops *vq = ft_quant_ops_find(p->v_cache->type);
    ft_vec_dot_fn dot = cpu_vec_dot(c, p->k_cache->type);
    int hd = p->head_dim, group = p->n_head / p->n_head_kv;
    const float *sinks = cpu_attn_sinks(p);
    float *ws = c->attn_ws + (size_t)ith * c->attn_ws_per_thread;
    uint8_t *qbuf = (uint8_t *)ws;            // up to hd * 4 bytes + block overhead
    float *acc = ws + hd + 16;                // (hd)
    float *vrow = acc + hd;                   // (hd)

    int64_t i0, i1;
    ft_pool_split((int64_t)p->n_tok * p->n_head, ith, nth, &i0, &i1);
    for (int64_t it = i0; it < i1; it++) {
        int t = (int)(it / p->n_head), h = (int)(it % p->n_head), hk = h / group;
        int qpos = p->pos0 + t;
        int kmin = p->window > 0 ? FT_MAX(0, qpos - p->window + 1) : 0;
        cpu_quantize_row(kq->vec_dot_type, p->q + ((size_t)t * p->n_head + h) * hd, qbuf, hd);
        size_t koff = (size_t)hk * ft_row_bytes(p->k_cache->type, hd);
        size_t voff = (size_t)hk * ft_row_bytes(p->v_cache->type, hd);
        // Online softmax in key order, as llama.cpp's CPU flash attention runs it: with f16
        // values the running sum of values is kept in f16 (rounded after every key), which
        // we reproduce so the two agree closely; other value types accumulate in f32.
        bool v16 = p->v_cache->type == FT_TYPE_F16 && !j->tiled;
        float S = 0, M = -INFINITY;
        memset(acc, 0, (size_t)hd * sizeof(float));
        int64_t off = 0, last = -1;
        for (int k = kmin; k <= qpos; k++) {
            size_t row = (size_t)ft_kv_row_walk(p->blocks, k, &off, &last);
            const uint8_t *kr = (const uint8_t *)p->k_cache->data + row * p->k_cache->row_bytes + koff;
            float s;
            if (j->tiled) {
                kq->to_float(kr, vrow, hd);
                const float *qf = p->q + ((size_t)t * p->n_head + h) * hd;
                s = 0;
                for (int d = 0; d < hd; d++) s += qf[d] * vrow[d];
                s *= p->scale;
            } else {
                s = dot(hd, kr, qbuf) * p->scale;
            }
            float ms = 1.0f, vs = 1.0f;
            if (s > M) {
                float old = M;
                M = s;
                ms = expf(old - M);
                for (int d = 0; d < hd; d++) acc[d] = v16 ? f16_round(acc[d] * ms) : acc[d] * ms;
            } else {
                vs = expf(s - M);
            }
            const uint8_t *vr = (const uint8_t *)p->v_cache->data + row * p->v_cache->row_bytes + voff;
            vq->to_float(vr, vrow, hd);
            // a separate multiply and add (not fused): this agrees with llama.cpp to the bit
            // on q8_0 caches, where a fused one does not
            for (int d = 0; d < hd; d++) acc[d] = v16 ? f16_round(acc[d] + vrow[d] * vs) : acc[d] + vrow[d] * vs;
            S = S * ms + vs;
        }
        if (sinks) cpu_attn_sink(sinks[h], M, &S, acc, hd);
        float inv = S == 0.0f ? 0.0f : 1.0f / S;
        for (int d = 0; d < hd; d++) acc[d] *= inv;
        float *o = p->out + ((size_t)t * p->n_head + h) * hd;
        memcpy(o, acc, (size_t)hd * sizeof(float));
    }
}

const float *cpu_attn_sinks(const ft_attn_params *p) {
    if (!ft_tensor_present(p->sinks)) return NULL;
    FT_ASSERT(p->sinks->type == FT_TYPE_F32 && p->sinks->ne[0] >= p->n_head);
    return p->sinks->data;
}

int cpu_attn_head_parts(const cpu_backend *c, const ft_attn_params *p) {
    int pairs = p->n_tok * p->n_head_kv, nth = cpu_threads(c), group = p->n_head / p->n_head_kv;
    return pairs >= nth ? 1 : FT_MIN((nth + pairs - 1) / pairs, FT_MAX(1, (group + 1) / 2));
}

void cpu_attention(ft_backend *be, const ft_attn_params *p) {
    if (p->seqs) { // several sequences' decode rows: each row as its sequence's one-row call
        size_t width = (size_t)p->n_head * p->head_dim;
        FT_ASSERT(p->seqs->n == p->n_tok);
        for (int i = 0; i < p->seqs->n; i++) {
            ft_attn_params a = *p;
            a.seqs = NULL;
            a.q = p->q + (size_t)i * width;
            a.out = p->out + (size_t)i * width;
            a.blocks = p->seqs->blocks[i];
            a.pos0 = p->seqs->pos[i];
            a.n_tok = 1;
            a.n_chunk = 0;
            cpu_attention(be, &a);
        }
        return;
    }
    cpu_backend *c = cpu_of(be);
    FT_ASSERT(p->head_dim <= c->lim.max_head_dim && p->pos0 + p->n_tok <= c->lim.max_ctx);
    FT_ASSERT(p->n_head % p->n_head_kv == 0);
    // llama.cpp switches to a tiled kernel for batches of 64 queries or more over an f16
    // cache: q.k in f32 from the f16 keys, values accumulated in f32. We follow it (by the
    // whole chunk's length, where the queries end one).
    bool tiled = p->k_cache->type == FT_TYPE_F16 && FT_MAX(p->n_tok, p->n_chunk) >= FT_ATTN_TILED_MIN_TOK;
    if (!c->base.reference && cpu_has_avx512() && tiled && cpu_attention_tiled_avx512(c, p)) return;
    if (!c->base.reference && cpu_has_avx2() && tiled && cpu_attention_tiled(c, p)) return;
    if (!c->base.reference && cpu_has_avx512() && !tiled && cpu_attention_decode_avx512(c, p)) return;
    if (!c->base.reference && cpu_has_avx2() && cpu_attention_fast(c, p, tiled)) return;
    attn_job j = {c, p, tiled};
    cpu_run(c, attn_worker, &j);
}

// ---------------------------------------------------------------------------------------------
// Gates: attention outputs times an activation of a projection (laguna's softplus per head or
// element, qwen35moe's sigmoid of its doubled Q and the SiLU of its DeltaNet gate)

static float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

static float act(enum ft_act a, float x) {
    switch (a) {
    case FT_ACT_SOFTPLUS: return softplus(x);
    case FT_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case FT_ACT_SILU: return cpu_silu(x);
    }
    return x;
}

typedef struct {
    float *x;
    const float *g;
    int head_dim, g_width, width;
    enum ft_act a;
} gate_mul_job;

static void gate_mul_rows(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const gate_mul_job *j = ctx;
    const int width = j->width, g_width = j->g_width, hd = j->head_dim;
    for (int64_t t = t0; t < t1; t++) {
        const float *g = j->g + (size_t)t * g_width;
        float *x = j->x + (size_t)t * width;
        if (g_width == width)
            for (int i = 0; i < width; i++) x[i] *= act(j->a, g[i]);
        else // a gate per head: its activation once for the head's elements
            for (int h = 0; h < g_width; h++) {
                const float a = act(j->a, g[h]);
                for (int i = h * hd; i < (h + 1) * hd; i++) x[i] *= a;
            }
    }
}

void cpu_gate_mul(ft_backend *be, float *x, const float *g, int n_tok, int n_head, int head_dim, int g_width,
                  enum ft_act a) {
    int width = n_head * head_dim;
    FT_ASSERT(g_width == n_head || g_width == width);
    gate_mul_job j = {x, g, head_dim, g_width, width, a};
    cpu_run_rows(cpu_of(be), n_tok, width, gate_mul_rows, &j);
}

void cpu_split_heads(ft_backend *be, const float *x, float *a, float *b, int n_rows, int n_head, int head_dim) {
    (void)be;
    size_t hd = (size_t)head_dim;
    for (int r = 0; r < n_rows; r++)
        for (int h = 0; h < n_head; h++) {
            const float *src = x + ((size_t)r * n_head + h) * 2 * hd;
            memcpy(a + ((size_t)r * n_head + h) * hd, src, hd * sizeof(float));
            memcpy(b + ((size_t)r * n_head + h) * hd, src + hd, hd * sizeof(float));
        }
}
