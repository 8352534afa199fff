// kv_pool.c: the per-sequence KV caches of a batch engine (see kv_pool.h).
#include "kv_pool.h"

#include <stdlib.h>

struct ft_kv_pool {
    int n_seq, n_used;
    ft_kv_cache **caches; // (n_seq)
    bool *taken;          // (n_seq)
};

ft_kv_pool *ft_kv_pool_init(const ft_kv_params *p, int n_seq, ft_backend *be, ft_err *err) {
    FT_ASSERT(n_seq >= 1);
    ft_kv_pool *pool = ft_calloc(1, sizeof(*pool));
    pool->n_seq = n_seq;
    pool->caches = ft_calloc((size_t)n_seq, sizeof(ft_kv_cache *));
    pool->taken = ft_calloc((size_t)n_seq, sizeof(bool));
    for (int i = 0; i < n_seq; i++)
        if (!(pool->caches[i] = ft_kv_init(p, be, err))) {
            ft_err_prefix(err, "sequence %d", i);
            ft_kv_pool_free(pool);
            return NULL;
        }
    return pool;
}

void ft_kv_pool_free(ft_kv_pool *pool) {
    if (!pool) return;
    for (int i = 0; i < pool->n_seq; i++) ft_kv_free(pool->caches[i]);
    free(pool->caches);
    free(pool->taken);
    free(pool);
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
    pool->taken[i] = false;
    pool->n_used--;
}

ft_kv_cache *ft_kv_pool_cache(ft_kv_pool *pool, int i) {
    FT_ASSERT(i >= 0 && i < pool->n_seq);
    return pool->caches[i];
}

int ft_kv_pool_n_seq(const ft_kv_pool *pool) { return pool->n_seq; }
int ft_kv_pool_n_used(const ft_kv_pool *pool) { return pool->n_used; }

size_t ft_kv_pool_bytes(const ft_kv_pool *pool) {
    return (size_t)pool->n_seq * ft_kv_bytes(pool->caches[0]);
}
