// route_trace.c: the route-trace file format (reader, writer), its generator and the LRU
// replay that calibrates it.
#include "route_trace.h"
#include "expert_cache.h"
#include "../util/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char g_magic[4] = {'F', 'T', 'R', 'T'};

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v) {
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

// Bytes of the expert ids for these counts, or false on overflow / past the size limit.
static bool ids_count(uint64_t n_steps, uint64_t n_layers, uint64_t n_seq, uint64_t top_k, uint64_t *count) {
    uint64_t a, b;
    return ft_mul_u64(n_steps, n_layers, &a) && ft_mul_u64(a, n_seq, &b) && ft_mul_u64(b, top_k, count) &&
           *count <= MOE_TRACE_MAX_BYTES / 2;
}

// Checks n_ids ids at ip (groups of top_k: each below n_expert, distinct within a group).
static bool check_ids(const uint8_t *ip, uint64_t n_ids, uint32_t n_expert, uint32_t top_k, uint32_t n_layers,
                      uint32_t n_seq, const char *what, ft_err *err) {
    uint32_t *mark = ft_calloc(n_expert, sizeof(uint32_t));
    uint64_t groups = n_ids / top_k;
    for (uint64_t g = 0; g < groups; g++) {
        uint32_t epoch = (uint32_t)(g % 0xfffffffeu) + 1;
        if (epoch == 1 && g) memset(mark, 0, n_expert * sizeof(uint32_t));
        for (uint32_t j = 0; j < top_k; j++) {
            uint64_t at = g * top_k + j;
            uint32_t e = (uint32_t)ip[2 * at] | (uint32_t)ip[2 * at + 1] << 8;
            uint64_t per_step = (uint64_t)n_layers * n_seq;
            if (e >= n_expert || mark[e] == epoch) {
                free(mark);
                return ft_err_set(err, "route trace: step %llu, layer entry %llu, sequence %llu: %sexpert %u is %s",
                                  (unsigned long long)(g / per_step), (unsigned long long)(g % per_step / n_seq),
                                  (unsigned long long)(g % n_seq), what, e,
                                  e >= n_expert ? "out of range" : "selected twice");
            }
            mark[e] = epoch;
        }
    }
    free(mark);
    return true;
}

static uint16_t *read_ids(const uint8_t *ip, uint64_t n_ids) {
    uint16_t *ids = ft_malloc(n_ids * sizeof(uint16_t));
    for (uint64_t i = 0; i < n_ids; i++) ids[i] = (uint16_t)(ip[2 * i] | ip[2 * i + 1] << 8);
    return ids;
}

bool moe_route_trace_parse(const void *data, size_t size, moe_route_trace *out, ft_err *err) {
    memset(out, 0, sizeof(*out));
    const uint8_t *p = data;
    if (size < MOE_TRACE_HEADER_BYTES)
        return ft_err_set(err, "route trace: %zu bytes, shorter than the %d-byte header", size, MOE_TRACE_HEADER_BYTES);
    if (memcmp(p, g_magic, 4)) return ft_err_set(err, "route trace: bad magic (not an FTRT file)");
    uint32_t version = get_u32(p + 4), n_layers = get_u32(p + 8), n_expert = get_u32(p + 12);
    uint32_t top_k = get_u32(p + 16), n_seq = get_u32(p + 20);
    uint64_t n_steps = get_u64(p + 24);
    if (version != 1 && version != 2)
        return ft_err_set(err, "route trace: version %u, only versions 1 and 2 are known", version);
    if (n_layers < 1 || n_layers > MOE_TRACE_MAX_LAYERS)
        return ft_err_set(err, "route trace: n_layers %u outside [1, %d]", n_layers, MOE_TRACE_MAX_LAYERS);
    if (n_expert < 1 || n_expert > 65535) return ft_err_set(err, "route trace: n_expert %u outside [1, 65535]", n_expert);
    if (top_k < 1 || top_k > n_expert)
        return ft_err_set(err, "route trace: top_k %u outside [1, n_expert = %u]", top_k, n_expert);
    if (n_seq < 1 || n_seq > MOE_TRACE_MAX_SEQ)
        return ft_err_set(err, "route trace: n_seq %u outside [1, %d]", n_seq, MOE_TRACE_MAX_SEQ);
    uint64_t n_ids;
    if (n_steps < 1 || !ids_count(n_steps, n_layers, n_seq, top_k, &n_ids) || n_ids > MOE_TRACE_MAX_BYTES / 2 / version)
        return ft_err_set(err, "route trace: n_steps %llu is 0 or makes the file larger than %llu bytes",
                          (unsigned long long)n_steps, (unsigned long long)MOE_TRACE_MAX_BYTES);
    uint64_t want = MOE_TRACE_HEADER_BYTES + 4ull * n_layers + 2 * n_ids * version;
    if (size != want)
        return ft_err_set(err, "route trace: %zu bytes, but the header describes %llu", size, (unsigned long long)want);
    const uint8_t *lp = p + MOE_TRACE_HEADER_BYTES;
    for (uint32_t i = 0; i < n_layers; i++) {
        uint32_t L = get_u32(lp + 4 * i);
        if (L > 1000000 || (i && L <= get_u32(lp + 4 * (i - 1))))
            return ft_err_set(err, "route trace: layer entry %u is block %u: blocks must ascend and be <= 1000000",
                              i, L);
    }
    // ids: each below n_expert, distinct within one (step, layer, sequence); the predictions alike
    const uint8_t *ip = lp + 4ull * n_layers;
    if (!check_ids(ip, n_ids, n_expert, top_k, n_layers, n_seq, "", err)) return false;
    if (version == 2 && !check_ids(ip + 2 * n_ids, n_ids, n_expert, top_k, n_layers, n_seq, "predicted ", err))
        return false;
    out->n_layers = (int)n_layers;
    out->layers = ft_malloc(n_layers * sizeof(int));
    for (uint32_t i = 0; i < n_layers; i++) out->layers[i] = (int)get_u32(lp + 4 * i);
    out->n_expert = (int)n_expert;
    out->top_k = (int)top_k;
    out->n_seq = (int)n_seq;
    out->n_steps = (int64_t)n_steps;
    out->experts = read_ids(ip, n_ids);
    if (version == 2) out->predicted = read_ids(ip + 2 * n_ids, n_ids);
    return true;
}

bool moe_route_trace_read(const char *path, moe_route_trace *out, ft_err *err) {
    memset(out, 0, sizeof(*out));
    FILE *f = fopen(path, "rb");
    if (!f) return ft_err_set(err, "%s: cannot open", path);
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || (uint64_t)size > MOE_TRACE_MAX_BYTES + MOE_TRACE_HEADER_BYTES + 4ull * MOE_TRACE_MAX_LAYERS ||
        fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return ft_err_set(err, "%s: cannot size the file, or it is larger than a route trace may be", path);
    }
    uint8_t *buf = ft_malloc((size_t)size + 1);
    bool ok = fread(buf, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    if (!ok) {
        free(buf);
        return ft_err_set(err, "%s: read error", path);
    }
    ok = moe_route_trace_parse(buf, (size_t)size, out, err);
    free(buf);
    return ok || ft_err_prefix(err, "%s", path);
}

bool moe_route_trace_write(const moe_route_trace *t, const char *path, ft_err *err) {
    uint64_t n_ids;
    FT_ASSERT(ids_count((uint64_t)t->n_steps, (uint64_t)t->n_layers, (uint64_t)t->n_seq, (uint64_t)t->top_k, &n_ids));
    uint32_t version = t->predicted ? 2 : 1;
    FT_ASSERT(n_ids <= MOE_TRACE_MAX_BYTES / 2 / version);
    size_t size = MOE_TRACE_HEADER_BYTES + 4 * (size_t)t->n_layers + 2 * (size_t)n_ids * version;
    uint8_t *buf = ft_malloc(size);
    memcpy(buf, g_magic, 4);
    put_u32(buf + 4, version);
    put_u32(buf + 8, (uint32_t)t->n_layers);
    put_u32(buf + 12, (uint32_t)t->n_expert);
    put_u32(buf + 16, (uint32_t)t->top_k);
    put_u32(buf + 20, (uint32_t)t->n_seq);
    put_u64(buf + 24, (uint64_t)t->n_steps);
    uint8_t *lp = buf + MOE_TRACE_HEADER_BYTES;
    for (int i = 0; i < t->n_layers; i++) put_u32(lp + 4 * i, (uint32_t)t->layers[i]);
    uint8_t *ip = lp + 4 * (size_t)t->n_layers;
    for (uint64_t i = 0; i < n_ids * version; i++) {
        uint16_t e = i < n_ids ? t->experts[i] : t->predicted[i - n_ids];
        ip[2 * i] = (uint8_t)e;
        ip[2 * i + 1] = (uint8_t)(e >> 8);
    }
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(buf, 1, size, f) == size;
    if (f) ok &= fclose(f) == 0;
    free(buf);
    return ok || ft_err_set(err, "%s: cannot write the route trace", path);
}

void moe_route_trace_free(moe_route_trace *t) {
    if (!t) return;
    free(t->layers);
    free(t->experts);
    free(t->predicted);
    memset(t, 0, sizeof(*t));
}

// ---------------------------------------------------------------------------------------------
// Generator

moe_trace_gen_params moe_trace_gen_default_params(void) {
    return (moe_trace_gen_params){.n_layers = 40, .layers = NULL, .n_expert = 256, .top_k = 10, .n_seq = 1,
                                  .n_steps = 1000, .zipf_s = MOE_TRACE_DEFAULT_ZIPF_S, .zipf_max = -1,
                                  .reuse_next = 0, .reuse = MOE_TRACE_DEFAULT_REUSE,
                                  .reuse_window = MOE_TRACE_DEFAULT_REUSE_WINDOW, .predict_accuracy = 0, .seed = 1};
}

static double uniform01(ft_rng *r) { return (double)(ft_rng_next(r) >> 11) * 0x1p-53; }

// Smallest index whose cumulative weight exceeds u.
static int sample_cdf(const double *cdf, int n, double u) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cdf[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

// Random streams of their own, so the routing does not change with the skews' order or with
// the predictions (and the routing of traces written before them stays what it was).
#define SKEW_STREAM 0x736b6577ull
#define PREDICT_STREAM 0x70726564ull

void moe_trace_gen_layer_skews(const moe_trace_gen_params *p, double *skew) {
    int n = p->n_layers;
    if (!(p->zipf_max >= 0)) {
        for (int i = 0; i < n; i++) skew[i] = p->zipf_s;
        return;
    }
    for (int i = 0; i < n; i++) skew[i] = n == 1 ? p->zipf_s : p->zipf_s + (p->zipf_max - p->zipf_s) * i / (n - 1);
    // dealt in a seeded order: hot and spread layers alternate irregularly, as in real models
    ft_rng rng = ft_rng_init(p->seed ^ SKEW_STREAM);
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(ft_rng_next(&rng) % (uint64_t)(i + 1));
        double tmp = skew[i];
        skew[i] = skew[j];
        skew[j] = tmp;
    }
}

// A distractor for a prediction: an expert drawn by the layer's popularity that neither the
// group selected nor the prediction holds yet (mark == epoch for both); -1 when none is left.
static int draw_distractor(ft_rng *rng, const double *cdf, const uint16_t *perm, int E, const uint32_t *mark,
                           uint32_t epoch) {
    for (int tries = 0; tries < 64; tries++) {
        int e = perm[sample_cdf(cdf, E, uniform01(rng))];
        if (mark[e] != epoch) return e;
    }
    // a layer so skewed that its popular experts are all taken: the first free one by rank
    for (int r = 0; r < E; r++)
        if (mark[perm[r]] != epoch) return perm[r];
    return -1; // every expert is taken (fewer than 2 top-k experts)
}

bool moe_trace_generate(const moe_trace_gen_params *p, moe_route_trace *out, ft_err *err) {
    memset(out, 0, sizeof(*out));
    uint64_t n_ids;
    if (p->n_layers < 1 || p->n_layers > MOE_TRACE_MAX_LAYERS || p->n_expert < 1 || p->n_expert > 65535 ||
        p->top_k < 1 || p->top_k > p->n_expert || p->n_seq < 1 || p->n_seq > MOE_TRACE_MAX_SEQ || p->n_steps < 1 ||
        !ids_count((uint64_t)p->n_steps, (uint64_t)p->n_layers, (uint64_t)p->n_seq, (uint64_t)p->top_k, &n_ids) ||
        (p->predict_accuracy > 0 && n_ids > MOE_TRACE_MAX_BYTES / 4))
        return ft_err_set(err, "trace generator: layers %d, experts %d, top-k %d, sequences %d, steps %lld: a count is "
                          "out of range or the trace would exceed %llu bytes",
                          p->n_layers, p->n_expert, p->top_k, p->n_seq, (long long)p->n_steps,
                          (unsigned long long)MOE_TRACE_MAX_BYTES);
    if (!(p->zipf_s >= 0 && p->zipf_s <= 10) || !(p->reuse >= 0 && p->reuse < 1) || p->reuse_window < 1 ||
        p->reuse_window > 1000000)
        return ft_err_set(err, "trace generator: zipf_s %g must be in [0, 10], reuse %g in [0, 1) and the reuse "
                          "window %d in [1, 1000000]", p->zipf_s, p->reuse, p->reuse_window);
    if (p->zipf_max >= 0 && (!(p->zipf_max <= 10) || p->zipf_max < p->zipf_s))
        return ft_err_set(err, "trace generator: the largest skew %g must be in [zipf_s = %g, 10]", p->zipf_max,
                          p->zipf_s);
    if (!(p->reuse_next >= 0 && p->reuse_next + p->reuse < 1))
        return ft_err_set(err, "trace generator: reuse_next %g must be >= 0 and reuse_next + reuse (%g) below 1",
                          p->reuse_next, p->reuse_next + p->reuse);
    if (!(p->predict_accuracy >= 0 && p->predict_accuracy <= 1))
        return ft_err_set(err, "trace generator: predict_accuracy %g outside [0, 1]", p->predict_accuracy);
    // the skews must all be drawn from: one CDF per distinct skew
    bool spread = p->zipf_max >= 0 && p->zipf_max > p->zipf_s && p->n_layers > 1;
    int n_cdf = spread ? p->n_layers : 1;
    if ((uint64_t)n_cdf * (uint64_t)p->n_expert > (1u << 24))
        return ft_err_set(err, "trace generator: per-layer skews over %d layers of %d experts take more than 2^24 "
                          "weights", p->n_layers, p->n_expert);
    for (int i = 1; p->layers && i < p->n_layers; i++)
        if (p->layers[i] <= p->layers[i - 1] || p->layers[0] < 0)
            return ft_err_set(err, "trace generator: layer blocks must ascend from 0 or more");
    int E = p->n_expert, K = p->top_k;
    out->n_layers = p->n_layers;
    out->layers = ft_malloc((size_t)p->n_layers * sizeof(int));
    for (int i = 0; i < p->n_layers; i++) out->layers[i] = p->layers ? p->layers[i] : i;
    out->n_expert = E;
    out->top_k = K;
    out->n_seq = p->n_seq;
    out->n_steps = p->n_steps;
    out->experts = ft_malloc(n_ids * sizeof(uint16_t));

    ft_rng rng = ft_rng_init(p->seed);
    double *skew = ft_malloc((size_t)p->n_layers * sizeof(double));
    moe_trace_gen_layer_skews(p, skew);
    double *cdf = ft_malloc((size_t)n_cdf * (size_t)E * sizeof(double));
    for (int c = 0; c < n_cdf; c++) {
        double *w = cdf + (size_t)c * (size_t)E, total = 0;
        for (int r = 0; r < E; r++) w[r] = total += pow(r + 1.0, -skew[c]);
        for (int r = 0; r < E; r++) w[r] /= total;
        w[E - 1] = 1.0;
    }
    // each layer ranks its experts in its own random order
    uint16_t *rank_to_expert = ft_malloc((size_t)p->n_layers * (size_t)E * sizeof(uint16_t));
    for (int li = 0; li < p->n_layers; li++) {
        uint16_t *perm = rank_to_expert + (size_t)li * (size_t)E;
        for (int e = 0; e < E; e++) perm[e] = (uint16_t)e;
        for (int e = E - 1; e > 0; e--) {
            int j = (int)(ft_rng_next(&rng) % (uint64_t)(e + 1));
            uint16_t tmp = perm[e];
            perm[e] = perm[j];
            perm[j] = tmp;
        }
    }
    uint32_t *mark = ft_calloc((size_t)E, sizeof(uint32_t));
    uint32_t epoch = 0;
    for (int64_t step = 0; step < p->n_steps; step++)
        for (int li = 0; li < p->n_layers; li++)
            for (int s = 0; s < p->n_seq; s++) {
                uint16_t *sel = (uint16_t *)moe_route_trace_at(out, step, li) + (size_t)s * (size_t)K;
                int64_t window = FT_MIN(step, (int64_t)p->reuse_window);
                const uint16_t *perm = rank_to_expert + (size_t)li * (size_t)E;
                const double *lcdf = cdf + (spread ? (size_t)li * (size_t)E : 0);
                if (++epoch == 0) {
                    memset(mark, 0, (size_t)E * sizeof(uint32_t));
                    epoch = 1;
                }
                for (int j = 0; j < K;) {
                    int e;
                    int64_t back = 0;
                    if (window) { // the step before, or one of the last `window` steps
                        double u = uniform01(&rng);
                        if (u < p->reuse_next) back = 1;
                        else if (u < p->reuse_next + p->reuse) back = 1 + (int64_t)(ft_rng_next(&rng) % (uint64_t)window);
                    }
                    if (back) e = moe_route_trace_at(out, step - back, li)[(size_t)s * (size_t)K + ft_rng_next(&rng) % (uint64_t)K];
                    else e = perm[sample_cdf(lcdf, E, uniform01(&rng))];
                    if (mark[e] == epoch) continue; // already selected by this sequence: draw again
                    mark[e] = epoch;
                    sel[j++] = (uint16_t)e;
                }
            }
    if (p->predict_accuracy > 0) {
        // Each selection is guessed right with the stated chance, else replaced by a distractor
        // drawn by the layer's popularity (a predictor's errors lean to the popular experts).
        ft_rng prng = ft_rng_init(p->seed ^ PREDICT_STREAM);
        out->predicted = ft_malloc(n_ids * sizeof(uint16_t));
        for (int64_t step = 0; step < p->n_steps; step++)
            for (int li = 0; li < p->n_layers; li++)
                for (int s = 0; s < p->n_seq; s++) {
                    size_t at = (size_t)s * (size_t)K;
                    const uint16_t *sel = moe_route_trace_at(out, step, li) + at;
                    uint16_t *pred = (uint16_t *)moe_route_trace_predicted_at(out, step, li) + at;
                    if (++epoch == 0) {
                        memset(mark, 0, (size_t)E * sizeof(uint32_t));
                        epoch = 1;
                    }
                    for (int j = 0; j < K; j++) mark[sel[j]] = epoch; // distractors avoid the whole group
                    const uint16_t *perm = rank_to_expert + (size_t)li * (size_t)E;
                    const double *lcdf = cdf + (spread ? (size_t)li * (size_t)E : 0);
                    for (int j = 0; j < K; j++) {
                        bool keep = uniform01(&prng) < p->predict_accuracy;
                        int e = keep ? sel[j] : draw_distractor(&prng, lcdf, perm, E, mark, epoch);
                        if (e < 0) e = sel[j]; // no expert left to guess wrong with
                        mark[e] = epoch;
                        pred[j] = (uint16_t)e;
                    }
                }
    }
    free(mark);
    free(rank_to_expert);
    free(cdf);
    free(skew);
    return true;
}

void moe_route_trace_reuse(const moe_route_trace *t, int layer, int window, double *next, double *recent) {
    FT_ASSERT(window >= 1 && layer < t->n_layers);
    int64_t *last = ft_malloc((size_t)t->n_expert * sizeof(int64_t));
    uint64_t n = 0, n1 = 0, nw = 0;
    int K = t->top_k;
    for (int li = layer >= 0 ? layer : 0; li < (layer >= 0 ? layer + 1 : t->n_layers); li++)
        for (int s = 0; s < t->n_seq; s++) {
            for (int e = 0; e < t->n_expert; e++) last[e] = INT64_MIN / 2;
            for (int64_t step = 0; step < t->n_steps; step++) {
                const uint16_t *sel = moe_route_trace_at(t, step, li) + (size_t)s * (size_t)K;
                for (int j = 0; j < K && step >= window; j++) {
                    int64_t d = step - last[sel[j]];
                    n++;
                    n1 += d == 1;
                    nw += d <= window;
                }
                for (int j = 0; j < K; j++) last[sel[j]] = step;
            }
        }
    free(last);
    *next = n ? (double)n1 / (double)n : 0.0;
    *recent = n ? (double)nw / (double)n : 0.0;
}

double moe_route_trace_predict_accuracy(const moe_route_trace *t, int layer) {
    FT_ASSERT(t->predicted && layer < t->n_layers);
    uint32_t *mark = ft_calloc((size_t)t->n_expert, sizeof(uint32_t));
    uint32_t epoch = 0;
    uint64_t n = 0, right = 0;
    size_t G = (size_t)t->n_seq;
    int K = t->top_k;
    for (int64_t step = 0; step < t->n_steps; step++)
        for (int li = layer >= 0 ? layer : 0; li < (layer >= 0 ? layer + 1 : t->n_layers); li++)
            for (size_t s = 0; s < G; s++) {
                if (++epoch == 0) {
                    memset(mark, 0, (size_t)t->n_expert * sizeof(uint32_t));
                    epoch = 1;
                }
                const uint16_t *sel = moe_route_trace_at(t, step, li) + s * (size_t)K;
                const uint16_t *pred = moe_route_trace_predicted_at(t, step, li) + s * (size_t)K;
                for (int j = 0; j < K; j++) mark[sel[j]] = epoch;
                for (int j = 0; j < K; j++) right += mark[pred[j]] == epoch;
                n += (uint64_t)K;
            }
    free(mark);
    return n ? (double)right / (double)n : 0.0;
}

double moe_route_trace_lru_hit_rate(const moe_route_trace *t, int slots_per_layer, int64_t warmup) {
    FT_ASSERT(slots_per_layer >= t->n_seq * t->top_k || slots_per_layer >= t->n_expert);
    int n = t->n_seq * t->top_k;
    int32_t *ex = ft_malloc((size_t)n * sizeof(int32_t)), *slots = ft_malloc((size_t)n * sizeof(int32_t));
    moe_cache_copy *copies = ft_malloc((size_t)n * sizeof(moe_cache_copy));
    uint64_t hits = 0, selections = 0;
    for (int li = 0; li < t->n_layers; li++) {
        moe_layer_geometry lg = {.layer = t->layers[li], .n_expert = t->n_expert, .bytes = {1, 1, 1}};
        moe_geometry g;
        moe_geometry_from_layers(&lg, 1, &g);
        moe_cache_plan_params pp = moe_cache_plan_default_params();
        pp.layout = MOE_POOL_LAYOUT_UNIFORM;
        pp.n_slots = FT_MIN(slots_per_layer, t->n_expert);
        pp.view_align = 1;
        moe_cache_plan plan;
        FT_ASSERT(moe_cache_plan_make(&g, &pp, &plan, NULL));
        moe_expert_cache *c = moe_expert_cache_init(&plan, &g);
        for (int64_t step = 0; step < t->n_steps; step++) {
            const uint16_t *sel = moe_route_trace_at(t, step, li);
            for (int i = 0; i < n; i++) ex[i] = sel[i];
            int k;
            FT_ASSERT(moe_expert_cache_step(c, t->layers[li], ex, n, slots, copies, &k, NULL));
            if (step >= warmup) {
                hits += (uint64_t)(n - k);
                selections += (uint64_t)n;
            }
        }
        moe_expert_cache_free(c);
        moe_cache_plan_free(&plan);
        moe_geometry_free(&g);
    }
    free(ex);
    free(slots);
    free(copies);
    return selections ? (double)hits / (double)selections : 0.0;
}

// ---------------------------------------------------------------------------------------------
// Calibration

// Hit rates at 12.5% and 25% of the experts on a short calibration trace.
static void calibration_hits(const moe_trace_gen_params *base, double s, double r, double *h8, double *h4) {
    moe_trace_gen_params p = *base;
    p.n_layers = 2;
    p.layers = NULL;
    p.n_seq = 1;
    p.n_steps = 1500;
    p.seed = 0xca11b;
    p.zipf_s = s;
    p.reuse = r;
    moe_route_trace t;
    FT_ASSERT(moe_trace_generate(&p, &t, NULL));
    *h8 = moe_route_trace_lru_hit_rate(&t, p.n_expert / 8, 200);
    if (h4) *h4 = moe_route_trace_lru_hit_rate(&t, p.n_expert / 4, 200);
    moe_route_trace_free(&t);
}

// The reuse that meets the 12.5% target at skew s; -1 when even no reuse overshoots it.
static double reuse_for_skew(const moe_trace_gen_params *p, double s) {
    double h8;
    calibration_hits(p, s, 0.0, &h8, NULL);
    if (h8 >= MOE_TRACE_TARGET_HIT_8TH) return -1;
    double lo = 0, hi = 0.95;
    for (int it = 0; it < 10; it++) {
        double mid = 0.5 * (lo + hi);
        calibration_hits(p, s, mid, &h8, NULL);
        if (h8 < MOE_TRACE_TARGET_HIT_8TH) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

// Calibrates skew and reuse for a window; returns the distance from the targets it reaches.
static double calibrate_window(moe_trace_gen_params *p, int window) {
    p->reuse_window = window;
    // More skew with less reuse widens the gap between the two cache sizes: bisect the skew
    // for the 25% target along the curve where the 12.5% target holds.
    double lo = 0, hi = 3;
    for (int it = 0; it < 12; it++) {
        double s = 0.5 * (lo + hi), r = reuse_for_skew(p, s), h8, h4;
        if (r < 0) { // too skewed: the 12.5% target is overshot with no reuse at all
            hi = s;
            continue;
        }
        calibration_hits(p, s, r, &h8, &h4);
        if (h4 < MOE_TRACE_TARGET_HIT_4TH) lo = s;
        else hi = s;
    }
    p->zipf_s = lo;
    p->reuse = FT_MAX(0.0, reuse_for_skew(p, lo));
    double h8, h4;
    calibration_hits(p, p->zipf_s, p->reuse, &h8, &h4);
    return fabs(h8 - MOE_TRACE_TARGET_HIT_8TH) + fabs(h4 - MOE_TRACE_TARGET_HIT_4TH);
}

bool moe_trace_gen_calibrate(moe_trace_gen_params *p, ft_err *err) {
    if (p->n_expert / 8 < p->top_k || p->top_k < 1)
        return ft_err_set(err, "trace calibration: 12.5%% of %d experts holds fewer than top-k %d", p->n_expert,
                          p->top_k);
    // The reuse window is tried at multiples of the steps whose selections fill 12.5% of the
    // experts: a window longer than the small cache's reach is what lets the larger cache hit
    // more. The window whose calibrated rates come closest to the targets wins.
    static const double multiples[] = {1.5, 2, 2.5, 3, 4, 6};
    double span = p->n_expert / (8.0 * p->top_k), best_err = INFINITY;
    moe_trace_gen_params best = *p;
    int last_window = 0;
    for (size_t i = 0; i < FT_ARRAY_LEN(multiples); i++) {
        int window = FT_MAX(1, (int)lround(multiples[i] * span));
        if (window == last_window) continue;
        last_window = window;
        moe_trace_gen_params q = *p;
        double e = calibrate_window(&q, window);
        if (e < best_err) {
            best_err = e;
            best = q;
        }
    }
    p->zipf_s = best.zipf_s;
    p->reuse = best.reuse;
    p->reuse_window = best.reuse_window;
    return true;
}

// Reuse measured on a short calibration trace of p's layers and skews.
static void reuse_at(const moe_trace_gen_params *base, double a, double r, double *next, double *recent) {
    moe_trace_gen_params q = *base;
    q.reuse_next = a;
    q.reuse = r;
    moe_route_trace t;
    FT_ASSERT(moe_trace_generate(&q, &t, NULL));
    moe_route_trace_reuse(&t, -1, q.reuse_window, next, recent);
    moe_route_trace_free(&t);
}

// The reuse_next that gives repeat_next at reuse r (0 when the rest already overshoots it).
static double reuse_next_for(const moe_trace_gen_params *q, double r, double repeat_next) {
    double lo = 0, hi = 0.99 - r, next, recent;
    reuse_at(q, 0, r, &next, &recent);
    if (next >= repeat_next) return 0;
    for (int it = 0; it < 12; it++) {
        double mid = 0.5 * (lo + hi);
        reuse_at(q, mid, r, &next, &recent);
        if (next < repeat_next) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

bool moe_trace_gen_calibrate_reuse(moe_trace_gen_params *p, double repeat_next, double repeat_recent, int window,
                                   ft_err *err) {
    if (!(repeat_next >= 0 && repeat_next <= repeat_recent && repeat_recent < 1) || window < 1 || window > 1000000)
        return ft_err_set(err, "reuse calibration: the levels must satisfy 0 <= next (%g) <= recent (%g) < 1 and the "
                          "window (%d) be in [1, 1000000]", repeat_next, repeat_recent, window);
    moe_trace_gen_params q = *p;
    q.layers = NULL;
    q.n_seq = 1;
    // enough selections that the measured shares move by well under a point between seeds
    q.n_steps = window + FT_MAX(200, 200000 / ((int64_t)q.n_layers * q.top_k));
    q.seed = 0xca11b;
    q.reuse_window = window;
    q.predict_accuracy = 0;
    ft_err gerr = {{0}};
    moe_route_trace probe;
    q.reuse_next = 0;
    q.reuse = 0;
    if (!moe_trace_generate(&q, &probe, &gerr)) return ft_err_set(err, "reuse calibration: %s", gerr.msg);
    moe_route_trace_free(&probe);
    // The share within the window grows with reuse along the curve where the share at the step
    // before holds (mass moves from the step before to the whole window): bisect reuse on it.
    double lo = 0, hi = 0.98;
    for (int it = 0; it < 12; it++) {
        double r = 0.5 * (lo + hi), a = reuse_next_for(&q, r, repeat_next), next, recent;
        reuse_at(&q, a, r, &next, &recent);
        if (recent < repeat_recent) lo = r;
        else hi = r;
    }
    p->reuse = lo;
    p->reuse_next = reuse_next_for(&q, lo, repeat_next);
    p->reuse_window = window;
    return true;
}
