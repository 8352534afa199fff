// kv_pool.c: the blocks and sequences of a batch engine's KV memory (see kv_pool.h).
#include "kv_pool.h"

#include <stdlib.h>
#include <string.h>

struct ft_kv_pool {
    ft_kv_store *st;
    int n_seq, n_used;
    ft_kv_cache **seqs; // (n_seq)
    bool *taken;        // (n_seq)
    int64_t n_blocks, n_free;
    int32_t *refs;      // (n_blocks)
    int32_t *free_ids;  // (n_blocks) a stack: the free blocks are its first n_free
    ft_kv_reclaim_fn reclaim;
    void *reclaim_ctx;
    size_t bytes;
};

static int64_t pool_blocks(const ft_kv_params *p, int n_seq) {
    return p->n_blocks > 0 ? p->n_blocks : (int64_t)n_seq * ft_kv_blocks_for(p->n_ctx);
}

size_t ft_kv_pool_bytes_for(const ft_kv_params *p, int n_seq) {
    return (size_t)pool_blocks(p, n_seq) * ft_kv_block_bytes(p) + (size_t)n_seq * ft_kv_seq_bytes(p);
}

ft_kv_pool *ft_kv_pool_init(const ft_kv_params *p, int n_seq, ft_backend *be, ft_err *err) {
    FT_ASSERT(n_seq >= 1);
    ft_kv_pool *pool = ft_calloc(1, sizeof(*pool));
    ft_kv_params sp = *p;
    sp.n_blocks = pool_blocks(p, n_seq);
    FT_ASSERT(sp.n_blocks <= INT32_MAX);
    pool->n_seq = n_seq;
    pool->seqs = ft_calloc((size_t)n_seq, sizeof(ft_kv_cache *));
    pool->taken = ft_calloc((size_t)n_seq, sizeof(bool));
    pool->n_blocks = sp.n_blocks;
    pool->refs = ft_calloc((size_t)sp.n_blocks, sizeof(int32_t));
    pool->free_ids = ft_malloc((size_t)sp.n_blocks * sizeof(int32_t));
    // popped from the top: block 0 first, so a lone sequence's rows run in order
    for (int64_t b = 0; b < sp.n_blocks; b++) pool->free_ids[b] = (int32_t)(sp.n_blocks - 1 - b);
    pool->n_free = sp.n_blocks;
    if (!(pool->st = ft_kv_store_init(&sp, be, err))) {
        ft_kv_pool_free(pool);
        return NULL;
    }
    for (int i = 0; i < n_seq; i++)
        if (!(pool->seqs[i] = ft_kv_init(pool->st, &sp, be, err))) {
            ft_err_prefix(err, "sequence %d", i);
            ft_kv_pool_free(pool);
            return NULL;
        }
    pool->bytes = ft_kv_pool_bytes_for(&sp, n_seq);
    return pool;
}

void ft_kv_pool_free(ft_kv_pool *pool) {
    if (!pool) return;
    for (int i = 0; i < pool->n_seq; i++) ft_kv_free(pool->seqs[i]);
    ft_kv_store_free(pool->st);
    free(pool->seqs);
    free(pool->taken);
    free(pool->refs);
    free(pool->free_ids);
    free(pool);
}

void ft_kv_pool_set_reclaimer(ft_kv_pool *pool, ft_kv_reclaim_fn fn, void *ctx) {
    pool->reclaim = fn;
    pool->reclaim_ctx = ctx;
}

int ft_kv_pool_acquire(ft_kv_pool *pool) {
    for (int i = 0; i < pool->n_seq; i++)
        if (!pool->taken[i]) {
            pool->taken[i] = true;
            pool->n_used++;
            return i;
        }
    return -1;
}

void ft_kv_pool_release(ft_kv_pool *pool, int i) {
    FT_ASSERT(i >= 0 && i < pool->n_seq && pool->taken[i]);
    ft_kv_cache *kv = pool->seqs[i];
    const int32_t *ids = ft_kv_block_ids(kv);
    for (int b = 0; b < ft_kv_n_blocks(kv); b++) ft_kv_pool_unref(pool, ids[b]);
    ft_kv_clear(kv);
    pool->taken[i] = false;
    pool->n_used--;
}

ft_kv_cache *ft_kv_pool_cache(ft_kv_pool *pool, int i) {
    FT_ASSERT(i >= 0 && i < pool->n_seq);
    return pool->seqs[i];
}

bool ft_kv_pool_grow(ft_kv_pool *pool, int i, int n_pos) {
    FT_ASSERT(i >= 0 && i < pool->n_seq && pool->taken[i]);
    ft_kv_cache *kv = pool->seqs[i];
    FT_ASSERT(n_pos <= ft_kv_n_ctx(kv));
    int need = ft_kv_blocks_for(n_pos) - ft_kv_n_blocks(kv);
    if (need <= 0) return true;
    if (pool->n_free < need && pool->reclaim) pool->reclaim(pool->reclaim_ctx, (int)(need - pool->n_free));
    if (pool->n_free < need) return false;
    for (int k = 0; k < need; k++) {
        int32_t b = pool->free_ids[--pool->n_free];
        FT_ASSERT(pool->refs[b] == 0);
        pool->refs[b] = 1;
        ft_kv_push_block(kv, b);
    }
    return true;
}

void ft_kv_pool_share(ft_kv_pool *pool, int i, int32_t block) {
    FT_ASSERT(i >= 0 && i < pool->n_seq && pool->taken[i]);
    ft_kv_pool_ref(pool, block);
    ft_kv_push_block(pool->seqs[i], block);
}

void ft_kv_pool_ref(ft_kv_pool *pool, int32_t block) {
    FT_ASSERT(block >= 0 && block < pool->n_blocks && pool->refs[block] > 0);
    pool->refs[block]++;
}

void ft_kv_pool_unref(ft_kv_pool *pool, int32_t block) {
    FT_ASSERT(block >= 0 && block < pool->n_blocks && pool->refs[block] > 0);
    if (--pool->refs[block] == 0) pool->free_ids[pool->n_free++] = block;
}

int ft_kv_pool_refs(const ft_kv_pool *pool, int32_t block) {
    FT_ASSERT(block >= 0 && block < pool->n_blocks);
    return pool->refs[block];
}

int ft_kv_pool_n_seq(const ft_kv_pool *pool) { return pool->n_seq; }
int ft_kv_pool_n_used(const ft_kv_pool *pool) { return pool->n_used; }
int64_t ft_kv_pool_n_blocks(const ft_kv_pool *pool) { return pool->n_blocks; }
int64_t ft_kv_pool_n_free(const ft_kv_pool *pool) { return pool->n_free; }
size_t ft_kv_pool_bytes(const ft_kv_pool *pool) { return pool->bytes; }

bool ft_kv_pool_check(const ft_kv_pool *pool, const int32_t *extra, ft_err *err) {
    int32_t *want = ft_calloc((size_t)pool->n_blocks, sizeof(int32_t));
    bool *is_free = ft_calloc((size_t)pool->n_blocks, sizeof(bool));
    bool ok = true;
    for (int i = 0; i < pool->n_seq; i++) {
        if (!pool->taken[i] && ft_kv_n_blocks(pool->seqs[i]) > 0) {
            ok = ft_err_set(err, "sequence %d is free but lists %d blocks", i, ft_kv_n_blocks(pool->seqs[i]));
            goto done;
        }
        const int32_t *ids = ft_kv_block_ids(pool->seqs[i]);
        for (int b = 0; b < ft_kv_n_blocks(pool->seqs[i]); b++) want[ids[b]]++;
    }
    for (int64_t f = 0; f < pool->n_free; f++) {
        int32_t b = pool->free_ids[f];
        if (is_free[b]) {
            ok = ft_err_set(err, "block %d is on the free list twice", b);
            goto done;
        }
        is_free[b] = true;
    }
    for (int64_t b = 0; b < pool->n_blocks; b++) {
        int32_t w = want[b] + (extra ? extra[b] : 0);
        if (pool->refs[b] != w || is_free[b] != (w == 0)) {
            ok = ft_err_set(err, "block %lld: %d references counted, %d held, %s", (long long)b, pool->refs[b], w,
                            is_free[b] ? "free" : "not free");
            goto done;
        }
    }
done:
    free(want);
    free(is_free);
    return ok;
}
