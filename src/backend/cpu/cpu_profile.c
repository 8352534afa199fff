// cpu_profile.c: FT_CPU_PROFILE: the CPU backend's ops timed by kind (op, weight or cache type,
// prefill or decode) and the thread pool's balance within them, printed at exit.
//
// The profiled backend's ops table forwards every op to the real one. An op's time is
// exclusive: what ops it calls through the table (the router's and a dense FFN's matmuls) count
// as their own rows. The outermost op of a call also traces its pool jobs: "busy" is the mean
// thread's working time over the jobs' wall time (1: every thread worked throughout; less: the
// threads' shares were uneven, or waking the workers and waiting for the last one cost time).
#include "cpu_impl.h"
#include "../../util/env.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { PROF_KINDS = 256, PROF_JOBS = 4096 };

typedef struct {
    const char *op;
    int type;  // weight or cache type, -1: none
    int phase; // 0 decode (one token), 1 prefill, 2 either (an op that does not know)
    uint64_t calls, tokens, ns, jobs, job_wall_ns;
    double job_busy_ns; // sum over jobs of the mean thread's working time
} prof_kind;

static const ft_backend_ops *g_inner;
static ft_backend_ops g_profiled;
static prof_kind g_kinds[PROF_KINDS];
static int g_n_kinds;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static _Thread_local int tl_depth;              // profiled ops in progress on this thread
static _Thread_local uint64_t tl_child_ns[16];  // time of the ops called from depth d
static _Thread_local ft_pool_job_times *tl_jobs; // the outermost op's pool trace

typedef struct {
    uint64_t t0;
    ft_pool_trace tr;
    ft_pool *pool; // traced, or NULL
} prof_span;

static void span_begin(ft_backend *be, prof_span *s) {
    ft_pool *pool = cpu_of(be)->pool;
    s->pool = NULL;
    if (tl_depth == 0 && ft_pool_threads(pool) <= FT_POOL_TRACE_THREADS) {
        if (!tl_jobs) tl_jobs = ft_malloc(PROF_JOBS * sizeof(*tl_jobs));
        s->tr = (ft_pool_trace){tl_jobs, PROF_JOBS, 0};
        s->pool = pool;
        ft_pool_set_trace(pool, &s->tr);
    }
    if (tl_depth < 15) tl_child_ns[tl_depth + 1] = 0;
    tl_depth++;
    s->t0 = ft_pool_now_ns();
}

static void span_end(prof_span *s, const char *op, int type, int n_tok) {
    uint64_t ns = ft_pool_now_ns() - s->t0;
    tl_depth--;
    uint64_t child = tl_depth < 15 ? tl_child_ns[tl_depth + 1] : 0;
    if (tl_depth < 16) tl_child_ns[tl_depth] += ns;
    uint64_t jobs = 0, wall = 0;
    double busy = 0;
    if (s->pool) {
        ft_pool_set_trace(s->pool, NULL);
        int nth = ft_pool_threads(s->pool);
        for (int j = 0; j < s->tr.n; j++) {
            const ft_pool_job_times *t = &s->tr.jobs[j];
            double sum = 0;
            for (int i = 0; i < nth; i++) sum += (double)(t->end_ns[i] - t->begin_ns[i]);
            busy += sum / nth;
            wall += t->done_ns - t->post_ns;
        }
        jobs = (uint64_t)s->tr.n;
    }
    int phase = n_tok < 0 ? 2 : n_tok > 1;
    pthread_mutex_lock(&g_mu);
    prof_kind *k = NULL;
    for (int i = 0; i < g_n_kinds && !k; i++)
        if (g_kinds[i].op == op && g_kinds[i].type == type && g_kinds[i].phase == phase) k = &g_kinds[i];
    if (!k && g_n_kinds < PROF_KINDS) {
        k = &g_kinds[g_n_kinds++];
        *k = (prof_kind){.op = op, .type = type, .phase = phase};
    }
    if (k) {
        k->calls++;
        k->tokens += (uint64_t)(n_tok > 0 ? n_tok : 0);
        k->ns += ns > child ? ns - child : 0;
        k->jobs += jobs;
        k->job_wall_ns += wall;
        k->job_busy_ns += busy;
    }
    pthread_mutex_unlock(&g_mu);
}

static int by_time(const void *a, const void *b) {
    const prof_kind *x = a, *y = b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

static void prof_print(void) {
    pthread_mutex_lock(&g_mu);
    qsort(g_kinds, (size_t)g_n_kinds, sizeof(g_kinds[0]), by_time);
    double total = 0;
    for (int i = 0; i < g_n_kinds; i++) total += (double)g_kinds[i].ns;
    fprintf(stderr, "cpu profile (FT_CPU_PROFILE): %.1f ms in ops; exclusive time per kind, pool jobs and "
                    "their busy share\n", total / 1e6);
    fprintf(stderr, "%-18s %-6s %-7s %9s %10s %11s %9s %6s %8s %6s\n", "op", "type", "phase", "calls", "tokens", "ms",
            "us/call", "share", "jobs", "busy");
    for (int i = 0; i < g_n_kinds; i++) {
        const prof_kind *k = &g_kinds[i];
        char busy[16] = "-";
        if (k->job_wall_ns) snprintf(busy, sizeof(busy), "%.2f", k->job_busy_ns / (double)k->job_wall_ns);
        fprintf(stderr, "%-18s %-6s %-7s %9llu %10llu %11.2f %9.1f %5.1f%% %8llu %6s\n", k->op,
                k->type >= 0 ? ft_type_name((enum ft_type)k->type) : "-",
                k->phase == 2 ? "-" : k->phase ? "prefill" : "decode",
                (unsigned long long)k->calls, (unsigned long long)k->tokens, (double)k->ns / 1e6,
                (double)k->ns / 1e3 / (double)k->calls, total > 0 ? 100.0 * (double)k->ns / total : 0.0,
                (unsigned long long)k->jobs, busy);
    }
    pthread_mutex_unlock(&g_mu);
}

// The wrappers: one per op worth timing.
#define SPAN(be, op, type, n_tok, call)                                                                        \
    do {                                                                                                       \
        prof_span s_;                                                                                          \
        span_begin(be, &s_);                                                                                   \
        call;                                                                                                  \
        span_end(&s_, op, type, n_tok);                                                                    \
    } while (0)

static void p_matmul(ft_backend *be, const ft_tensor *w, const float *x, float *y, int n_tok) {
    SPAN(be, "matmul", (int)w->type, n_tok, g_inner->matmul(be, w, x, y, n_tok));
}
static void p_get_rows(ft_backend *be, const ft_tensor *t, const int32_t *ids, float *y, int n_tok) {
    SPAN(be, "get_rows", (int)t->type, n_tok, g_inner->get_rows(be, t, ids, y, n_tok));
}
// (its rows are tokens, or tokens x heads for per-head norms: no phase)
static void p_rms_norm(ft_backend *be, const float *x, const ft_tensor *w, float *y, int n_rows, int n, float eps) {
    SPAN(be, "rms_norm", -1, -1, g_inner->rms_norm(be, x, w, y, n_rows, n, eps));
}
static void p_rope(ft_backend *be, float *x, int n_tok, int n_head, int head_dim, int pos0, const ft_rope_params *p) {
    SPAN(be, "rope", -1, n_tok, g_inner->rope(be, x, n_tok, n_head, head_dim, pos0, p));
}
static void p_set_rows(ft_backend *be, ft_tensor *cache, const int32_t *blocks, int pos0, const float *x, int n_rows) {
    SPAN(be, "set_rows", (int)cache->type, n_rows, g_inner->set_rows(be, cache, blocks, pos0, x, n_rows));
}
static void p_attention(ft_backend *be, const ft_attn_params *p) {
    SPAN(be, "attention", (int)p->k_cache->type, p->n_tok, g_inner->attention(be, p));
}
static void p_gate_mul(ft_backend *be, float *x, const float *g, int n_tok, int n_head, int head_dim, int g_width,
                       enum ft_act act) {
    SPAN(be, "gate_mul", -1, n_tok, g_inner->gate_mul(be, x, g, n_tok, n_head, head_dim, g_width, act));
}
static void p_delta_net(ft_backend *be, const ft_delta_params *p) {
    SPAN(be, "delta_net", -1, p->n_tok, g_inner->delta_net(be, p));
}
static void p_ffn(ft_backend *be, const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down, const float *x,
                  float *y, int n_tok, enum ft_glu act) {
    SPAN(be, "ffn", (int)gate->type, n_tok, g_inner->ffn(be, gate, up, down, x, y, n_tok, act));
}
static void p_moe_ffn(ft_backend *be, const ft_moe_params *p, const float *x, float *y, int n_tok) {
    SPAN(be, "moe_ffn", (int)p->gate_exps->type, n_tok, g_inner->moe_ffn(be, p, x, y, n_tok));
}
static void p_add(ft_backend *be, float *y, const float *x, size_t n) {
    SPAN(be, "add", -1, -1, g_inner->add(be, y, x, n));
}

static void profile_setup(void) {
    g_profiled = *g_inner;
    g_profiled.matmul = p_matmul;
    g_profiled.get_rows = p_get_rows;
    g_profiled.rms_norm = p_rms_norm;
    g_profiled.rope = p_rope;
    g_profiled.set_rows = p_set_rows;
    g_profiled.attention = p_attention;
    g_profiled.gate_mul = p_gate_mul;
    if (g_inner->delta_net) g_profiled.delta_net = p_delta_net;
    g_profiled.ffn = p_ffn;
    g_profiled.moe_ffn = p_moe_ffn;
    g_profiled.add = p_add;
    atexit(prof_print);
}

const ft_backend_ops *cpu_profile_ops(const ft_backend_ops *inner) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    FT_ASSERT(!g_inner || g_inner == inner);
    g_inner = inner;
    pthread_once(&once, profile_setup);
    return &g_profiled;
}
