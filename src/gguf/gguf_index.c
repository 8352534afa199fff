// gguf_index.c: a name -> index hash table for keys and tensor names.
//
// Open addressing with linear probing over a power-of-two table kept at most half full.
// Each slot keeps the full 64-bit hash, so a probe compares names only when hashes match.
#include "gguf_impl.h"

#include <stdlib.h>

// FNV-1a, 64-bit.
static uint64_t hash_name(const char *s, uint64_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static bool name_is(const gguf_index *ix, int64_t i, const char *name, uint64_t len) {
    gguf_str s = ix->name_of(ix->owner, i);
    return s.len == len && (len == 0 || memcmp(s.ptr, name, len) == 0);
}

static void alloc_slots(gguf_index *ix, uint64_t cap) {
    ix->cap = cap;
    ix->slots = ft_malloc(cap * sizeof(*ix->slots));
    for (uint64_t k = 0; k < cap; k++)
        ix->slots[k] = (gguf_index_slot){0, -1};
}

// The slot holding name, or the empty slot where it would go.
static uint64_t probe(const gguf_index *ix, uint64_t h, const char *name, uint64_t len) {
    uint64_t mask = ix->cap - 1;
    for (uint64_t k = h & mask;; k = (k + 1) & mask) {
        const gguf_index_slot *s = &ix->slots[k];
        if (s->i < 0 || (s->hash == h && name_is(ix, s->i, name, len))) return k;
    }
}

void gguf_index_init(gguf_index *ix, gguf_index_name_fn name_of, const void *owner, int64_t expected) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)FT_MAX(expected, 0))
        cap *= 2;
    *ix = (gguf_index){.name_of = name_of, .owner = owner};
    alloc_slots(ix, cap);
}

void gguf_index_free(gguf_index *ix) {
    free(ix->slots);
    ix->slots = NULL;
    ix->cap = 0;
    ix->n = 0;
}

static void grow(gguf_index *ix) {
    gguf_index_slot *old = ix->slots;
    uint64_t old_cap = ix->cap;
    alloc_slots(ix, old_cap * 2);
    for (uint64_t k = 0; k < old_cap; k++) {
        if (old[k].i < 0) continue;
        uint64_t mask = ix->cap - 1, j = old[k].hash & mask;
        while (ix->slots[j].i >= 0)
            j = (j + 1) & mask;
        ix->slots[j] = old[k];
    }
    free(old);
}

int64_t gguf_index_add(gguf_index *ix, int64_t i) {
    if (2 * (uint64_t)(ix->n + 1) > ix->cap) grow(ix);
    gguf_str name = ix->name_of(ix->owner, i);
    uint64_t h = hash_name(name.ptr, name.len);
    uint64_t k = probe(ix, h, name.ptr, name.len);
    if (ix->slots[k].i >= 0) return ix->slots[k].i;
    ix->slots[k] = (gguf_index_slot){h, i};
    ix->n++;
    return -1;
}

int64_t gguf_index_find(const gguf_index *ix, const char *name, uint64_t len) {
    if (!ix->slots) return -1;
    return ix->slots[probe(ix, hash_name(name, len), name, len)].i;
}
