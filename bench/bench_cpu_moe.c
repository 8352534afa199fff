// bench_cpu_moe.c: the CPU backend's moe_ffn for one token (decode) on synthetic
// Qwen3-30B-A3B-shaped MoE layers, and the machine's multi-threaded memory read bandwidth.
//
// Layers: a router (f32, n_expert x n_embd) and gate/up/down banks of q4_K experts (n_embd
// 2048, n_ff 768, 128 experts, top-8 by default), 48 layers by default (16 GB), so each step
// reads its experts from memory, not from the last-level cache. The expert rows are a few
// random valid experts copied over every slot (the bytes, not their values, set the speed);
// each layer's router is its own, and each step's input rows are new, so the routes move.
//
// For each thread count: warm-up steps, then timed steps, each one moe_ffn per layer in turn.
// Reported per layer: the op's time (mean, median), the GB/s of the selected experts' bytes,
// and the split taken from the pool's trace (pool.h): each job's time from post to done, its
// threads' mean and slowest busy time and latest start, and the serial rest (the op's time
// less its jobs'). Then the read bandwidth of the same thread count over the weights (GB/s,
// best of 3). --check prints a hash of the first step's outputs, to compare two builds bit for
// bit; --pin pins pool thread i to CPU i. A measurement, not a test: it asserts nothing about
// speed.
//
// --given-routing hands the op its routing (random distinct experts and weights, as
// --moe-backend cpu hands it the GPU's), so it runs no router.
//
// Usage: bench_cpu_moe [-t 1,2,4,8,12,15,16] [-l layers] [-s steps] [-w warm-up steps]
//                      [--embd N] [--ff N] [--experts N] [--top-k N] [--check] [--pin]
//                      [--given-routing]
#include "../src/backend/cpu/cpu_impl.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_COUNTS = 32, TEMPLATE_EXPERTS = 4, MAX_JOBS = 8 };

typedef struct {
    int counts[MAX_COUNTS], n_counts;
    int layers, steps, warmup;
    int64_t embd, ff;
    int experts, top_k;
    bool check, pin, given;
} bench_args;

typedef struct {
    ft_tensor router, gate, up, down;
} bench_layer;

static ft_tensor make_bank(enum ft_type type, int64_t ne0, int64_t ne1, int64_t ne2, const char *name) {
    ft_tensor t = {.type = type, .ne = {ne0, ne1, ne2}, .placement = FT_PLACEMENT_CPU};
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.row_bytes = ft_row_bytes(type, ne0);
    t.mat_bytes = t.row_bytes * (size_t)ne1;
    t.data = ft_malloc(t.mat_bytes * (size_t)ne2);
    return t;
}

// Fills every expert of bank t with one of the TEMPLATE_EXPERTS random ones (tmpl).
static void fill_bank(ft_tensor *t, const uint8_t *tmpl) {
    for (int64_t e = 0; e < t->ne[2]; e++)
        memcpy((uint8_t *)t->data + (size_t)e * t->mat_bytes, tmpl + (size_t)(e % TEMPLATE_EXPERTS) * t->mat_bytes,
               t->mat_bytes);
}

static uint8_t *random_experts(enum ft_type type, int64_t ne0, int64_t ne1, ft_rng *r) {
    size_t row = ft_row_bytes(type, ne0);
    uint8_t *p = ft_malloc(row * (size_t)ne1 * TEMPLATE_EXPERTS);
    for (int64_t i = 0; i < ne1 * TEMPLATE_EXPERTS; i++)
        ft_quant_random_row(type, r, 1.0f / sqrtf((float)ne0), p + (size_t)i * row, ne0);
    return p;
}

static bench_layer *make_layers(const bench_args *a) {
    ft_rng r = ft_rng_init(7);
    uint8_t *tg = random_experts(FT_TYPE_Q4_K, a->embd, a->ff, &r);
    uint8_t *tu = random_experts(FT_TYPE_Q4_K, a->embd, a->ff, &r);
    uint8_t *td = random_experts(FT_TYPE_Q4_K, a->ff, a->embd, &r);
    bench_layer *ls = ft_calloc((size_t)a->layers, sizeof(*ls));
    for (int l = 0; l < a->layers; l++) {
        bench_layer *L = &ls[l];
        L->router = make_bank(FT_TYPE_F32, a->embd, a->experts, 1, "router");
        float *rw = L->router.data;
        for (int64_t i = 0; i < a->embd * a->experts; i++) rw[i] = ft_rng_normal(&r) / sqrtf((float)a->embd);
        L->gate = make_bank(FT_TYPE_Q4_K, a->embd, a->ff, a->experts, "gate");
        L->up = make_bank(FT_TYPE_Q4_K, a->embd, a->ff, a->experts, "up");
        L->down = make_bank(FT_TYPE_Q4_K, a->ff, a->embd, a->experts, "down");
        fill_bank(&L->gate, tg);
        fill_bank(&L->up, tu);
        fill_bank(&L->down, td);
    }
    free(tg);
    free(tu);
    free(td);
    return ls;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

// Per job position within the op (router, gate/up, ...): sums over the timed calls, in us.
typedef struct {
    double wall, busy_mean, busy_max, begin_max, n;
} job_sums;

static void add_job(job_sums *s, const ft_pool_job_times *t, int nth) {
    double busy = 0, busy_max = 0, begin_max = 0;
    for (int i = 0; i < nth; i++) {
        double b = (double)(t->end_ns[i] - t->begin_ns[i]) / 1e3;
        busy += b;
        busy_max = FT_MAX(busy_max, b);
        begin_max = FT_MAX(begin_max, (double)(t->begin_ns[i] - t->post_ns) / 1e3);
    }
    s->wall += (double)(t->done_ns - t->post_ns) / 1e3;
    s->busy_mean += busy / nth;
    s->busy_max += busy_max;
    s->begin_max += begin_max;
    s->n++;
}

// The names of the jobs of one moe_ffn at one token, by their number (cpu_moe.c's order).
static const char *job_name(int n_jobs, int i) {
    static const char *four[] = {"router", "gate/up", "quant h", "down"};
    static const char *three[] = {"router", "gate/up", "down"};
    static const char *two[] = {"router", "experts"}; // gate/up and down in one job
    if (n_jobs == 4) return four[i];
    if (n_jobs == 3) return three[i];
    if (n_jobs == 2) return two[i];
    return n_jobs == 1 ? "experts" : "job"; // the routing given: no router job
}

typedef struct {
    const uint8_t *p;
    size_t bytes;
    uint64_t sink[FT_POOL_TRACE_THREADS * 8];
} read_job;

__attribute__((target("avx2"))) static void read_worker(void *ctx, int ith, int nth) {
    read_job *j = ctx;
    int64_t b0, b1;
    ft_pool_split((int64_t)(j->bytes / 128), ith, nth, &b0, &b1);
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t b = b0; b < b1; b++) {
        const __m256i *q = (const __m256i *)(j->p + (size_t)b * 128);
        s0 = _mm256_xor_si256(s0, _mm256_loadu_si256(q));
        s1 = _mm256_xor_si256(s1, _mm256_loadu_si256(q + 1));
        s2 = _mm256_xor_si256(s2, _mm256_loadu_si256(q + 2));
        s3 = _mm256_xor_si256(s3, _mm256_loadu_si256(q + 3));
    }
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(s0, s1), _mm256_xor_si256(s2, s3));
    j->sink[ith * 8] = (uint64_t)_mm256_extract_epi64(s, 0);
}

// GB/s of nth threads reading the layers' gate banks (each thread a contiguous share), best of 3.
static double read_bandwidth(ft_pool *pool, const bench_layer *ls, int n_layers) {
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double bytes = 0, ns = 0;
        for (int l = 0; l < n_layers; l++) {
            read_job j = {.p = ls[l].gate.data, .bytes = ls[l].gate.mat_bytes * (size_t)ls[l].gate.ne[2]};
            uint64_t t0 = ft_pool_now_ns();
            ft_pool_run(pool, read_worker, &j);
            ns += (double)(ft_pool_now_ns() - t0);
            bytes += (double)j.bytes;
        }
        best = FT_MAX(best, bytes / ns);
    }
    return best;
}

// Pins pool thread ith to CPU ith (mod the CPUs this process may use).
static void pin_worker(void *ctx, int ith, int nth) {
    (void)ctx;
    (void)nth;
    cpu_set_t allowed, one;
    CPU_ZERO(&one);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
    int n = CPU_COUNT(&allowed), k = ith % FT_MAX(n, 1);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &allowed) && k-- == 0) {
            CPU_SET(cpu, &one);
            pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
            return;
        }
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

static void bench_threads(const bench_args *a, const bench_layer *ls, int nth) {
    ft_backend *be = ft_backend_cpu_init(nth, false);
    ft_backend_limits lim = {.max_tok = 1, .max_width = FT_MAX(a->embd, a->ff), .max_ctx = 16, .max_head_dim = 128,
                             .n_expert = a->experts, .n_expert_used = a->top_k};
    be->ops->reserve(be, &lim);
    cpu_backend *c = cpu_of(be);
    cpu_set_t saved;
    sched_getaffinity(0, sizeof(saved), &saved);
    if (a->pin) ft_pool_run(c->pool, pin_worker, NULL);
    ft_rng r = ft_rng_init(99);
    float *x = ft_malloc((size_t)a->embd * sizeof(float)), *y = ft_malloc((size_t)a->embd * sizeof(float));
    int n_calls = a->steps * a->layers;
    double *op_us = ft_malloc((size_t)n_calls * sizeof(double));
    ft_pool_job_times *jobs = ft_malloc(MAX_JOBS * sizeof(*jobs));
    job_sums js[MAX_JOBS] = {{0}};
    int n_jobs = -1;
    double expert_bytes = 0, serial_us = 0; // serial: the op's time less its jobs'
    uint64_t hash = 0xcbf29ce484222325ull;
    int32_t *perm = ft_malloc((size_t)a->experts * sizeof(int32_t)), *sel = ft_malloc((size_t)a->top_k * sizeof(int32_t));
    float *sel_w = ft_malloc((size_t)a->top_k * sizeof(float));
    for (int s = -a->warmup; s < a->steps; s++)
        for (int l = 0; l < a->layers; l++) {
            const bench_layer *L = &ls[l];
            for (int64_t i = 0; i < a->embd; i++) x[i] = ft_rng_normal(&r);
            ft_moe_params mp = {.router = &L->router, .gate_exps = &L->gate, .up_exps = &L->up,
                                .down_exps = &L->down, .n_expert = a->experts, .n_expert_used = a->top_k,
                                .gating = FT_GATING_SOFTMAX, .norm_w = true, .layer = l};
            if (a->given) { // top_k distinct experts (a partial shuffle), weights summing to 1
                for (int e = 0; e < a->experts; e++) perm[e] = e;
                float wsum = 0;
                for (int j = 0; j < a->top_k; j++) {
                    int pick = j + (int)(ft_rng_next(&r) % (uint64_t)(a->experts - j)), e = perm[pick];
                    perm[pick] = perm[j];
                    perm[j] = e;
                    sel[j] = e;
                    sel_w[j] = 0.5f + (float)(ft_rng_next(&r) % 1000) / 1000.0f;
                    wsum += sel_w[j];
                }
                for (int j = 0; j < a->top_k; j++) sel_w[j] /= wsum;
                mp.sel = sel;
                mp.sel_w = sel_w;
            }
            ft_pool_trace tr = {jobs, MAX_JOBS, 0};
            ft_pool_set_trace(c->pool, &tr);
            uint64_t t0 = ft_pool_now_ns();
            be->ops->moe_ffn(be, &mp, x, y, 1);
            uint64_t t1 = ft_pool_now_ns();
            ft_pool_set_trace(c->pool, NULL);
            if (s == 0) hash = fnv1a(hash, y, (size_t)a->embd * sizeof(float));
            if (s < 0) continue;
            int call = s * a->layers + l;
            op_us[call] = (double)(t1 - t0) / 1e3;
            FT_ASSERT(n_jobs < 0 || n_jobs == tr.n);
            n_jobs = tr.n;
            double jobs_us = 0;
            for (int i = 0; i < tr.n; i++) {
                add_job(&js[i], &jobs[i], nth);
                jobs_us += (double)(jobs[i].done_ns - jobs[i].post_ns) / 1e3;
            }
            serial_us += op_us[call] - jobs_us;
            // the selected experts: the active ones of the op's grouping
            int active = 0;
            for (int e = 0; e < a->experts; e++) active += c->exp_off[e + 1] > c->exp_off[e];
            expert_bytes += (double)(L->gate.mat_bytes + L->up.mat_bytes + L->down.mat_bytes) * active;
        }
    double sum = 0;
    for (int i = 0; i < n_calls; i++) sum += op_us[i];
    double mean = sum / n_calls;
    qsort(op_us, (size_t)n_calls, sizeof(double), cmp_double);
    double gbps = expert_bytes / (sum * 1e3);
    printf("-t %2d: %7.1f us/layer (median %7.1f, p90 %7.1f), experts %5.1f GB/s |", nth, mean,
           op_us[n_calls / 2], op_us[n_calls * 9 / 10], gbps);
    for (int i = 0; i < n_jobs; i++)
        printf(" %s %.1f (busy %.1f max %.1f, start<=%.1f) |", job_name(n_jobs, i), js[i].wall / js[i].n,
               js[i].busy_mean / js[i].n, js[i].busy_max / js[i].n, js[i].begin_max / js[i].n);
    printf(" serial %.1f%s", serial_us / n_calls, a->pin ? " | pinned" : "");
    double rb = read_bandwidth(c->pool, ls, a->layers);
    printf(" | read %.1f GB/s", rb);
    if (a->check) printf(" | hash %016llx", (unsigned long long)hash);
    printf("\n");
    fflush(stdout);
    free(x);
    free(y);
    free(perm);
    free(sel);
    free(sel_w);
    free(op_us);
    free(jobs);
    be->ops->free(be);
    pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
}

static int parse_counts(const char *s, int *out) {
    int n = 0;
    for (const char *p = s; *p && n < MAX_COUNTS;) {
        out[n++] = atoi(p);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return n;
}

int main(int argc, char **argv) {
    bench_args a = {.layers = 48, .steps = 20, .warmup = 2, .embd = 2048, .ff = 768, .experts = 128, .top_k = 8};
    a.n_counts = parse_counts("1,2,4,8,12,15,16", a.counts);
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(argv[i], "-t")) a.n_counts = parse_counts(v, a.counts), i++;
        else if (!strcmp(argv[i], "-l")) a.layers = atoi(v), i++;
        else if (!strcmp(argv[i], "-s")) a.steps = atoi(v), i++;
        else if (!strcmp(argv[i], "-w")) a.warmup = atoi(v), i++;
        else if (!strcmp(argv[i], "--embd")) a.embd = atoi(v), i++;
        else if (!strcmp(argv[i], "--ff")) a.ff = atoi(v), i++;
        else if (!strcmp(argv[i], "--experts")) a.experts = atoi(v), i++;
        else if (!strcmp(argv[i], "--top-k")) a.top_k = atoi(v), i++;
        else if (!strcmp(argv[i], "--check")) a.check = true;
        else if (!strcmp(argv[i], "--pin")) a.pin = true;
        else if (!strcmp(argv[i], "--given-routing")) a.given = true;
        else {
            fprintf(stderr, "usage: bench_cpu_moe [-t 1,2,4] [-l layers] [-s steps] [-w warm-up] [--embd N] "
                            "[--ff N] [--experts N] [--top-k N] [--check] [--pin] [--given-routing]\n");
            return 2;
        }
    }
    FT_ASSERT(a.layers >= 1 && a.steps >= 1 && a.warmup >= 0 && a.top_k >= 1 && a.top_k <= a.experts);
    uint64_t t0 = ft_pool_now_ns();
    bench_layer *ls = make_layers(&a);
    double layer_bytes = (double)(ls[0].gate.mat_bytes + ls[0].up.mat_bytes + ls[0].down.mat_bytes) * a.experts;
    printf("bench_cpu_moe: %d layers of %d q4_K experts (embd %lld, ff %lld, top-%d), %.2f GB of experts "
           "(made in %.1f s); %s kernels; %d physical cores; %d timed steps after %d\n",
           a.layers, a.experts, (long long)a.embd, (long long)a.ff, a.top_k, layer_bytes * a.layers / 1e9,
           (double)(ft_pool_now_ns() - t0) / 1e9, ft_quant_simd_name(), ft_cpu_physical_cores(), a.steps, a.warmup);
    printf("per job: us from post to done (threads' mean and slowest busy us, latest start us after post)\n");
    for (int i = 0; i < a.n_counts; i++) bench_threads(&a, ls, a.counts[i]);
    for (int l = 0; l < a.layers; l++) {
        free(ls[l].router.data);
        free(ls[l].gate.data);
        free(ls[l].up.data);
        free(ls[l].down.data);
    }
    free(ls);
    return 0;
}
