// expert_banks.c: host expert banks carved from one allocation, filled from the GGUF mapping.
#include "expert_banks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_bank_names[MOE_BANK_COUNT] = {"gate", "up", "down"};

static void *aligned_host_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    size_t rounded = (bytes + MOE_BANK_ALIGN - 1) / MOE_BANK_ALIGN * MOE_BANK_ALIGN;
    return aligned_alloc(MOE_BANK_ALIGN, rounded ? rounded : MOE_BANK_ALIGN);
}

static void aligned_host_free(void *ctx, void *p, size_t bytes) {
    (void)ctx;
    (void)bytes;
    free(p);
}

moe_host_allocator moe_host_allocator_default(void) {
    return (moe_host_allocator){aligned_host_alloc, aligned_host_free, NULL, "page-aligned malloc"};
}

moe_expert_banks_params moe_expert_banks_default_params(void) {
    return (moe_expert_banks_params){moe_host_allocator_default(), 0};
}

static uint64_t align_up(uint64_t x) { return (x + MOE_BANK_ALIGN - 1) / MOE_BANK_ALIGN * MOE_BANK_ALIGN; }

uint64_t moe_expert_banks_bytes(const moe_geometry *g) {
    uint64_t total = 0;
    for (int i = 0; i < g->n_layers; i++)
        for (int b = 0; b < MOE_BANK_COUNT; b++)
            total += align_up((uint64_t)g->layers[i].n_expert * g->layers[i].bytes[b]);
    return total;
}

uint64_t moe_mem_available(ft_err *err) {
    size_t n = ft_mem_available();
    if (!n) ft_err_set(err, "cannot read MemAvailable from /proc/meminfo to check the available RAM");
    return n;
}

static double gib(uint64_t b) { return (double)b / 1073741824.0; }

moe_expert_banks *moe_expert_banks_load(const gguf_file *f, const moe_geometry *g,
                                        const moe_expert_banks_params *p, ft_err *err) {
    uint64_t need = moe_expert_banks_bytes(g);
    uint64_t avail = p->ram_available;
    if (!avail && !(avail = moe_mem_available(err))) return NULL;
    if (need > avail) {
        ft_err_set(err,
                   "the host expert banks need %llu bytes (%.2f GiB) but only %llu bytes (%.2f GiB) of "
                   "RAM are available",
                   (unsigned long long)need, gib(need), (unsigned long long)avail, gib(avail));
        return NULL;
    }
    // Look every tensor up and check it against g before allocating anything.
    const gguf_tensor **src = ft_calloc((size_t)g->n_layers * MOE_BANK_COUNT, sizeof(*src));
    for (int i = 0; i < g->n_layers; i++) {
        const moe_layer_geometry *lg = &g->layers[i];
        for (int b = 0; b < MOE_BANK_COUNT; b++) {
            // a fused layer's gate and up both come from its ffn_gate_up_exps, half of each expert
            bool fused = lg->gate_up_fused && b != MOE_BANK_DOWN;
            char name[96];
            snprintf(name, sizeof(name), "blk.%d.ffn_%s_exps.weight", lg->layer,
                     fused ? "gate_up" : g_bank_names[b]);
            const gguf_tensor *t = gguf_find_tensor(f, name);
            uint64_t expert_bytes = fused ? lg->bytes[MOE_BANK_GATE] + lg->bytes[MOE_BANK_UP] : lg->bytes[b];
            if (!t || t->type != lg->type[b] || t->n_dims != 3 || t->ne[2] != lg->n_expert ||
                t->bytes != (uint64_t)lg->n_expert * expert_bytes ||
                (fused && lg->bytes[MOE_BANK_GATE] != lg->bytes[MOE_BANK_UP])) {
                free(src);
                ft_err_set(err, "tensor '%s' is %s the expert geometry read from this file", name,
                           t ? "inconsistent with" : "missing from");
                return NULL;
            }
            src[i * MOE_BANK_COUNT + b] = t;
        }
    }
    moe_expert_banks *hb = ft_calloc(1, sizeof(*hb));
    hb->alloc = p->alloc;
    hb->bytes = need;
    hb->block = need ? p->alloc.alloc(p->alloc.ctx, need) : NULL;
    if (need && !hb->block) {
        free(src);
        free(hb);
        ft_err_set(err, "%s of %llu bytes (%.2f GiB) for the host expert banks failed", p->alloc.name,
                   (unsigned long long)need, gib(need));
        return NULL;
    }
    hb->n_layers = g->n_layers;
    hb->layers = ft_calloc((size_t)(g->n_layers ? g->n_layers : 1), sizeof(*hb->layers));
    uint64_t off = 0;
    for (int i = 0; i < g->n_layers; i++) {
        const moe_layer_geometry *lg = &g->layers[i];
        moe_host_layer *hl = &hb->layers[i];
        hl->layer = lg->layer;
        hl->n_expert = lg->n_expert;
        for (int b = 0; b < MOE_BANK_COUNT; b++) {
            const gguf_tensor *t = src[i * MOE_BANK_COUNT + b];
            moe_expert_bank *k = &hl->bank[b];
            k->type = lg->type[b];
            k->expert_bytes = lg->bytes[b];
            k->data = (uint8_t *)hb->block + off;
            uint64_t n = (uint64_t)hl->n_expert * k->expert_bytes;
            if (lg->gate_up_fused && b != MOE_BANK_DOWN) {
                // expert e of the fused tensor: its gate rows, then its up rows
                const uint8_t *half = (const uint8_t *)t->data + (b == MOE_BANK_UP ? k->expert_bytes : 0);
                for (int e = 0; e < hl->n_expert; e++)
                    memcpy(k->data + (uint64_t)e * k->expert_bytes, half + 2 * (uint64_t)e * k->expert_bytes,
                           k->expert_bytes);
            } else {
                memcpy(k->data, t->data, n);
            }
            off += align_up(n);
        }
    }
    FT_ASSERT(off == need);
    free(src);
    return hb;
}

void moe_expert_banks_free(moe_expert_banks *hb) {
    if (!hb) return;
    if (hb->block) hb->alloc.free(hb->alloc.ctx, hb->block, hb->bytes);
    free(hb->layers);
    free(hb);
}
