// cuda_cpu_experts.c: the routed experts on the CPU for the CUDA backend, and the prefill
// overlay that brings a layer's experts to the GPU for large steps (see cuda_cpu_experts.h).
#include "cuda_cpu_experts.h"
#include "../cpu/cpu.h"
#include "expert_cache_kernels.h" // stream waits, sync-only events, the device-clock timer

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N_BANK = 3 }; // gate, up, down

// A page-locked range of the mapping.
typedef struct host_range {
    uintptr_t start, end;
} host_range;

struct cuda_cpu_experts {
    ft_backend *cpu;
    int n_layer;
    ft_tensor *routers, *sel_bias;   // (n_layer) host descriptors
    float *x_host, *y_host;          // pinned (max_tok, max_width)
    size_t cap;                      // floats of each
    ft_cuda_event *x_ready;          // after the copy of x
    float *route_gap;

    // the prefill overlay (see the header)
    ft_tensor *banks[N_BANK];        // (n_layer) host descriptors of gate, up, down
    int n_buf;                       // 0, 1 or 2
    size_t bank_bytes[N_BANK];       // one buffer's share of each bank (256-aligned)
    uint8_t *buf[2];                 // device, bank_bytes summed each
    int buf_layer[2];                // layer a buffer holds (or is being copied), -1
    int last_buf;                    // buffer of the last overlay layer, -1
    ft_cuda_stream *copy_stream;
    ft_cuda_event *copied[2];        // on the copy stream, after a buffer's copy
    ft_cuda_event *released[2];      // on the backend's stream, after the work reading a buffer
    host_range *pinned;              // registered ranges
    int n_pinned;
    uint64_t *timer;                 // device (2): the copy stream's clock at a copy's start, and
                                     // the nanoseconds of copies so far
    uint64_t layers_on_gpu, layers_copied, bytes_copied;
};

bool cuda_cpu_experts_overlay_takes(const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down) {
    return ft_tensor_present(gate) && ft_tensor_present(up) && ft_tensor_present(down) &&
           gate->placement == FT_PLACEMENT_CPU && up->placement == FT_PLACEMENT_CPU &&
           down->placement == FT_PLACEMENT_CPU && up->mat_bytes == gate->mat_bytes && up->ne[2] == gate->ne[2] &&
           down->ne[2] == gate->ne[2] && ft_cuda_moe_gemm_supported(gate->type, up->type, down->type);
}

static size_t bank_total(const ft_tensor *t) { return t->mat_bytes * (size_t)t->ne[2]; }
static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static void max_bank_bytes(const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down, int n_layer,
                           size_t out[N_BANK]) {
    for (int b = 0; b < N_BANK; b++) out[b] = 0;
    for (int il = 0; il < n_layer; il++) {
        if (!cuda_cpu_experts_overlay_takes(&gate[il], &up[il], &down[il])) continue;
        const ft_tensor *t[N_BANK] = {&gate[il], &up[il], &down[il]};
        for (int b = 0; b < N_BANK; b++) out[b] = FT_MAX(out[b], align256(bank_total(t[b])));
    }
}

size_t cuda_cpu_experts_buffer_bytes(const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down, int n_layer) {
    size_t m[N_BANK];
    max_bank_bytes(gate, up, down, n_layer, m);
    return m[0] + m[1] + m[2];
}

static int range_cmp(const void *a, const void *b) {
    uintptr_t x = ((const host_range *)a)->start, y = ((const host_range *)b)->start;
    return x < y ? -1 : x > y;
}

// Page-locks the mapping's expert ranges of the overlay's layers, merged into disjoint whole
// pages; on a refusal, unlocks what was locked and says so once (copies are then pageable).
static void pin_expert_ranges(cuda_cpu_experts *ce) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    host_range *r = ft_malloc((size_t)ce->n_layer * N_BANK * sizeof(host_range) + 1);
    int n = 0;
    for (int il = 0; il < ce->n_layer; il++) {
        if (!cuda_cpu_experts_overlay_takes(&ce->banks[0][il], &ce->banks[1][il], &ce->banks[2][il])) continue;
        for (int b = 0; b < N_BANK; b++) {
            uintptr_t a = (uintptr_t)ce->banks[b][il].data;
            r[n++] = (host_range){a & ~(page - 1), (a + bank_total(&ce->banks[b][il]) + page - 1) & ~(page - 1)};
        }
    }
    qsort(r, (size_t)n, sizeof(*r), range_cmp);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && r[i].start <= r[m - 1].end) r[m - 1].end = FT_MAX(r[m - 1].end, r[i].end);
        else r[m++] = r[i];
    }
    size_t total = 0;
    for (int i = 0; i < m; i++) {
        const char *why = NULL;
        if (!ft_cuda_host_register((void *)r[i].start, r[i].end - r[i].start, &why)) {
            for (int j = 0; j < i; j++) ft_cuda_host_unregister((void *)r[j].start);
            fprintf(stderr, "cpu experts: cannot page-lock the mapping's experts (cudaHostRegister: %s); prefill "
                            "copies them from pageable memory (slower)\n", why ? why : "?");
            free(r);
            return;
        }
        total += r[i].end - r[i].start;
    }
    ce->pinned = r;
    ce->n_pinned = m;
    fprintf(stderr, "cpu experts: %.1f MiB of the mapping's experts page-locked for prefill copies (%d range%s)\n",
            total / 1048576.0, m, m == 1 ? "" : "s");
}

static void overlay_init(cuda_cpu_experts *ce, const cuda_cpu_experts_params *p) {
    ce->last_buf = ce->buf_layer[0] = ce->buf_layer[1] = -1;
    if (p->overlay_buffers <= 0 || !p->gate_exps) return;
    FT_ASSERT(p->overlay_buffers <= 2 && p->up_exps && p->down_exps);
    const ft_tensor *src[N_BANK] = {p->gate_exps, p->up_exps, p->down_exps};
    for (int b = 0; b < N_BANK; b++) {
        ce->banks[b] = ft_malloc((size_t)p->n_layer * sizeof(ft_tensor));
        memcpy(ce->banks[b], src[b], (size_t)p->n_layer * sizeof(ft_tensor));
    }
    max_bank_bytes(ce->banks[0], ce->banks[1], ce->banks[2], ce->n_layer, ce->bank_bytes);
    size_t bytes = ce->bank_bytes[0] + ce->bank_bytes[1] + ce->bank_bytes[2];
    if (bytes == 0) return; // no layer's types are the grouped GEMM's
    ce->n_buf = p->overlay_buffers;
    for (int i = 0; i < ce->n_buf; i++) {
        if (!(ce->buf[i] = ft_cuda_malloc(bytes)))
            ft_abort(__FILE__, __LINE__, "cpu experts: out of device memory for the prefill overlay (%.1f MiB)",
                     bytes / 1048576.0);
        ce->copied[i] = ft_cuda_event_init_sync_only();
        ce->released[i] = ft_cuda_event_init_sync_only();
    }
    ce->copy_stream = ft_cuda_stream_init();
    if (!(ce->timer = ft_cuda_malloc(2 * sizeof(uint64_t))))
        ft_abort(__FILE__, __LINE__, "cpu experts: out of device memory");
    ft_cuda_memset(ce->timer, 0, 2 * sizeof(uint64_t), ce->copy_stream);
    pin_expert_ranges(ce);
}

cuda_cpu_experts *cuda_cpu_experts_init(const cuda_cpu_experts_params *p, const ft_backend_limits *lim) {
    FT_ASSERT(p->n_layer >= 1 && p->routers && p->n_threads >= 1);
    cuda_cpu_experts *ce = ft_calloc(1, sizeof(*ce));
    ce->n_layer = p->n_layer;
    ce->routers = ft_malloc((size_t)p->n_layer * sizeof(ft_tensor));
    ce->sel_bias = ft_calloc((size_t)p->n_layer, sizeof(ft_tensor));
    memcpy(ce->routers, p->routers, (size_t)p->n_layer * sizeof(ft_tensor));
    if (p->sel_bias) memcpy(ce->sel_bias, p->sel_bias, (size_t)p->n_layer * sizeof(ft_tensor));
    ce->cpu = ft_backend_cpu_init(p->n_threads, p->reference);
    ce->cpu->ops->reserve(ce->cpu, lim);
    ce->cap = (size_t)lim->max_tok * (size_t)lim->max_width;
    ce->x_host = ft_cuda_host_alloc(ce->cap * sizeof(float));
    ce->y_host = ft_cuda_host_alloc(ce->cap * sizeof(float));
    ce->x_ready = ft_cuda_event_init();
    ce->route_gap = p->route_gap;
    overlay_init(ce, p);
    return ce;
}

void cuda_cpu_experts_free(cuda_cpu_experts *ce) {
    if (!ce) return;
    uint64_t copy_ns = 0;
    if (ce->copy_stream) {
        ft_cuda_memcpy_d2h(&copy_ns, &ce->timer[1], sizeof(copy_ns), ce->copy_stream);
        ft_cuda_stream_sync(ce->copy_stream);
    }
    if (ce->layers_on_gpu)
        fprintf(stderr, "cpu experts: %llu MoE layer steps of prefill on the GPU, %llu layer copies (%.1f MiB) from %s "
                        "host memory at %.1f GB/s\n", (unsigned long long)ce->layers_on_gpu,
                (unsigned long long)ce->layers_copied, ce->bytes_copied / 1048576.0,
                ce->n_pinned ? "page-locked" : "pageable", copy_ns ? (double)ce->bytes_copied / (double)copy_ns : 0.0);
    ft_cuda_free(ce->timer);
    for (int i = 0; i < ce->n_pinned; i++) ft_cuda_host_unregister((void *)ce->pinned[i].start);
    free(ce->pinned);
    for (int i = 0; i < 2; i++) {
        ft_cuda_free(ce->buf[i]);
        ft_cuda_event_free(ce->copied[i]);
        ft_cuda_event_free(ce->released[i]);
    }
    ft_cuda_stream_free(ce->copy_stream);
    for (int b = 0; b < N_BANK; b++) free(ce->banks[b]);
    ce->cpu->ops->free(ce->cpu);
    ft_cuda_host_free(ce->x_host);
    ft_cuda_host_free(ce->y_host);
    ft_cuda_event_free(ce->x_ready);
    free(ce->routers);
    free(ce->sel_bias);
    free(ce);
}

bool cuda_cpu_experts_serves(const cuda_cpu_experts *ce, const ft_moe_params *p) {
    return ce && p->layer >= 0 && p->layer < ce->n_layer && p->gate_exps->placement == FT_PLACEMENT_CPU &&
           ft_tensor_present(&ce->routers[p->layer]);
}

// The layer's parameters as the CPU backend takes them: host router and bias, every expert on
// the CPU.
static ft_moe_params host_params(const cuda_cpu_experts *ce, const ft_moe_params *p) {
    ft_moe_params h = *p;
    h.router = &ce->routers[p->layer];
    h.sel_bias = &ce->sel_bias[p->layer];
    h.place = NULL;
    h.place_ctx = NULL;
    FT_ASSERT(h.router->placement == FT_PLACEMENT_CPU && p->up_exps->placement == FT_PLACEMENT_CPU &&
              p->down_exps->placement == FT_PLACEMENT_CPU);
    FT_ASSERT(ft_tensor_present(h.sel_bias) == ft_tensor_present(p->sel_bias));
    return h;
}

// The CPU op on the pinned buffers; its smallest routing gap joins the CUDA backend's.
static void run_cpu(cuda_cpu_experts *ce, const ft_moe_params *h, int n_tok) {
    ce->cpu->min_route_gap = INFINITY;
    ce->cpu->ops->moe_ffn(ce->cpu, h, ce->x_host, ce->y_host, n_tok);
    if (ce->route_gap && ce->cpu->min_route_gap < *ce->route_gap) *ce->route_gap = ce->cpu->min_route_gap;
}

void cuda_cpu_experts_moe_ffn(cuda_cpu_experts *ce, const ft_moe_params *p, const float *x, float *y, int n_tok,
                              ft_cuda_stream *s) {
    FT_ASSERT(cuda_cpu_experts_serves(ce, p));
    int64_t n_embd = p->gate_exps->ne[0];
    size_t bytes = (size_t)n_tok * (size_t)n_embd * sizeof(float);
    FT_ASSERT((size_t)n_tok * (size_t)n_embd <= ce->cap);
    ft_cuda_memcpy_d2h(ce->x_host, x, bytes, s);
    ft_moe_params h = host_params(ce, p);
    ft_cuda_event_record(ce->x_ready, s);
    ft_cuda_event_sync(ce->x_ready);
    run_cpu(ce, &h, n_tok);
    ft_cuda_memcpy_h2d(y, ce->y_host, bytes, s);
}

// ---------------------------------------------------------------------------------------------
// The prefill overlay

bool cuda_cpu_experts_overlay_serves(const cuda_cpu_experts *ce, const ft_moe_params *p) {
    return cuda_cpu_experts_serves(ce, p) && ce->n_buf > 0 &&
           cuda_cpu_experts_overlay_takes(&ce->banks[0][p->layer], &ce->banks[1][p->layer], &ce->banks[2][p->layer]);
}

// Enqueues the copy of layer il's banks into buffer i on the copy stream, after the work that
// read the buffer last (released[i]; a buffer never used has no record, so no wait).
static void stream_in(cuda_cpu_experts *ce, int il, int i) {
    ft_cuda_stream_wait_event(ce->copy_stream, ce->released[i]);
    ft_cuda_cache_timer_start(&ce->timer[0], ce->copy_stream);
    uint8_t *dst = ce->buf[i];
    for (int b = 0; b < N_BANK; b++) {
        const ft_tensor *t = &ce->banks[b][il];
        ft_cuda_memcpy_h2d(dst, t->data, bank_total(t), ce->copy_stream);
        ce->bytes_copied += bank_total(t);
        dst += ce->bank_bytes[b];
    }
    ft_cuda_cache_timer_stop(&ce->timer[0], &ce->timer[1], ce->copy_stream);
    ft_cuda_event_record(ce->copied[i], ce->copy_stream);
    ce->buf_layer[i] = il;
    ce->layers_copied++;
}

// The next layer after il that the overlay takes, wrapping around to the first (the next
// step's); -1 if il is the only one.
static int next_overlay_layer(const cuda_cpu_experts *ce, int il) {
    for (int d = 1; d < ce->n_layer; d++) {
        int j = (il + d) % ce->n_layer;
        if (ft_tensor_present(&ce->routers[j]) &&
            cuda_cpu_experts_overlay_takes(&ce->banks[0][j], &ce->banks[1][j], &ce->banks[2][j]))
            return j;
    }
    return -1;
}

void cuda_cpu_experts_overlay_begin(cuda_cpu_experts *ce, const ft_moe_params *p, ft_cuda_stream *s,
                                    ft_tensor views[3]) {
    FT_ASSERT(cuda_cpu_experts_overlay_serves(ce, p));
    int il = p->layer;
    // everything s enqueued so far includes the last overlay layer's experts: its buffer may
    // be overwritten after that
    if (ce->last_buf >= 0) ft_cuda_event_record(ce->released[ce->last_buf], s);
    int i = -1;
    for (int j = 0; j < ce->n_buf; j++)
        if (ce->buf_layer[j] == il) i = j;
    if (i < 0) {
        i = ce->n_buf == 2 && ce->last_buf >= 0 ? 1 - ce->last_buf : 0;
        stream_in(ce, il, i);
    }
    ft_cuda_stream_wait_event(s, ce->copied[i]);
    // double buffering: the next overlay layer streams into the other buffer while this one
    // computes
    if (ce->n_buf == 2) {
        int next = next_overlay_layer(ce, il);
        if (next >= 0 && ce->buf_layer[1 - i] != next) stream_in(ce, next, 1 - i);
    }
    ce->last_buf = i;
    ce->layers_on_gpu++;
    const ft_tensor *src[N_BANK] = {p->gate_exps, p->up_exps, p->down_exps};
    uint8_t *at = ce->buf[i];
    for (int b = 0; b < N_BANK; b++) {
        FT_ASSERT(src[b]->type == ce->banks[b][il].type && src[b]->mat_bytes == ce->banks[b][il].mat_bytes);
        views[b] = *src[b];
        views[b].data = at;
        views[b].placement = FT_PLACEMENT_CUDA;
        at += ce->bank_bytes[b];
    }
}
