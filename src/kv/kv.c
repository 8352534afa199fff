// kv.c: the paged key/value cache (see kv.h).
#include "kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ft_kv_store {
    ft_backend *be;
    int n_layer;
    int64_t n_blocks;
    ft_tensor *k, *v; // (n_layer) n_blocks * FT_KV_BLOCK rows each; absent for recurrent layers
    size_t bytes;
    int *rot_k, rot_v; // (n_layer) K's chunk per layer; V's (0: no rotation)
};

struct ft_kv_cache {
    ft_kv_store *st;
    ft_backend *be;
    int n_ctx;
    int32_t *table;       // (max_blocks) host copy
    int n_blocks, max_blocks;
    int32_t *table_dev;   // (max_blocks) the backend's copy
    int synced;           // leading entries of table_dev equal to table's
    ft_tensor *conv, *state; // (n_layer) recurrent layers' state
};

static bool check_params(const ft_kv_params *p, ft_err *err) {
    if (p->type != FT_TYPE_F16 && p->type != FT_TYPE_Q8_0)
        return ft_err_set(err, "KV cache type %s: only f16 and q8_0 are supported", ft_type_name(p->type));
    int block = ft_type_traits_find(p->type)->block_elems;
    for (int l = 0; l < p->n_layer; l++)
        if (p->width[l] < 0 || p->width[l] % block)
            return ft_err_set(err, "KV cache type %s: layer %d's row of %lld values is not a multiple of %d",
                              ft_type_name(p->type), l, (long long)p->width[l], block);
    return true;
}

// One f32 or cache tensor of rows x width in be's buffers (width 0: left absent).
static bool tensor_alloc(ft_tensor *t, ft_backend *be, const char *name, int layer, enum ft_type type,
                         int64_t width, int64_t rows, ft_err *err) {
    if (width <= 0) return true;
    snprintf(t->name, sizeof(t->name), "%s.%d", name, layer);
    t->type = type;
    t->ne[0] = width;
    t->ne[1] = rows;
    t->ne[2] = 1;
    t->row_bytes = ft_row_bytes(type, width);
    t->mat_bytes = t->row_bytes * (size_t)rows;
    t->placement = be->placement;
    if ((t->data = be->ops->buffer_alloc(be, t->mat_bytes))) return true;
    return ft_err_set(err, "out of %s memory for the KV cache (%s, %zu bytes)", be->ops->name, t->name, t->mat_bytes);
}

static void tensors_free(ft_backend *be, ft_tensor *ts, int n) {
    if (!ts) return;
    for (int l = 0; l < n; l++) be->ops->buffer_free(be, ts[l].data);
    free(ts);
}

static int64_t store_blocks(const ft_kv_params *p) {
    return p->n_blocks > 0 ? p->n_blocks : ft_kv_blocks_for(p->n_ctx);
}

ft_kv_store *ft_kv_store_init(const ft_kv_params *p, ft_backend *be, ft_err *err) {
    if (!check_params(p, err)) return NULL;
    ft_kv_store *st = ft_calloc(1, sizeof(*st));
    st->be = be;
    st->n_layer = p->n_layer;
    st->n_blocks = store_blocks(p);
    st->rot_k = ft_calloc((size_t)p->n_layer, sizeof(int));
    int64_t first = p->head_dims ? p->head_dims[0] : p->head_dim;
    if (p->type != FT_TYPE_F16 && first > 0 && first % 64 == 0) {
        // K: the largest power of two (from 64) dividing the layer's head size; V: always 64
        st->rot_v = 64;
        for (int l = 0; l < p->n_layer; l++) {
            int64_t hd = p->head_dims ? p->head_dims[l] : p->head_dim;
            if (p->width[l] > 0 && hd % 64) {
                ft_err_set(err, "KV cache type %s: layer %d's head size %lld is not a multiple of 64 (the first "
                                "layer's is, so llama.cpp would rotate its cache in chunks across heads)",
                           ft_type_name(p->type), l, (long long)hd);
                ft_kv_store_free(st);
                return NULL;
            }
            st->rot_k[l] = 64;
            while (hd % (st->rot_k[l] * 2) == 0) st->rot_k[l] *= 2;
        }
    }
    st->k = ft_calloc((size_t)p->n_layer, sizeof(ft_tensor));
    st->v = ft_calloc((size_t)p->n_layer, sizeof(ft_tensor));
    int64_t rows = st->n_blocks * FT_KV_BLOCK;
    for (int l = 0; l < p->n_layer; l++) {
        if (!tensor_alloc(&st->k[l], be, "cache_k", l, p->type, p->width[l], rows, err) ||
            !tensor_alloc(&st->v[l], be, "cache_v", l, p->type, p->width[l], rows, err)) {
            ft_kv_store_free(st);
            return NULL;
        }
        st->bytes += st->k[l].mat_bytes + st->v[l].mat_bytes;
    }
    return st;
}

void ft_kv_store_free(ft_kv_store *st) {
    if (!st) return;
    tensors_free(st->be, st->k, st->n_layer);
    tensors_free(st->be, st->v, st->n_layer);
    free(st->rot_k);
    free(st);
}

int64_t ft_kv_store_n_blocks(const ft_kv_store *st) { return st->n_blocks; }
size_t ft_kv_store_bytes(const ft_kv_store *st) { return st->bytes; }

size_t ft_kv_block_bytes(const ft_kv_params *p) {
    size_t bytes = 0;
    for (int l = 0; l < p->n_layer; l++)
        if (p->width[l] > 0) bytes += 2 * FT_KV_BLOCK * ft_row_bytes(p->type, p->width[l]);
    return bytes;
}

size_t ft_kv_seq_bytes(const ft_kv_params *p) {
    size_t bytes = (size_t)ft_kv_blocks_for(p->n_ctx) * sizeof(int32_t);
    for (int l = 0; l < p->n_layer; l++)
        bytes += (size_t)((p->conv_floats ? p->conv_floats[l] : 0) + (p->state_floats ? p->state_floats[l] : 0)) *
                 sizeof(float);
    return bytes;
}

ft_kv_cache *ft_kv_init(ft_kv_store *st, const ft_kv_params *p, ft_backend *be, ft_err *err) {
    FT_ASSERT(st->n_layer == p->n_layer && st->be == be);
    ft_kv_cache *kv = ft_calloc(1, sizeof(*kv));
    kv->st = st;
    kv->be = be;
    kv->n_ctx = p->n_ctx;
    kv->max_blocks = ft_kv_blocks_for(p->n_ctx);
    kv->table = ft_calloc((size_t)kv->max_blocks, sizeof(int32_t));
    kv->conv = ft_calloc((size_t)p->n_layer, sizeof(ft_tensor));
    kv->state = ft_calloc((size_t)p->n_layer, sizeof(ft_tensor));
    bool ok = (kv->table_dev = be->ops->buffer_alloc(be, (size_t)kv->max_blocks * sizeof(int32_t))) != NULL;
    if (!ok) ft_err_set(err, "out of %s memory for a block table", be->ops->name);
    for (int l = 0; l < p->n_layer && ok; l++)
        ok = tensor_alloc(&kv->conv[l], be, "conv_state", l, FT_TYPE_F32, p->conv_floats ? p->conv_floats[l] : 0, 1,
                          err) &&
             tensor_alloc(&kv->state[l], be, "ssm_state", l, FT_TYPE_F32, p->state_floats ? p->state_floats[l] : 0,
                          1, err);
    if (!ok) {
        ft_kv_free(kv);
        return NULL;
    }
    return kv;
}

void ft_kv_free(ft_kv_cache *kv) {
    if (!kv) return;
    tensors_free(kv->be, kv->conv, kv->st->n_layer);
    tensors_free(kv->be, kv->state, kv->st->n_layer);
    kv->be->ops->buffer_free(kv->be, kv->table_dev);
    free(kv->table);
    free(kv);
}

int ft_kv_n_blocks(const ft_kv_cache *kv) { return kv->n_blocks; }
const int32_t *ft_kv_block_ids(const ft_kv_cache *kv) { return kv->table; }

void ft_kv_push_block(ft_kv_cache *kv, int32_t block) {
    FT_ASSERT(kv->n_blocks < kv->max_blocks && block >= 0 && block < kv->st->n_blocks);
    kv->table[kv->n_blocks++] = block;
}

void ft_kv_clear(ft_kv_cache *kv) {
    kv->n_blocks = 0;
    kv->synced = 0;
}

void ft_kv_sync(ft_kv_cache *kv) {
    if (kv->synced >= kv->n_blocks) return;
    const ft_backend_ops *ops = kv->be->ops;
    (ops->buffer_write_ordered ? ops->buffer_write_ordered : ops->buffer_write)(
        kv->be, kv->table_dev + kv->synced, kv->table + kv->synced,
        (size_t)(kv->n_blocks - kv->synced) * sizeof(int32_t));
    kv->synced = kv->n_blocks;
}

const int32_t *ft_kv_blocks(const ft_kv_cache *kv) { return kv->table_dev; }

void ft_kv_copy_block_rows(ft_kv_cache *kv, int i, int32_t src, int n) {
    FT_ASSERT(i >= 0 && i < kv->n_blocks && src >= 0 && src < kv->st->n_blocks && n >= 0 && n <= FT_KV_BLOCK);
    int64_t dst = kv->table[i];
    FT_ASSERT(dst != src);
    for (int l = 0; l < kv->st->n_layer; l++) {
        ft_tensor *ts[2] = {&kv->st->k[l], &kv->st->v[l]};
        for (int t = 0; t < 2; t++)
            if (ts[t]->data)
                kv->be->ops->copy_rows(kv->be, ts[t], dst * FT_KV_BLOCK, (int64_t)src * FT_KV_BLOCK, n);
    }
}

ft_tensor *ft_kv_k(ft_kv_cache *kv, int layer) {
    FT_ASSERT(layer >= 0 && layer < kv->st->n_layer);
    return &kv->st->k[layer];
}

ft_tensor *ft_kv_v(ft_kv_cache *kv, int layer) {
    FT_ASSERT(layer >= 0 && layer < kv->st->n_layer);
    return &kv->st->v[layer];
}

ft_tensor *ft_kv_conv(ft_kv_cache *kv, int layer) {
    FT_ASSERT(layer >= 0 && layer < kv->st->n_layer);
    return &kv->conv[layer];
}

ft_tensor *ft_kv_state(ft_kv_cache *kv, int layer) {
    FT_ASSERT(layer >= 0 && layer < kv->st->n_layer);
    return &kv->state[layer];
}

int ft_kv_rot_k(const ft_kv_cache *kv, int layer) {
    FT_ASSERT(layer >= 0 && layer < kv->st->n_layer);
    return kv->st->rot_k[layer];
}

int ft_kv_rot_v(const ft_kv_cache *kv, int layer) {
    FT_ASSERT(layer >= 0 && layer < kv->st->n_layer);
    return kv->st->rot_v;
}
int ft_kv_n_ctx(const ft_kv_cache *kv) { return kv->n_ctx; }

bool ft_kv_type_from_name(const char *name, enum ft_type *out) {
    if (!strcmp(name, "f16")) *out = FT_TYPE_F16;
    else if (!strcmp(name, "q8_0")) *out = FT_TYPE_Q8_0;
    else return false;
    return true;
}
