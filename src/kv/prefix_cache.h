// prefix_cache: KV blocks kept after their sequences end, found again by the tokens they hold.
//
// A radix tree over whole blocks: a node is one block of FT_KV_BLOCK tokens, its children the
// blocks that followed it in some sequence, so the path from the root spells a cached prefix
// and the nodes on it are the blocks that hold its keys and values. The rows of a position
// depend only on the tokens up to it, so any sequence whose prompt starts with that path can
// list the same blocks instead of computing them (kv_pool.h: shared blocks are only read). A
// prompt that leaves the path inside a block can still have that block's leading rows: the
// match names the child whose tokens agree with the prompt's longest, and the caller copies
// those rows into a block of its own (shared by reference, copied where they part).
//
// The cache holds a reference to each block it keeps (kv_pool.h). Under memory pressure the
// pool asks it for blocks back: the least recently used leaves whose only reference is the
// cache's go first, so a block some sequence still lists is never dropped, nor a prefix before
// its continuations.
//
// Not thread-safe: the scheduler thread, like the pool.
#ifndef FT_PREFIX_CACHE_H
#define FT_PREFIX_CACHE_H

#include "kv_pool.h"

typedef struct ft_prefix_cache ft_prefix_cache;

// A cache for pool's blocks; becomes the pool's reclaimer. Free it before the pool.
ft_prefix_cache *ft_prefix_cache_init(ft_kv_pool *pool);
void ft_prefix_cache_free(ft_prefix_cache *pc); // drops its references; NULL is a no-op

// A cached block whose leading rows continue a match (see ft_prefix_cache_match).
typedef struct ft_prefix_part {
    int32_t block; // -1: none
    int n_tok;     // its leading positions whose tokens are the prompt's next ones (0: none)
} ft_prefix_part;

// The blocks holding the longest cached prefix of tokens (n of them) in whole blocks, at most
// max_blocks: written to blocks, their count d returned. With part (NULL: whole blocks only),
// also the block cached right after those d (a child of the last) whose leading tokens agree
// longest with tokens[d * FT_KV_BLOCK .. n - 1], and how many agree: fewer than FT_KV_BLOCK
// and at most n - d * FT_KV_BLOCK (ties: any of them); {-1, 0} when none agrees on a first
// token, or d == max_blocks. The blocks returned, the part's included, count as used now (LRU
// order); the part's has no reference of the caller's (take one before the pool may reclaim).
int ft_prefix_cache_match(ft_prefix_cache *pc, const int32_t *tokens, int n, int32_t *blocks, int max_blocks,
                          ft_prefix_part *part);
// Keeps the n_blocks blocks holding tokens[0 .. n_blocks * FT_KV_BLOCK - 1] of a sequence. A
// prefix already cached under other blocks stays as it is (the sequence's own copies are
// freed with it); the rest is added with a reference each.
void ft_prefix_cache_insert(ft_prefix_cache *pc, const int32_t *tokens, const int32_t *blocks, int n_blocks);
// Drops up to n blocks (see above); returns how many it dropped, which are free now.
int ft_prefix_cache_evict(ft_prefix_cache *pc, int n);

// Recurrent-state snapshots. A model with recurrent layers (gated DeltaNet) computes a state
// that no block holds, so a cached prefix is usable only where the state after it was kept
// too: a snapshot of snap_floats floats (every recurrent layer's state, in host memory) on the
// node that ends the prefix. At most max_snaps are held; storing one more drops the least
// recently used, and a node's snapshot goes with the node. Call once, before the first store.
void ft_prefix_cache_set_snapshots(ft_prefix_cache *pc, int max_snaps, size_t snap_floats);
// The buffer to fill with the state after tokens[0 .. n_blocks * FT_KV_BLOCK - 1], whose blocks
// must be cached (insert first); NULL when they are not, or when that node has a snapshot
// already (the same tokens give the same state), or without snapshots.
float *ft_prefix_cache_snapshot_slot(ft_prefix_cache *pc, const int32_t *tokens, int n_blocks);
// As match, but the prefix ends at the deepest matched node with a snapshot: returns its depth
// in blocks (0: none) and sets *snap to the snapshot (NULL with 0).
int ft_prefix_cache_match_snapshot(ft_prefix_cache *pc, const int32_t *tokens, int n, int32_t *blocks,
                                   int max_blocks, const float **snap);
int ft_prefix_cache_n_snapshots(const ft_prefix_cache *pc);

int ft_prefix_cache_n_blocks(const ft_prefix_cache *pc); // blocks kept
// Blocks kept that only the cache references: what evict could free.
int ft_prefix_cache_n_evictable(const ft_prefix_cache *pc);
// Adds 1 to held[block] for each block kept (for ft_kv_pool_check).
void ft_prefix_cache_count_refs(const ft_prefix_cache *pc, int32_t *held);

#endif
