// geometry.c: expert geometry per layer and its exact-geometry groups.
#include "geometry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_bank_names[MOE_BANK_COUNT] = {"gate", "up", "down"};

// The fused gate and up experts of a layer, in parse_expert_tensor's answer.
enum { BANK_GATE_UP = MOE_BANK_COUNT };

// Parses "blk.<L>.ffn_<bank>_exps.weight" (bank gate, up, down or gate_up). Returns the bank,
// BANK_GATE_UP, or -1.
static int parse_expert_tensor(gguf_str name, int *layer) {
    static const char *const suffix[MOE_BANK_COUNT + 1] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                                           "ffn_down_exps.weight", "ffn_gate_up_exps.weight"};
    char buf[128];
    if (name.len >= sizeof(buf)) return -1;
    memcpy(buf, name.ptr, name.len);
    buf[name.len] = 0;
    int l, n = 0;
    if (sscanf(buf, "blk.%d.%n", &l, &n) != 1 || n == 0 || l < 0) return -1;
    for (int b = 0; b <= MOE_BANK_COUNT; b++)
        if (!strcmp(buf + n, suffix[b])) {
            *layer = l;
            return b;
        }
    return -1;
}

static int cmp_layer(const void *a, const void *b) {
    return ((const moe_layer_geometry *)a)->layer - ((const moe_layer_geometry *)b)->layer;
}

static moe_layer_geometry *find_or_add(moe_geometry *g, int layer, int *cap) {
    for (int i = 0; i < g->n_layers; i++)
        if (g->layers[i].layer == layer) return &g->layers[i];
    if (g->n_layers == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        g->layers = ft_realloc(g->layers, (size_t)*cap * sizeof(*g->layers));
    }
    moe_layer_geometry *lg = &g->layers[g->n_layers++];
    memset(lg, 0, sizeof(*lg));
    lg->layer = layer;
    lg->n_expert = -1;
    return lg;
}

static void build_groups(moe_geometry *g) {
    g->groups = ft_calloc((size_t)g->n_layers, sizeof(*g->groups));
    uint64_t widest[MOE_BANK_COUNT] = {0};
    for (int i = 0; i < g->n_layers; i++) {
        const moe_layer_geometry *lg = &g->layers[i];
        moe_geometry_group *grp = NULL;
        for (int j = 0; j < g->n_groups && !grp; j++)
            if (!memcmp(g->groups[j].bytes, lg->bytes, sizeof(lg->bytes))) grp = &g->groups[j];
        if (!grp) {
            grp = &g->groups[g->n_groups++];
            memcpy(grp->bytes, lg->bytes, sizeof(lg->bytes));
            grp->layers = ft_malloc((size_t)g->n_layers * sizeof(int));
        }
        grp->layers[grp->n_layers++] = lg->layer;
        for (int b = 0; b < MOE_BANK_COUNT; b++) {
            g->bytes_native += (uint64_t)lg->n_expert * lg->bytes[b];
            if (lg->bytes[b] > widest[b]) widest[b] = lg->bytes[b];
        }
    }
    for (int i = 0; i < g->n_layers; i++)
        for (int b = 0; b < MOE_BANK_COUNT; b++)
            g->bytes_padded += (uint64_t)g->layers[i].n_expert * widest[b];
}

bool moe_geometry_read(const gguf_file *f, moe_geometry *out, ft_err *err) {
    memset(out, 0, sizeof(*out));
    int cap = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        int layer;
        int bank = parse_expert_tensor(t->name, &layer);
        if (bank < 0) continue;
        if (t->n_dims != 3) {
            moe_geometry_free(out);
            return ft_err_set(err, "tensor '%.*s': expert tensors must be 3-D, this one has %u dims",
                              (int)t->name.len, t->name.ptr, t->n_dims);
        }
        moe_layer_geometry *lg = find_or_add(out, layer, &cap);
        if (lg->n_expert >= 0 && lg->n_expert != t->ne[2]) {
            int64_t other = lg->n_expert;
            moe_geometry_free(out);
            return ft_err_set(err, "tensor '%.*s': %lld experts, but another bank of layer %d has %lld",
                              (int)t->name.len, t->name.ptr, (long long)t->ne[2], layer,
                              (long long)other);
        }
        // one layout per layer: gate and up fused, or each its own tensor
        bool fused = bank == BANK_GATE_UP;
        const char *clash = NULL;
        if (fused && (lg->bytes[MOE_BANK_GATE] || lg->bytes[MOE_BANK_UP])) clash = "split gate/up experts too";
        if (!fused && bank != MOE_BANK_DOWN && lg->gate_up_fused) clash = "fused gate/up experts too";
        if (fused && t->ne[1] % 2) clash = "an odd number of gate/up rows";
        if (clash) {
            moe_geometry_free(out);
            return ft_err_set(err, "tensor '%.*s': layer %d has %s", (int)t->name.len, t->name.ptr, layer,
                              clash);
        }
        lg->n_expert = (int)t->ne[2];
        uint64_t bytes = t->bytes / (uint64_t)t->ne[2];
        if (fused) {
            // each expert: its gate rows, then as many up rows
            lg->gate_up_fused = true;
            lg->type[MOE_BANK_GATE] = lg->type[MOE_BANK_UP] = t->type;
            lg->bytes[MOE_BANK_GATE] = lg->bytes[MOE_BANK_UP] = bytes / 2;
            continue;
        }
        lg->type[bank] = t->type;
        lg->bytes[bank] = bytes;
    }
    for (int i = 0; i < out->n_layers; i++)
        for (int b = 0; b < MOE_BANK_COUNT; b++)
            if (!out->layers[i].bytes[b]) {
                int layer = out->layers[i].layer;
                moe_geometry_free(out);
                return ft_err_set(err, "layer %d: expert tensor blk.%d.ffn_%s_exps.weight is missing%s",
                                  layer, layer, g_bank_names[b],
                                  b == MOE_BANK_DOWN ? "" : " (nor are gate and up fused in ffn_gate_up_exps)");
            }
    qsort(out->layers, (size_t)out->n_layers, sizeof(*out->layers), cmp_layer);
    build_groups(out);
    return true;
}

void moe_geometry_from_layers(const moe_layer_geometry *layers, int n_layers, moe_geometry *out) {
    memset(out, 0, sizeof(*out));
    out->n_layers = n_layers;
    out->layers = ft_malloc((size_t)(n_layers ? n_layers : 1) * sizeof(*out->layers));
    memcpy(out->layers, layers, (size_t)n_layers * sizeof(*layers));
    qsort(out->layers, (size_t)n_layers, sizeof(*out->layers), cmp_layer);
    build_groups(out);
}

void moe_geometry_keep_below(moe_geometry *g, int end_layer) {
    int n = 0;
    while (n < g->n_layers && g->layers[n].layer < end_layer) n++; // (ascending)
    if (n == g->n_layers) return;
    moe_geometry kept;
    moe_geometry_from_layers(g->layers, n, &kept);
    moe_geometry_free(g);
    *g = kept;
}

void moe_geometry_free(moe_geometry *g) {
    if (!g) return;
    for (int i = 0; i < g->n_groups; i++) free(g->groups[i].layers);
    free(g->groups);
    free(g->layers);
    memset(g, 0, sizeof(*g));
}
