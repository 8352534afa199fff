// kv.c: the key/value cache (see kv.h).
#include "kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ft_kv_cache {
    ft_backend *be;     // where the rows live (its buffers)
    int n_layer, n_ctx;
    ft_tensor *k, *v;   // (n_layer)
    ft_tensor *conv, *state; // (n_layer) recurrent layers' state
    size_t bytes;
    int rot_k, rot_v;
};

ft_kv_cache *ft_kv_init(const ft_kv_params *p, ft_backend *be, ft_err *err) {
    if (p->type != FT_TYPE_F16 && p->type != FT_TYPE_Q8_0) {
        ft_err_set(err, "KV cache type %s: only f16 and q8_0 are supported", ft_type_name(p->type));
        return NULL;
    }
    int block = ft_type_traits_find(p->type)->block_elems;
    for (int l = 0; l < p->n_layer; l++)
        if (p->width[l] < 0 || p->width[l] % block) {
            ft_err_set(err, "KV cache type %s: layer %d's row of %lld values is not a multiple of %d",
                       ft_type_name(p->type), l, (long long)p->width[l], block);
            return NULL;
        }
    ft_kv_cache *kv = ft_calloc(1, sizeof(*kv));
    kv->be = be;
    kv->n_layer = p->n_layer;
    kv->n_ctx = p->n_ctx;
    if (p->type != FT_TYPE_F16 && p->head_dim > 0 && p->head_dim % 64 == 0) {
        // K: the largest power of two (from 64) dividing the head size; V: always 64
        kv->rot_k = 64;
        while (p->head_dim % (kv->rot_k * 2) == 0) kv->rot_k *= 2;
        kv->rot_v = 64;
    }
    kv->k = ft_calloc((size_t)p->n_layer, sizeof(ft_tensor));
    kv->v = ft_calloc((size_t)p->n_layer, sizeof(ft_tensor));
    kv->conv = ft_calloc((size_t)p->n_layer, sizeof(ft_tensor));
    kv->state = ft_calloc((size_t)p->n_layer, sizeof(ft_tensor));
    for (int l = 0; l < p->n_layer; l++) {
        ft_tensor *ts[4] = {&kv->k[l], &kv->v[l], &kv->conv[l], &kv->state[l]};
        int64_t rows[4] = {p->n_ctx, p->n_ctx, 1, 1};
        int64_t width[4] = {p->width[l], p->width[l], p->conv_floats ? p->conv_floats[l] : 0,
                            p->state_floats ? p->state_floats[l] : 0};
        static const char *const names[4] = {"cache_k", "cache_v", "conv_state", "ssm_state"};
        for (int i = 0; i < 4; i++) {
            if (width[i] <= 0) continue;
            ft_tensor *t = ts[i];
            snprintf(t->name, sizeof(t->name), "%s.%d", names[i], l);
            t->type = i < 2 ? p->type : FT_TYPE_F32;
            t->ne[0] = width[i];
            t->ne[1] = rows[i];
            t->ne[2] = 1;
            t->row_bytes = ft_row_bytes(t->type, width[i]);
            t->mat_bytes = t->row_bytes * (size_t)rows[i];
            t->data = be->ops->buffer_alloc(be, t->mat_bytes);
            t->placement = be->placement;
            if (!t->data) {
                ft_err_set(err, "out of %s memory for the KV cache (%s, %zu bytes)", be->ops->name, t->name,
                           t->mat_bytes);
                ft_kv_free(kv);
                return NULL;
            }
            kv->bytes += t->mat_bytes;
        }
    }
    return kv;
}

void ft_kv_free(ft_kv_cache *kv) {
    if (!kv) return;
    for (int l = 0; l < kv->n_layer; l++) {
        kv->be->ops->buffer_free(kv->be, kv->k[l].data);
        kv->be->ops->buffer_free(kv->be, kv->v[l].data);
        kv->be->ops->buffer_free(kv->be, kv->conv[l].data);
        kv->be->ops->buffer_free(kv->be, kv->state[l].data);
    }
    free(kv->k);
    free(kv->v);
    free(kv->conv);
    free(kv->state);
    free(kv);
}

ft_tensor *ft_kv_k(ft_kv_cache *kv, int layer) {
    FT_ASSERT(layer >= 0 && layer < kv->n_layer);
    return &kv->k[layer];
}

ft_tensor *ft_kv_v(ft_kv_cache *kv, int layer) {
    FT_ASSERT(layer >= 0 && layer < kv->n_layer);
    return &kv->v[layer];
}

ft_tensor *ft_kv_conv(ft_kv_cache *kv, int layer) {
    FT_ASSERT(layer >= 0 && layer < kv->n_layer);
    return &kv->conv[layer];
}

ft_tensor *ft_kv_state(ft_kv_cache *kv, int layer) {
    FT_ASSERT(layer >= 0 && layer < kv->n_layer);
    return &kv->state[layer];
}

int ft_kv_rot_k(const ft_kv_cache *kv) { return kv->rot_k; }
int ft_kv_rot_v(const ft_kv_cache *kv) { return kv->rot_v; }
int ft_kv_n_ctx(const ft_kv_cache *kv) { return kv->n_ctx; }
size_t ft_kv_bytes(const ft_kv_cache *kv) { return kv->bytes; }

bool ft_kv_type_from_name(const char *name, enum ft_type *out) {
    if (!strcmp(name, "f16")) *out = FT_TYPE_F16;
    else if (!strcmp(name, "q8_0")) *out = FT_TYPE_Q8_0;
    else return false;
    return true;
}
