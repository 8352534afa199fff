// kv_pool.c: the per-sequence KV caches of a batch engine (see kv_pool.h).
#include "kv_pool.h"
#include "../backend/cuda/ft_cuda.h"

#include <stdlib.h>

struct ft_kv_pool {
    int n_seq, n_used;
    int n_layer;
    enum ft_placement where;
    ft_kv_cache **caches; // (n_seq)
    bool *taken;          // (n_seq)
    void **host_rows;     // (n_seq * 2 * n_layer) host memory set aside while on the device
};

// Moves cache i's tensors to zeroed device memory, keeping their host rows for the free.
static bool cache_to_device(ft_kv_pool *pool, int i, ft_err *err) {
    for (int l = 0; l < pool->n_layer; l++)
        for (int kv = 0; kv < 2; kv++) {
            ft_tensor *t = kv ? ft_kv_v(pool->caches[i], l) : ft_kv_k(pool->caches[i], l);
            void *d = ft_cuda_malloc(t->mat_bytes);
            if (!d) return ft_err_set(err, "out of device memory for the KV cache of sequence %d (%s)", i, t->name);
            ft_cuda_memset(d, 0, t->mat_bytes, NULL);
            pool->host_rows[((size_t)i * pool->n_layer + l) * 2 + kv] = t->data;
            t->data = d;
            t->placement = FT_PLACEMENT_CUDA;
        }
    return true;
}

ft_kv_pool *ft_kv_pool_init(const ft_kv_params *p, int n_seq, enum ft_placement where, ft_err *err) {
    FT_ASSERT(n_seq >= 1);
    ft_kv_pool *pool = ft_calloc(1, sizeof(*pool));
    pool->n_seq = n_seq;
    pool->n_layer = p->n_layer;
    pool->where = where;
    pool->caches = ft_calloc((size_t)n_seq, sizeof(ft_kv_cache *));
    pool->taken = ft_calloc((size_t)n_seq, sizeof(bool));
    if (where == FT_PLACEMENT_CUDA)
        pool->host_rows = ft_calloc((size_t)n_seq * 2 * (size_t)p->n_layer, sizeof(void *));
    for (int i = 0; i < n_seq; i++) {
        if (!(pool->caches[i] = ft_kv_init(p, err)) || (where == FT_PLACEMENT_CUDA && !cache_to_device(pool, i, err))) {
            ft_kv_pool_free(pool);
            return NULL;
        }
    }
    if (where == FT_PLACEMENT_CUDA) ft_cuda_device_sync(); // the memsets ran on the default stream
    return pool;
}

void ft_kv_pool_free(ft_kv_pool *pool) {
    if (!pool) return;
    for (int i = 0; i < pool->n_seq; i++) {
        if (!pool->caches[i]) continue;
        if (pool->host_rows)
            for (int l = 0; l < pool->n_layer; l++)
                for (int kv = 0; kv < 2; kv++) {
                    void *host = pool->host_rows[((size_t)i * pool->n_layer + l) * 2 + kv];
                    if (!host) continue;
                    ft_tensor *t = kv ? ft_kv_v(pool->caches[i], l) : ft_kv_k(pool->caches[i], l);
                    ft_cuda_free(t->data);
                    t->data = host;
                    t->placement = FT_PLACEMENT_CPU;
                }
        ft_kv_free(pool->caches[i]);
    }
    free(pool->host_rows);
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
