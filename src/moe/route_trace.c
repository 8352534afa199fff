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

bool moe_route_trace_parse(const void *data, size_t size, moe_route_trace *out, ft_err *err) {
    memset(out, 0, sizeof(*out));
    const uint8_t *p = data;
    if (size < MOE_TRACE_HEADER_BYTES)
        return ft_err_set(err, "route trace: %zu bytes, shorter than the %d-byte header", size, MOE_TRACE_HEADER_BYTES);
    if (memcmp(p, g_magic, 4)) return ft_err_set(err, "route trace: bad magic (not an FTRT file)");
    uint32_t version = get_u32(p + 4), n_layers = get_u32(p + 8), n_expert = get_u32(p + 12);
    uint32_t top_k = get_u32(p + 16), n_seq = get_u32(p + 20);
    uint64_t n_steps = get_u64(p + 24);
    if (version != 1) return ft_err_set(err, "route trace: version %u, only version 1 is known", version);
    if (n_layers < 1 || n_layers > MOE_TRACE_MAX_LAYERS)
        return ft_err_set(err, "route trace: n_layers %u outside [1, %d]", n_layers, MOE_TRACE_MAX_LAYERS);
    if (n_expert < 1 || n_expert > 65535) return ft_err_set(err, "route trace: n_expert %u outside [1, 65535]", n_expert);
    if (top_k < 1 || top_k > n_expert)
        return ft_err_set(err, "route trace: top_k %u outside [1, n_expert = %u]", top_k, n_expert);
    if (n_seq < 1 || n_seq > MOE_TRACE_MAX_SEQ)
        return ft_err_set(err, "route trace: n_seq %u outside [1, %d]", n_seq, MOE_TRACE_MAX_SEQ);
    uint64_t n_ids;
    if (n_steps < 1 || !ids_count(n_steps, n_layers, n_seq, top_k, &n_ids))
        return ft_err_set(err, "route trace: n_steps %llu is 0 or makes the file larger than %llu bytes",
                          (unsigned long long)n_steps, (unsigned long long)MOE_TRACE_MAX_BYTES);
    uint64_t want = MOE_TRACE_HEADER_BYTES + 4ull * n_layers + 2 * n_ids;
    if (size != want)
        return ft_err_set(err, "route trace: %zu bytes, but the header describes %llu", size, (unsigned long long)want);
    const uint8_t *lp = p + MOE_TRACE_HEADER_BYTES;
    for (uint32_t i = 0; i < n_layers; i++) {
        uint32_t L = get_u32(lp + 4 * i);
        if (L > 1000000 || (i && L <= get_u32(lp + 4 * (i - 1))))
            return ft_err_set(err, "route trace: layer entry %u is block %u: blocks must ascend and be <= 1000000",
                              i, L);
    }
    // ids: each below n_expert, distinct within one (step, layer, sequence)
    const uint8_t *ip = lp + 4ull * n_layers;
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
                return ft_err_set(err, "route trace: step %llu, layer entry %llu, sequence %llu: expert %u is %s",
                                  (unsigned long long)(g / per_step), (unsigned long long)(g % per_step / n_seq),
                                  (unsigned long long)(g % n_seq), e,
                                  e >= n_expert ? "out of range" : "selected twice");
            }
            mark[e] = epoch;
        }
    }
    free(mark);
    out->n_layers = (int)n_layers;
    out->layers = ft_malloc(n_layers * sizeof(int));
    for (uint32_t i = 0; i < n_layers; i++) out->layers[i] = (int)get_u32(lp + 4 * i);
    out->n_expert = (int)n_expert;
    out->top_k = (int)top_k;
    out->n_seq = (int)n_seq;
    out->n_steps = (int64_t)n_steps;
    out->experts = ft_malloc(n_ids * sizeof(uint16_t));
    for (uint64_t i = 0; i < n_ids; i++) out->experts[i] = (uint16_t)(ip[2 * i] | ip[2 * i + 1] << 8);
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
    size_t size = MOE_TRACE_HEADER_BYTES + 4 * (size_t)t->n_layers + 2 * (size_t)n_ids;
    uint8_t *buf = ft_malloc(size);
    memcpy(buf, g_magic, 4);
    put_u32(buf + 4, 1);
    put_u32(buf + 8, (uint32_t)t->n_layers);
    put_u32(buf + 12, (uint32_t)t->n_expert);
    put_u32(buf + 16, (uint32_t)t->top_k);
    put_u32(buf + 20, (uint32_t)t->n_seq);
    put_u64(buf + 24, (uint64_t)t->n_steps);
    uint8_t *lp = buf + MOE_TRACE_HEADER_BYTES;
    for (int i = 0; i < t->n_layers; i++) put_u32(lp + 4 * i, (uint32_t)t->layers[i]);
    uint8_t *ip = lp + 4 * (size_t)t->n_layers;
    for (uint64_t i = 0; i < n_ids; i++) {
        ip[2 * i] = (uint8_t)t->experts[i];
        ip[2 * i + 1] = (uint8_t)(t->experts[i] >> 8);
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
    memset(t, 0, sizeof(*t));
}

// ---------------------------------------------------------------------------------------------
// Generator

moe_trace_gen_params moe_trace_gen_default_params(void) {
    return (moe_trace_gen_params){.n_layers = 40, .layers = NULL, .n_expert = 256, .top_k = 10, .n_seq = 1,
                                  .n_steps = 1000, .zipf_s = MOE_TRACE_DEFAULT_ZIPF_S,
                                  .reuse = MOE_TRACE_DEFAULT_REUSE, .reuse_window = MOE_TRACE_DEFAULT_REUSE_WINDOW, .seed = 1};
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

bool moe_trace_generate(const moe_trace_gen_params *p, moe_route_trace *out, ft_err *err) {
    memset(out, 0, sizeof(*out));
    uint64_t n_ids;
    if (p->n_layers < 1 || p->n_layers > MOE_TRACE_MAX_LAYERS || p->n_expert < 1 || p->n_expert > 65535 ||
        p->top_k < 1 || p->top_k > p->n_expert || p->n_seq < 1 || p->n_seq > MOE_TRACE_MAX_SEQ || p->n_steps < 1 ||
        !ids_count((uint64_t)p->n_steps, (uint64_t)p->n_layers, (uint64_t)p->n_seq, (uint64_t)p->top_k, &n_ids))
        return ft_err_set(err, "trace generator: layers %d, experts %d, top-k %d, sequences %d, steps %lld: a count is "
                          "out of range or the trace would exceed %llu bytes",
                          p->n_layers, p->n_expert, p->top_k, p->n_seq, (long long)p->n_steps,
                          (unsigned long long)MOE_TRACE_MAX_BYTES);
    if (!(p->zipf_s >= 0 && p->zipf_s <= 10) || !(p->reuse >= 0 && p->reuse < 1) || p->reuse_window < 1 ||
        p->reuse_window > 1000000)
        return ft_err_set(err, "trace generator: zipf_s %g must be in [0, 10], reuse %g in [0, 1) and the reuse "
                          "window %d in [1, 1000000]", p->zipf_s, p->reuse, p->reuse_window);
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
    double *cdf = ft_malloc((size_t)E * sizeof(double)), total = 0;
    for (int r = 0; r < E; r++) cdf[r] = total += pow(r + 1.0, -p->zipf_s);
    for (int r = 0; r < E; r++) cdf[r] /= total;
    cdf[E - 1] = 1.0;
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
                if (++epoch == 0) {
                    memset(mark, 0, (size_t)E * sizeof(uint32_t));
                    epoch = 1;
                }
                for (int j = 0; j < K;) {
                    int e;
                    if (window && uniform01(&rng) < p->reuse) { // one of the last `window` steps' experts
                        int64_t back = 1 + (int64_t)(ft_rng_next(&rng) % (uint64_t)window);
                        e = moe_route_trace_at(out, step - back, li)[(size_t)s * (size_t)K + ft_rng_next(&rng) % (uint64_t)K];
                    } else {
                        e = perm[sample_cdf(cdf, E, uniform01(&rng))];
                    }
                    if (mark[e] == epoch) continue; // already selected by this sequence: draw again
                    mark[e] = epoch;
                    sel[j++] = (uint16_t)e;
                }
            }
    free(mark);
    free(rank_to_expert);
    free(cdf);
    return true;
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
