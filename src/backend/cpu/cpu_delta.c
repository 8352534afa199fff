// cpu_delta.c: gated DeltaNet linear attention on the CPU (backend.h, ft_delta_params), in
// llama.cpp's steps and summation orders: the conv's taps summed oldest first, the L2 norm's
// squares in double, the delta rule token by token on transposed state matrices. That is the
// reference; with AVX2 the same steps run in 8-lane FMAs (cpu_delta_avx2.c).
//
// Prefill keeps the recurrence (as llama.cpp's CPU backend does) rather than the chunked form:
// with a head's state resident in L1/L2 and its rows updated four at a time, the step is a few
// passes of FMAs over 64 KiB per head and token, a small share of a layer's matrix work.
#include "cpu_impl.h"

#include <string.h>

typedef struct {
    cpu_backend *c;
    const ft_delta_params *p;
    float *conv;   // (n_tok, channels) the conv's output, SiLU applied, then q and k normalised
    int channels;
    bool fast; // the AVX2 path (cpu_delta_avx2.c)
} delta_job;

// Steps 1 and 2 for the channels of thread ith: the causal conv and SiLU, then (once every
// channel of a head is done: each thread takes whole heads) the L2 norm of q's and k's heads.
static void conv_worker(void *ctx, int ith, int nth) {
    const delta_job *j = ctx;
    const ft_delta_params *p = j->p;
    int C = j->channels, K = p->d_conv, hd = p->head_dim, n = p->n_tok;
    int n_groups = C / hd; // heads of q, k and v, in channel order
    int64_t g0, g1;
    ft_pool_split(n_groups, ith, nth, &g0, &g1);
    const float *w = p->conv_w->data, *hist = p->conv_state->data;
    const bool fresh = p->pos0 == 0;
    if (j->fast) {
        cpu_delta_conv_avx2(p->qkv, hist, fresh, w, C, K, n, (int)(g0 * hd), (int)(g1 * hd), j->conv);
        for (int64_t g = g0; g < g1 && g < 2 * p->n_k_heads; g++)
            for (int t = 0; t < n; t++)
                cpu_delta_l2norm_avx2(j->conv + (size_t)t * C + (size_t)g * hd, hd, p->eps);
        return;
    }
    for (int64_t c = g0 * hd; c < g1 * hd; c++) {
        const float *wc = w + (size_t)c * K;
        for (int t = 0; t < n; t++) {
            // input i of the window ending at token t: the state's rows, then the new ones
            float sum = 0.0f;
            for (int i = 0; i < K; i++) {
                int row = t + i; // in concat(state (K - 1 rows), qkv)
                float x = row < K - 1 ? (fresh ? 0.0f : hist[(size_t)row * C + c])
                                      : p->qkv[(size_t)(row - (K - 1)) * C + c];
                sum += x * wc[i];
            }
            j->conv[(size_t)t * C + c] = cpu_silu(sum);
        }
    }
    int qk_heads = 2 * p->n_k_heads;
    for (int64_t g = g0; g < g1 && g < qk_heads; g++)
        for (int t = 0; t < n; t++) {
            float *x = j->conv + (size_t)t * C + (size_t)g * hd;
            double ss = 0;
            for (int i = 0; i < hd; i++) ss += (double)(x[i] * x[i]);
            float scale = 1.0f / fmaxf(sqrtf((float)ss), p->eps);
            for (int i = 0; i < hd; i++) x[i] *= scale;
        }
}

// The conv state after the step: the last d_conv - 1 inputs of concat(state, qkv).
static void conv_state_update(const ft_delta_params *p, int C) {
    int keep = p->d_conv - 1, n = p->n_tok;
    float *hist = p->conv_state->data;
    if (n >= keep) {
        memcpy(hist, p->qkv + (size_t)(n - keep) * C, (size_t)keep * C * sizeof(float));
        return;
    }
    if (p->pos0 == 0) memset(hist, 0, (size_t)keep * C * sizeof(float));
    memmove(hist, hist + (size_t)n * C, (size_t)(keep - n) * C * sizeof(float));
    memcpy(hist + (size_t)(keep - n) * C, p->qkv, (size_t)n * C * sizeof(float));
}

static float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

// Step 3 for the V heads of thread ith.
static void delta_worker(void *ctx, int ith, int nth) {
    const delta_job *j = ctx;
    const ft_delta_params *p = j->p;
    int C = j->channels, hd = p->head_dim, H = p->n_v_heads, Hk = p->n_k_heads;
    size_t Kw = (size_t)Hk * hd;
    int64_t h0, h1;
    ft_pool_split(H, ith, nth, &h0, &h1);
    float *delta = j->c->attn_ws + (size_t)ith * j->c->attn_ws_per_thread; // (head_dim)
    const float scale = 1.0f / sqrtf((float)hd);
    const float *dt = p->dt->data, *a = p->a->data;
    const bool fresh = p->pos0 == 0;
    for (int64_t h = h0; h < h1; h++) {
        float *S = (float *)p->state->data + (size_t)h * hd * hd; // row r: column r of the state
        if (fresh) memset(S, 0, (size_t)hd * hd * sizeof(float));
        int hk = p->k_grouped ? (int)(h / (H / Hk)) : (int)(h % Hk);
        for (int t = 0; t < p->n_tok; t++) {
            const float *row = j->conv + (size_t)t * C;
            const float *q = row + (size_t)hk * hd, *k = row + Kw + (size_t)hk * hd;
            const float *v = row + 2 * Kw + (size_t)h * hd;
            float g = softplus(p->alpha[(size_t)t * H + h] + dt[h]) * a[h];
            float decay = expf(g);
            float b = 1.0f / (1.0f + expf(-p->beta[(size_t)t * H + h]));
            float *o = p->out + (size_t)t * H * hd + (size_t)h * hd;
            if (j->fast) {
                cpu_delta_rule_avx2(S, hd, q, k, v, decay, b, o, scale);
                continue;
            }
            for (int i = 0; i < hd * hd; i++) S[i] *= decay;
            for (int r = 0; r < hd; r++) {
                const float *Sr = S + (size_t)r * hd;
                float sum = 0.0f;
                for (int i = 0; i < hd; i++) sum += Sr[i] * k[i];
                delta[r] = (v[r] - sum) * b;
            }
            for (int r = 0; r < hd; r++) {
                float *Sr = S + (size_t)r * hd;
                for (int i = 0; i < hd; i++) Sr[i] += k[i] * delta[r];
            }
            for (int r = 0; r < hd; r++) {
                const float *Sr = S + (size_t)r * hd;
                float sum = 0.0f;
                for (int i = 0; i < hd; i++) sum += Sr[i] * q[i];
                o[r] = sum * scale;
            }
        }
    }
}

void cpu_delta_net(ft_backend *be, const ft_delta_params *p) {
    cpu_backend *c = cpu_of(be);
    int C = (2 * p->n_k_heads + p->n_v_heads) * p->head_dim;
    FT_ASSERT(c->reserved && p->n_tok <= c->lim.max_tok && C <= c->lim.max_width && p->d_conv >= 1 &&
              p->head_dim <= c->lim.max_head_dim);
    FT_ASSERT(p->n_v_heads % p->n_k_heads == 0 && p->conv_w->type == FT_TYPE_F32 && p->conv_w->ne[0] == p->d_conv &&
              p->conv_w->ne[1] == C);
    FT_ASSERT(p->conv_state->ne[0] * p->conv_state->ne[1] == (int64_t)(p->d_conv - 1) * C);
    FT_ASSERT(p->state->ne[0] == (int64_t)p->n_v_heads * p->head_dim * p->head_dim);
    delta_job j = {c, p, c->h_gate, C,
                   !c->base.reference && cpu_has_avx2() && cpu_delta_fast_fits(p->head_dim, p->d_conv)};
    cpu_run(c, conv_worker, &j);
    conv_state_update(p, C);
    cpu_run(c, delta_worker, &j);
}
