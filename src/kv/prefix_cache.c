// prefix_cache.c: the radix tree of cached KV blocks (see prefix_cache.h).
//
// Nodes live in one array sized for every block of the pool (a block is on at most one node:
// the tree hands out only blocks it holds, at the place it holds them), so the cache never
// allocates after it is made. Children are a doubly linked sibling list, searched by the hash
// of the block's tokens then the tokens; eviction scans for the oldest evictable leaf, which
// costs a pass over the nodes per block freed, small beside the step that needs the block.
#include "prefix_cache.h"

#include <stdlib.h>
#include <string.h>

enum { NONE = -1 };

typedef struct pc_node {
    int32_t block;
    int32_t parent;                 // NONE: a child of the root
    int32_t child, prev, next;      // first child; siblings (next also chains free nodes)
    uint64_t hash;                  // of the block's tokens
    uint64_t used;                  // clock of the last match or insert
    bool live;                      // in the tree (else on the free chain)
    bool pinned;                    // scratch of n_evictable
} pc_node;

struct ft_prefix_cache {
    ft_kv_pool *pool;
    pc_node *nodes;      // (cap)
    int32_t *tokens;     // (cap, FT_KV_BLOCK) each node's tokens
    int32_t cap, n, free_head, root;
    uint64_t clock;
};

static uint64_t hash_tokens(const int32_t *t) {
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < FT_KV_BLOCK; i++) {
        h ^= (uint32_t)t[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int reclaim(void *ctx, int n) { return ft_prefix_cache_evict(ctx, n); }

ft_prefix_cache *ft_prefix_cache_init(ft_kv_pool *pool) {
    ft_prefix_cache *pc = ft_calloc(1, sizeof(*pc));
    pc->pool = pool;
    pc->cap = (int32_t)ft_kv_pool_n_blocks(pool);
    pc->nodes = ft_malloc((size_t)pc->cap * sizeof(pc_node));
    pc->tokens = ft_malloc((size_t)pc->cap * FT_KV_BLOCK * sizeof(int32_t));
    for (int32_t i = 0; i < pc->cap; i++) pc->nodes[i] = (pc_node){.next = i + 1 < pc->cap ? i + 1 : NONE};
    pc->free_head = pc->cap > 0 ? 0 : NONE;
    pc->root = NONE;
    ft_kv_pool_set_reclaimer(pool, reclaim, pc);
    return pc;
}

void ft_prefix_cache_free(ft_prefix_cache *pc) {
    if (!pc) return;
    for (int32_t i = 0; i < pc->cap; i++)
        if (pc->nodes[i].live) ft_kv_pool_unref(pc->pool, pc->nodes[i].block);
    ft_kv_pool_set_reclaimer(pc->pool, NULL, NULL);
    free(pc->nodes);
    free(pc->tokens);
    free(pc);
}

// The child of parent (NONE: the root) holding exactly tokens t, or NONE.
static int32_t find_child(const ft_prefix_cache *pc, int32_t parent, const int32_t *t, uint64_t h) {
    int32_t c = parent == NONE ? pc->root : pc->nodes[parent].child;
    for (; c != NONE; c = pc->nodes[c].next)
        if (pc->nodes[c].hash == h && !memcmp(pc->tokens + (size_t)c * FT_KV_BLOCK, t, FT_KV_BLOCK * sizeof(int32_t)))
            return c;
    return NONE;
}

int ft_prefix_cache_match(ft_prefix_cache *pc, const int32_t *tokens, int n, int32_t *blocks, int max_blocks) {
    int32_t at = NONE;
    int d = 0;
    pc->clock++;
    for (; d < max_blocks && (d + 1) * FT_KV_BLOCK <= n; d++) {
        const int32_t *t = tokens + (size_t)d * FT_KV_BLOCK;
        int32_t c = find_child(pc, at, t, hash_tokens(t));
        if (c == NONE) break;
        pc->nodes[c].used = pc->clock;
        blocks[d] = pc->nodes[c].block;
        at = c;
    }
    return d;
}

void ft_prefix_cache_insert(ft_prefix_cache *pc, const int32_t *tokens, const int32_t *blocks, int n_blocks) {
    int32_t at = NONE;
    pc->clock++;
    for (int d = 0; d < n_blocks; d++) {
        const int32_t *t = tokens + (size_t)d * FT_KV_BLOCK;
        uint64_t h = hash_tokens(t);
        int32_t c = find_child(pc, at, t, h);
        if (c == NONE) {
            c = pc->free_head;
            FT_ASSERT(c != NONE); // a node per block of the pool
            pc_node *nd = &pc->nodes[c];
            pc->free_head = nd->next;
            int32_t *head = at == NONE ? &pc->root : &pc->nodes[at].child;
            *nd = (pc_node){.block = blocks[d], .parent = at, .child = NONE, .prev = NONE, .next = *head, .hash = h,
                              .live = true};
            if (*head != NONE) pc->nodes[*head].prev = c;
            *head = c;
            memcpy(pc->tokens + (size_t)c * FT_KV_BLOCK, t, FT_KV_BLOCK * sizeof(int32_t));
            ft_kv_pool_ref(pc->pool, blocks[d]);
            pc->n++;
        }
        pc->nodes[c].used = pc->clock;
        at = c;
    }
}

static bool evictable(const ft_prefix_cache *pc, const pc_node *nd) {
    return nd->child == NONE && ft_kv_pool_refs(pc->pool, nd->block) == 1;
}

static void remove_node(ft_prefix_cache *pc, int32_t i) {
    pc_node *nd = &pc->nodes[i];
    if (nd->prev != NONE) pc->nodes[nd->prev].next = nd->next;
    else if (nd->parent == NONE) pc->root = nd->next;
    else pc->nodes[nd->parent].child = nd->next;
    if (nd->next != NONE) pc->nodes[nd->next].prev = nd->prev;
    ft_kv_pool_unref(pc->pool, nd->block);
    nd->live = false;
    nd->next = pc->free_head;
    pc->free_head = i;
    pc->n--;
}

int ft_prefix_cache_evict(ft_prefix_cache *pc, int n) {
    int freed = 0;
    for (; freed < n && pc->n > 0; freed++) {
        int32_t best = NONE;
        for (int32_t i = 0; i < pc->cap; i++)
            if (pc->nodes[i].live && evictable(pc, &pc->nodes[i]) &&
                (best == NONE || pc->nodes[i].used < pc->nodes[best].used))
                best = i;
        if (best == NONE) break;
        remove_node(pc, best);
    }
    return freed;
}

int ft_prefix_cache_n_blocks(const ft_prefix_cache *pc) { return pc->n; }

int ft_prefix_cache_n_evictable(const ft_prefix_cache *pc) {
    // a block can go once nothing below it is listed by a sequence: pin every listed node and
    // its ancestors, count the rest
    pc_node *nodes = pc->nodes;
    for (int32_t i = 0; i < pc->cap; i++) nodes[i].pinned = false;
    for (int32_t i = 0; i < pc->cap; i++) {
        if (!nodes[i].live || ft_kv_pool_refs(pc->pool, nodes[i].block) == 1) continue;
        for (int32_t a = i; a != NONE && !nodes[a].pinned; a = nodes[a].parent) nodes[a].pinned = true;
    }
    int n = 0;
    for (int32_t i = 0; i < pc->cap; i++) n += nodes[i].live && !nodes[i].pinned;
    return n;
}

void ft_prefix_cache_count_refs(const ft_prefix_cache *pc, int32_t *held) {
    for (int32_t i = 0; i < pc->cap; i++)
        if (pc->nodes[i].live) held[pc->nodes[i].block]++;
}
