// bw_measure.c: the CPU's part of the bandwidth profile, and the synthetic experts both parts
// time (see bw_measure.h).
#include "bw_measure.h"
#include "cpu/cpu.h"
#include "cuda/cuda.h"
#include "../util/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TIMED_RUNS = 5 };
#define CACHE_FLUSH_BYTES (128.0 * 1048576.0) // more than a CPU's last-level cache or a GPU's L2

static int timed_experts(int top_k) {
    return (TIMED_RUNS + 1) * (top_k + 1);
}

int ft_bw_experts_needed(enum ft_type t, int n_embd, int n_ff, int top_k) {
    double bytes =
        (double)(2 * ft_row_bytes(t, n_embd) * (size_t)n_ff + ft_row_bytes(t, n_ff) * (size_t)n_embd);
    // at most the 1024 experts of a layer the CPU op takes (small shapes flush less)
    return FT_MIN(timed_experts(top_k) + (int)(CACHE_FLUSH_BYTES / bytes) + 1, 1024);
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void set_bank(ft_tensor *t, const char *name, enum ft_type type, int64_t cols, int64_t rows,
                     int64_t n_expert, uint8_t *data) {
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->type = type;
    t->ne[0] = cols, t->ne[1] = rows, t->ne[2] = n_expert;
    t->row_bytes = ft_row_bytes(type, cols);
    t->mat_bytes = t->row_bytes * (size_t)rows;
    t->data = data;
    t->placement = FT_PLACEMENT_CPU;
}

void ft_bw_experts_init(ft_bw_experts *e, enum ft_type t, int n_embd, int n_ff, int n_expert,
                        void *(*alloc)(size_t)) {
    size_t gate = ft_row_bytes(t, n_embd) * (size_t)n_ff, down = ft_row_bytes(t, n_ff) * (size_t)n_embd;
    e->expert_bytes = 2 * gate + down;
    e->bytes = (size_t)n_expert * e->expert_bytes;
    e->mem = alloc ? alloc(e->bytes) : ft_malloc(e->bytes);
    if (!e->mem)
        ft_abort(__FILE__, __LINE__, "bw: cannot allocate %.1f MiB of experts", e->bytes / 1048576.0);
    uint8_t *m = e->mem;
    set_bank(&e->gate, "bw.gate_exps", t, n_embd, n_ff, n_expert, m);
    set_bank(&e->up, "bw.up_exps", t, n_embd, n_ff, n_expert, m + (size_t)n_expert * gate);
    set_bank(&e->down, "bw.down_exps", t, n_ff, n_embd, n_expert, m + 2 * (size_t)n_expert * gate);
    ft_rng rng = ft_rng_init(0x5eed + (uint64_t)t);
    const ft_tensor *banks[] = {&e->gate, &e->up, &e->down};
    for (int b = 0; b < 3; b++)
        for (int64_t r = 0; r < banks[b]->ne[1] * n_expert; r++)
            ft_quant_random_row(t, &rng, 0.02f, (uint8_t *)banks[b]->data + (size_t)r * banks[b]->row_bytes,
                                banks[b]->ne[0]);
}

void ft_bw_experts_free(ft_bw_experts *e, void (*release)(void *)) {
    if (release)
        release(e->mem);
    else
        free(e->mem);
    e->mem = NULL;
}

void ft_bw_profile_key(moe_bw_profile *p, int n_threads) {
    memset(p, 0, sizeof(*p));
    snprintf(p->gpu, sizeof(p->gpu), "none");
    snprintf(p->cpu, sizeof(p->cpu), "unknown CPU");
    p->threads = n_threads;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        for (v++; *v == ' ' || *v == '\t'; v++) {
        }
        size_t n = strcspn(v, "\n");
        while (n > 0 && v[n - 1] == ' ')
            n--;
        if (n > 0) snprintf(p->cpu, sizeof(p->cpu), "%.*s", (int)FT_MIN(n, sizeof(p->cpu) - 1), v);
        break;
    }
    fclose(f);
}

// The CPU's time for one token's experts through cpu's moe_ffn: sel (n experts) over e; x and y
// host rows of e's widths.
static double time_cpu_experts(ft_backend *cpu, const ft_bw_experts *e, const int32_t *sel, int n, float *x,
                               float *y) {
    float w[64];
    FT_ASSERT(n >= 1 && n <= 64);
    for (int j = 0; j < n; j++)
        w[j] = 1.0f / (float)n;
    ft_moe_params h = {.layer = 0,
                       .gate_exps = &e->gate,
                       .up_exps = &e->up,
                       .down_exps = &e->down,
                       .act = FT_GLU_SILU,
                       .n_expert = (int)e->gate.ne[2],
                       .n_expert_used = n,
                       .gating = FT_GATING_SOFTMAX,
                       .w_scale = 1.0f,
                       .sel = sel,
                       .sel_w = w};
    uint64_t t0 = now_ns();
    cpu->ops->moe_ffn(cpu, &h, x, y, 1);
    return (double)(now_ns() - t0) * 1e-9;
}

void ft_bw_slope(ft_bw_timed_fn f, void *ctx, int k, double *slope, double *intercept) {
    int32_t sel[64];
    double t1 = INFINITY, tk = INFINITY;
    for (int r = 0; r <= TIMED_RUNS; r++) { // run 0 wakes the CPU's pool, or the GPU's clocks
        int base = r * (k + 1);
        sel[0] = base;
        double a = f(ctx, sel, 1);
        for (int j = 0; j < k; j++)
            sel[j] = base + 1 + j;
        double b = f(ctx, sel, k);
        if (r > 0) t1 = fmin(t1, a), tk = fmin(tk, b);
    }
    *slope = fmax(tk - t1, 0.0) / (k - 1);
    *intercept = fmax(t1 - *slope, 0.0);
}

double ft_bw_step_time(ft_bw_timed_fn f, void *ctx, int k) {
    int32_t sel[64];
    double best = INFINITY;
    for (int r = 0; r <= TIMED_RUNS; r++) {
        for (int j = 0; j < k; j++)
            sel[j] = r * (k + 1) + 1 + j;
        double t = f(ctx, sel, k);
        if (r > 0) best = fmin(best, t);
    }
    return best;
}

bool ft_bw_slope_settled(ft_bw_timed_fn f, void (*again)(void *ctx), void *ctx, int top_k, int retries,
                         double *slope, double *intercept) {
    ft_bw_slope(f, ctx, top_k, slope, intercept);
    for (int i = 0; i < retries && *intercept > *slope * top_k; i++) {
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
        if (again) again(ctx);
        double s, c;
        ft_bw_slope(f, ctx, top_k, &s, &c);
        if (c < *intercept) *slope = s, *intercept = c;
    }
    return *intercept <= *slope * top_k;
}

typedef struct cpu_ctx {
    ft_backend *cpu;
    const ft_bw_experts *e;
    float *x, *y;
    int shift; // added to the experts' indices (modulo the bank's count): another attempt's experts
    int step;  // the shift of each new attempt
} cpu_ctx;

static double time_cpu(void *ctx, const int32_t *sel, int n) {
    cpu_ctx *c = ctx;
    int32_t s[64];
    FT_ASSERT(n >= 1 && n <= 64);
    for (int i = 0; i < n; i++)
        s[i] = (int32_t)((sel[i] + c->shift) % c->e->gate.ne[2]);
    return time_cpu_experts(c->cpu, c->e, s, n, c->x, c->y);
}

static void cpu_again(void *ctx) {
    cpu_ctx *c = ctx;
    c->shift += c->step;
}

// The CPU's rate for type t: the slope between one token over k and over 1 of its experts.
static void measure_cpu_type(ft_backend *cpu, enum ft_type t, const ft_bw_request *req, double *gbps,
                             double *fixed_us) {
    ft_bw_experts e;
    ft_bw_experts_init(&e, t, req->n_embd, req->n_ff,
                       ft_bw_experts_needed(t, req->n_embd, req->n_ff, req->top_k), NULL);
    int width = FT_MAX(req->n_embd, req->n_ff);
    cpu_ctx c = {cpu, &e, ft_calloc((size_t)width, sizeof(float)), ft_calloc((size_t)width, sizeof(float)), 0,
                 timed_experts(req->top_k)};
    for (int i = 0; i < req->n_embd; i++)
        c.x[i] = 0.01f * (float)((i * 7919) % 97 - 48);
    double slope, icpt;
    if (!ft_bw_slope_settled(time_cpu, cpu_again, &c, req->top_k, 2, &slope, &icpt))
        fprintf(stderr, "bw: %s: the CPU's fixed cost measured %.1f us, more than its %d experts take (%.1f us), "
                        "in three attempts: was the host busy? `ft bench bw` measures it again\n",
                ft_type_name(t), icpt * 1e6, req->top_k, slope * req->top_k * 1e6);
    *gbps = slope > 0 ? (double)e.expert_bytes / (slope * 1e9) : 0;
    *fixed_us = icpt * 1e6;
    free(c.x);
    free(c.y);
    ft_bw_experts_free(&e, NULL);
}

bool ft_bw_measure_cpu_rates(const ft_bw_request *req, moe_bw_profile *out, ft_err *err) {
    ft_backend *cpu = ft_backend_cpu_init(req->n_threads, false);
    int width = FT_MAX(req->n_embd, req->n_ff), n_exp = 0;
    for (int i = 0; i < req->n_types; i++)
        n_exp = FT_MAX(n_exp, ft_bw_experts_needed(req->types[i], req->n_embd, req->n_ff, req->top_k));
    ft_backend_limits lim = {.max_tok = 1,
                             .max_width = width,
                             .max_ctx = 1,
                             .max_head_dim = 64,
                             .n_expert = n_exp,
                             .n_expert_used = req->top_k,
                             .n_layer = 1};
    cpu->ops->reserve(cpu, &lim);
    bool ok = true;
    for (int i = 0; i < req->n_types && ok; i++) {
        moe_bw_rate *r = moe_bw_rate_add(out, req->types[i]);
        if (!r) {
            ok = ft_err_set(err, "more than %d expert types", MOE_BW_MAX_TYPES);
            break;
        }
        measure_cpu_type(cpu, req->types[i], req, &r->cpu_gbps, &r->cpu_fixed_us);
        r->cpu_fixed_us = fmax(r->cpu_fixed_us, 0.001); // (0 would read as not measured)
        out->cpu_fixed_us = i == 0 ? r->cpu_fixed_us : fmax(out->cpu_fixed_us, r->cpu_fixed_us);
    }
    cpu->ops->free(cpu);
    return ok;
}

bool ft_backend_measure_bw(const ft_bw_request *req, moe_bw_profile *out, ft_err *err) {
    if (req->top_k < 2 || req->top_k > 32 || req->n_embd < 32 || req->n_ff < 32 || req->n_threads < 1)
        return ft_err_set(err, "bw: top-k 2..32, widths of at least 32 and a thread are needed");
    for (int i = 0; i < req->n_types; i++) {
        const ft_quant_ops *q = ft_quant_ops_find(req->types[i]);
        const ft_type_traits *tr = ft_type_traits_find(req->types[i]);
        if (!q || !q->vec_dot || !tr || req->n_embd % tr->block_elems || req->n_ff % tr->block_elems)
            return ft_err_set(err, "bw: %s experts of %d x %d cannot be computed here",
                              ft_type_name(req->types[i]), req->n_embd, req->n_ff);
    }
    ft_bw_profile_key(out, req->n_threads);
    if (req->device == FT_PLACEMENT_CUDA) return ft_backend_cuda_measure_bw(req, out, err);
    return ft_bw_measure_cpu_rates(req, out, err);
}
