// kv_pool: the KV memory of a batch engine: one store of blocks (kv.h) that n_seq sequences
// draw from as they grow, so all of them share one budget of positions.
//
// The store and the n_seq sequences are allocated once, when the pool is made, so admitting a
// sequence or growing it never allocates memory and a full pool is known at start-up. A block
// counts its references: each sequence that lists it, and the prefix cache while it keeps it
// (prefix_cache.h). It is free at zero references, and is then simply overwritten by its next
// owner (attention reads only the positions below a sequence's length). A block listed by
// several sequences is only ever read: a sequence writes only its own last blocks.
//
// When a sequence needs a block and none is free, the pool asks its reclaimer (the prefix
// cache) to give some back first.
//
// The pool owns its store and sequences. Not thread-safe: one scheduler thread.
#ifndef FT_KV_POOL_H
#define FT_KV_POOL_H

#include "kv.h"

typedef struct ft_kv_pool ft_kv_pool;

// Frees up to n blocks the reclaimer holds (drops its references); returns how many it freed.
typedef int (*ft_kv_reclaim_fn)(void *ctx, int n);

// Allocates the store of p->n_blocks blocks (0: n_seq sequences of p->n_ctx) and n_seq
// sequences, zeroed, in be's buffers. Returns NULL and sets *err when ft_kv_store_init
// refuses the parameters or memory runs out (nothing stays allocated). Free it before be.
ft_kv_pool *ft_kv_pool_init(const ft_kv_params *p, int n_seq, ft_backend *be, ft_err *err);
void ft_kv_pool_free(ft_kv_pool *pool); // NULL is a no-op
void ft_kv_pool_set_reclaimer(ft_kv_pool *pool, ft_kv_reclaim_fn fn, void *ctx);

// Takes a free sequence, with an empty block table: returns its index (0 <= i < n_seq), or -1
// when every one is in use. The lowest free index is taken, so a lone sequence always runs on
// the same one.
int ft_kv_pool_acquire(ft_kv_pool *pool);
// Gives sequence i back, and its references to its blocks; aborts if it was not taken.
void ft_kv_pool_release(ft_kv_pool *pool, int i);
ft_kv_cache *ft_kv_pool_cache(ft_kv_pool *pool, int i);

// Gives sequence i the blocks to hold positions 0 .. n_pos - 1 (fresh ones, from the free
// blocks, then from the reclaimer). Returns false, and takes nothing, when there are not
// enough.
bool ft_kv_pool_grow(ft_kv_pool *pool, int i, int n_pos);
// Appends block (referenced elsewhere, holding the sequence's next FT_KV_BLOCK positions) to
// sequence i's table, with a reference of its own.
void ft_kv_pool_share(ft_kv_pool *pool, int i, int32_t block);
// A reference to a block, held by someone other than a sequence (the prefix cache).
void ft_kv_pool_ref(ft_kv_pool *pool, int32_t block);
void ft_kv_pool_unref(ft_kv_pool *pool, int32_t block);
int ft_kv_pool_refs(const ft_kv_pool *pool, int32_t block);

int ft_kv_pool_n_seq(const ft_kv_pool *pool);
int ft_kv_pool_n_used(const ft_kv_pool *pool); // sequences taken
int64_t ft_kv_pool_n_blocks(const ft_kv_pool *pool);
int64_t ft_kv_pool_n_free(const ft_kv_pool *pool); // blocks without a reference
size_t ft_kv_pool_bytes(const ft_kv_pool *pool);   // the store and the sequences
// Bytes a pool of these parameters allocates (p->n_blocks as ft_kv_pool_init reads it).
size_t ft_kv_pool_bytes_for(const ft_kv_params *p, int n_seq);

// Checks the reference counts: each block's count equals the tables that list it plus
// extra[block] (the other holders' references, NULL: none), and the free blocks are exactly
// those at zero. Returns false and sets *err naming the first block that disagrees.
bool ft_kv_pool_check(const ft_kv_pool *pool, const int32_t *extra, ft_err *err);

#endif
