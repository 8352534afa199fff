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
    int32_t snap;                   // its snapshot (an index into snaps), NONE: none
    bool live;                      // in the tree (else on the free chain)
    bool pinned;                    // scratch of n_evictable
} pc_node;

// A recurrent-state snapshot: the state after the tokens on the path to node.
typedef struct pc_snap {
    float *data; // (snap_floats); NULL: the slot is free
    int32_t node;
    uint64_t used; // clock of the last match or store
} pc_snap;

struct ft_prefix_cache {
    ft_kv_pool *pool;
    pc_node *nodes;      // (cap)
    int32_t *tokens;     // (cap, FT_KV_BLOCK) each node's tokens
    int32_t cap, n, free_head, root;
    uint64_t clock;
    pc_snap *snaps; // (max_snaps)
    int max_snaps, n_snaps;
    size_t snap_floats;
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
    for (int i = 0; i < pc->max_snaps; i++)
        free(pc->snaps[i].data);
    free(pc->snaps);
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

// The child of parent (NONE: the root) whose tokens start with the longest run of t's first n
// (n < FT_KV_BLOCK or none holds all of them), and that run's length in *len (0: NONE).
static int32_t find_part(const ft_prefix_cache *pc, int32_t parent, const int32_t *t, int n, int *len) {
    int32_t best = NONE;
    *len = 0;
    int32_t c = parent == NONE ? pc->root : pc->nodes[parent].child;
    for (; c != NONE; c = pc->nodes[c].next) {
        const int32_t *ct = pc->tokens + (size_t)c * FT_KV_BLOCK;
        int k = 0;
        while (k < n && ct[k] == t[k]) k++;
        if (k > *len) {
            *len = k;
            best = c;
        }
    }
    return best;
}

// The matched path's blocks, as match (part: NULL, or as match's); *deepest_snap (when not
// NULL) gets the depth of the deepest node on it holding a snapshot (0: none) and that node's
// snapshot index.
static int match_path(ft_prefix_cache *pc, const int32_t *tokens, int n, int32_t *blocks, int max_blocks,
                      ft_prefix_part *part, int *deepest_snap, int32_t *snap) {
    int32_t at = NONE;
    int d = 0;
    pc->clock++;
    for (; d < max_blocks && (d + 1) * FT_KV_BLOCK <= n; d++) {
        const int32_t *t = tokens + (size_t)d * FT_KV_BLOCK;
        int32_t c = find_child(pc, at, t, hash_tokens(t));
        if (c == NONE) break;
        pc->nodes[c].used = pc->clock;
        blocks[d] = pc->nodes[c].block;
        if (deepest_snap && pc->nodes[c].snap != NONE) {
            *deepest_snap = d + 1;
            *snap = pc->nodes[c].snap;
        }
        at = c;
    }
    if (part) {
        *part = (ft_prefix_part){.block = -1};
        int left = FT_MIN(n - d * FT_KV_BLOCK, FT_KV_BLOCK - 1), len;
        const int32_t *next = tokens + (size_t)d * FT_KV_BLOCK;
        int32_t c = d < max_blocks && left > 0 ? find_part(pc, at, next, left, &len) : NONE;
        if (c != NONE) {
            pc->nodes[c].used = pc->clock;
            *part = (ft_prefix_part){.block = pc->nodes[c].block, .n_tok = len};
        }
    }
    return d;
}

int ft_prefix_cache_match(ft_prefix_cache *pc, const int32_t *tokens, int n, int32_t *blocks, int max_blocks,
                          ft_prefix_part *part) {
    return match_path(pc, tokens, n, blocks, max_blocks, part, NULL, NULL);
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
            *nd = (pc_node){.block = blocks[d],
                            .parent = at,
                            .child = NONE,
                            .prev = NONE,
                            .next = *head,
                            .hash = h,
                            .snap = NONE,
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

static void drop_snap(ft_prefix_cache *pc, int32_t s) {
    pc_snap *sn = &pc->snaps[s];
    pc->nodes[sn->node].snap = NONE;
    free(sn->data);
    *sn = (pc_snap){.node = NONE};
    pc->n_snaps--;
}

static void remove_node(ft_prefix_cache *pc, int32_t i) {
    pc_node *nd = &pc->nodes[i];
    if (nd->snap != NONE) drop_snap(pc, nd->snap);
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

// ---------------------------------------------------------------------------------------------
// Recurrent-state snapshots

void ft_prefix_cache_set_snapshots(ft_prefix_cache *pc, int max_snaps, size_t snap_floats) {
    FT_ASSERT(!pc->snaps && max_snaps > 0 && snap_floats > 0);
    pc->snaps = ft_malloc((size_t)max_snaps * sizeof(pc_snap));
    for (int i = 0; i < max_snaps; i++)
        pc->snaps[i] = (pc_snap){.node = NONE};
    pc->max_snaps = max_snaps;
    pc->snap_floats = snap_floats;
}

// The node at depth n_blocks on the path tokens spells, or NONE.
static int32_t find_path(const ft_prefix_cache *pc, const int32_t *tokens, int n_blocks) {
    int32_t at = NONE;
    for (int d = 0; d < n_blocks; d++) {
        const int32_t *t = tokens + (size_t)d * FT_KV_BLOCK;
        if ((at = find_child(pc, at, t, hash_tokens(t))) == NONE) return NONE;
    }
    return at;
}

float *ft_prefix_cache_snapshot_slot(ft_prefix_cache *pc, const int32_t *tokens, int n_blocks) {
    if (!pc->snaps || n_blocks < 1) return NULL;
    int32_t node = find_path(pc, tokens, n_blocks);
    if (node == NONE) return NULL;
    pc->clock++;
    if (pc->nodes[node].snap != NONE) { // the same tokens give the same state: keep the one held
        pc->snaps[pc->nodes[node].snap].used = pc->clock;
        return NULL;
    }
    int32_t s = NONE;
    for (int i = 0; i < pc->max_snaps && s == NONE; i++)
        if (!pc->snaps[i].data) s = i;
    if (s == NONE) { // all held: the least recently used goes
        s = 0;
        for (int i = 1; i < pc->max_snaps; i++)
            if (pc->snaps[i].used < pc->snaps[s].used) s = i;
        drop_snap(pc, s);
    }
    pc->snaps[s] =
        (pc_snap){.data = ft_malloc(pc->snap_floats * sizeof(float)), .node = node, .used = pc->clock};
    pc->nodes[node].snap = s;
    pc->n_snaps++;
    return pc->snaps[s].data;
}

int ft_prefix_cache_match_snapshot(ft_prefix_cache *pc, const int32_t *tokens, int n, int32_t *blocks,
                                   int max_blocks, const float **snap) {
    *snap = NULL;
    int best = 0;
    int32_t s = NONE;
    match_path(pc, tokens, n, blocks, max_blocks, NULL, &best, &s);
    if (best == 0) return 0;
    pc->snaps[s].used = pc->clock;
    *snap = pc->snaps[s].data;
    return best;
}

int ft_prefix_cache_n_snapshots(const ft_prefix_cache *pc) {
    return pc->n_snaps;
}
