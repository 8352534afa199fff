// cpu_backend.c: the CPU backend's life cycle, scratch, matmul and the element-wise ops.
#include "cpu_impl.h"
#include "../../util/env.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cpu_run(cpu_backend *c, ft_pool_fn fn, void *ctx) {
    if (c->base.reference)
        fn(ctx, 0, 1);
    else
        ft_pool_run(c->pool, fn, ctx);
}

typedef struct {
    cpu_rows_fn fn;
    void *ctx;
    int64_t n_rows;
} rows_job;

static void rows_worker(void *ctx, int ith, int nth) {
    const rows_job *j = ctx;
    int64_t r0, r1;
    ft_pool_split(j->n_rows, ith, nth, &r0, &r1);
    if (r0 < r1) j->fn(j->ctx, r0, r1, ith);
}

void cpu_run_rows(cpu_backend *c, int64_t n_rows, int64_t row_elems, cpu_rows_fn fn, void *ctx) {
    if (n_rows >= 2 && n_rows * row_elems >= CPU_ROWS_MIN_FLOATS && cpu_threads(c) > 1) {
        rows_job j = {fn, ctx, n_rows};
        cpu_run(c, rows_worker, &j);
    } else if (n_rows > 0) {
        fn(ctx, 0, n_rows, 0);
    }
}

ft_vec_dot_fn cpu_vec_dot(const cpu_backend *c, enum ft_type type) {
    const ft_quant_ops *q = ft_quant_ops_find(type);
    FT_ASSERT(q && q->vec_dot);
    return c->base.reference ? q->vec_dot_ref : q->vec_dot;
}

// Loops over vec_dot where the type has no tile kernel (and on the reference path).
static void dot_tile_by_rows(ft_vec_dot_fn dot, int64_t n, const uint8_t *w, size_t w_row, int nr,
                             const uint8_t *x, size_t x_row, int nc, float *y, size_t ldy) {
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++) y[(size_t)c * ldy + r] = dot(n, w + (size_t)r * w_row, x + (size_t)c * x_row);
}

bool cpu_has_gemm(const cpu_backend *c, enum ft_type wtype) {
    return !c->base.reference && ft_quant_ops_find(wtype)->gemm;
}

void cpu_dot_tile(const cpu_backend *c, enum ft_type wtype, bool gemm, int64_t n, const uint8_t *w, size_t w_row,
                  int nr, const uint8_t *x, size_t x_row, int nc, float *y, size_t ldy) {
    const ft_quant_ops *q = ft_quant_ops_find(wtype);
    FT_ASSERT(q && q->vec_dot);
    if (gemm && cpu_has_gemm(c, wtype))
        q->gemm(n, w, w_row, nr, x, x_row, nc, y, ldy);
    else if (!c->base.reference && q->vec_dot_tile)
        q->vec_dot_tile(n, w, w_row, nr, x, x_row, nc, y, ldy);
    else
        dot_tile_by_rows(c->base.reference ? q->vec_dot_ref : q->vec_dot, n, w, w_row, nr, x, x_row, nc, y, ldy);
}

// ---------------------------------------------------------------------------------------------
// Scratch

static float *cpu_alloc(ft_backend *be, size_t n) {
    cpu_backend *c = cpu_of(be);
    if (c->n_bufs == c->cap_bufs) {
        c->cap_bufs = c->cap_bufs ? 2 * c->cap_bufs : 16;
        c->bufs = ft_realloc(c->bufs, (size_t)c->cap_bufs * sizeof(*c->bufs));
    }
    float *p = ft_calloc(n ? n : 1, sizeof(float));
    c->bufs[c->n_bufs++] = p;
    return p;
}

static void cpu_read(ft_backend *be, const float *src, float *dst, size_t n) {
    (void)be;
    memcpy(dst, src, n * sizeof(float));
}

static void cpu_reserve(ft_backend *be, const ft_backend_limits *lim) {
    cpu_backend *c = cpu_of(be);
    FT_ASSERT(!c->reserved && lim->max_tok >= 1 && lim->max_width >= 1);
    c->reserved = true;
    c->lim = *lim;
    int n_used = FT_MAX(lim->n_expert_used, 1);
    size_t rows = (size_t)lim->max_tok * (size_t)n_used;
    // f32 is the widest vec_dot_type (4 bytes per element); block formats are narrower.
    c->xq_row = (size_t)lim->max_width * 4 + 64;
    c->xq = ft_malloc(rows * c->xq_row);
    c->xq2 = ft_malloc(rows * c->xq_row);
    c->xq_tok = ft_malloc((size_t)lim->max_tok * c->xq_row);
    int nth = ft_pool_threads(c->pool);
    // q in the key's format, the V accumulator and one dequantized V row (also RoPE's angles)
    // (the fast path: a GQA group's accumulators and converted queries, each at most the
    // q width, which max_width covers)
    c->attn_ws_per_thread = FT_MAX((size_t)lim->max_head_dim * 3, (size_t)lim->max_width * 2) + 64;
    c->attn_ws_per_thread = FT_MAX(c->attn_ws_per_thread, cpu_attn_tiled_ws_floats(lim->max_head_dim));
    c->attn_ws_per_thread = FT_MAX(c->attn_ws_per_thread, cpu_attn_decode_ws_floats(lim->max_head_dim));
    c->attn_ws = ft_malloc((size_t)nth * c->attn_ws_per_thread * sizeof(float));
    int ne = FT_MAX(lim->n_expert, 1);
    c->logits = ft_malloc((size_t)lim->max_tok * (size_t)ne * sizeof(float));
    c->sel = ft_malloc(rows * sizeof(int32_t));
    c->sel_w = ft_malloc(rows * sizeof(float));
    c->grp_tok = ft_malloc(rows * sizeof(int32_t));
    c->grp_of = ft_malloc(rows * sizeof(int32_t));
    c->exp_off = ft_malloc(((size_t)ne + 1) * sizeof(int32_t));
    c->exp_gemm = ft_malloc((size_t)ne * sizeof(int32_t));
    c->active = ft_malloc((size_t)ne * sizeof(int32_t));
    c->h_gate = ft_malloc(rows * (size_t)lim->max_width * sizeof(float));
    c->h_up = ft_malloc(rows * (size_t)lim->max_width * sizeof(float));
    c->h_out = ft_malloc(rows * (size_t)lim->max_width * sizeof(float));
    if (lim->n_layer > 0 && lim->n_expert > 0)
        c->route_counts = ft_calloc((size_t)lim->n_layer * (size_t)lim->n_expert, sizeof(uint64_t));
}

static void cpu_free(ft_backend *be) {
    if (!be) return;
    cpu_backend *c = cpu_of(be);
    ft_pool_free(c->pool);
    for (int i = 0; i < c->n_bufs; i++) free(c->bufs[i]);
    free(c->bufs);
    free(c->xq);
    free(c->xq2);
    free(c->xq_tok);
    free(c->attn_ws);
    free(c->logits);
    free(c->sel);
    free(c->sel_w);
    free(c->grp_tok);
    free(c->grp_of);
    free(c->exp_off);
    free(c->exp_gemm);
    free(c->active);
    free(c->h_gate);
    free(c->h_up);
    free(c->h_out);
    free(c->route_counts);
    free(c);
}

// ---------------------------------------------------------------------------------------------
// Matmul

typedef struct {
    enum ft_type vdt;
    const float *x;
    int64_t n;
    int n_rows;
    uint8_t *dst;
    size_t stride;
} quant_job;

static void quant_worker(void *ctx, int ith, int nth) {
    quant_job *j = ctx;
    int64_t r0, r1;
    ft_pool_split(j->n_rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) cpu_quantize_row(j->vdt, j->x + r * j->n, j->dst + r * j->stride, j->n);
}

void cpu_quantize_rows(cpu_backend *c, enum ft_type vdt, const float *x, int64_t n, int n_rows,
                       uint8_t *dst, size_t dst_stride) {
    FT_ASSERT(ft_row_bytes(vdt, n) <= dst_stride);
    quant_job j = {vdt, x, n, n_rows, dst, dst_stride};
    if (n_rows == 1)
        quant_worker(&j, 0, 1);
    else
        cpu_run(c, quant_worker, &j);
}

typedef struct {
    const cpu_backend *c;
    enum ft_type wtype;
    bool has_gemm;       // the weight type has a GEMM on this CPU
    const uint8_t *w;
    size_t w_row;
    int64_t n_in, n_out;
    const uint8_t *xq;
    size_t xq_row;
    float *y;
    int n_rows;
} mm_job;

// Does activation row r take the GEMM (ft_backend.row_gemm's rule)?
static bool mm_row_gemm(const mm_job *j, int r) {
    return j->has_gemm && ft_row_gemm(j->c->base.row_gemm, r, j->n_rows);
}

// The end of the run of rows from r0 that take the same kernel as r0.
static int mm_run_end(const mm_job *j, int r0) {
    bool g = mm_row_gemm(j, r0);
    int r1 = r0 + 1;
    while (r1 < j->n_rows && mm_row_gemm(j, r1) == g) r1++;
    return r1;
}

// Thread ith computes its share of the weight rows for every activation row: first each run of
// GEMM rows with the whole share at once (the GEMM packs its activations once per call), then
// the other rows in blocks of 16 weight rows that stay in cache while each such run passes
// over them.
static void mm_worker(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    int64_t o0, o1;
    ft_pool_split(j->n_out, ith, nth, &o0, &o1);
    if (o0 >= o1) return;
    if (j->has_gemm)
        for (int r0 = 0, r1; r0 < j->n_rows; r0 = r1) {
            r1 = mm_run_end(j, r0);
            if (mm_row_gemm(j, r0))
                cpu_dot_tile(j->c, j->wtype, true, j->n_in, j->w + (size_t)o0 * j->w_row, j->w_row, (int)(o1 - o0),
                             j->xq + (size_t)r0 * j->xq_row, j->xq_row, r1 - r0, j->y + (size_t)r0 * j->n_out + o0,
                             (size_t)j->n_out);
        }
    for (int64_t ob = o0; ob < o1; ob += 16) {
        int nr = (int)FT_MIN(16, o1 - ob);
        for (int r0 = 0, r1; r0 < j->n_rows; r0 = r1) {
            r1 = mm_run_end(j, r0);
            if (!mm_row_gemm(j, r0))
                cpu_dot_tile(j->c, j->wtype, false, j->n_in, j->w + (size_t)ob * j->w_row, j->w_row, nr,
                             j->xq + (size_t)r0 * j->xq_row, j->xq_row, r1 - r0, j->y + (size_t)r0 * j->n_out + ob,
                             (size_t)j->n_out);
        }
    }
}

static void cpu_matmul(ft_backend *be, const ft_tensor *w, const float *x, float *y, int n_tok) {
    cpu_backend *c = cpu_of(be);
    FT_ASSERT(c->reserved && n_tok <= c->lim.max_tok && w->ne[2] == 1);
    FT_ASSERT(w->placement == FT_PLACEMENT_CPU);
    enum ft_type vdt = ft_quant_ops_find(w->type)->vec_dot_type;
    cpu_quantize_rows(c, vdt, x, w->ne[0], n_tok, c->xq, c->xq_row);
    mm_job j = {c, w->type, cpu_has_gemm(c, w->type), w->data, w->row_bytes, w->ne[0], w->ne[1], c->xq, c->xq_row,
                y, n_tok};
    cpu_run(c, mm_worker, &j);
}

// ---------------------------------------------------------------------------------------------
// Element-wise ops: row by row, over the pool where a prefill chunk's rows make it worth it
// (cpu_run_rows); every row computes as it would alone.

typedef struct {
    const ft_tensor *t;
    const int32_t *ids;
    float *y;
} get_rows_job;

static void get_rows_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const get_rows_job *j = ctx;
    const ft_quant_ops *q = ft_quant_ops_find(j->t->type);
    for (int64_t i = r0; i < r1; i++) {
        FT_ASSERT(j->ids[i] >= 0 && j->ids[i] < j->t->ne[1]);
        q->to_float((const uint8_t *)j->t->data + (size_t)j->ids[i] * j->t->row_bytes, j->y + (size_t)i * j->t->ne[0],
                    j->t->ne[0]);
    }
}

static void cpu_get_rows(ft_backend *be, const ft_tensor *t, const int32_t *ids, float *y, int n_tok) {
    get_rows_job j = {t, ids, y};
    cpu_run_rows(cpu_of(be), n_tok, t->ne[0], get_rows_rows, &j);
}

typedef struct {
    const float *x, *w;
    float *y;
    int n;
    float eps;
} norm_job;

// As ggml: the mean of squares summed in double, then x * (1/sqrt(mean + eps)), then * w (where
// there is a weight: gemma4 normalises V without one).
static void norm_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const norm_job *j = ctx;
    const int n = j->n;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + (size_t)r * n;
        float *yr = j->y + (size_t)r * n;
        double sum = 0;
        for (int i = 0; i < n; i++) sum += (double)(xr[i] * xr[i]);
        float scale = 1.0f / sqrtf((float)(sum / n) + j->eps);
        if (j->w)
            for (int i = 0; i < n; i++) yr[i] = (xr[i] * scale) * j->w[i];
        else
            for (int i = 0; i < n; i++) yr[i] = xr[i] * scale;
    }
}

static void cpu_rms_norm(ft_backend *be, const float *x, const ft_tensor *w, float *y, int n_rows,
                         int n, float eps) {
    const float *wd = NULL;
    if (ft_tensor_present(w)) {
        FT_ASSERT(w->type == FT_TYPE_F32 && w->ne[0] == n);
        wd = w->data;
    }
    norm_job j = {x, wd, y, n, eps};
    cpu_run_rows(cpu_of(be), n_rows, n, norm_rows, &j);
}

// The flat ops (add, scale, softcap) in rows of FLAT_ROW floats.
enum { FLAT_ROW = 4096 };

typedef struct {
    enum { FLAT_ADD, FLAT_SCALE, FLAT_SOFTCAP } op;
    float *y;
    const float *x;
    size_t n;
    float s; // scale, or the cap
} flat_job;

static void flat_rows_fn(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const flat_job *j = ctx;
    const size_t i0 = (size_t)r0 * FLAT_ROW, i1 = FT_MIN((size_t)r1 * FLAT_ROW, j->n);
    float *y = j->y;
    switch (j->op) {
    case FLAT_ADD:
        for (size_t i = i0; i < i1; i++) y[i] += j->x[i];
        break;
    case FLAT_SCALE:
        for (size_t i = i0; i < i1; i++) y[i] *= j->s;
        break;
    case FLAT_SOFTCAP: { // ggml's three ops: a scale by the reciprocal (not a division), tanhf, a scale back
        const float cap = j->s, inv = 1.0f / cap;
        for (size_t i = i0; i < i1; i++) y[i] = tanhf(y[i] * inv) * cap;
        break;
    }
    }
}

static void flat_run(ft_backend *be, flat_job j) {
    cpu_run_rows(cpu_of(be), (int64_t)((j.n + FLAT_ROW - 1) / FLAT_ROW), FLAT_ROW, flat_rows_fn, &j);
}

static void cpu_add(ft_backend *be, float *y, const float *x, size_t n) {
    flat_run(be, (flat_job){FLAT_ADD, y, x, n, 0});
}

static void cpu_add_bias(ft_backend *be, float *y, const ft_tensor *b, int n_rows, int n) {
    (void)be;
    FT_ASSERT(b->type == FT_TYPE_F32 && b->ne[0] == n);
    const float *bd = b->data;
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * n + i] += bd[i];
}

static void cpu_scale(ft_backend *be, float *x, size_t n, float s) {
    flat_run(be, (flat_job){FLAT_SCALE, x, NULL, n, s});
}

static void cpu_softcap(ft_backend *be, float *x, size_t n, float cap) {
    FT_ASSERT(cap > 0);
    flat_run(be, (flat_job){FLAT_SOFTCAP, x, NULL, n, cap});
}

// ---------------------------------------------------------------------------------------------
// Memory: host memory; weights stay in the model's mapping (ft_weights_place copies nothing
// for this backend), caches come from buffer_alloc.

static void cpu_device_info(ft_backend *be, ft_device_info *out) {
    (void)be;
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "cpu");
    out->free_mem = out->total_mem = ft_mem_available();
}

static bool cpu_supports_type(ft_backend *be, enum ft_type type) {
    (void)be;
    const ft_quant_ops *q = ft_quant_ops_find(type);
    return q && q->vec_dot;
}

static size_t cpu_scratch_bytes(ft_backend *be, const ft_backend_limits *lim) {
    (void)be;
    (void)lim;
    return 0; // host scratch is not part of a device plan
}

static void *cpu_buffer_alloc(ft_backend *be, size_t n) {
    (void)be;
    return calloc(1, n ? n : 1);
}

static void cpu_buffer_free(ft_backend *be, void *p) {
    (void)be;
    free(p);
}

static void cpu_buffer_write(ft_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    memcpy(dst, src, n);
}

static void cpu_route_counts(ft_backend *be, uint64_t *out) {
    cpu_backend *c = cpu_of(be);
    if (c->route_counts)
        memcpy(out, c->route_counts, (size_t)c->lim.n_layer * (size_t)c->lim.n_expert * sizeof(uint64_t));
}

static const ft_backend_ops g_cpu_ops = {
    .name = "cpu",
    .features = FT_OPS_ALL,
    .free = cpu_free,
    .device_info = cpu_device_info,
    .supports_type = cpu_supports_type,
    .scratch_bytes = cpu_scratch_bytes,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_write = cpu_buffer_write,
    .reserve = cpu_reserve,
    .alloc = cpu_alloc,
    .read = cpu_read,
    .matmul = cpu_matmul,
    .get_rows = cpu_get_rows,
    .rms_norm = cpu_rms_norm,
    .add = cpu_add,
    .add_bias = cpu_add_bias,
    .scale = cpu_scale,
    .softcap = cpu_softcap,
    .rope = cpu_rope,
    .hadamard = cpu_hadamard,
    .set_rows = cpu_set_rows,
    .copy_rows = cpu_copy_rows,
    .attention = cpu_attention,
    .rope_seqs = cpu_rope_seqs,
    .set_rows_seqs = cpu_set_rows_seqs,
    .gate_mul = cpu_gate_mul,
    .split_heads = cpu_split_heads,
    .delta_net = cpu_delta_net,
    .ffn = cpu_ffn,
    .moe_ffn = cpu_moe_ffn,
    .sigmoid_gate_add = cpu_sigmoid_gate_add,
    .route_counts = cpu_route_counts,
};

unsigned ft_backend_cpu_features(void) { return g_cpu_ops.features; }

float cpu_gelu_f16_table[1 << 16];

static void gelu_table_fill(void) {
    for (uint32_t h = 0; h < (1u << 16); h++) cpu_gelu_f16_table[h] = cpu_gelu_f16(ft_fp16_to_fp32((ft_half)h));
}

void cpu_gelu_table_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, gelu_table_fill);
}

ft_backend *ft_backend_cpu_init(int n_threads, bool reference) {
    cpu_gelu_table_init();
    cpu_backend *c = ft_calloc(1, sizeof(*c));
    c->base.ops = ft_env_flag(FT_ENV_CPU_PROFILE) ? cpu_profile_ops(&g_cpu_ops) : &g_cpu_ops;
    c->base.placement = FT_PLACEMENT_CPU;
    c->base.reference = reference;
    c->base.min_route_gap = INFINITY;
    c->pool = ft_pool_init(n_threads < 1 ? 1 : n_threads);
    return &c->base;
}

int ft_cpu_physical_cores(void) {
    // Distinct (package, core) pairs among the CPUs this thread may run on (taskset, a
    // container's cpuset): threads beyond them would share cores, and the pool's spinning
    // threads stall a job when one waits for its core. Else the CPUs it may run on, else the
    // online ones.
    cpu_set_t allowed;
    bool masked = sched_getaffinity(0, sizeof(allowed), &allowed) == 0;
    long n_conf = sysconf(_SC_NPROCESSORS_CONF);
    int n = 0;
    char seen[4096] = {0};
    for (int cpu = 0; cpu < CPU_SETSIZE && cpu < n_conf; cpu++) {
        if (masked && !CPU_ISSET(cpu, &allowed)) continue;
        char path[128];
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        FILE *f = fopen(path, "r");
        if (!f) continue; // offline, or no topology
        int core = -1, pkg = 0;
        if (fscanf(f, "%d", &core) != 1) core = -1;
        fclose(f);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%d", &pkg) != 1) pkg = 0;
            fclose(f);
        }
        int key = pkg * 512 + core;
        if (core >= 0 && key >= 0 && key < 4096 && !seen[key]) {
            seen[key] = 1;
            n++;
        }
    }
    if (n < 1 && masked) n = CPU_COUNT(&allowed);
    if (n < 1) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n = online > 0 ? (int)online : 1;
    }
    return n;
}
