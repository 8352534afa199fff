// test_kv.c: the paged KV cache: the store's types, sizes and rotations; rows written and read
// through block tables (set_rows, attention through a shuffled table against the unpaged
// cache); the pool's block accounting; the prefix cache's matching, sharing and eviction.
#include "test.h"
#include "../src/backend/cpu/cpu.h"
#include "../src/kv/prefix_cache.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>

static ft_backend *kv_backend(int max_ctx) {
    ft_backend *be = ft_backend_cpu_init(2, false);
    ft_backend_limits lim = {.max_tok = 80, .max_width = 4 * 64 * 2, .max_ctx = max_ctx, .max_head_dim = 64,
                             .n_expert = 1, .n_expert_used = 1};
    be->ops->reserve(be, &lim);
    return be;
}

TEST(kv_types_and_rotation) {
    int64_t widths[2] = {128, 128};
    ft_err err = {{0}};
    ft_backend *be = ft_backend_cpu_init(1, false);
    ft_kv_params p = {2, 100, FT_TYPE_F16, widths, 64, NULL, NULL, 0, NULL};
    ft_kv_store *st = ft_kv_store_init(&p, be, &err);
    REQUIRE(st, "%s", err.msg);
    CHECK(ft_kv_store_n_blocks(st) == 2, "100 positions: 2 blocks of %d", FT_KV_BLOCK);
    CHECK(ft_kv_store_bytes(st) == 2 * 2 * 2 * FT_KV_BLOCK * 128 * 2);
    CHECK(ft_kv_block_bytes(&p) == 2 * 2 * FT_KV_BLOCK * 128 * 2);
    ft_kv_cache *kv = ft_kv_init(st, &p, be, &err);
    REQUIRE(kv, "%s", err.msg);
    CHECK(ft_kv_rot_k(kv, 0) == 0 && ft_kv_rot_v(kv, 0) == 0, "f16 is not rotated");
    CHECK(ft_kv_k(kv, 1)->ne[1] == 2 * FT_KV_BLOCK && ft_kv_v(kv, 0)->type == FT_TYPE_F16);
    CHECK(ft_kv_n_blocks(kv) == 0 && ft_kv_n_ctx(kv) == 100);
    ft_kv_free(kv);
    ft_kv_store_free(st);
    p.type = FT_TYPE_Q8_0;
    p.head_dim = 128;
    p.n_blocks = 5;
    st = ft_kv_store_init(&p, be, &err);
    REQUIRE(st, "%s", err.msg);
    CHECK(ft_kv_store_n_blocks(st) == 5);
    kv = ft_kv_init(st, &p, be, &err);
    REQUIRE(kv, "%s", err.msg);
    CHECK(ft_kv_rot_k(kv, 0) == 128 && ft_kv_rot_v(kv, 0) == 64, "rotations %d %d", ft_kv_rot_k(kv, 0), ft_kv_rot_v(kv, 0));
    ft_kv_free(kv);
    ft_kv_store_free(st);
    // head sizes per layer (gemma4's sliding and full layers): K's chunk follows each layer's
    int64_t dims[2] = {64, 128};
    p.head_dims = dims;
    st = ft_kv_store_init(&p, be, &err);
    REQUIRE(st, "%s", err.msg);
    kv = ft_kv_init(st, &p, be, &err);
    REQUIRE(kv, "%s", err.msg);
    CHECK(ft_kv_rot_k(kv, 0) == 64 && ft_kv_rot_k(kv, 1) == 128 && ft_kv_rot_v(kv, 1) == 64, "rotations %d %d",
          ft_kv_rot_k(kv, 0), ft_kv_rot_k(kv, 1));
    ft_kv_free(kv);
    ft_kv_store_free(st);
    // the first layer's size decides (llama.cpp's rule): 32 then 64 is not rotated, 64 then 32 refused
    dims[0] = 32;
    dims[1] = 64;
    st = ft_kv_store_init(&p, be, &err);
    REQUIRE(st, "%s", err.msg);
    kv = ft_kv_init(st, &p, be, &err);
    REQUIRE(kv, "%s", err.msg);
    CHECK(ft_kv_rot_k(kv, 0) == 0 && ft_kv_rot_k(kv, 1) == 0 && ft_kv_rot_v(kv, 1) == 0);
    ft_kv_free(kv);
    ft_kv_store_free(st);
    dims[0] = 64;
    dims[1] = 32;
    CHECK(!ft_kv_store_init(&p, be, &err), "head sizes 64 and 32 in a q8_0 cache");
    CHECK(strstr(err.msg, "layer 1's head size 32"), "message: %s", err.msg);
    p.head_dims = NULL;
    widths[1] = 100; // not a multiple of q8_0's 32
    CHECK(!ft_kv_store_init(&p, be, &err));
    CHECK(strstr(err.msg, "layer 1"), "message: %s", err.msg);
    p.type = FT_TYPE_Q4_K;
    CHECK(!ft_kv_store_init(&p, be, &err));
    enum ft_type t;
    CHECK(ft_kv_type_from_name("q8_0", &t) && t == FT_TYPE_Q8_0);
    CHECK(!ft_kv_type_from_name("q4_0", &t));
    ft_kv_free(NULL);
    ft_kv_store_free(NULL);
    be->ops->free(be);
}

// set_rows through a table lands each position in its block's row.
TEST(kv_rows_round_trip_through_blocks) {
    int64_t widths[1] = {64};
    ft_err err = {{0}};
    ft_backend *be = kv_backend(3 * FT_KV_BLOCK);
    for (int q = 0; q < 2; q++) {
        ft_kv_params p = {1, 3 * FT_KV_BLOCK, q ? FT_TYPE_Q8_0 : FT_TYPE_F16, widths, 64, NULL, NULL, 4, NULL};
        ft_kv_store *st = ft_kv_store_init(&p, be, &err);
        REQUIRE(st, "%s", err.msg);
        ft_kv_cache *kv = ft_kv_init(st, &p, be, &err);
        REQUIRE(kv, "%s", err.msg);
        ft_kv_push_block(kv, 3);
        ft_kv_push_block(kv, 1);
        ft_kv_sync(kv);
        CHECK(ft_kv_blocks(kv)[0] == 3 && ft_kv_blocks(kv)[1] == 1, "the backend's copy of the table");
        float x[3 * 64], y[64];
        for (int i = 0; i < 3 * 64; i++) x[i] = sinf((float)i) * 3;
        int pos0 = FT_KV_BLOCK - 2; // rows across the two blocks
        be->ops->set_rows(be, ft_kv_k(kv, 0), ft_kv_blocks(kv), pos0, x, 3);
        const ft_tensor *k = ft_kv_k(kv, 0);
        const int64_t rows[3] = {3 * FT_KV_BLOCK + FT_KV_BLOCK - 2, 3 * FT_KV_BLOCK + FT_KV_BLOCK - 1, FT_KV_BLOCK};
        for (int r = 0; r < 3; r++) {
            CHECK(ft_kv_row(ft_kv_blocks(kv), pos0 + r) == rows[r]);
            ft_quant_ops_find(k->type)->to_float((uint8_t *)k->data + rows[r] * k->row_bytes, y, 64);
            for (int i = 0; i < 64; i++)
                CHECK(fabsf(y[i] - x[r * 64 + i]) < (q ? 3.0f / 127 : 3e-3f), "%s row %d [%d]: %g vs %g",
                      ft_type_name(k->type), r, i, y[i], x[r * 64 + i]);
        }
        ft_kv_free(kv);
        ft_kv_store_free(st);
    }
    be->ops->free(be);
}

// Attention over a sequence whose blocks lie shuffled in the store gives the bits of the same
// keys in an unpaged cache (both paths: the fast one and the reference).
TEST(kv_attention_through_shuffled_blocks) {
    enum { HD = 64, NKV = 2, NH = 4, CTX = 3 * FT_KV_BLOCK, W = NKV * HD };
    int64_t widths[1] = {W};
    ft_err err = {{0}};
    ft_rng r = ft_rng_init(11);
    float *kx = ft_malloc((size_t)CTX * W * sizeof(float)), *vx = ft_malloc((size_t)CTX * W * sizeof(float));
    float *q = ft_malloc((size_t)70 * NH * HD * sizeof(float));
    float *o_paged = ft_malloc((size_t)70 * NH * HD * sizeof(float)), *o_flat = ft_malloc((size_t)70 * NH * HD * sizeof(float));
    for (size_t i = 0; i < (size_t)CTX * W; i++) kx[i] = ft_rng_normal(&r), vx[i] = ft_rng_normal(&r);
    for (size_t i = 0; i < (size_t)70 * NH * HD; i++) q[i] = ft_rng_normal(&r);
    for (int reference = 0; reference < 2; reference++)
        for (int ti = 0; ti < 2; ti++) {
            ft_backend *be = ft_backend_cpu_init(2, reference);
            ft_backend_limits lim = {.max_tok = 80, .max_width = NH * HD * 2, .max_ctx = CTX, .max_head_dim = HD,
                                     .n_expert = 1, .n_expert_used = 1};
            be->ops->reserve(be, &lim);
            enum ft_type type = ti ? FT_TYPE_Q8_0 : FT_TYPE_F16;
            ft_kv_params p = {1, CTX, type, widths, HD, NULL, NULL, 5, NULL};
            ft_kv_store *st = ft_kv_store_init(&p, be, &err);
            ft_kv_cache *kv = ft_kv_init(st, &p, be, &err);
            REQUIRE(st && kv, "%s", err.msg);
            const int32_t order[3] = {4, 0, 2};
            for (int b = 0; b < 3; b++) ft_kv_push_block(kv, order[b]);
            ft_kv_sync(kv);
            ft_tensor flat_k = *ft_kv_k(kv, 0), flat_v = *ft_kv_v(kv, 0);
            flat_k.data = ft_calloc(1, flat_k.row_bytes * CTX);
            flat_v.data = ft_calloc(1, flat_v.row_bytes * CTX);
            be->ops->set_rows(be, ft_kv_k(kv, 0), ft_kv_blocks(kv), 0, kx, CTX);
            be->ops->set_rows(be, ft_kv_v(kv, 0), ft_kv_blocks(kv), 0, vx, CTX);
            be->ops->set_rows(be, &flat_k, NULL, 0, kx, CTX);
            be->ops->set_rows(be, &flat_v, NULL, 0, vx, CTX);
            const int shapes[3][3] = {{1, CTX - 1, 0}, {70, CTX - 70, 0}, {5, 100, 40}}; // n_tok, pos0, window
            for (int si = 0; si < 3; si++) {
                ft_attn_params ap = {.q = q, .out = o_paged, .k_cache = ft_kv_k(kv, 0), .v_cache = ft_kv_v(kv, 0),
                                     .blocks = ft_kv_blocks(kv), .n_tok = shapes[si][0], .pos0 = shapes[si][1],
                                     .n_head = NH, .n_head_kv = NKV, .head_dim = HD, .window = shapes[si][2],
                                     .scale = 0.125f};
                be->ops->attention(be, &ap);
                ap.out = o_flat;
                ap.k_cache = &flat_k;
                ap.v_cache = &flat_v;
                ap.blocks = NULL;
                be->ops->attention(be, &ap);
                CHECK(!memcmp(o_paged, o_flat, (size_t)shapes[si][0] * NH * HD * sizeof(float)),
                      "%s %s n_tok %d: paged and flat differ", ft_type_name(type), reference ? "reference" : "fast",
                      shapes[si][0]);
            }
            free(flat_k.data);
            free(flat_v.data);
            ft_kv_free(kv);
            ft_kv_store_free(st);
            be->ops->free(be);
        }
    free(kx);
    free(vx);
    free(q);
    free(o_paged);
    free(o_flat);
}

// ft_kv_copy_block_rows copies the first n rows of one block into a sequence's block, in every
// attention layer's K and V (a recurrent layer between them has none), f16 and q8_0: those rows
// hold the source's bytes, the source and the destination's other rows keep theirs.
TEST(kv_copy_block_rows) {
    enum { W = 128 };
    int64_t widths[3] = {W, 0, W};
    ft_err err = {{0}};
    ft_rng r = ft_rng_init(13);
    float *x = ft_malloc((size_t)FT_KV_BLOCK * W * sizeof(float));
    ft_backend *be = kv_backend(2 * FT_KV_BLOCK);
    static const int ns[3] = {1, 37, FT_KV_BLOCK - 1};
    for (int q = 0; q < 2; q++)
        for (int ni = 0; ni < 3; ni++) {
            int n = ns[ni];
            ft_kv_params p = {3, 2 * FT_KV_BLOCK, q ? FT_TYPE_Q8_0 : FT_TYPE_F16, widths, 64, NULL, NULL, 4, NULL};
            ft_kv_store *st = ft_kv_store_init(&p, be, &err);
            ft_kv_cache *from = ft_kv_init(st, &p, be, &err), *to = ft_kv_init(st, &p, be, &err);
            REQUIRE(st && from && to, "%s", err.msg);
            ft_kv_push_block(from, 1);
            ft_kv_push_block(to, 0);
            ft_kv_push_block(to, 3);
            ft_kv_sync(from);
            ft_kv_sync(to);
            for (int l = 0; l < 3; l += 2) // distinct rows everywhere: block 1 (from), blocks 0 and 3 (to)
                for (int t = 0; t < 2; t++) {
                    ft_tensor *c = t ? ft_kv_v(from, l) : ft_kv_k(from, l);
                    for (int pos0 = 0; pos0 < 2 * FT_KV_BLOCK; pos0 += FT_KV_BLOCK) {
                        for (int i = 0; i < FT_KV_BLOCK * W; i++) x[i] = ft_rng_normal(&r);
                        be->ops->set_rows(be, c, ft_kv_blocks(to), pos0, x, FT_KV_BLOCK);
                    }
                    for (int i = 0; i < FT_KV_BLOCK * W; i++) x[i] = ft_rng_normal(&r);
                    be->ops->set_rows(be, c, ft_kv_blocks(from), 0, x, FT_KV_BLOCK);
                }
            size_t bytes = ft_kv_store_bytes(st);
            uint8_t *before = ft_malloc(bytes);
            size_t off = 0;
            for (int l = 0; l < 3; l += 2)
                for (int t = 0; t < 2; t++) {
                    ft_tensor *c = t ? ft_kv_v(to, l) : ft_kv_k(to, l);
                    memcpy(before + off, c->data, c->mat_bytes);
                    off += c->mat_bytes;
                }
            ft_kv_copy_block_rows(to, 1, 1, n);
            off = 0;
            for (int l = 0; l < 3; l += 2)
                for (int t = 0; t < 2; t++) {
                    const ft_tensor *c = t ? ft_kv_v(to, l) : ft_kv_k(to, l);
                    const uint8_t *now = c->data, *was = before + off;
                    size_t rb = c->row_bytes, blk = FT_KV_BLOCK * rb;
                    CHECK(!memcmp(now + 3 * blk, was + 1 * blk, (size_t)n * rb), "%s layer %d %c: the %d rows copied",
                          ft_type_name(c->type), l, "kv"[t], n);
                    CHECK(!memcmp(now + 3 * blk + n * rb, was + 3 * blk + n * rb, (FT_KV_BLOCK - n) * rb),
                          "%s layer %d %c: rows past %d kept", ft_type_name(c->type), l, "kv"[t], n);
                    CHECK(!memcmp(now, was, 3 * blk), "%s layer %d %c: blocks 0-2 unchanged", ft_type_name(c->type), l,
                          "kv"[t]);
                    off += c->mat_bytes;
                }
            CHECK(!ft_kv_k(to, 1)->data && !ft_kv_v(to, 1)->data, "the recurrent layer has no rows");
            free(before);
            ft_kv_free(from);
            ft_kv_free(to);
            ft_kv_store_free(st);
        }
    free(x);
    be->ops->free(be);
}

static ft_kv_pool *small_pool(ft_backend *be, int n_seq, int n_blocks, int n_ctx) {
    static int64_t widths[1] = {64};
    ft_kv_params p = {1, n_ctx, FT_TYPE_F16, widths, 64, NULL, NULL, n_blocks, NULL};
    ft_err err = {{0}};
    ft_kv_pool *pool = ft_kv_pool_init(&p, n_seq, be, &err);
    if (!pool) test_fail(__FILE__, __LINE__, "pool: %s", err.msg);
    return pool;
}

static bool pool_ok(ft_kv_pool *pool, ft_prefix_cache *pc) {
    int32_t *held = ft_calloc((size_t)ft_kv_pool_n_blocks(pool), sizeof(int32_t));
    if (pc) ft_prefix_cache_count_refs(pc, held);
    ft_err err = {{0}};
    bool ok = ft_kv_pool_check(pool, held, &err);
    if (!ok) test_fail(__FILE__, __LINE__, "accounting: %s", err.msg);
    free(held);
    return ok;
}

// Sequences take the lowest free index, grow block by block from one shared budget, and give
// their blocks back when released; a grow that does not fit takes nothing.
TEST(kv_pool_blocks_and_sequences) {
    ft_backend *be = ft_backend_cpu_init(1, false);
    ft_kv_pool *pool = small_pool(be, 3, 4, 3 * FT_KV_BLOCK);
    REQUIRE(pool);
    CHECK(ft_kv_pool_n_seq(pool) == 3 && ft_kv_pool_n_blocks(pool) == 4 && ft_kv_pool_n_free(pool) == 4);
    // 4 blocks of K and V rows of 64 f16, and 3 tables of 3 entries
    CHECK(ft_kv_pool_bytes(pool) == 4 * 2 * FT_KV_BLOCK * 64 * 2 + 3 * 3 * sizeof(int32_t));
    CHECK(ft_kv_pool_acquire(pool) == 0 && ft_kv_pool_acquire(pool) == 1 && ft_kv_pool_acquire(pool) == 2);
    CHECK(ft_kv_pool_acquire(pool) == -1 && ft_kv_pool_n_used(pool) == 3);
    CHECK(ft_kv_pool_grow(pool, 0, 1) && ft_kv_pool_grow(pool, 0, FT_KV_BLOCK), "one block");
    CHECK(ft_kv_pool_grow(pool, 1, 2 * FT_KV_BLOCK + 1), "three blocks");
    CHECK(ft_kv_pool_n_free(pool) == 0 && ft_kv_n_blocks(ft_kv_pool_cache(pool, 1)) == 3);
    CHECK(!ft_kv_pool_grow(pool, 2, 1), "the budget is spent");
    CHECK(ft_kv_n_blocks(ft_kv_pool_cache(pool, 2)) == 0);
    pool_ok(pool, NULL);
    ft_kv_pool_share(pool, 2, ft_kv_block_ids(ft_kv_pool_cache(pool, 0))[0]);
    CHECK(ft_kv_pool_refs(pool, ft_kv_block_ids(ft_kv_pool_cache(pool, 0))[0]) == 2);
    pool_ok(pool, NULL);
    ft_kv_pool_release(pool, 0);
    CHECK(ft_kv_pool_n_free(pool) == 0, "the shared block stays with sequence 2");
    ft_kv_pool_release(pool, 1);
    CHECK(ft_kv_pool_n_free(pool) == 3 && ft_kv_pool_n_used(pool) == 1);
    CHECK(ft_kv_pool_acquire(pool) == 0 && ft_kv_n_blocks(ft_kv_pool_cache(pool, 0)) == 0, "a fresh table");
    pool_ok(pool, NULL);
    ft_kv_pool_free(pool);
    ft_kv_pool_free(NULL);
    int64_t widths[1] = {64};
    ft_kv_params bad = {1, 16, FT_TYPE_Q4_K, widths, 64, NULL, NULL, 0, NULL};
    ft_err err = {{0}};
    CHECK(!ft_kv_pool_init(&bad, 2, be, &err) && strstr(err.msg, "q4_K"), "%s", err.msg);
    be->ops->free(be);
}

static void fill_tokens(int32_t *t, int n, int32_t base) {
    for (int i = 0; i < n; i++) t[i] = base + i;
}

// The longest cached prefix is found to the block; a prompt that diverges inside a block gets
// the blocks before it; a block no sequence lists is given back under pressure, least recently
// used first, leaves before their prefixes, never one in use.
TEST(prefix_cache_match_share_evict) {
    enum { B = FT_KV_BLOCK };
    ft_backend *be = ft_backend_cpu_init(1, false);
    ft_kv_pool *pool = small_pool(be, 2, 6, 4 * B);
    REQUIRE(pool);
    ft_prefix_cache *pc = ft_prefix_cache_init(pool);
    int32_t a[4 * B], c[4 * B], got[4];
    fill_tokens(a, 4 * B, 1000);
    memcpy(c, a, sizeof(a));
    c[2 * B + 5] = 7; // diverges in the middle of block 2

    // sequence 0 computes 3 blocks of a and hands them to the cache
    int s0 = ft_kv_pool_acquire(pool);
    REQUIRE(ft_kv_pool_grow(pool, s0, 3 * B));
    ft_prefix_cache_insert(pc, a, ft_kv_block_ids(ft_kv_pool_cache(pool, s0)), 3);
    CHECK(ft_prefix_cache_n_blocks(pc) == 3 && ft_prefix_cache_n_evictable(pc) == 0, "all listed by s0");
    pool_ok(pool, pc);
    CHECK(ft_prefix_cache_match(pc, c, 4 * B, got, 4, NULL) == 2, "c shares two whole blocks with a");
    CHECK(ft_prefix_cache_match(pc, a, 3 * B - 1, got, 4, NULL) == 2, "a shorter prompt: whole blocks only");
    CHECK(ft_prefix_cache_match(pc, a, 4 * B, got, 1, NULL) == 1, "at most max_blocks");
    int32_t other[B];
    fill_tokens(other, B, 5);
    CHECK(ft_prefix_cache_match(pc, other, B, got, 4, NULL) == 0);

    // sequence 1 takes c's shared prefix and grows on its own blocks past it
    int s1 = ft_kv_pool_acquire(pool);
    int n = ft_prefix_cache_match(pc, c, 4 * B, got, 4, NULL);
    for (int i = 0; i < n; i++) ft_kv_pool_share(pool, s1, got[i]);
    REQUIRE(ft_kv_pool_grow(pool, s1, 4 * B));
    CHECK(ft_kv_pool_n_free(pool) == 1, "6 blocks: 3 of s0, 2 more of s1, one free");
    ft_prefix_cache_insert(pc, c, ft_kv_block_ids(ft_kv_pool_cache(pool, s1)), 4);
    CHECK(ft_prefix_cache_n_blocks(pc) == 5, "c's blocks 2 and 3 join a's two");
    pool_ok(pool, pc);

    // s0 ends: its third block (a's own) is kept by the cache only
    ft_kv_pool_release(pool, s0);
    CHECK(ft_kv_pool_n_free(pool) == 1 && ft_prefix_cache_n_evictable(pc) == 1);
    pool_ok(pool, pc);
    // s1 asks for what is not free: the cache gives a's block 2 back, nothing s1 lists
    int s2 = ft_kv_pool_acquire(pool);
    REQUIRE(s2 >= 0);
    CHECK(ft_kv_pool_grow(pool, s2, 2 * B), "one free block and one given back");
    CHECK(ft_prefix_cache_n_blocks(pc) == 4 && ft_prefix_cache_match(pc, a, 4 * B, got, 4, NULL) == 2);
    CHECK(ft_prefix_cache_match(pc, c, 4 * B, got, 4, NULL) == 4, "c's blocks are in use: still cached");
    CHECK(!ft_kv_pool_grow(pool, s2, 3 * B), "nothing left: every cached block is listed by s1");
    pool_ok(pool, pc);
    ft_kv_pool_release(pool, s1);
    CHECK(ft_prefix_cache_n_evictable(pc) == 4);
    // leaves before their prefixes: c's last block goes first
    CHECK(ft_prefix_cache_evict(pc, 1) == 1 && ft_prefix_cache_match(pc, c, 4 * B, got, 4, NULL) == 3);
    CHECK(ft_prefix_cache_evict(pc, 10) == 3 && ft_prefix_cache_n_blocks(pc) == 0);
    pool_ok(pool, pc);
    ft_kv_pool_release(pool, s2);
    CHECK(ft_kv_pool_n_free(pool) == 6);
    ft_prefix_cache_free(pc);
    ft_kv_pool_free(pool);
    be->ops->free(be);
}

// A prompt that leaves the cached path inside a block gets the child whose tokens agree with
// its next ones longest (not merely the first child, nor one agreeing shorter), counted up to
// the tokens it has and to 63; at the root too; that block counts as used (it outlives an
// older leaf under eviction) and a reference taken on it keeps it from the reclaimer.
TEST(prefix_cache_match_part) {
    enum { B = FT_KV_BLOCK };
    ft_backend *be = ft_backend_cpu_init(1, false);
    ft_kv_pool *pool = small_pool(be, 1, 6, 3 * B);
    REQUIRE(pool);
    ft_prefix_cache *pc = ft_prefix_cache_init(pool);
    int32_t a[3 * B], e[2 * B], p[3 * B], got[3];
    fill_tokens(a, 3 * B, 1000);
    memcpy(e, a, sizeof(e));
    for (int i = 10; i < B; i++) e[B + i] = 7000 + i; // e's block 1 agrees with a's on 10 tokens
    int32_t blk[2][3];
    const int32_t *src[2] = {a, e};
    for (int k = 0; k < 2; k++) { // a (3 blocks), then e (2; its block 0 is a's)
        int s = ft_kv_pool_acquire(pool);
        REQUIRE(s >= 0 && ft_kv_pool_grow(pool, s, (3 - k) * B));
        ft_prefix_cache_insert(pc, src[k], ft_kv_block_ids(ft_kv_pool_cache(pool, s)), 3 - k);
        memcpy(blk[k], ft_kv_block_ids(ft_kv_pool_cache(pool, s)), (size_t)(3 - k) * sizeof(int32_t));
        ft_kv_pool_release(pool, s);
    }
    REQUIRE(ft_prefix_cache_n_blocks(pc) == 4 && pool_ok(pool, pc));
    const struct {
        const int32_t *base; // p's block 1 is base's for k tokens, then its own
        int k, n;            // and p has n tokens
        int32_t block;       // the part wanted (-1: none), and its tokens
        int n_tok;
    } cases[] = {
        {a, 30, 3 * B, blk[0][1], 30}, // a's child agrees longer (e's on 10): it, though e's came last
        {e, 40, 3 * B, blk[1][1], 40}, // e's agrees longer
        {a, B, B + 20, blk[0][1], 20}, // as far as p goes
        {a, 0, 3 * B, -1, 0},          // nothing agrees on the first token
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        memcpy(p, a, sizeof(p));
        for (int t = 0; t < B; t++) p[B + t] = t < cases[i].k ? cases[i].base[B + t] : 9000 + t;
        ft_prefix_part part = {.block = 99, .n_tok = 99};
        int d = ft_prefix_cache_match(pc, p, cases[i].n, got, 3, &part);
        CHECK(d == 1 && got[0] == blk[0][0], "case %zu: %d whole blocks", i, d);
        CHECK(part.block == cases[i].block && part.n_tok == cases[i].n_tok, "case %zu: part block %d, %d tokens", i,
              part.block, part.n_tok);
    }
    // at the root: p leaves a's block 0 after 5 tokens, then after 1
    memcpy(p, a, sizeof(p));
    p[5] = 1;
    ft_prefix_part part;
    CHECK(ft_prefix_cache_match(pc, p, 3 * B, got, 3, &part) == 0 && part.block == blk[0][0] && part.n_tok == 5);
    p[1] = 1;
    CHECK(ft_prefix_cache_match(pc, p, 3 * B, got, 3, &part) == 0 && part.block == blk[0][0] && part.n_tok == 1);
    // all of a but its last token: two whole blocks and 63 rows of the third; none past max_blocks
    CHECK(ft_prefix_cache_match(pc, a, 3 * B - 1, got, 3, &part) == 2 && part.block == blk[0][2] &&
              part.n_tok == B - 1,
          "%d tokens", part.n_tok);
    CHECK(ft_prefix_cache_match(pc, a, 3 * B, got, 2, &part) == 2 && part.block == -1 && part.n_tok == 0);
    // a's block 2 (inserted before e's block 1) was just used for its part: e's leaf goes first
    memcpy(p, a, sizeof(p));
    p[2 * B + 30] = 1;
    CHECK(ft_prefix_cache_match(pc, p, 3 * B, got, 3, &part) == 2 && part.block == blk[0][2]);
    CHECK(ft_prefix_cache_evict(pc, 1) == 1 && ft_prefix_cache_match(pc, e, 2 * B, got, 3, NULL) == 1,
          "e's block 1 went, not a's block 2");
    // a reference on the part (the caller's, while it copies) keeps it cached
    ft_kv_pool_ref(pool, part.block);
    int32_t *held = ft_calloc(6, sizeof(int32_t));
    held[part.block] = 1;
    ft_err err = {{0}};
    ft_prefix_cache_count_refs(pc, held);
    CHECK(ft_kv_pool_check(pool, held, &err), "%s", err.msg);
    free(held);
    CHECK(ft_prefix_cache_evict(pc, 10) == 0 && ft_prefix_cache_n_blocks(pc) == 3, "a's path stays under its leaf");
    ft_kv_pool_unref(pool, part.block);
    CHECK(ft_prefix_cache_evict(pc, 10) == 3 && ft_kv_pool_n_free(pool) == 6);
    ft_prefix_cache_free(pc);
    ft_kv_pool_free(pool);
    be->ops->free(be);
}
