// test_cpu_attn.c: the CPU attention's fast paths (cpu_attn_avx2.c, the tiled kernels, the AVX-512
// decode kernel) against its reference path (cpu_attn.c on FT_REFERENCE's backend), over f16 and
// q8_0 caches, GQA groups of 1 to 16 query heads, sliding windows, attention sinks (gpt-oss), and batches on both sides of
// llama.cpp's tiled threshold (64 queries). Outputs are filled with NaN first so an unwritten element fails.
#include "fixtures.h"
#include "../src/backend/cpu/cpu.h"
#include "../src/backend/cpu/cpu_impl.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>

enum { ATT_HD = 128, ATT_CTX = 80 };

static ft_backend *attn_backend(bool reference) {
    ft_backend *be = ft_backend_cpu_init(reference ? 1 : 3, reference);
    ft_backend_limits lim = {.max_tok = 80, .max_width = 8 * ATT_HD * 2, .max_ctx = ATT_CTX,
                             .max_head_dim = ATT_HD, .n_expert = 1, .n_expert_used = 1};
    be->ops->reserve(be, &lim);
    return be;
}

// Fills caches kc and vc (width floats a row, n_ctx rows) with normal draws, keys twice as
// spread as values, through be's set_rows; kv is scratch of width * n_ctx floats.
static void fill_kv(ft_backend *be, ft_tensor *kc, ft_tensor *vc, int width, int n_ctx, float *kv, ft_rng *r) {
    for (int i = 0; i < n_ctx * width; i++) kv[i] = ft_rng_normal(r) * 2.0f;
    be->ops->set_rows(be, kc, NULL, 0, kv, n_ctx);
    for (int i = 0; i < n_ctx * width; i++) kv[i] = ft_rng_normal(r);
    be->ops->set_rows(be, vc, NULL, 0, kv, n_ctx);
}

// 16 attention sinks' logits into sink_v, of every size against scores of order 1 (far above:
// the sum of values is rescaled to the sink; near; far below), and the tensor over them.
static ft_tensor test_sinks(float sink_v[16], ft_rng *r) {
    for (int h = 0; h < 16; h++) sink_v[h] = (float)((h % 4) * 3 - 3) + 0.25f * ft_rng_normal(r);
    return (ft_tensor){.name = "sinks", .type = FT_TYPE_F32, .ne = {16, 1, 1}, .row_bytes = 64, .mat_bytes = 64,
                       .data = sink_v};
}

// Runs ap on the fast backend into of and on the reference into orf (both filled with NaN
// first, so an unwritten element fails), and checks |fast - ref| <= tol element by element,
// reporting the first three misses under what.
static void check_vs_reference(ft_backend *fast, ft_backend *ref, ft_attn_params ap, float *of, float *orf, float tol,
                               const char *what) {
    size_t n = (size_t)ap.n_tok * ap.n_head * ap.head_dim;
    for (size_t i = 0; i < n; i++) of[i] = orf[i] = NAN;
    ap.out = of;
    fast->ops->attention(fast, &ap);
    ap.out = orf;
    ref->ops->attention(ref, &ap);
    int bad = 0;
    for (size_t i = 0; i < n && bad < 3; i++) {
        bool ok = fabsf(of[i] - orf[i]) <= tol;
        bad += !ok;
        CHECK(ok, "%s: [%zu] fast %.9g ref %.9g", what, i, of[i], orf[i]);
    }
}

// A 3-thread fast backend for the paths-agree tests: heads of hd, up to 16 query heads.
static ft_backend *paths_backend(int max_tok, int hd, int ctx) {
    ft_backend_limits lim = {.max_tok = max_tok, .max_width = 16 * hd * 2, .max_ctx = ctx, .max_head_dim = hd,
                             .n_expert = 1, .n_expert_used = 1};
    ft_backend *be = ft_backend_cpu_init(3, false);
    be->ops->reserve(be, &lim);
    return be;
}

// Both paths make the same roundings but the reference's dot products are scalar and the
// fast path's are SIMD (another summation order), so a score may differ in its last bit; with
// an f16 value accumulator (below 64 queries) that can move an f16 rounding of the running
// sum: 4e-3 there (outputs are of order 1, f16's step at 1 is 1e-3), 1e-4 elsewhere.
TEST(cpu_attention_fast_vs_reference) {
    ft_rng r = ft_rng_init(5);
    ft_backend *fast = attn_backend(false), *ref = attn_backend(true);
    const enum ft_type types[2] = {FT_TYPE_F16, FT_TYPE_Q8_0};
    // (n_head, n_head_kv): groups of 1, 4, 8, and 2, 12 and 16 (the AVX-512 decode kernel takes
    // heads 8, 4, 2 and 1 at a time)
    const int groups[6][2] = {{4, 4}, {8, 2}, {16, 2}, {4, 2}, {12, 1}, {16, 1}};
    const int batches[3][2] = {{1, ATT_CTX - 1}, {7, 30}, {70, 5}}; // (n_tok, pos0)
    size_t max_q = (size_t)80 * 16 * ATT_HD;
    float *q = ft_malloc(max_q * sizeof(float)), *of = ft_malloc(max_q * sizeof(float)),
          *orf = ft_malloc(max_q * sizeof(float));
    float *kv = ft_malloc((size_t)ATT_CTX * 4 * ATT_HD * sizeof(float));
    float sink_v[16];
    ft_tensor sinks = test_sinks(sink_v, &r);
    for (int ti = 0; ti < 2; ti++)
        for (int gi = 0; gi < 6; gi++)
            for (int bi = 0; bi < 3; bi++)
                for (int wi = 0; wi < 3; wi++) {
                    // no window and no sinks, a window, a window and sinks
                    int window = wi ? 9 : 0;
                    bool with_sinks = wi == 2;
                    int nh = groups[gi][0], nkv = groups[gi][1], nt = batches[bi][0], pos0 = batches[bi][1];
                    if (pos0 + nt > ATT_CTX) continue;
                    ft_tensor kc = fixture_kv_cache(types[ti], nkv * ATT_HD, ATT_CTX),
                              vc = fixture_kv_cache(types[ti], nkv * ATT_HD, ATT_CTX);
                    fill_kv(fast, &kc, &vc, nkv * ATT_HD, ATT_CTX, kv, &r);
                    size_t nq = (size_t)nt * nh * ATT_HD;
                    for (size_t i = 0; i < nq; i++) q[i] = ft_rng_normal(&r);
                    ft_attn_params ap = {.q = q, .k_cache = &kc, .v_cache = &vc, .n_tok = nt, .pos0 = pos0,
                                         .n_head = nh, .n_head_kv = nkv, .head_dim = ATT_HD, .window = window,
                                         .scale = 0.0884f, .sinks = with_sinks ? &sinks : NULL};
                    bool v16 = types[ti] == FT_TYPE_F16 && nt < 64;
                    float tol = v16 ? 4e-3f : 1e-4f;
                    char what[96];
                    snprintf(what, sizeof(what), "%s heads %d/%d n_tok %d window %d sinks %d", ft_type_name(types[ti]),
                             nh, nkv, nt, window, with_sinks);
                    check_vs_reference(fast, ref, ap, of, orf, tol, what);
                    free(kc.data);
                    free(vc.data);
                }
    free(q);
    free(of);
    free(orf);
    free(kv);
    fast->ops->free(fast);
    ref->ops->free(ref);
}

// A long prefill chunk deep in the cache (the tiled kernels' whole groups of tiles: up to
// CPU_ATTN_TILE_GROUP tiles of a KV head share each block of keys) against the reference, with
// and without a window, on 1 and 3 threads (items of the most tiles, and of fewer).
TEST(cpu_attention_tiled_long_chunk_vs_reference) {
    enum { HD = 128, NT = 512, POS0 = 700, CTX = NT + POS0, NH = 8, NKV = 2 };
    ft_rng r = ft_rng_init(53);
    ft_backend_limits lim = {.max_tok = NT, .max_width = NH * HD * 2, .max_ctx = CTX, .max_head_dim = HD,
                             .n_expert = 1, .n_expert_used = 1};
    ft_backend *ref = ft_backend_cpu_init(1, true);
    ref->ops->reserve(ref, &lim);
    size_t nq = (size_t)NT * NH * HD;
    float *q = ft_malloc(nq * sizeof(float)), *of = ft_malloc(nq * sizeof(float)), *orf = ft_malloc(nq * sizeof(float));
    float *kv = ft_malloc((size_t)CTX * NKV * HD * sizeof(float));
    ft_tensor kc = fixture_kv_cache(FT_TYPE_F16, NKV * HD, CTX), vc = fixture_kv_cache(FT_TYPE_F16, NKV * HD, CTX);
    fill_kv(ref, &kc, &vc, NKV * HD, CTX, kv, &r);
    for (size_t i = 0; i < nq; i++) q[i] = ft_rng_normal(&r);
    for (int threads = 1; threads <= 3; threads += 2)
        for (int window = 0; window <= 300; window += 300) {
            ft_backend *fast = ft_backend_cpu_init(threads, false);
            fast->ops->reserve(fast, &lim);
            ft_attn_params ap = {.q = q, .k_cache = &kc, .v_cache = &vc, .n_tok = NT, .pos0 = POS0, .n_head = NH,
                                 .n_head_kv = NKV, .head_dim = HD, .window = window, .scale = 0.0884f};
            char what[64];
            snprintf(what, sizeof(what), "threads %d window %d", threads, window);
            check_vs_reference(fast, ref, ap, of, orf, 1e-4f, what);
            fast->ops->free(fast);
        }
    free(kc.data);
    free(vc.data);
    free(q);
    free(of);
    free(orf);
    free(kv);
    ref->ops->free(ref);
}

// A query's output does not depend on which call (or which tile of it) holds it: 150 queries
// over an f16 cache in one tiled call give the bits of the same queries in two calls split at 70
// (both tiled by their own length) or at 110 (the last 40 tiled because their chunk, n_chunk, is
// 150), as a prompt chunk resumed after a reused prefix is split (batch.h); with and without a
// sliding window and attention sinks, for GQA groups of 1, 3 and 4 (tiles of 64, 21 and 16
// queries), on the fast and the reference paths.
TEST(cpu_attention_rows_independent_of_the_call) {
    enum { HD = 64, CTX = 200, NT = 150, POS0 = 30 };
    static const int splits[2] = {70, 110};
    ft_rng r = ft_rng_init(29);
    ft_backend_limits lim = {.max_tok = NT, .max_width = 12 * HD * 2, .max_ctx = CTX, .max_head_dim = HD,
                             .n_expert = 1, .n_expert_used = 1};
    const int groups[3][2] = {{4, 4}, {12, 4}, {8, 2}}; // (n_head, n_head_kv)
    size_t max_q = (size_t)NT * 12 * HD;
    float *q = ft_malloc(max_q * sizeof(float)), *one = ft_malloc(max_q * sizeof(float)),
          *two = ft_malloc(max_q * sizeof(float)), *kv = ft_malloc((size_t)CTX * 4 * HD * sizeof(float));
    float sink_v[12];
    for (int h = 0; h < 12; h++) sink_v[h] = (float)((h % 4) * 3 - 3) + 0.25f * ft_rng_normal(&r);
    ft_tensor sinks = {.name = "sinks", .type = FT_TYPE_F32, .ne = {12, 1, 1}, .row_bytes = 48, .mat_bytes = 48,
                       .data = sink_v};
    for (int reference = 0; reference < 2; reference++) {
        ft_backend *be = ft_backend_cpu_init(3, reference);
        be->ops->reserve(be, &lim);
        for (int gi = 0; gi < 3; gi++)
            for (int window = 0; window <= 45; window += 45)
                for (int with_sinks = 0; with_sinks < 2; with_sinks++) {
                    int nh = groups[gi][0], nkv = groups[gi][1];
                    ft_tensor kc = fixture_kv_cache(FT_TYPE_F16, nkv * HD, CTX),
                              vc = fixture_kv_cache(FT_TYPE_F16, nkv * HD, CTX);
                    fill_kv(be, &kc, &vc, nkv * HD, CTX, kv, &r);
                    size_t row = (size_t)nh * HD;
                    for (size_t i = 0; i < NT * row; i++) q[i] = ft_rng_normal(&r), one[i] = NAN;
                    ft_attn_params whole = {.q = q, .out = one, .k_cache = &kc, .v_cache = &vc, .n_tok = NT,
                                            .pos0 = POS0, .n_head = nh, .n_head_kv = nkv, .head_dim = HD,
                                            .window = window, .scale = 0.125f,
                                            .sinks = with_sinks ? &sinks : NULL};
                    be->ops->attention(be, &whole);
                    for (int si = 0; si < 2; si++) {
                        int split = splits[si];
                        for (size_t i = 0; i < NT * row; i++) two[i] = NAN;
                        ft_attn_params ap = whole;
                        ap.out = two;
                        ap.n_tok = split;
                        be->ops->attention(be, &ap);
                        ap.q = q + split * row;
                        ap.out = two + split * row;
                        ap.n_tok = NT - split;
                        ap.n_chunk = NT;
                        ap.pos0 = POS0 + split;
                        be->ops->attention(be, &ap);
                        int t = 0;
                        while (t < NT && !memcmp(one + t * row, two + t * row, row * sizeof(float))) t++;
                        CHECK(t == NT, "%s heads %d/%d window %d sinks %d: query %d differs split at %d",
                              reference ? "reference" : "fast", nh, nkv, window, with_sinks, t, split);
                    }
                    free(kc.data);
                    free(vc.data);
                }
        be->ops->free(be);
    }
    free(q);
    free(one);
    free(two);
    free(kv);
}

// Below the tiled threshold, a query's output does not depend on the threads: with fewer (token,
// KV head) pairs than threads the AVX-512 kernel splits a group's heads among them, and every
// head's arithmetic stays its own. One thread and five give the same bits, decode and a few
// tokens, f16 and q8_0 caches, groups of 3 (parts of 2 heads and 1), 6, 8 and 16.
TEST(cpu_attention_decode_same_bits_any_threads) {
    enum { HD = 128, CTX = 300 };
    ft_rng r = ft_rng_init(41);
    ft_backend_limits lim = {.max_tok = 4, .max_width = 16 * HD * 2, .max_ctx = CTX, .max_head_dim = HD,
                             .n_expert = 1, .n_expert_used = 1};
    ft_backend *be1 = ft_backend_cpu_init(1, false), *be5 = ft_backend_cpu_init(5, false);
    be1->ops->reserve(be1, &lim);
    be5->ops->reserve(be5, &lim);
    const int groups[4][2] = {{6, 2}, {12, 2}, {32, 4}, {16, 1}}; // (n_head, n_head_kv)
    const enum ft_type types[2] = {FT_TYPE_F16, FT_TYPE_Q8_0};
    size_t max_q = (size_t)4 * 32 * HD;
    float *q = ft_malloc(max_q * sizeof(float)), *a = ft_malloc(max_q * sizeof(float)),
          *b = ft_malloc(max_q * sizeof(float)), *kv = ft_malloc((size_t)CTX * 4 * HD * sizeof(float));
    for (int ti = 0; ti < 2; ti++)
        for (int gi = 0; gi < 4; gi++)
            for (int nt = 1; nt <= 3; nt += 2) {
                int nh = groups[gi][0], nkv = groups[gi][1];
                ft_tensor kc = fixture_kv_cache(types[ti], nkv * HD, CTX), vc = fixture_kv_cache(types[ti], nkv * HD, CTX);
                fill_kv(be1, &kc, &vc, nkv * HD, CTX, kv, &r);
                size_t nq = (size_t)nt * nh * HD;
                for (size_t i = 0; i < nq; i++) q[i] = ft_rng_normal(&r), a[i] = b[i] = NAN;
                ft_attn_params ap = {.q = q, .out = a, .k_cache = &kc, .v_cache = &vc, .n_tok = nt, .pos0 = CTX - nt,
                                     .n_head = nh, .n_head_kv = nkv, .head_dim = HD, .scale = 0.0884f};
                be1->ops->attention(be1, &ap);
                ap.out = b;
                be5->ops->attention(be5, &ap);
                CHECK(!memcmp(a, b, nq * sizeof(float)), "%s heads %d/%d n_tok %d: 1 and 5 threads differ",
                      ft_type_name(types[ti]), nh, nkv, nt);
                size_t unwritten = 0;
                for (size_t i = 0; i < nq; i++) unwritten += isnan(a[i]);
                CHECK(unwritten == 0, "%zu outputs unwritten", unwritten);
                free(kc.data);
                free(vc.data);
            }
    free(q);
    free(a);
    free(b);
    free(kv);
    be1->ops->free(be1);
    be5->ops->free(be5);
}

// The two tiled kernels (AVX2: 8 rows a vector, AVX-512: 16) make the same operations per row in
// the same order, so they agree to the bit: groups of 1 to 16 query heads, windows, sinks,
// chunks of one tile and of several tiles per item, after cached keys. Each is called
// directly, so both are tested whichever one the CPU dispatches to.
TEST(cpu_attention_tiled_paths_agree) {
    if (!cpu_has_avx512()) return;
    enum { HD = 64, CTX = 420 };
    ft_rng r = ft_rng_init(47);
    ft_backend *be = paths_backend(300, HD, CTX);
    cpu_backend *c = cpu_of(be);
    const int groups[4][2] = {{4, 4}, {8, 2}, {12, 1}, {16, 1}}; // (n_head, n_head_kv)
    const int batches[3][2] = {{64, 0}, {150, 37}, {300, CTX - 300}}; // (n_tok, pos0)
    float sink_v[16];
    ft_tensor sinks = test_sinks(sink_v, &r);
    size_t max_q = (size_t)300 * 16 * HD;
    float *q = ft_malloc(max_q * sizeof(float)), *a = ft_malloc(max_q * sizeof(float)),
          *b = ft_malloc(max_q * sizeof(float)), *kv = ft_malloc((size_t)CTX * 4 * HD * sizeof(float));
    for (int gi = 0; gi < 4; gi++)
        for (int bi = 0; bi < 3; bi++)
            for (int wi = 0; wi < 3; wi++) {
                int nh = groups[gi][0], nkv = groups[gi][1], nt = batches[bi][0];
                ft_tensor kc = fixture_kv_cache(FT_TYPE_F16, nkv * HD, CTX), vc = fixture_kv_cache(FT_TYPE_F16, nkv * HD, CTX);
                fill_kv(be, &kc, &vc, nkv * HD, CTX, kv, &r);
                size_t nq = (size_t)nt * nh * HD;
                for (size_t i = 0; i < nq; i++) q[i] = ft_rng_normal(&r), a[i] = b[i] = NAN;
                ft_attn_params ap = {.q = q, .out = a, .k_cache = &kc, .v_cache = &vc, .n_tok = nt, .pos0 = batches[bi][1],
                                     .n_head = nh, .n_head_kv = nkv, .head_dim = HD, .window = wi ? 100 : 0,
                                     .scale = 0.125f, .sinks = wi == 2 ? &sinks : NULL};
                REQUIRE(cpu_attention_tiled(c, &ap), "the AVX2 tiled kernel declined heads %d/%d", nh, nkv);
                ap.out = b;
                REQUIRE(cpu_attention_tiled_avx512(c, &ap), "the AVX-512 tiled kernel declined heads %d/%d", nh, nkv);
                size_t unwritten = 0, differ = 0;
                for (size_t i = 0; i < nq; i++) unwritten += isnan(a[i]), differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
                CHECK(unwritten == 0 && differ == 0, "heads %d/%d n_tok %d window %d sinks %d: %zu unwritten, %zu differ",
                      nh, nkv, nt, ap.window, wi == 2, unwritten, differ);
                free(kc.data);
                free(vc.data);
            }
    free(q);
    free(a);
    free(b);
    free(kv);
    be->ops->free(be);
}

// Below the tiled threshold the AVX2 path and the AVX-512 decode kernel make the same roundings
// in the same order (the key type's dot product, f16 value sums rounded after every key, q8_0
// ones in f32), so they agree to the bit: f16 and q8_0 caches, decode and a few tokens, groups
// of 1 to 16, windows and sinks. Each is
// called directly, so both are tested whichever one the CPU dispatches to.
TEST(cpu_attention_decode_paths_agree) {
    if (!cpu_has_avx2()) return;
    enum { HD = 64, CTX = 150 };
    ft_rng r = ft_rng_init(43);
    ft_backend *be = paths_backend(8, HD, CTX);
    cpu_backend *c = cpu_of(be);
    const int groups[4][2] = {{4, 4}, {8, 2}, {12, 1}, {16, 1}}; // (n_head, n_head_kv)
    float sink_v[16];
    ft_tensor sinks = test_sinks(sink_v, &r);
    size_t max_q = (size_t)8 * 16 * HD;
    float *q = ft_malloc(max_q * sizeof(float)), *a = ft_malloc(max_q * sizeof(float)),
          *b = ft_malloc(max_q * sizeof(float)), *kv = ft_malloc((size_t)CTX * 4 * HD * sizeof(float));
    const enum ft_type types[2] = {FT_TYPE_F16, FT_TYPE_Q8_0};
    for (int ti = 0; ti < 2; ti++)
    for (int gi = 0; gi < 4; gi++)
        for (int nt = 1; nt <= 8; nt += 7)
            for (int wi = 0; wi < 3; wi++) {
                int nh = groups[gi][0], nkv = groups[gi][1];
                ft_tensor kc = fixture_kv_cache(types[ti], nkv * HD, CTX), vc = fixture_kv_cache(types[ti], nkv * HD, CTX);
                fill_kv(be, &kc, &vc, nkv * HD, CTX, kv, &r);
                size_t nq = (size_t)nt * nh * HD;
                for (size_t i = 0; i < nq; i++) q[i] = ft_rng_normal(&r), a[i] = b[i] = NAN;
                ft_attn_params ap = {.q = q, .out = a, .k_cache = &kc, .v_cache = &vc, .n_tok = nt, .pos0 = CTX - nt - 3,
                                     .n_head = nh, .n_head_kv = nkv, .head_dim = HD, .window = wi ? 40 : 0,
                                     .scale = 0.125f, .sinks = wi == 2 ? &sinks : NULL};
                REQUIRE(cpu_attention_fast(c, &ap, false), "the AVX2 path declined heads %d/%d", nh, nkv);
                size_t unwritten = 0;
                for (size_t i = 0; i < nq; i++) unwritten += isnan(a[i]);
                CHECK(unwritten == 0, "AVX2: %zu outputs unwritten", unwritten);
                if (cpu_has_avx512()) {
                    ap.out = b;
                    REQUIRE(cpu_attention_decode_avx512(c, &ap), "the AVX-512 kernel declined heads %d/%d", nh, nkv);
                    CHECK(!memcmp(a, b, nq * sizeof(float)), "%s heads %d/%d n_tok %d window %d sinks %d: AVX2 and AVX-512 differ",
                          ft_type_name(types[ti]), nh, nkv, nt, ap.window, wi == 2);
                }
                free(kc.data);
                free(vc.data);
            }
    free(q);
    free(a);
    free(b);
    free(kv);
    be->ops->free(be);
}
