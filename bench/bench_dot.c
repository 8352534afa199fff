// bench_dot.c: single-thread throughput of the dot products of every weight type.
//
// For each type: a weight matrix of rows of 4096 elements, about 8 MiB (larger than a core's
// L2), against one activation row, the way a matrix-vector product at batch 1 reads it. One
// run walks all rows once or more (at least 25 ms of the thread's CPU time); the figure is the
// median of 9 runs, in GB/s of weight bytes. The kernels take turns within each round of
// runs, so that load from elsewhere on the machine hits them alike. Columns: ft's scalar
// reference, ft's AVX2 kernel, llama.cpp's AVX2 kernel (libggml-cpu-haswell.so from the npm
// package, when it loads) and the ratio ft AVX2 / llama.cpp. A measurement, not a test: it
// prints a table on stdout and asserts nothing.
//
// A second table times prefill's tiles (see bench_tiles), a third decode's matrix-vector
// product through the tile kernels (see bench_matvec), a fourth prefill's GEMMs on the MoE and
// dense shapes of the bench models (see bench_gemm).
//
// Usage: bench_dot [type-name-substring [gemm]] (gemm: only the fourth table). FT_LLAMA_LIB_DIR overrides the library folder.
#include "../src/quant/dot.h"
#include "../src/quant/quant.h"
#include "../src/util/rng.h"
#include "../src/util/util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { ROW_ELEMS = 4096, MATRIX_BYTES = 8 << 20, DISTINCT_ROWS = 16, RUNS = 9 };
#define MIN_RUN_SECONDS 0.025

typedef struct {
    enum ft_type type;
    ft_vec_dot_fn ref, avx2;
} bench_case;

#define CASE(t, T) {FT_TYPE_##T, ft_vec_dot_##t##_ref, ft_vec_dot_##t##_avx2}

// n bytes for weights streamed from memory, in transparent huge pages where the kernel gives
// them, as the engine's copied weights are (util/mapping.h): 4 KiB pages would time the TLB.
static void *weights_alloc(size_t n) {
    const size_t huge = (size_t)2 << 20;
    void *p = aligned_alloc(huge, (n + huge - 1) / huge * huge);
    FT_ASSERT(p);
    madvise(p, (n + huge - 1) / huge * huge, MADV_HUGEPAGE);
    return p;
}

static const bench_case g_cases[] = {
    CASE(f32, F32),   CASE(f16, F16),   CASE(bf16, BF16), CASE(q4_0, Q4_0),     CASE(q4_1, Q4_1),
    CASE(q5_0, Q5_0), CASE(q5_1, Q5_1), CASE(q8_0, Q8_0), CASE(q2_K, Q2_K),     CASE(q3_K, Q3_K),
    CASE(q4_K, Q4_K), CASE(q5_K, Q5_K), CASE(q6_K, Q6_K), CASE(iq4_nl, IQ4_NL), CASE(iq4_xs, IQ4_XS),
    CASE(mxfp4, MXFP4),
};
#undef CASE

// llama.cpp's CPU type traits (ggml-cpu.h) and vec_dot signature.
typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                size_t by, int nrc);
struct ggml_type_traits_cpu {
    void (*from_float)(const float *x, void *y, int64_t k);
    ggml_vec_dot_fn vec_dot;
    int vec_dot_type;
    int64_t nrows;
};
typedef const struct ggml_type_traits_cpu *(*get_traits_fn)(int type);

// llama.cpp's AVX2 CPU backend, or NULL (with a note on stderr) when it cannot be used here.
static get_traits_fn load_llama(void) {
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
          __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2"))) {
        fprintf(stderr, "llama.cpp column skipped: the CPU cannot run its AVX2 build\n");
        return NULL;
    }
    const char *dir = getenv("FT_LLAMA_LIB_DIR");
    if (!dir) dir = "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64";
    char path[1024];
    snprintf(path, sizeof(path), "%s/libggml-base.so", dir);
    if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "llama.cpp column skipped: %s\n", dlerror());
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/libggml-cpu-haswell.so", dir);
    void *cpu = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!cpu) {
        fprintf(stderr, "llama.cpp column skipped: %s\n", dlerror());
        return NULL;
    }
    void (*init)(void) = (void (*)(void))dlsym(cpu, "ggml_cpu_init");
    get_traits_fn get = (get_traits_fn)dlsym(cpu, "ggml_get_type_traits_cpu");
    if (!init || !get) {
        fprintf(stderr, "llama.cpp column skipped: symbols missing in %s\n", path);
        return NULL;
    }
    init();
    return get;
}

// CPU time of this thread: on a shared machine a run that is descheduled for a while is
// not charged for it.
static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The kernel under test: ft's signature, or llama.cpp's (then `ft` is NULL).
typedef struct {
    ft_vec_dot_fn ft;
    ggml_vec_dot_fn llama;
} kernel;

static volatile float g_sink;

// GB/s of weight bytes of one run of kernel k over all rows of the matrix (at least
// MIN_RUN_SECONDS, whole passes).
static double run_once(kernel k, const uint8_t *w, size_t row_bytes, int rows, const void *act) {
    double t0 = now_seconds(), t;
    int64_t passes = 0;
    float sum = 0;
    do {
        for (int i = 0; i < rows; i++) {
            float s;
            if (k.ft) {
                s = k.ft(ROW_ELEMS, w + (size_t)i * row_bytes, act);
            } else {
                k.llama(ROW_ELEMS, &s, 0, w + (size_t)i * row_bytes, 0, act, 0, 1);
            }
            sum += s;
        }
        passes++;
        t = now_seconds() - t0;
    } while (t < MIN_RUN_SECONDS);
    g_sink = sum;
    return (double)passes * rows * row_bytes / t * 1e-9;
}

// Median GB/s of each of the nk kernels over RUNS rounds; each round runs every kernel once,
// so a burst of load from elsewhere on the machine hits them alike.
static void measure(const kernel *k, int nk, const uint8_t *w, size_t row_bytes, int rows,
                    const void *act, double *gbps) {
    double runs[3][RUNS];
    for (int r = 0; r < RUNS; r++)
        for (int i = 0; i < nk; i++) runs[i][r] = run_once(k[i], w, row_bytes, rows, act);
    for (int i = 0; i < nk; i++) {
        qsort(runs[i], RUNS, sizeof(double), cmp_double);
        gbps[i] = runs[i][RUNS / 2];
    }
}

// ---------------------------------------------------------------------------------------------
// Tiles: prefill's matmul shape, TILE_ROWS weight rows x TILE_COLS activation rows (all in
// cache), computed as a loop of per-row dot products (ft's AVX2 vec_dot, and llama.cpp's
// vec_dot with one row, which is what its CPU backend runs for the K-quants on AVX2), and as
// ft's tile kernel. Figures in G multiply-adds per second of one thread's CPU time.

enum { TILE_ROWS = 32, TILE_COLS = 64 };

typedef enum { TILE_BY_ROWS, TILE_LLAMA, TILE_KERNEL } tile_way;

static double tile_run_once(tile_way way, const ft_quant_ops *ops, ggml_vec_dot_fn llama, const uint8_t *w,
                            size_t bx, const uint8_t *y, size_t by, float *s) {
    double t0 = now_seconds(), t;
    int64_t passes = 0;
    do {
        if (way == TILE_KERNEL) {
            ops->vec_dot_tile(ROW_ELEMS, w, bx, TILE_ROWS, y, by, TILE_COLS, s, TILE_ROWS);
        } else {
            for (int c = 0; c < TILE_COLS; c++)
                for (int r = 0; r < TILE_ROWS; r++) {
                    float *o = s + c * TILE_ROWS + r;
                    if (way == TILE_BY_ROWS) *o = ops->vec_dot(ROW_ELEMS, w + r * bx, y + c * by);
                    else llama(ROW_ELEMS, o, 0, w + r * bx, 0, y + c * by, 0, 1);
                }
        }
        passes++;
        t = now_seconds() - t0;
    } while (t < MIN_RUN_SECONDS);
    g_sink = s[0];
    return (double)passes * TILE_ROWS * TILE_COLS * ROW_ELEMS / t * 1e-9;
}

static void bench_tiles(const char *filter, get_traits_fn llama) {
    printf("\nprefill tiles, 1 thread (CPU time): %d weight rows x %d activation rows of %d elements, "
           "G multiply-adds/s, median of %d runs\n",
           TILE_ROWS, TILE_COLS, ROW_ELEMS, RUNS);
    printf("%-7s %10s %10s %10s %9s %9s\n", "type", "rows GMAC", "llama GMAC", "tile GMAC", "tile/rows",
           "tile/llama");
    float *f = ft_malloc(ROW_ELEMS * sizeof(float)), *s = ft_malloc(TILE_ROWS * TILE_COLS * sizeof(float));
    for (size_t c = 0; c < FT_ARRAY_LEN(g_cases); c++) {
        const bench_case *bc = &g_cases[c];
        if (filter && !strstr(ft_type_name(bc->type), filter)) continue;
        const ft_quant_ops *ops = ft_quant_ops_find(bc->type);
        if (!ops->vec_dot_tile) continue;
        const ft_quant_ops *act_ops = ft_quant_ops_find(ops->vec_dot_type);
        size_t bx = ft_row_bytes(bc->type, ROW_ELEMS), by = ft_row_bytes(ops->vec_dot_type, ROW_ELEMS);
        uint8_t *w = ft_malloc(bx * TILE_ROWS), *y = ft_malloc(by * TILE_COLS);
        ft_rng rng = ft_rng_init(7 + c);
        for (int i = 0; i < TILE_ROWS; i++) {
            for (int j = 0; j < ROW_ELEMS; j++) f[j] = ft_rng_normal(&rng);
            ops->from_float_ref(f, w + i * bx, ROW_ELEMS);
        }
        for (int i = 0; i < TILE_COLS; i++) {
            for (int j = 0; j < ROW_ELEMS; j++) f[j] = ft_rng_normal(&rng);
            act_ops->from_float_ref(f, y + i * by, ROW_ELEMS);
        }
        const struct ggml_type_traits_cpu *tr = llama ? llama(bc->type) : NULL;
        bool has_llama = tr && tr->vec_dot && tr->vec_dot_type == (int)ops->vec_dot_type;
        double runs[3][RUNS], med[3] = {0, 0, 0};
        for (int r = 0; r < RUNS; r++)
            for (int way = 0; way < 3; way++)
                runs[way][r] = way == TILE_LLAMA && !has_llama
                                   ? 0
                                   : tile_run_once((tile_way)way, ops, has_llama ? tr->vec_dot : NULL, w, bx, y, by, s);
        for (int way = 0; way < 3; way++) {
            qsort(runs[way], RUNS, sizeof(double), cmp_double);
            med[way] = runs[way][RUNS / 2];
        }
        printf("%-7s %10.2f %10.2f %10.2f %9.2f %9.2f\n", ft_type_name(bc->type), med[0], med[1], med[2],
               med[2] / med[0], med[1] > 0 ? med[2] / med[1] : 0.0);
        fflush(stdout);
        free(w);
        free(y);
    }
    free(f);
    free(s);
}

// ---------------------------------------------------------------------------------------------
// Decode's matrix-vector product: a weight matrix of MATVEC_BYTES (larger than this machine's 300 MiB L3,
// as a model's weights are) of rows of MATVEC_ELEMS elements (Qwen3's embedding) against one
// activation row, walked in blocks of 16 rows as the CPU backend's matmul does, through each
// tile kernel this CPU runs, and through llama.cpp's per-row vec_dot. GB/s of weight bytes,
// one thread (CPU time), median of RUNS rounds that alternate the kernels.

enum { MATVEC_ELEMS = 2048, MATVEC_BYTES = 512 << 20, MATVEC_BLOCK = 16 };

typedef struct {
    const char *name;
    ft_vec_dot_tile_fn tile; // NULL: llama.cpp's vec_dot per row
} matvec_kernel;

static double matvec_run_once(const matvec_kernel *k, ggml_vec_dot_fn llama, const uint8_t *w, size_t bx,
                              int rows, const void *y, float *out) {
    double t0 = now_seconds(), t;
    int64_t passes = 0;
    do {
        for (int r = 0; r < rows; r += MATVEC_BLOCK) {
            int nr = rows - r < MATVEC_BLOCK ? rows - r : MATVEC_BLOCK;
            if (k->tile) k->tile(MATVEC_ELEMS, w + (size_t)r * bx, bx, nr, y, 0, 1, out + r, (size_t)rows);
            else
                for (int i = 0; i < nr; i++) llama(MATVEC_ELEMS, out + r + i, 0, w + (size_t)(r + i) * bx, 0, y, 0, 1);
        }
        passes++;
        t = now_seconds() - t0;
    } while (t < MIN_RUN_SECONDS);
    g_sink = out[0];
    return (double)passes * rows * bx / t * 1e-9;
}

static void bench_matvec(const char *filter, get_traits_fn llama) {
    printf("\ndecode matvec, 1 thread (CPU time): rows of %d elements, %d MiB of weights, 1 activation row, "
           "GB/s, median of %d runs\n", MATVEC_ELEMS, MATVEC_BYTES >> 20, RUNS);
    const struct {
        enum ft_type type;
        matvec_kernel k[3];
    } cases[] = {
        {FT_TYPE_Q8_0, {{"avx2", ft_vec_dot_tile_q8_0_avx2}, {"avx512bw", ft_vec_dot_tile_q8_0_avx512},
                        {"vnni", ft_vec_dot_tile_q8_0_vnni}}},
        {FT_TYPE_Q4_K, {{"avx2", ft_vec_dot_tile_q4_K_avx2}, {"avx512bw", ft_vec_dot_tile_q4_K_avx512},
                        {"vnni", ft_vec_dot_tile_q4_K_vnni}}},
        {FT_TYPE_MXFP4, {{"avx2", ft_vec_dot_tile_mxfp4_avx2}, {NULL, NULL}, {"vnni", ft_vec_dot_tile_mxfp4_vnni}}},
    };
    __builtin_cpu_init();
    const bool has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    const bool has_vnni = has512 && __builtin_cpu_supports("avx512vnni");
    float *f = ft_malloc(MATVEC_ELEMS * sizeof(float));
    for (size_t c = 0; c < FT_ARRAY_LEN(cases); c++) {
        const enum ft_type type = cases[c].type;
        if (filter && !strstr(ft_type_name(type), filter)) continue;
        const ft_quant_ops *ops = ft_quant_ops_find(type);
        if (ops->vec_dot == ops->vec_dot_ref) continue; // no AVX2 here
        const ft_quant_ops *act_ops = ft_quant_ops_find(ops->vec_dot_type);
        const size_t bx = ft_row_bytes(type, MATVEC_ELEMS);
        const int rows = (int)(MATVEC_BYTES / bx);
        uint8_t *w = weights_alloc((size_t)rows * bx);
        void *y = ft_malloc(ft_row_bytes(ops->vec_dot_type, MATVEC_ELEMS));
        float *out = ft_malloc((size_t)rows * sizeof(float));
        ft_rng rng = ft_rng_init(99 + c);
        for (int i = 0; i < rows; i++) {
            if (i < DISTINCT_ROWS) {
                for (int j = 0; j < MATVEC_ELEMS; j++) f[j] = ft_rng_normal(&rng);
                ops->from_float_ref(f, w + (size_t)i * bx, MATVEC_ELEMS);
            } else {
                memcpy(w + (size_t)i * bx, w + (size_t)(i % DISTINCT_ROWS) * bx, bx);
            }
        }
        for (int j = 0; j < MATVEC_ELEMS; j++) f[j] = ft_rng_normal(&rng);
        act_ops->from_float_ref(f, y, MATVEC_ELEMS);
        const struct ggml_type_traits_cpu *tr = llama ? llama(type) : NULL;
        matvec_kernel k[4];
        int nk = 0;
        for (int i = 0; i < 3; i++) {
            const matvec_kernel *m = &cases[c].k[i];
            if (!m->name || (strcmp(m->name, "avx512bw") == 0 && !has512) || (strcmp(m->name, "vnni") == 0 && !has_vnni))
                continue;
            k[nk++] = *m;
        }
        if (tr && tr->vec_dot && tr->vec_dot_type == (int)ops->vec_dot_type) k[nk++] = (matvec_kernel){"llama", NULL};
        double runs[4][RUNS];
        for (int r = 0; r < RUNS; r++)
            for (int i = 0; i < nk; i++) runs[i][r] = matvec_run_once(&k[i], tr ? tr->vec_dot : NULL, w, bx, rows, y, out);
        printf("%-7s", ft_type_name(type));
        for (int i = 0; i < nk; i++) {
            qsort(runs[i], RUNS, sizeof(double), cmp_double);
            printf("  %s %.2f", k[i].name, runs[i][RUNS / 2]);
        }
        printf("\n");
        fflush(stdout);
        free(w);
        free(y);
        free(out);
    }
    free(f);
}

// ---------------------------------------------------------------------------------------------
// Prefill's GEMMs (AMX where the CPU has it) against the tile kernels, on the shapes prefill
// meets: an expert of the Qwen3 slice (768 rows of 2048) with the 32 tokens a 512-token batch
// gives it on average (8 of 128 experts each), over GEMM_BYTES of distinct experts so the
// weights come from memory as they do in prefill; and a dense projection (2048 x 2048) with 512
// tokens. The tile kernels take 16 rows per call (the CPU backend's block), the GEMM all rows of
// a matrix at once. G multiply-adds per second of one thread's CPU time, median of RUNS rounds
// that alternate the two.

enum { GEMM_ELEMS = 2048, GEMM_BYTES = 256 << 20 };

typedef struct {
    const char *name;
    int rows, tokens; // per matrix
} gemm_shape;

static double gemm_run_once(ft_vec_dot_tile_fn gemm, const ft_quant_ops *ops, const uint8_t *w, size_t bx, int rows,
                            int n_mat, const uint8_t *y, size_t by, int tokens, float *s) {
    double t0 = now_seconds(), t;
    int64_t done = 0;
    int m = 0;
    do {
        const uint8_t *wm = w + (size_t)m * rows * bx;
        if (gemm)
            gemm(GEMM_ELEMS, wm, bx, rows, y, by, tokens, s, rows);
        else
            for (int r = 0; r < rows; r += 16)
                ops->vec_dot_tile(GEMM_ELEMS, wm + (size_t)r * bx, bx, FT_MIN(16, rows - r), y, by, tokens, s + r, rows);
        m = (m + 1) % n_mat;
        done++;
        t = now_seconds() - t0;
    } while (t < MIN_RUN_SECONDS);
    g_sink = s[0];
    return (double)done * rows * tokens * GEMM_ELEMS / t * 1e-9;
}

static void bench_gemm(const char *filter) {
    // the dispatched GEMMs: AMX, else AVX-512 VNNI and BF16, else AVX2 (FT_AMX=0 and FT_SIMD=avx2
    // time the paths of CPUs without them)
    const char *kind = ft_quant_gemm_name();
    if (!strcmp(kind, "none")) {
        printf("\nprefill GEMMs: none on this CPU (no AVX2)\n");
        return;
    }
    static const gemm_shape shapes[] = {{"expert", 768, 32}, {"dense", 2048, 512}};
    printf("\nprefill GEMMs (%s, tiles %s), 1 thread (CPU time): rows of %d elements, G multiply-adds/s, median of "
           "%d runs\n",
           kind, ft_quant_simd_name(), GEMM_ELEMS, RUNS);
    printf("%-7s %-7s %6s %6s %10s %10s %9s\n", "type", "shape", "rows", "tokens", "tile GMAC", "gemm GMAC",
           "gemm/tile");
    const enum ft_type types[] = {FT_TYPE_Q8_0, FT_TYPE_Q4_K, FT_TYPE_Q5_K, FT_TYPE_Q6_K, FT_TYPE_MXFP4, FT_TYPE_BF16};
    for (size_t i = 0; i < FT_ARRAY_LEN(types); i++) {
        if (filter && !strstr(ft_type_name(types[i]), filter)) continue;
        const ft_quant_ops *ops = ft_quant_ops_find(types[i]);
        ft_vec_dot_tile_fn gemm = ops->gemm;
        if (!gemm) continue;
        size_t bx = ft_row_bytes(types[i], GEMM_ELEMS), by = ft_row_bytes(ops->vec_dot_type, GEMM_ELEMS);
        // a row of normal floats quantized by ft, repeated over the matrix: what a model holds
        // (random bytes would hold q8_0 codes of -128, which its quantizer never writes and the
        // AVX2 kernel takes a slower form for, and bf16 subnormals, which slow FMAs down)
        size_t total = (size_t)GEMM_BYTES / bx * bx;
        uint8_t *w = weights_alloc(total), *y = ft_malloc(by * 512);
        float *f = ft_malloc(GEMM_ELEMS * sizeof(float)), *s = ft_malloc(2048 * 512 * sizeof(float));
        ft_rng rng = ft_rng_init(11 + i);
        if (ops->from_float_ref) {
            for (int j = 0; j < GEMM_ELEMS; j++) f[j] = ft_rng_normal(&rng);
            ops->from_float_ref(f, w, GEMM_ELEMS);
            for (size_t b = bx; b < total; b += bx) memcpy(w + b, w, bx);
        } else {
            for (size_t b = 0; b < total; b += 8) {
                uint64_t v = ft_rng_next(&rng);
                memcpy(w + b, &v, FT_MIN(8, total - b));
            }
        }
        for (int c = 0; c < 512; c++) {
            for (int j = 0; j < GEMM_ELEMS; j++) f[j] = ft_rng_normal(&rng);
            ft_quant_ops_find(ops->vec_dot_type)->from_float_ref(f, y + c * by, GEMM_ELEMS);
        }
        for (size_t k = 0; k < FT_ARRAY_LEN(shapes); k++) {
            const gemm_shape *sh = &shapes[k];
            int n_mat = (int)(total / bx / (size_t)sh->rows);
            double runs[2][RUNS];
            for (int r = 0; r < RUNS; r++)
                for (int g = 0; g < 2; g++)
                    runs[g][r] = gemm_run_once(g ? gemm : NULL, ops, w, bx, sh->rows, n_mat, y, by, sh->tokens, s);
            for (int g = 0; g < 2; g++) qsort(runs[g], RUNS, sizeof(double), cmp_double);
            printf("%-7s %-7s %6d %6d %10.2f %10.2f %9.2f\n", ft_type_name(types[i]), sh->name, sh->rows, sh->tokens,
                   runs[0][RUNS / 2], runs[1][RUNS / 2], runs[1][RUNS / 2] / runs[0][RUNS / 2]);
            fflush(stdout);
        }
        free(w);
        free(y);
        free(f);
        free(s);
    }
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    if (argc > 2 && strcmp(argv[2], "gemm") == 0) {
        bench_gemm(filter);
        return 0;
    }
    get_traits_fn llama = load_llama();
    printf("vec_dot throughput, 1 thread (CPU time), rows of %d elements, ~%d MiB of weights, "
           "median of %d runs\n",
           ROW_ELEMS, MATRIX_BYTES >> 20, RUNS);
    printf("%-7s %9s %9s %9s %10s %9s\n", "type", "row B", "ref GB/s", "avx2 GB/s", "llama GB/s",
           "ft/llama");
    float *f = ft_malloc(ROW_ELEMS * sizeof(float));
    for (size_t c = 0; c < FT_ARRAY_LEN(g_cases); c++) {
        const bench_case *bc = &g_cases[c];
        if (filter && !strstr(ft_type_name(bc->type), filter)) continue;
        const ft_quant_ops *ops = ft_quant_ops_find(bc->type);
        const ft_quant_ops *act_ops = ft_quant_ops_find(ops->vec_dot_type);
        const size_t row_bytes = ft_row_bytes(bc->type, ROW_ELEMS);
        const int rows = (int)((MATRIX_BYTES + row_bytes - 1) / row_bytes);
        uint8_t *w = ft_malloc((size_t)rows * row_bytes);
        void *act = ft_malloc(ft_row_bytes(ops->vec_dot_type, ROW_ELEMS));

        // A few distinct random rows quantized by ft, repeated over the matrix: the kernels
        // have no data-dependent branches, so only the size matters for the timing.
        ft_rng rng = ft_rng_init(42 + c);
        for (int i = 0; i < rows; i++) {
            if (i < DISTINCT_ROWS) {
                for (int j = 0; j < ROW_ELEMS; j++) f[j] = ft_rng_normal(&rng);
                ops->from_float_ref(f, w + (size_t)i * row_bytes, ROW_ELEMS);
            } else {
                memcpy(w + (size_t)i * row_bytes, w + (size_t)(i % DISTINCT_ROWS) * row_bytes, row_bytes);
            }
        }
        for (int j = 0; j < ROW_ELEMS; j++) f[j] = ft_rng_normal(&rng);
        act_ops->from_float_ref(f, act, ROW_ELEMS);

        // the kernels to time: ref, avx2 (if this CPU runs it), llama.cpp (if loaded)
        const struct ggml_type_traits_cpu *tr = llama ? llama(bc->type) : NULL;
        const bool has_avx2 = ops->vec_dot == bc->avx2;
        const bool has_llama = tr && tr->vec_dot && tr->vec_dot_type == (int)ops->vec_dot_type;
        kernel k[3] = {{bc->ref, NULL}};
        int nk = 1;
        if (has_avx2) k[nk++] = (kernel){bc->avx2, NULL};
        if (has_llama) k[nk++] = (kernel){NULL, tr->vec_dot};
        double gbps[3];
        measure(k, nk, w, row_bytes, rows, act, gbps);
        double ref = gbps[0], avx2 = has_avx2 ? gbps[1] : 0, lc = has_llama ? gbps[nk - 1] : 0;
        printf("%-7s %9zu %9.2f ", ft_type_name(bc->type), row_bytes, ref);
        if (avx2 > 0) printf("%9.2f ", avx2);
        else printf("%9s ", "-");
        if (lc > 0) printf("%10.2f ", lc);
        else printf("%10s ", "-");
        if (lc > 0 && avx2 > 0) printf("%9.2f\n", avx2 / lc);
        else printf("%9s\n", "-");
        fflush(stdout);
        free(w);
        free(act);
    }
    free(f);
    bench_tiles(filter, llama);
    bench_matvec(filter, llama);
    bench_gemm(filter);
    return 0;
}
