// cpu_impl.h: the CPU backend's private state, shared by its op files (not a public header).
#ifndef FT_CPU_IMPL_H
#define FT_CPU_IMPL_H

#include "cpu.h"
#include "../../quant/fp16.h"
#include "../../util/pool.h"

#include <math.h>
#include <string.h>

typedef struct cpu_backend {
    ft_backend base;
    ft_pool *pool;
    ft_backend_limits lim;
    bool reserved;
    // activation buffers handed out by alloc, freed with the backend
    float **bufs;
    int n_bufs, cap_bufs;
    // scratch, sized once by reserve
    uint8_t *xq;        // quantized activations: (max_tok * max(n_used, 1)) rows
    size_t xq_row;      // bytes per quantized row (enough for any vec_dot_type)
    uint8_t *xq2;       // a second quantized copy (gate and up of different types)
    uint8_t *xq_tok;    // (max_tok) rows: MoE inputs quantized in token order before grouping
    float *attn_ws;     // per-thread attention workspace
    size_t attn_ws_per_thread;
    // MoE routing and grouping
    float *logits;      // (max_tok, n_expert)
    int32_t *sel;       // (max_tok, n_used) selected experts
    float *sel_w;       // (max_tok, n_used) their weights
    int32_t *grp_tok;   // (max_tok * n_used) token of each grouped row
    int32_t *grp_of;    // (max_tok * n_used) grouped row of (token, slot)
    int32_t *exp_off;   // (n_expert + 1) first grouped row of each expert
    int32_t *exp_gemm;  // (n_expert) grouped rows of each expert, from its first, that take the GEMM
    int32_t *active;    // (n_expert) experts with at least one token, ascending
    uint64_t *route_counts; // (lim.n_layer, n_expert) selections the router made (route_counts op);
                            // NULL without lim.n_layer or experts
    float *h_gate, *h_up; // (max_tok * n_used, max_width)
    float *h_out;       // (max_tok * n_used, max_width)
} cpu_backend;

static inline cpu_backend *cpu_of(ft_backend *be) { return (cpu_backend *)be; }

// FT_CPU_PROFILE (cpu_profile.c): an ops table that times inner's ops and prints a table at exit.
const ft_backend_ops *cpu_profile_ops(const ft_backend_ops *inner);

// Threads an op may use: 1 on the reference path.
static inline int cpu_threads(const cpu_backend *c) {
    return c->base.reference ? 1 : ft_pool_threads(c->pool);
}

// Runs fn over the pool, or on the caller alone on the reference path.
void cpu_run(cpu_backend *c, ft_pool_fn fn, void *ctx);

// Rows r0 .. r1 - 1 of an op whose rows are independent, on thread ith (its share of per-thread
// scratch).
typedef void (*cpu_rows_fn)(void *ctx, int64_t r0, int64_t r1, int ith);
// Runs fn over n_rows rows of about row_elems floats each: split among the pool's threads where
// the whole is worth a pool job (CPU_ROWS_MIN_FLOATS or more, two rows or more), else on the
// caller. Each row gets the same bits either way.
enum { CPU_ROWS_MIN_FLOATS = 16384 };
void cpu_run_rows(cpu_backend *c, int64_t n_rows, int64_t row_elems, cpu_rows_fn fn, void *ctx);

// The dot product to use for a weight type (reference or fastest).
ft_vec_dot_fn cpu_vec_dot(const cpu_backend *c, enum ft_type type);

// True where the weight type has a GEMM on this CPU (quant.h's ft_quant_ops.gemm; never on the
// reference path). Which rows take it is ft_backend.row_gemm's rule; a call should then carry
// as many weight rows as the caller has (the GEMM packs its activations once per call).
bool cpu_has_gemm(const cpu_backend *c, enum ft_type wtype);

// y[c * ldy + r] = dot(w row r, x row c) for r < nr weight rows (w_row bytes apart) and c < nc
// activation rows (x_row bytes apart, in the weight type's vec_dot_type): with gemm, the type's
// GEMM where it has one (cpu_has_gemm); else its tile kernel, or a loop over its dot product
// (always on the reference path). Each output depends only on its own weight and activation
// rows and on gemm, never on nr or nc.
void cpu_dot_tile(const cpu_backend *c, enum ft_type wtype, bool gemm, int64_t n, const uint8_t *w, size_t w_row,
                  int nr, const uint8_t *x, size_t x_row, int nc, float *y, size_t ldy);

// Quantizes one activation row of n floats to vdt as llama.cpp's CPU backend does.
void cpu_quantize_row(enum ft_type vdt, const float *x, void *y, int64_t n);
// q8_0 (with_sum false) or q8_1 in llama.cpp's x86 arithmetic, in plain C: what the AVX2 form
// that cpu_quantize_row takes must equal byte for byte (finite inputs).
void cpu_quantize_q8_scalar(const float *x, void *y, int64_t n, bool with_sum);

// Quantizes n_rows rows of n floats to type vdt (rows dst_stride bytes apart), in parallel.
void cpu_quantize_rows(cpu_backend *c, enum ft_type vdt, const float *x, int64_t n, int n_rows,
                       uint8_t *dst, size_t dst_stride);

// True where the AVX2 kernels (cpu_*_avx2.c, quant's _avx2 dots) may run on this CPU.
static inline bool cpu_has_avx2(void) { return ft_quant_simd_name()[0] == 'a'; }
static inline bool cpu_has_avx512(void) { return !strcmp(ft_quant_simd_name(), "avx512"); }

// The attention sinks' logits of p (ft_attn_params.sinks), or NULL; asserts they are f32, one
// per query head.
const float *cpu_attn_sinks(const ft_attn_params *p);

// The attention sink's step for one query row, after its keys: the sink's logit joins the
// softmax denominator S; where it exceeds the keys' maximum M, the sum of values acc (n floats)
// and S are first rescaled to it. llama.cpp's order and roundings, on every path.
static inline void cpu_attn_sink(float sink, float M, float *S, float *acc, int n) {
    if (sink > M) {
        float ms = expf(M - sink);
        for (int d = 0; d < n; d++) acc[d] *= ms;
        *S = *S * ms + 1.0f;
    } else {
        *S += expf(sink - M);
    }
}

// Asks for KV head hk's part of cache row `row` in K and V (its krow and vrow bytes) ahead of
// its use: a head's part of each row is a stride the hardware's prefetchers do not follow across
// pages, and the untiled attention kernels otherwise wait on memory. Always inlined: inlined
// into a kernel of another target (#pragma GCC target) only by choice, GCC 12 dropped the
// prefetches altogether.
static inline __attribute__((always_inline)) void cpu_attn_prefetch_row(const ft_attn_params *p, size_t row, int hk,
                                                                      size_t krow, size_t vrow) {
    const char *kr = (const char *)p->k_cache->data + row * p->k_cache->row_bytes + (size_t)hk * krow;
    const char *vr = (const char *)p->v_cache->data + row * p->v_cache->row_bytes + (size_t)hk * vrow;
    for (size_t b = 0; b < krow; b += 64) __builtin_prefetch(kr + b, 0, 3);
    for (size_t b = 0; b < vrow; b += 64) __builtin_prefetch(vr + b, 0, 3);
}

// The parts each (token, KV head) pair's group of query heads is split into on the untiled fast
// paths, so that every thread has an item: 1 where the pairs are at least the threads, else
// enough parts of 2 or more heads (an odd group's last part may hold one: laguna's groups of 3
// on 8 KV heads then keep 16 threads busy). A head's arithmetic does not depend on its part.
int cpu_attn_head_parts(const cpu_backend *c, const ft_attn_params *p);

// The fast attention (cpu_attn_avx2.c): false, having done nothing, for a case it does not
// cover (then the reference path runs). tiled: llama.cpp's f32 path for large batches.
bool cpu_attention_fast(cpu_backend *c, const ft_attn_params *p, bool tiled);
// cpu_attn_tiled_avx2.c: the tiled path (f16 cache, FT_ATTN_TILED_MIN_TOK queries or more) in
// blocks of keys (cpu_attn_tiled.h); false where it does not apply. Needs AVX2 and
// cpu_attn_tiled_ws_floats (cpu_attn_tiled.c) of the per-thread workspace.
bool cpu_attention_tiled(cpu_backend *c, const ft_attn_params *p);
size_t cpu_attn_tiled_ws_floats(int head_dim);
// Both tiled kernels' tiles: up to CPU_ATTN_TILE_ROWS query rows against blocks of
// CPU_ATTN_TILE_KEYS keys that start at multiples of it whatever the tile's first query, so a
// query's sums do not depend on the tile (or call) that holds it: a prompt chunk resumed after a
// reused prefix is tiled from another start (batch.h).
// Both run up to CPU_ATTN_TILE_GROUP tiles of one KV head together, each block of keys
// converted to f32 once for all of them (the workspace holds that many tiles' queries and
// sums, about 1 MiB a thread at head_dim 128), with the same operations per row: their outputs
// agree to the bit. 16 rather than 4: a long chunk at depth converts each block a quarter as
// often (docs/performance.md).
enum { CPU_ATTN_TILE_ROWS = 64, CPU_ATTN_TILE_KEYS = 64, CPU_ATTN_TILE_GROUP = 16 };
// The first key of the first block a tile whose first query sits at position `first` sees.
static inline int cpu_attn_tiled_first_key(const ft_attn_params *p, int first) {
    return p->window > 0 ? FT_MAX(0, first - p->window + 1) / CPU_ATTN_TILE_KEYS * CPU_ATTN_TILE_KEYS : 0;
}
// Keys k0 .. k0 + nk - 1 of KV head hk (found through the block table: off and walked as
// ft_kv_row_walk's, -1 before the first call) as f32 rows of head_dim: K into kb, V into vb.
void cpu_attn_tiled_load_block(const ft_attn_params *p, int hk, int k0, int nk, float *kb, float *vb, int64_t *off,
                               int64_t *walked);
// cpu_attn_tiled_avx512.c: the same tiles and blocks with the rows in 16-lane vectors, for
// cpu_has_avx512 (the same workspace, CPU_ATTN_TILE_GROUP tiles of it).
bool cpu_attention_tiled_avx512(cpu_backend *c, const ft_attn_params *p);
// cpu_attn_decode_avx512.c: the untiled path (below FT_ATTN_TILED_MIN_TOK queries) over f16 or
// q8_0 caches in blocks of keys, for cpu_has_avx512, groups of up to 16 query heads and head_dim a
// multiple of 32 up to 512; false where it does not apply. Needs cpu_attn_decode_ws_floats of
// the per-thread workspace.
bool cpu_attention_decode_avx512(cpu_backend *c, const ft_attn_params *p);
size_t cpu_attn_decode_ws_floats(int head_dim);

// The fast gated DeltaNet pieces (cpu_delta_avx2.c), for head_dim % 8 == 0 and at most
// CPU_DELTA_MAX_CONV taps (cpu_delta_fast_fits): the conv and SiLU of channels c0..c1 (a
// multiple of 8 apart) over the tokens into out (n_tok, C); one head's L2 norm in place; one
// token's delta rule on a head's state S (row r: column r of S) with its decay and sigmoid(beta)
// b, writing the head's output o.
enum { CPU_DELTA_MAX_CONV = 8 };
bool cpu_delta_fast_fits(int head_dim, int d_conv);
void cpu_delta_conv_avx2(const float *qkv, const float *hist, bool fresh, const float *w, int C, int K,
                         int n_tok, int c0, int c1, float *out);
void cpu_delta_l2norm_avx2(float *x, int hd, float eps);
void cpu_delta_rule_avx2(float *S, int hd, const float *q, const float *k, const float *v, float decay,
                         float b, float *o, float scale);

// The op functions defined in cpu_attn.c, cpu_delta.c and cpu_moe.c.
void cpu_rope(ft_backend *be, float *x, int n_tok, int n_head, int head_dim, int pos0,
              const ft_rope_params *p);
void cpu_hadamard(ft_backend *be, float *x, int n_rows, int row_len, int n);
void cpu_set_rows(ft_backend *be, ft_tensor *cache, const int32_t *blocks, int pos0, const float *x, int n_rows);
void cpu_copy_rows(ft_backend *be, ft_tensor *cache, int64_t dst, int64_t src, int64_t n_rows);
void cpu_rope_seqs(ft_backend *be, float *x, int n_head, int head_dim, const ft_seq_rows *rows,
                   const ft_rope_params *p);
void cpu_set_rows_seqs(ft_backend *be, ft_tensor *cache, const ft_seq_rows *rows, const float *x);
void cpu_attention(ft_backend *be, const ft_attn_params *p);
void cpu_gate_mul(ft_backend *be, float *x, const float *g, int n_tok, int n_head, int head_dim, int g_width,
                  enum ft_act a);
void cpu_split_heads(ft_backend *be, const float *x, float *a, float *b, int n_rows, int n_head, int head_dim);
void cpu_delta_net(ft_backend *be, const ft_delta_params *p);
void cpu_ffn(ft_backend *be, const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down,
             const float *x, float *y, int n_tok, enum ft_glu act);
void cpu_moe_ffn(ft_backend *be, const ft_moe_params *p, const float *x, float *y, int n_tok);
void cpu_sigmoid_gate_add(ft_backend *be, const ft_tensor *gate_inp, const float *x,
                          const float *s, float *y, int n_tok, int n_embd);

// ggml's SiLU: x / (1 + e^-x).
static inline float cpu_silu(float x) { return x / (1.0f + expf(-x)); }

// gpt-oss's clamped SwiGLU of a gate and an up value, in ggml's steps (swiglu_oai): the gate
// clamped above, up on both sides, then g / (1 + e^(alpha * -g)) * (u + 1). The comparisons are
// std::min's and std::clamp's (a NaN passes through, as there).
static inline float cpu_swiglu_oai(float gate, float up) {
    const float lim = FT_SWIGLU_OAI_LIMIT;
    float g = lim < gate ? lim : gate;
    float u = up < -lim ? -lim : (lim < up ? lim : up);
    return g / (1.0f + expf(FT_SWIGLU_OAI_ALPHA * -g)) * (u + 1.0f);
}

// GELU's tanh form of every f16 value, rounded to f16 (ggml's table): filled by
// ft_backend_cpu_init, before any op runs.
extern float cpu_gelu_f16_table[1 << 16];
void cpu_gelu_table_init(void);

// GELU's tanh form of x rounded to f16, as the table holds it.
static inline float cpu_gelu_f16(float x) {
    const float coef_a = 0.044715f, sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    float gelu = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
    return ft_fp16_to_fp32(ft_fp32_to_fp16(gelu));
}

// ggml's CPU GELU of a gate times an up value (geglu): the gate rounded to f16 and looked up in
// its table of GELU's tanh form rounded to f16; past +-10 the gate itself or 0.
static inline float cpu_geglu(float gate, float up) {
    if (gate <= -10.0f) return 0.0f;
    if (gate >= 10.0f) return gate * up;
    return cpu_gelu_f16_table[ft_fp32_to_fp16(gate)] * up;
}

// The gated activation act(gate, up) of ft_glu.
static inline float cpu_glu(enum ft_glu act, float gate, float up) {
    switch (act) {
    case FT_GLU_SILU: return cpu_silu(gate) * up;
    case FT_GLU_SWIGLU_OAI: return cpu_swiglu_oai(gate, up);
    case FT_GLU_GELU: return cpu_geglu(gate, up);
    }
    return 0.0f;
}

#endif
