// bw_measure_cuda.c: the GPU's part of `ft bench bw` (bw_measure.h): the decode copy kernel
// over mapped pinned host memory (offload's misses), one host meeting (cpu and hybrid modes'
// road), and the fused decode expert kernels (gate, up and the activation in one launch, down
// and the weighted sum in another: a step of top-k experts, their bytes over its time), each on
// synthetic experts of the request's types.
#include "cuda.h"
#include "cuda_cpu_experts.h"
#include "cuda_ops.h"
#include "expert_cache_kernels.h"
#include "ft_cuda.h"
#include "../bw_measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *mapped_alloc(size_t n) {
    void *dev;
    return ft_cuda_host_alloc_mapped(n, &dev);
}

typedef struct copy_ctx {
    ft_cuda_cache_copy_params cp;
    int32_t *ids_dev, *ids_host;
    ft_cuda_stream *s;
} copy_ctx;

// The experts sel copied by the decode copy kernel into slots 0..n-1.
static double time_copies(void *ctx, const int32_t *sel, int n) {
    copy_ctx *c = ctx;
    c->ids_host[0] = n;
    for (int j = 0; j < n; j++)
        c->ids_host[1 + j] = sel[j], c->ids_host[1 + 64 + j] = j;
    ft_cuda_memcpy_h2d(c->ids_dev, c->ids_host, (1 + 2 * 64) * sizeof(int32_t), c->s);
    ft_cuda_stream_sync(c->s);
    double t0 = now_s();
    ft_cuda_cache_copy(&c->cp, 0, c->s);
    ft_cuda_stream_sync(c->s);
    return now_s() - t0;
}

typedef struct kernel_ctx {
    const ft_bw_experts *e; // device copy's descriptors (data: device memory)
    const void *xq;
    float *h, *y, *w;
    void *hq;
    int32_t *ids_dev;
    ft_cuda_stream *s;
} kernel_ctx;

// One token's fused expert kernels over the experts sel (device copies).
static double time_kernels(void *ctx, const int32_t *sel, int n) {
    kernel_ctx *c = ctx;
    const ft_bw_experts *e = c->e;
    ft_cuda_memcpy_h2d(c->ids_dev, sel, (size_t)n * sizeof(int32_t), c->s);
    ft_cuda_stream_sync(c->s);
    double t0 = now_s();
    ft_cuda_matvec_ids_params glu = {.type = e->gate.type,
                                     .w = e->gate.data,
                                     .mat_bytes = e->gate.mat_bytes,
                                     .n_rows = e->gate.ne[1],
                                     .n_cols = e->gate.ne[0],
                                     .x = c->xq,
                                     .ids = c->ids_dev,
                                     .x_div = n,
                                     .y = c->h,
                                     .n_pairs = n,
                                     .w_up = e->up.data,
                                     .y_q = c->hq};
    ft_cuda_matvec_ids(&glu, c->s);
    ft_cuda_matvec_ids_params sum = {.type = e->down.type,
                                     .w = e->down.data,
                                     .mat_bytes = e->down.mat_bytes,
                                     .n_rows = e->down.ne[1],
                                     .n_cols = e->down.ne[0],
                                     .x = c->hq,
                                     .ids = c->ids_dev,
                                     .x_div = 1,
                                     .y = c->y,
                                     .n_pairs = n,
                                     .sum_w = c->w,
                                     .k = n};
    ft_cuda_matvec_ids(&sum, c->s);
    ft_cuda_stream_sync(c->s);
    return now_s() - t0;
}

// Device copies of host banks e (same layout), for the kernels.
static bool device_experts(const ft_bw_experts *e, ft_bw_experts *d) {
    *d = *e;
    d->mem = ft_cuda_malloc(e->bytes);
    if (!d->mem) return false;
    ft_cuda_memcpy_h2d(d->mem, e->mem, e->bytes, NULL);
    ft_cuda_stream_sync(NULL);
    ptrdiff_t off = (uint8_t *)d->mem - (uint8_t *)e->mem;
    d->gate.data = (uint8_t *)e->gate.data + off;
    d->up.data = (uint8_t *)e->up.data + off;
    d->down.data = (uint8_t *)e->down.data + off;
    return true;
}

bool ft_backend_cuda_measure_bw(const ft_bw_request *req, moe_bw_profile *out, ft_err *err) {
    ft_cuda_device_info info;
    if (ft_cuda_device_count() == 0 || !ft_cuda_device_get_info(0, &info))
        return ft_err_set(err, "bw: no CUDA device");
    snprintf(out->gpu, sizeof(out->gpu), "%.127s", info.name);
    if (!ft_bw_measure_cpu_rates(req, out, err)) return false;

    const int k = req->top_k, width = FT_MAX(req->n_embd, req->n_ff);
    ft_cuda_stream *s = ft_cuda_stream_init();
    int32_t *ids_dev = ft_cuda_malloc((1 + 2 * 64) * sizeof(int32_t));
    int32_t *ids_host = ft_cuda_host_alloc((1 + 2 * 64) * sizeof(int32_t));
    float *x = ft_cuda_malloc((size_t)width * sizeof(float)),
          *h = ft_cuda_malloc((size_t)k * req->n_ff * sizeof(float));
    float *y = ft_cuda_malloc((size_t)width * sizeof(float)), *w = ft_cuda_malloc(64 * sizeof(float));
    void *xq = ft_cuda_malloc(ft_cuda_q8_1_bytes(width, 1)),
         *hq = ft_cuda_malloc(ft_cuda_q8_1_bytes(req->n_ff, k));
    uint8_t *slots = NULL;
    bool ok = ids_dev && x && h && y && w && xq && hq;
    if (!ok) ft_err_set(err, "bw: out of device memory");
    if (ok) {
        float *xh = ft_malloc((size_t)width * sizeof(float)), wh[64];
        for (int i = 0; i < width; i++)
            xh[i] = 0.01f * (float)((i * 7919) % 97 - 48);
        for (int j = 0; j < 64; j++)
            wh[j] = 1.0f / (float)k;
        ft_cuda_memcpy_h2d(x, xh, (size_t)width * sizeof(float), s);
        ft_cuda_memcpy_h2d(w, wh, sizeof(wh), s);
        ft_cuda_quantize_q8_1(x, xq, req->n_embd, 1, s);
        ft_cuda_stream_sync(s);
        free(xh);
    }
    // per type: the copies (for the fit below) and the kernels
    double copy_bytes[MOE_BW_MAX_TYPES], copy_s[MOE_BW_MAX_TYPES];
    int n_copy = 0;
    for (int i = 0; i < req->n_types && ok; i++) {
        ft_bw_experts e, d;
        int n_exp = ft_bw_experts_needed(req->types[i], req->n_embd, req->n_ff, k);
        ft_bw_experts_init(&e, req->types[i], req->n_embd, req->n_ff, n_exp, mapped_alloc);
        slots = ft_cuda_malloc((size_t)k * e.expert_bytes);
        if (!slots || !device_experts(&e, &d)) {
            ok = ft_err_set(err, "bw: out of device memory for %s experts", ft_type_name(req->types[i]));
            ft_bw_experts_free(&e, ft_cuda_host_free);
            break;
        }
        copy_ctx cc = {.ids_dev = ids_dev, .ids_host = ids_host, .s = s};
        cc.cp.n_copies = ids_dev, cc.cp.copy_expert = ids_dev + 1, cc.cp.copy_slot = ids_dev + 1 + 64;
        const ft_tensor *banks[3] = {&e.gate, &e.up, &e.down};
        uint64_t off = 0;
        for (int b = 0; b < 3; b++) {
            cc.cp.src[b] = ft_cuda_host_device_pointer(banks[b]->data);
            cc.cp.bytes[b] = banks[b]->mat_bytes;
            cc.cp.dst[b] = slots + off; // the three banks' slots side by side, as offload's timing
            cc.cp.stride[b] = e.expert_bytes;
            off += banks[b]->mat_bytes;
        }
        double slope, icpt;
        ft_bw_slope(time_copies, &cc, k, &slope, &icpt);
        copy_bytes[n_copy] = (double)e.expert_bytes, copy_s[n_copy++] = slope;
        // the fused kernels take the quantized types (the float ones are not rated): a step of k
        // experts over its time (the slope between 1 and k, below a microsecond an expert, is
        // under the host clock's noise)
        if (ft_cuda_matvec_wants_q8_1(req->types[i])) {
            kernel_ctx kc = {.e = &d, .xq = xq, .h = h, .y = y, .w = w, .hq = hq, .ids_dev = ids_dev, .s = s};
            double tk = ft_bw_step_time(time_kernels, &kc, k);
            moe_bw_rate *r = moe_bw_rate_add(out, req->types[i]);
            r->gpu_gbps = tk > 0 ? (double)k * (double)e.expert_bytes / (tk * 1e9) : 0;
        }
        ft_cuda_free(d.mem);
        ft_bw_experts_free(&e, ft_cuda_host_free);
        ft_cuda_free(slots);
        slots = NULL;
    }
    // copy time = fixed + bytes / gbps: a least-squares line through the types' experts (one
    // size, or sizes too close to separate: no fixed part); slopes lost in the noise (all 0)
    // give no rate, and the file keeps its old one
    double mb = 0, ms = 0;
    for (int i = 0; i < n_copy; i++)
        mb += copy_bytes[i] / n_copy, ms += copy_s[i] / n_copy;
    if (ok && ms > 0) {
        double sbb = 0, sbs = 0;
        for (int i = 0; i < n_copy; i++)
            sbb += (copy_bytes[i] - mb) * (copy_bytes[i] - mb),
                sbs += (copy_bytes[i] - mb) * (copy_s[i] - ms);
        double per_byte = sbb > 0.01 * mb * mb ? sbs / sbb : ms / mb, fixed = ms - per_byte * mb;
        if (per_byte <= 0 || fixed < 0) per_byte = ms / mb, fixed = 0;
        out->copy_gbps = 1.0 / (per_byte * 1e9);
        out->copy_fixed_us = fixed * 1e6;
    }
    // the meeting: a CPU road over the first type's experts (cuda_cpu_experts, as cpu and hybrid
    // modes build it)
    if (ok) {
        ft_bw_experts e;
        ft_bw_experts_init(&e, req->types[0], req->n_embd, req->n_ff, k, NULL);
        ft_tensor router = {0};
        ft_host_experts_params hp = {.n_layer = 1,
                                     .routers = &router,
                                     .gate_exps = &e.gate,
                                     .up_exps = &e.up,
                                     .down_exps = &e.down,
                                     .n_threads = req->n_threads};
        ft_backend_limits lim = {.max_tok = 1,
                                 .max_width = width,
                                 .max_ctx = 1,
                                 .max_head_dim = 64,
                                 .n_expert = k,
                                 .n_expert_used = k,
                                 .n_layer = 1};
        cuda_cpu_experts *ce = cuda_cpu_experts_init(&hp, NULL, &lim);
        out->meet_us = cuda_cpu_experts_meeting_us(ce, 0);
        cuda_cpu_experts_free(ce);
        ft_bw_experts_free(&e, NULL);
    }
    ft_cuda_free(slots);
    ft_cuda_free(ids_dev);
    ft_cuda_host_free(ids_host);
    ft_cuda_free(x);
    ft_cuda_free(h);
    ft_cuda_free(y);
    ft_cuda_free(w);
    ft_cuda_free(xq);
    ft_cuda_free(hq);
    ft_cuda_stream_free(s);
    return ok;
}
