// cuda_cpu_experts.c: the routed experts on the CPU for the CUDA backend (see
// cuda_cpu_experts.h).
#include "cuda_cpu_experts.h"
#include "../cpu/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cuda_cpu_experts {
    ft_backend *cpu;
    int n_layer;
    ft_tensor *routers, *sel_bias;   // (n_layer) host descriptors
    float *x_host, *y_host;          // pinned (max_tok, max_width)
    size_t cap;                      // floats of each
    ft_cuda_event *x_ready;          // after the copy of x
    float *route_gap;
};

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
    return ce;
}

void cuda_cpu_experts_free(cuda_cpu_experts *ce) {
    if (!ce) return;
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
