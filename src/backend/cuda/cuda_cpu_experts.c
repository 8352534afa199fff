// cuda_cpu_experts.c: the routed experts on the CPU for the CUDA backend and their meeting with
// the stream (see cuda_cpu_experts.h); the prefill overlay is cpu_experts_overlay.c.
#include "cuda_cpu_experts.h"
#include "../cpu/cpu.h"
#include "../../util/pool.h"
#include "cpu_experts_overlay.h"
#include "expert_cache_kernels.h" // mapped host memory, stream waits, sync-only events, timers
#include "host_meeting.h"
#include "../../util/env.h"

#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// FT_CPU_EXPERTS_PROFILE: decode layers' host times (ns), summed.
typedef struct meet_profile {
    bool on;
    uint64_t layers, bytes;   // decode layers computed, expert bytes they read
    uint64_t wait_ns;         // waiting for x (the GPU not there yet)
    uint64_t cpu_ns;          // the CPU op
    uint64_t between_ns;      // from one layer's end to the next's start in a step (the host's
                              // enqueueing of the ops between)
    uint64_t between_n;
    uint64_t first_n, first_cpu_ns; // the first layer of a step (the pool may have slept)
    uint64_t graph_layers;    // decode layers queued by graph steps
    uint64_t last_end;        // 0: none in this step
} meet_profile;

struct cuda_cpu_experts {
    ft_backend *cpu;
    int n_layer;
    ft_tensor *routers, *sel_bias;   // (n_layer) host descriptors
    ft_tensor *gate_exps, *up_exps, *down_exps; // (n_layer) the banks hybrid layers compute from
    // (n_layer each) host descriptors of the layers' extras (absent where a layer has none): the
    // router's bias, the gate, up and down biases, the down scales
    ft_tensor *router_bias, *gate_bias, *up_bias, *down_bias, *down_scale;
    float *route_gap;

    // the meeting (host_meeting.h); x_host, y_host: mapped pinned (max_tok, max_width)
    bool event_meeting;              // FT_CPU_EXPERTS_MEETING=event or lazy kernel loading: the previous meeting
    bool host_route;                 // FT_CPU_EXPERTS_ROUTE=host: the CPU runs the router
    bool stream_wait;                // the stream waits with cuStreamWaitValue32 (else the import
                                     // kernel spins: FT_CPU_EXPERTS_MEETING=spin, or no driver support)
    float *x_host, *y_host, *x_dev, *y_dev; // host addresses and the device's for them
    int32_t *sel_host;               // mapped pinned (max_tok, n_expert_used): the GPU's routing
    float *w_host;
    void *sel_dev, *w_dev;           // the device's addresses for them
    size_t sel_cap;                  // entries of sel_host and w_host
    uint32_t *flags, *flags_dev;     // mapped pinned: [0] x exported, [1] y ready
    uint32_t *counter, *dev_seq;     // device: the export's CTA count; the meetings so far
    uint32_t seq;                    // the meetings so far, as the host counts them
    size_t cap;                      // floats of x_host and y_host
    ft_cuda_event *x_ready;          // the event meeting: after the copy of x
    struct pending_layer {           // layers whose CPU work is not done yet, in order: one in a
        ft_moe_params h;             // direct step, every MoE layer of a graph step
        int n_tok;
        uint32_t seq;
        bool hybrid;                 // only the selections sel_host names (-1: the GPU's), and no
                                     // answer where there are none
        bool *row_gemm;              // (max_tok) the rows' kernel classes, copied at the call
    } *pending;
    bool *row_gemm;                  // (n_layer, max_tok): the pending layers' row_gemm
    int max_tok;
    int n_pending;
    meet_profile prof;

    cpu_experts_overlay *overlay;    // NULL: every layer on the CPU
    int32_t *hy_sel;                 // hybrid: (max_tok, n_expert_used) a layer's CPU share, compacted
    float *hy_w;
    struct hybrid_ops { uint64_t count, experts, ns; } *hy_ops; // (n_layer) one-token ops so far
    int n_expert_used;
    uint64_t *route_counts;          // (lim.n_layer, n_expert) host_route: the CPU router's, read back
    size_t n_counts;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// ---------------------------------------------------------------------------------------------
// FT_CPU_EXPERTS_PROFILE: what the meeting and the pool cost, measured once at init

static void empty_job(void *ctx, int ith, int nth) {
    (void)ctx;
    (void)ith;
    (void)nth;
}

// Microseconds per job of a pool of n threads: back to back (workers spinning), and after 2 ms
// idle (workers asleep: a wake-up through the condition variable).
static void profile_pool(int n_threads) {
    ft_pool *pool = ft_pool_init(n_threads);
    ft_pool_run(pool, empty_job, NULL);
    enum { HOT = 2000, COLD = 50 };
    uint64_t t0 = now_ns();
    for (int i = 0; i < HOT; i++) ft_pool_run(pool, empty_job, NULL);
    double hot = (double)(now_ns() - t0) / HOT / 1e3;
    uint64_t cold_ns = 0;
    for (int i = 0; i < COLD; i++) {
        usleep(2000);
        uint64_t a = now_ns();
        ft_pool_run(pool, empty_job, NULL);
        cold_ns += now_ns() - a;
    }
    ft_pool_free(pool);
    fprintf(stderr, "cpu experts profile: pool of %d threads: an empty job takes %.2f us hot, %.1f us after 2 ms "
                    "idle (workers asleep)\n", n_threads, hot, (double)cold_ns / COLD / 1e3);
}

// Microseconds of a round trip of n floats each way on a private stream, `rounds` of them after
// 10 unmeasured: the flag meeting (export, host sees the flag, host raises y's flag, import)
// with the stream wait (round 0) or a spinning import kernel (1), or the event meeting (2: copy
// of x, event record and host wait, copy of y).
static double meeting_round_trip_us(cuda_cpu_experts *ce, size_t n, int round, int rounds) {
    ft_cuda_stream *s = ft_cuda_stream_init();
    float *a = ft_cuda_malloc(n * sizeof(float)), *b = ft_cuda_malloc(n * sizeof(float));
    FT_ASSERT(a && b);
    ft_cuda_memset(a, 0, n * sizeof(float), s);
    ft_cuda_stream_sync(s);
    _Atomic uint32_t *fx = (_Atomic uint32_t *)&ce->flags[0], *fy = (_Atomic uint32_t *)&ce->flags[1];
    uint64_t t0 = 0;
    for (int i = -10; i < rounds; i++) {
        if (i == 0) t0 = now_ns();
        uint32_t seq = ++ce->seq;
        if (round < 2) {
            ft_cuda_meeting_piece piece = {a, ce->x_dev, n};
            ft_cuda_meeting_export(&piece, 1, ce->flags_dev, ce->dev_seq, ce->counter, s);
            ft_cuda_meeting_import(ce->y_dev, b, n, ce->flags_dev + 1, ce->dev_seq, round == 0, seq, s);
            while ((int32_t)(atomic_load_explicit(fx, memory_order_acquire) - seq) < 0) _mm_pause();
            atomic_store_explicit(fy, seq, memory_order_release);
        } else {
            --ce->seq; // (no meeting on the device's count)
            ft_cuda_memcpy_d2h(ce->x_host, a, n * sizeof(float), s);
            ft_cuda_event_record(ce->x_ready, s);
            ft_cuda_event_sync(ce->x_ready);
            ft_cuda_memcpy_h2d(b, ce->y_host, n * sizeof(float), s);
        }
    }
    ft_cuda_stream_sync(s);
    double us = (double)(now_ns() - t0) / rounds / 1e3;
    ft_cuda_free(a);
    ft_cuda_free(b);
    ft_cuda_stream_free(s);
    return us;
}

static void profile_meeting(cuda_cpu_experts *ce, size_t n) {
    enum { ROUNDS = 500 };
    bool have_wait = ft_cuda_meeting_stream_wait_available();
    double us[3];
    for (int round = 0; round < 3; round++)
        us[round] = round == 0 && !have_wait ? 0.0 : meeting_round_trip_us(ce, n, round, ROUNDS);
    fprintf(stderr, "cpu experts profile: meeting round trip of %zu floats: flags with the stream wait %.1f us (%s), "
                    "flags with a spinning kernel %.1f us, event and copies %.1f us\n",
            n, us[0], have_wait ? "cuStreamWaitValue32" : "not available", us[1], us[2]);
}

static void profile_print(const cuda_cpu_experts *ce) {
    const meet_profile *q = &ce->prof;
    if (!q->on || q->layers == 0) return;
    double n = (double)q->layers;
    const char *kind = ce->event_meeting  ? "event"
                       : q->graph_layers ? "flags, CUDA graphs with a spinning import"
                       : ce->stream_wait ? "flags, stream wait"
                                         : "flags, spinning import";
    fprintf(stderr, "cpu experts profile: %llu decode layer steps (%s meeting), per layer: host waited for x %.1f us, "
                    "CPU op %.1f us (%.1f GB/s of expert weights; the first layer of a step %.1f us), host between "
                    "layers %.1f us\n",
            (unsigned long long)q->layers, kind, q->wait_ns / n / 1e3, q->cpu_ns / n / 1e3,
            q->cpu_ns ? (double)q->bytes / (double)q->cpu_ns : 0.0,
            q->first_n ? (double)q->first_cpu_ns / (double)q->first_n / 1e3 : 0.0,
            q->between_n ? (double)q->between_ns / (double)q->between_n / 1e3 : 0.0);
}

// ---------------------------------------------------------------------------------------------
// Init and free

cuda_cpu_experts *cuda_cpu_experts_init(const ft_host_experts_params *p, float *route_gap, const ft_backend_limits *lim) {
    FT_ASSERT(p->n_layer >= 1 && p->routers && p->n_threads >= 1);
    cuda_cpu_experts *ce = ft_calloc(1, sizeof(*ce));
    ce->n_layer = p->n_layer;
    ce->routers = ft_malloc((size_t)p->n_layer * sizeof(ft_tensor));
    ce->sel_bias = ft_calloc((size_t)p->n_layer, sizeof(ft_tensor));
    memcpy(ce->routers, p->routers, (size_t)p->n_layer * sizeof(ft_tensor));
    if (p->sel_bias) memcpy(ce->sel_bias, p->sel_bias, (size_t)p->n_layer * sizeof(ft_tensor));
    ce->gate_exps = ft_calloc(8 * (size_t)p->n_layer, sizeof(ft_tensor));
    ce->up_exps = ce->gate_exps + p->n_layer;
    ce->down_exps = ce->up_exps + p->n_layer;
    const ft_tensor *const extras_in[5] = {p->router_bias, p->gate_bias, p->up_bias, p->down_bias, p->down_scale};
    ft_tensor **const extras[5] = {&ce->router_bias, &ce->gate_bias, &ce->up_bias, &ce->down_bias, &ce->down_scale};
    for (int i = 0; i < 5; i++) {
        *extras[i] = ce->down_exps + (size_t)(i + 1) * (size_t)p->n_layer;
        if (extras_in[i]) memcpy(*extras[i], extras_in[i], (size_t)p->n_layer * sizeof(ft_tensor));
    }
    if (p->gate_exps) {
        memcpy(ce->gate_exps, p->gate_exps, (size_t)p->n_layer * sizeof(ft_tensor));
        memcpy(ce->up_exps, p->up_exps, (size_t)p->n_layer * sizeof(ft_tensor));
        memcpy(ce->down_exps, p->down_exps, (size_t)p->n_layer * sizeof(ft_tensor));
    }
    ce->cpu = ft_backend_cpu_init(p->n_threads, p->reference);
    ce->cpu->ops->reserve(ce->cpu, lim);
    ce->cap = (size_t)lim->max_tok * (size_t)lim->max_width;
    ce->sel_cap = (size_t)lim->max_tok * (size_t)FT_MAX(lim->n_expert_used, 1);
    void *xd, *yd, *fd;
    ce->x_host = ft_cuda_host_alloc_mapped(ce->cap * sizeof(float), &xd);
    ce->y_host = ft_cuda_host_alloc_mapped(ce->cap * sizeof(float), &yd);
    ce->flags = ft_cuda_host_alloc_mapped(2 * sizeof(uint32_t), &fd);
    ce->sel_host = ft_cuda_host_alloc_mapped(ce->sel_cap * sizeof(int32_t), &ce->sel_dev);
    ce->w_host = ft_cuda_host_alloc_mapped(ce->sel_cap * sizeof(float), &ce->w_dev);
    if (!ce->x_host || !ce->y_host || !ce->flags || !ce->sel_host || !ce->w_host)
        ft_abort(__FILE__, __LINE__, "cpu experts: cannot allocate mapped pinned host memory (%.1f MiB)",
                 2.0 * (double)ce->cap * sizeof(float) / 1048576.0);
    ce->x_dev = xd, ce->y_dev = yd, ce->flags_dev = fd;
    ce->flags[0] = ce->flags[1] = 0;
    if (!(ce->counter = ft_cuda_malloc(2 * sizeof(uint32_t)))) ft_abort(__FILE__, __LINE__, "cpu experts: out of device memory");
    ce->dev_seq = ce->counter + 1;
    ft_cuda_memset(ce->counter, 0, 2 * sizeof(uint32_t), NULL);
    ce->pending = ft_calloc((size_t)p->n_layer, sizeof(*ce->pending));
    ce->max_tok = lim->max_tok;
    ce->row_gemm = ft_calloc((size_t)p->n_layer * (size_t)lim->max_tok, sizeof(bool));
    for (int i = 0; i < p->n_layer; i++) ce->pending[i].row_gemm = ce->row_gemm + (size_t)i * (size_t)lim->max_tok;
    ft_cuda_device_sync();
    ce->x_ready = ft_cuda_event_init();
    ce->route_gap = route_gap;
    ce->event_meeting = ft_env_is(FT_ENV_CPU_EXPERTS_MEETING, "event");
    if (!ce->event_meeting && ft_cuda_modules_load_lazily()) {
        // the other meetings enqueue the next layer's launches while the stream waits for the
        // host: a kernel's lazy first load there would wait for that stream (a deadlock seen
        // on the H200 with CUDA_MODULE_LOADING=LAZY)
        FT_LOG_WARN("cpu experts: CUDA loads kernels lazily (CUDA_MODULE_LOADING=LAZY), so the host and GPU meet "
                    "through events, without CUDA graphs (slower); unset CUDA_MODULE_LOADING for the fast meeting");
        ce->event_meeting = true;
    }
    ce->host_route = ft_env_is(FT_ENV_CPU_EXPERTS_ROUTE, "host");
    if (ce->host_route && lim->n_layer > 0 && lim->n_expert > 0) {
        ce->n_counts = (size_t)lim->n_layer * (size_t)lim->n_expert;
        ce->route_counts = ft_malloc(ce->n_counts * sizeof(uint64_t));
    }
    ce->stream_wait = !ft_env_is(FT_ENV_CPU_EXPERTS_MEETING, "spin") && ft_cuda_meeting_stream_wait_available();
    const char *prof = ft_env_str(FT_ENV_CPU_EXPERTS_PROFILE);
    ce->prof.on = prof && strcmp(prof, "0") != 0;
    if (ce->prof.on) {
        profile_pool(p->reference ? 1 : p->n_threads);
        profile_meeting(ce, (size_t)lim->max_width);
    }
    ce->overlay = cpu_experts_overlay_init(p);
    ce->n_expert_used = FT_MAX(lim->n_expert_used, 1);
    ce->hy_sel = ft_malloc(ce->sel_cap * sizeof(int32_t));
    ce->hy_w = ft_malloc(ce->sel_cap * sizeof(float));
    ce->hy_ops = ft_calloc((size_t)p->n_layer, sizeof(*ce->hy_ops));
    return ce;
}

void cuda_cpu_experts_free(cuda_cpu_experts *ce) {
    if (!ce) return;
    cuda_cpu_experts_flush(ce);
    profile_print(ce);
    cpu_experts_overlay_free(ce->overlay);
    ce->cpu->ops->free(ce->cpu);
    ft_cuda_host_free(ce->x_host);
    ft_cuda_host_free(ce->y_host);
    ft_cuda_host_free(ce->flags);
    ft_cuda_host_free(ce->sel_host);
    ft_cuda_host_free(ce->w_host);
    ft_cuda_free(ce->counter);
    ft_cuda_event_free(ce->x_ready);
    free(ce->pending);
    free(ce->row_gemm);
    free(ce->routers);
    free(ce->sel_bias);
    free(ce->gate_exps);
    free(ce->hy_sel);
    free(ce->hy_w);
    free(ce->hy_ops);
    free(ce->route_counts);
    free(ce);
}

bool cuda_cpu_experts_routes_on_gpu(const cuda_cpu_experts *ce) { return !ce->host_route; }

void cuda_cpu_experts_add_route_counts(cuda_cpu_experts *ce, uint64_t *out) {
    if (!ce || !ce->route_counts) return;
    cuda_cpu_experts_flush(ce);
    ce->cpu->ops->route_counts(ce->cpu, ce->route_counts);
    for (size_t i = 0; i < ce->n_counts; i++) out[i] += ce->route_counts[i];
}

bool cuda_cpu_experts_router_export(const cuda_cpu_experts *ce, ft_cuda_router_params *r) {
    if (ce->host_route || ce->event_meeting) return false;
    r->export_x = ce->x_dev;
    r->export_sel = ce->sel_dev;
    r->export_w = ce->w_dev;
    r->export_flag = ce->flags_dev;
    r->export_seq = ce->dev_seq;
    return true;
}

bool cuda_cpu_experts_serves(const cuda_cpu_experts *ce, const ft_moe_params *p) {
    return ce && p->layer >= 0 && p->layer < ce->n_layer && p->gate_exps->placement == FT_PLACEMENT_CPU &&
           ft_tensor_present(&ce->routers[p->layer]);
}

// ---------------------------------------------------------------------------------------------
// The CPU path and its meeting

// The layer's parameters as the CPU backend takes them: host router and bias (or the GPU's
// routing, in the pinned buffers), every expert on the CPU.
static ft_moe_params host_params(const cuda_cpu_experts *ce, const ft_moe_params *p) {
    ft_moe_params h = *p;
    h.router = &ce->routers[p->layer];
    h.sel_bias = &ce->sel_bias[p->layer];
    h.router_bias = &ce->router_bias[p->layer];
    h.gate_bias = &ce->gate_bias[p->layer];
    h.up_bias = &ce->up_bias[p->layer];
    h.down_bias = &ce->down_bias[p->layer];
    h.down_scale = &ce->down_scale[p->layer];
    h.place = NULL;
    h.place_ctx = NULL;
    h.sel = ce->host_route ? NULL : ce->sel_host;
    h.sel_w = ce->host_route ? NULL : ce->w_host;
    // the router's own input (gemma4) is on the device: the GPU routes such layers
    FT_ASSERT(!(ce->host_route && p->router_x) && "FT_CPU_EXPERTS_ROUTE=host: a layer routes from an input of its own");
    h.router_x = NULL;
    FT_ASSERT(h.router->placement == FT_PLACEMENT_CPU && p->up_exps->placement == FT_PLACEMENT_CPU &&
              p->down_exps->placement == FT_PLACEMENT_CPU);
    FT_ASSERT(ft_tensor_present(h.sel_bias) == ft_tensor_present(p->sel_bias));
    FT_ASSERT(ft_tensor_present(h.gate_bias) == ft_tensor_present(p->gate_bias) &&
              ft_tensor_present(h.down_bias) == ft_tensor_present(p->down_bias) &&
              ft_tensor_present(h.down_scale) == ft_tensor_present(p->down_scale) &&
              ft_tensor_present(h.router_bias) == ft_tensor_present(p->router_bias));
    return h;
}

// The CPU op on the pinned buffers, each row on the kernel class the step gave it (see
// ft_backend.row_gemm: decode rows batched with a prefill chunk stay off the GEMM, as alone);
// its smallest routing gap joins the CUDA backend's.
static void run_cpu(cuda_cpu_experts *ce, const ft_moe_params *h, int n_tok, const bool *row_gemm) {
    ce->cpu->min_route_gap = INFINITY;
    ce->cpu->row_gemm = row_gemm;
    ce->cpu->ops->moe_ffn(ce->cpu, h, ce->x_host, ce->y_host, n_tok);
    ce->cpu->row_gemm = NULL;
    if (ce->route_gap && ce->cpu->min_route_gap < *ce->route_gap) *ce->route_gap = ce->cpu->min_route_gap;
}

// Runs the CPU op of a decode layer with the profile's timing (t_arrive: when the host came
// to it, t_start: when its input was there).
static void run_cpu_timed(cuda_cpu_experts *ce, const ft_moe_params *h, int n_tok, const bool *row_gemm,
                          uint64_t t_arrive, uint64_t t_start) {
    run_cpu(ce, h, n_tok, row_gemm);
    meet_profile *q = &ce->prof;
    if (!q->on || n_tok != 1) return;
    uint64_t t_end = now_ns();
    q->layers++;
    q->wait_ns += t_start - t_arrive;
    q->cpu_ns += t_end - t_start;
    q->bytes += (uint64_t)h->n_expert_used * (h->gate_exps->mat_bytes + h->up_exps->mat_bytes + h->down_exps->mat_bytes);
    if (q->last_end) {
        q->between_ns += t_arrive - q->last_end;
        q->between_n++;
    } else {
        q->first_n++;
        q->first_cpu_ns += t_end - t_start;
    }
    q->last_end = t_end;
}

// Spins until the x flag reaches seq. A layer's input comes within milliseconds, so a wait of
// WAIT_REPORT_S says the stream is stuck or starved: it is reported on stderr (the meeting
// numbers on both sides), every WAIT_REPORT_S, and the wait goes on.
enum { WAIT_REPORT_S = 10 };
static void wait_for_x(const cuda_cpu_experts *ce, const _Atomic uint32_t *fx, uint32_t seq, int layer) {
    uint64_t t0 = 0, next = 0;
    for (uint64_t spins = 1; (int32_t)(atomic_load_explicit(fx, memory_order_acquire) - seq) < 0; spins++) {
        _mm_pause();
        if (spins % (1u << 20)) continue;
        uint64_t t = now_ns();
        if (!t0) t0 = t, next = t + (uint64_t)WAIT_REPORT_S * 1000000000u;
        if (t < next) continue;
        fprintf(stderr, "cpu experts: still waiting for layer %d's input after %.0f s (meeting %u; the GPU has "
                        "published %u, the host %u)\n", layer, (double)(t - t0) / 1e9, seq,
                atomic_load_explicit(fx, memory_order_relaxed), ce->flags[1]);
        next = t + (uint64_t)WAIT_REPORT_S * 1000000000u;
    }
}

// A hybrid layer's CPU share as the CPU op takes it: each token's selections the GPU left to
// the CPU (sel_host >= 0) first, in slot order, padded to the most any token has with one of
// the layer's CPU experts at weight 0 (so the padding adds exactly nothing and reads no expert
// the share does not). Returns that width, 0 when the CPU has nothing to do.
//   Where the layer has no share, the GPU does not wait for the host and may already be
// exporting a later layer over the buffers while they are read here: then the x flag has
// moved past seq (checked after the reads), or an id is out of this layer's range (a torn
// read), and the layer is skipped. Where it has a share, the GPU waits for this layer's
// answer before any later export, so the buffers hold this layer's rows.
static int hybrid_share(cuda_cpu_experts *ce, ft_moe_params *h, int n_tok, uint32_t seq) {
    int k = h->n_expert_used, width = 0, any = -1;
    bool torn = false;
    for (int t = 0; t < n_tok; t++) {
        int n = 0;
        for (int j = 0; j < k; j++) {
            int e = ce->sel_host[t * k + j];
            if (e < 0) continue;
            torn |= e >= h->n_expert;
            n++;
            any = e;
        }
        width = FT_MAX(width, n);
    }
    _Atomic uint32_t *fx = (_Atomic uint32_t *)&ce->flags[0];
    if (width == 0 || torn || atomic_load_explicit(fx, memory_order_acquire) != seq) return 0;
    for (int t = 0; t < n_tok; t++) {
        int n = 0;
        for (int j = 0; j < k; j++) {
            int e = ce->sel_host[t * k + j];
            if (e < 0) continue;
            ce->hy_sel[t * width + n] = e;
            ce->hy_w[t * width + n++] = ce->w_host[t * k + j];
        }
        for (; n < width; n++) {
            ce->hy_sel[t * width + n] = any;
            ce->hy_w[t * width + n] = 0.0f;
        }
    }
    h->sel = ce->hy_sel;
    h->sel_w = ce->hy_w;
    h->n_expert_used = width;
    return width;
}

// Computes the pending layers in order: for each, waits for its x flag, runs the CPU op, raises
// y's flag (a hybrid layer without a CPU share: nothing to run, and no flag: the GPU does not
// wait for it).
static void compute_pending(cuda_cpu_experts *ce) {
    _Atomic uint32_t *fx = (_Atomic uint32_t *)&ce->flags[0], *fy = (_Atomic uint32_t *)&ce->flags[1];
    for (int i = 0; i < ce->n_pending; i++) {
        const struct pending_layer *l = &ce->pending[i];
        uint64_t t_arrive = ce->prof.on ? now_ns() : 0;
        wait_for_x(ce, fx, l->seq, l->h.layer);
        if (l->hybrid) {
            ft_moe_params h = l->h;
            int width = hybrid_share(ce, &h, l->n_tok, l->seq);
            if (width == 0) continue;
            uint64_t t0 = now_ns();
            run_cpu_timed(ce, &h, l->n_tok, l->row_gemm, t_arrive, ce->prof.on ? t0 : 0);
            if (l->n_tok == 1) {
                struct hybrid_ops *o = &ce->hy_ops[l->h.layer];
                o->count++, o->experts += (uint64_t)width, o->ns += now_ns() - t0;
            }
        } else {
            run_cpu_timed(ce, &l->h, l->n_tok, l->row_gemm, t_arrive, ce->prof.on ? now_ns() : 0);
        }
        atomic_store_explicit(fy, l->seq, memory_order_release);
    }
    ce->n_pending = 0;
}

void cuda_cpu_experts_flush(cuda_cpu_experts *ce) {
    if (!ce) return;
    compute_pending(ce);
    ce->prof.last_end = 0; // what comes before the next layer is not the host's enqueueing
}

bool cuda_cpu_experts_graphable(const cuda_cpu_experts *ce) { return ce && !ce->event_meeting; }

// Queues a layer's CPU work (meeting number seq) for compute_pending; a hybrid layer's rows all
// take the tile kernels (its share is decode's), the others row_gemm's classes.
static void queue_layer(cuda_cpu_experts *ce, const ft_moe_params *h, int n_tok, uint32_t seq, bool hybrid,
                        const bool *row_gemm, bool graph_step) {
    FT_ASSERT(ce->n_pending < ce->n_layer);
    struct pending_layer *l = &ce->pending[ce->n_pending++];
    l->h = *h;
    l->n_tok = n_tok;
    l->seq = seq;
    l->hybrid = hybrid;
    for (int r = 0; r < n_tok; r++) l->row_gemm[r] = !hybrid && ft_row_gemm(row_gemm, r, n_tok);
    if (graph_step && n_tok == 1) ce->prof.graph_layers++;
}

void cuda_cpu_experts_moe_ffn(cuda_cpu_experts *ce, const ft_moe_params *p, const float *x, const int32_t *sel,
                              const float *sel_w, bool exported, float *y, int n_tok, const bool *row_gemm,
                              bool graph_step, ft_cuda_stream *s) {
    FT_ASSERT(cuda_cpu_experts_serves(ce, p) && n_tok <= ce->max_tok);
    FT_ASSERT(ce->host_route == (sel == NULL) && ce->host_route == (sel_w == NULL));
    FT_ASSERT(!exported || (sel && !ce->event_meeting));
    int64_t n_embd = p->gate_exps->ne[0];
    size_t n = (size_t)n_tok * (size_t)n_embd, n_sel = (size_t)n_tok * (size_t)p->n_expert_used;
    FT_ASSERT(n <= ce->cap && n_sel <= ce->sel_cap);
    ft_moe_params h = host_params(ce, p);
    if (ce->event_meeting) {
        FT_ASSERT(!graph_step && s);
        uint64_t t_arrive = ce->prof.on ? now_ns() : 0;
        if (sel) {
            ft_cuda_memcpy_d2h(ce->sel_host, sel, n_sel * sizeof(int32_t), s);
            ft_cuda_memcpy_d2h(ce->w_host, sel_w, n_sel * sizeof(float), s);
        }
        ft_cuda_memcpy_d2h(ce->x_host, x, n * sizeof(float), s);
        ft_cuda_event_record(ce->x_ready, s);
        ft_cuda_event_sync(ce->x_ready);
        run_cpu_timed(ce, &h, n_tok, row_gemm, t_arrive, ce->prof.on ? now_ns() : 0);
        ft_cuda_memcpy_h2d(y, ce->y_host, n * sizeof(float), s);
        return;
    }
    // a direct step computes the last layer first (the GPU waits for it, and this layer's x
    // depends on it); in a graph step nothing has run before the graph's launch, after which
    // the backend flushes every layer
    if (!graph_step) compute_pending(ce);
    uint32_t seq = ++ce->seq;
    if (s) { // (a replayed graph step enqueues nothing: its graph holds these launches)
        ft_cuda_meeting_piece pieces[3] = {{x, ce->x_dev, n}, {sel, ce->sel_dev, n_sel}, {sel_w, ce->w_dev, n_sel}};
        if (!exported) ft_cuda_meeting_export(pieces, sel ? 3 : 1, ce->flags_dev, ce->dev_seq, ce->counter, s);
        // the stream wait takes its number at enqueue: not for a graph's replays
        ft_cuda_meeting_import(ce->y_dev, y, n, ce->flags_dev + 1, ce->dev_seq, ce->stream_wait && !graph_step, seq, s);
    }
    queue_layer(ce, &h, n_tok, seq, false, row_gemm, graph_step);
}

// ---------------------------------------------------------------------------------------------
// The prefill overlay (cpu_experts_overlay.h)

bool cuda_cpu_experts_overlay_serves(const cuda_cpu_experts *ce, const ft_moe_params *p) {
    return cuda_cpu_experts_serves(ce, p) && cpu_experts_overlay_takes_layer(ce->overlay, p->layer);
}

void cuda_cpu_experts_overlay_begin(cuda_cpu_experts *ce, const ft_moe_params *p, ft_cuda_stream *s,
                                    ft_tensor views[3]) {
    FT_ASSERT(cuda_cpu_experts_overlay_serves(ce, p));
    // the staging waits on the host for copies that wait for s
    compute_pending(ce);
    cpu_experts_overlay_begin(ce->overlay, p, s, views);
}

void cuda_cpu_experts_overlay_end(cuda_cpu_experts *ce) { cpu_experts_overlay_end(ce->overlay); }

// ---------------------------------------------------------------------------------------------
// --moe-backend hybrid (cuda_cpu_experts.h)

void cuda_cpu_experts_hybrid_begin(cuda_cpu_experts *ce, const ft_moe_params *p, const float *x,
                                   const int32_t *cpu_sel, const float *sel_w, int n_tok, bool graph_step,
                                   ft_cuda_stream *s) {
    FT_ASSERT(cuda_cpu_experts_serves(ce, p) && n_tok <= ce->max_tok && !ce->event_meeting && !ce->host_route);
    FT_ASSERT(ft_tensor_present(&ce->gate_exps[p->layer]));
    int64_t n_embd = p->gate_exps->ne[0];
    size_t n = (size_t)n_tok * (size_t)n_embd, n_sel = (size_t)n_tok * (size_t)p->n_expert_used;
    FT_ASSERT(n <= ce->cap && n_sel <= ce->sel_cap);
    if (!graph_step) compute_pending(ce); // (as cpu mode: the GPU may be waiting for the last one)
    uint32_t seq = ++ce->seq;
    if (s) {
        ft_cuda_meeting_piece pieces[3] = {{x, ce->x_dev, n}, {cpu_sel, ce->sel_dev, n_sel}, {sel_w, ce->w_dev, n_sel}};
        ft_cuda_meeting_export(pieces, 3, ce->flags_dev, ce->dev_seq, ce->counter, s);
    }
    ft_moe_params h = host_params(ce, p); // (its routing: the share hybrid_share compacts)
    h.gate_exps = &ce->gate_exps[p->layer];
    h.up_exps = &ce->up_exps[p->layer];
    h.down_exps = &ce->down_exps[p->layer];
    queue_layer(ce, &h, n_tok, seq, true, NULL, graph_step);
}

void cuda_cpu_experts_hybrid_end(cuda_cpu_experts *ce, float *y, const int32_t *n_cpu, int n_tok, int64_t n_embd,
                                 ft_cuda_stream *s) {
    if (!s) return;
    ft_cuda_meeting_import_add(ce->y_dev, y, (size_t)n_tok * (size_t)n_embd, ce->flags_dev + 1, ce->dev_seq, n_cpu, s);
}

void cuda_cpu_experts_hybrid_take_ops(cuda_cpu_experts *ce, int layer, uint64_t *count, uint64_t *experts,
                                      uint64_t *ns) {
    FT_ASSERT(layer >= 0 && layer < ce->n_layer);
    struct hybrid_ops *o = &ce->hy_ops[layer];
    *count = o->count, *experts = o->experts, *ns = o->ns;
    *o = (struct hybrid_ops){0};
}

double cuda_cpu_experts_meeting_us(cuda_cpu_experts *ce, int layer) {
    FT_ASSERT(ce->n_pending == 0 && layer >= 0 && layer < ce->n_layer && ft_tensor_present(&ce->gate_exps[layer]));
    return meeting_round_trip_us(ce, (size_t)ce->gate_exps[layer].ne[0], 1, 100);
}

double cuda_cpu_experts_time_experts(cuda_cpu_experts *ce, int layer, int n_experts) {
    FT_ASSERT(ce->n_pending == 0 && layer >= 0 && layer < ce->n_layer && ft_tensor_present(&ce->gate_exps[layer]));
    const ft_tensor *g = &ce->gate_exps[layer];
    int n_embd = (int)g->ne[0];
    FT_ASSERT(n_experts >= 1 && n_experts <= ce->n_expert_used && n_experts <= g->ne[2] && (size_t)n_embd <= ce->cap);
    for (int i = 0; i < n_embd; i++) ce->x_host[i] = 0.01f * (float)((i * 7919) % 97 - 48); // any finite input
    ft_moe_params h = {.layer = layer, .router = &ce->routers[layer], .gate_exps = g, .up_exps = &ce->up_exps[layer],
                       .down_exps = &ce->down_exps[layer], .act = FT_GLU_SILU, .n_expert = (int)g->ne[2],
                       .n_expert_used = n_experts, .gating = FT_GATING_SOFTMAX, .w_scale = 1.0f,
                       .sel = ce->hy_sel, .sel_w = ce->hy_w};
    bool rows[1] = {false};
    double best = INFINITY;
    for (int r = 0; r < 6; r++) { // the first wakes the pool up
        // experts not read since loading where the layer has enough: a decode step's misses
        // come from DRAM, not from the caches of the run before
        for (int j = 0; j < n_experts; j++) {
            ce->hy_sel[j] = (r * n_experts + j) % (int)g->ne[2];
            ce->hy_w[j] = 1.0f / (float)n_experts;
        }
        uint64_t t0 = now_ns();
        run_cpu(ce, &h, 1, rows);
        double t = (double)(now_ns() - t0) * 1e-9;
        if (r > 0 && t < best) best = t;
    }
    return best;
}
