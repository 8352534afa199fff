// kv_pool: the key/value caches of the sequences a batch engine runs at once.
//
// A pool holds n_seq caches (kv.h), each of n_ctx positions, allocated once when the pool is
// made (in the backend's buffers), so admitting a sequence never
// allocates and a full pool is known at start-up. A sequence takes a cache with
// ft_kv_pool_acquire and gives it back with ft_kv_pool_release the moment it ends; its rows are
// simply overwritten by the next owner (attention reads only positions below the sequence's
// own length), so release costs nothing.
//
// Paged caches (DESIGN.md) would fit behind the same acquire/release: a sequence would then
// own a list of pages instead of a whole cache, which needs an attention op that reads through
// a page table; today's op reads one contiguous cache per sequence.
//
// The pool owns its caches. Not thread-safe: one scheduler thread acquires and releases.
#ifndef FT_KV_POOL_H
#define FT_KV_POOL_H

#include "kv.h"

typedef struct ft_kv_pool ft_kv_pool;

// Allocates n_seq caches of shape p, zeroed, in be's buffers (host memory on the CPU, device
// memory on a GPU). Returns NULL and sets *err when ft_kv_init refuses the parameters or memory
// runs out (nothing stays allocated). Free the pool before the backend.
ft_kv_pool *ft_kv_pool_init(const ft_kv_params *p, int n_seq, ft_backend *be, ft_err *err);
void ft_kv_pool_free(ft_kv_pool *pool); // NULL is a no-op

// Takes a free cache: returns its index (0 <= i < n_seq), or -1 when every cache is in use.
// The lowest free index is taken, so a lone sequence always runs on the same cache.
int ft_kv_pool_acquire(ft_kv_pool *pool);
// Gives cache i back; aborts if it was not taken.
void ft_kv_pool_release(ft_kv_pool *pool, int i);

ft_kv_cache *ft_kv_pool_cache(ft_kv_pool *pool, int i);
int ft_kv_pool_n_seq(const ft_kv_pool *pool);
int ft_kv_pool_n_used(const ft_kv_pool *pool); // caches taken
size_t ft_kv_pool_bytes(const ft_kv_pool *pool);

#endif
