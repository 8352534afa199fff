// random.c: rows of random but valid blocks of any type, for synthetic models.
//
// Generating a multi-GB synthetic model by quantizing random floats would take minutes for the
// K-quants, so instead every code and sub-block scale is a random byte (all bit patterns are
// valid) and only the fp16 super-block scales are chosen: set so that the dequantized values
// have roughly the requested standard deviation and a mean near zero (the "min" terms of the
// q4_1/q5_1/q2_K/q4_K/q5_K formats are set to cancel the mean of their unsigned codes).
#include "quant.h"
#include "fp16.h"
#include "../util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// Writes the fp16 super-scales of block `blk` of type t for a nominal scale d.
static void set_block_scales(enum ft_type t, void *blk, float d) {
    switch (t) {
    case FT_TYPE_Q4_0: ((block_q4_0 *)blk)->d = ft_fp32_to_fp16(d); break;
    case FT_TYPE_Q4_1: {
        block_q4_1 *b = blk;
        b->d = ft_fp32_to_fp16(d);
        b->m = ft_fp32_to_fp16(-7.5f * d);
        break;
    }
    case FT_TYPE_Q5_0: ((block_q5_0 *)blk)->d = ft_fp32_to_fp16(d); break;
    case FT_TYPE_Q5_1: {
        block_q5_1 *b = blk;
        b->d = ft_fp32_to_fp16(d);
        b->m = ft_fp32_to_fp16(-15.5f * d);
        break;
    }
    case FT_TYPE_Q8_0: ((block_q8_0 *)blk)->d = ft_fp32_to_fp16(d); break;
    case FT_TYPE_IQ4_NL: ((block_iq4_nl *)blk)->d = ft_fp32_to_fp16(d); break;
    case FT_TYPE_MXFP4: {
        // E8M0: the nearest power of two to d
        int e = 127 + (int)lrintf(log2f(d > 0 ? d : 1e-30f));
        ((block_mxfp4 *)blk)->e = (uint8_t)(e < 1 ? 1 : e > 254 ? 254 : e);
        break;
    }
    case FT_TYPE_Q2_K: {
        // codes 0..3 (mean 1.5) times scale nibbles (mean 7.5) against min nibbles (mean 7.5)
        block_q2_K *b = blk;
        b->d = ft_fp32_to_fp16(d);
        b->dmin = ft_fp32_to_fp16(1.5f * d);
        break;
    }
    case FT_TYPE_Q3_K: ((block_q3_K *)blk)->d = ft_fp32_to_fp16(d); break;
    case FT_TYPE_Q4_K: {
        block_q4_K *b = blk;
        b->d = ft_fp32_to_fp16(d);
        b->dmin = ft_fp32_to_fp16(7.5f * d);
        break;
    }
    case FT_TYPE_Q5_K: {
        block_q5_K *b = blk;
        b->d = ft_fp32_to_fp16(d);
        b->dmin = ft_fp32_to_fp16(15.5f * d);
        break;
    }
    case FT_TYPE_Q6_K: ((block_q6_K *)blk)->d = ft_fp32_to_fp16(d); break;
    case FT_TYPE_IQ4_XS: ((block_iq4_xs *)blk)->d = ft_fp32_to_fp16(d); break;
    default: FT_ASSERT(!"set_block_scales: not a block type");
    }
}

static bool is_float_type(enum ft_type t) {
    return t == FT_TYPE_F32 || t == FT_TYPE_F16 || t == FT_TYPE_BF16;
}

// Standard deviation of the values of type t's random blocks at nominal scale 1, measured once
// per type by dequantizing a sample (so no per-format algebra has to be kept in sync).
static float unit_std(enum ft_type t) {
    static float cache[FT_TYPE_COUNT];
    if (cache[t] > 0) return cache[t];
    const ft_type_traits *tr = ft_type_traits_find(t);
    enum { N_BLOCKS = 64 };
    int64_t n = (int64_t)N_BLOCKS * tr->block_elems;
    uint8_t *blocks = ft_malloc((size_t)N_BLOCKS * tr->block_bytes);
    float *vals = ft_malloc((size_t)n * sizeof(float));
    ft_rng rng = ft_rng_init(0x5eed);
    for (size_t i = 0; i < (size_t)N_BLOCKS * tr->block_bytes; i++) blocks[i] = (uint8_t)ft_rng_next(&rng);
    for (int b = 0; b < N_BLOCKS; b++) set_block_scales(t, blocks + (size_t)b * tr->block_bytes, 1.0f);
    ft_quant_ops_find(t)->to_float(blocks, vals, n);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s += vals[i];
        s2 += (double)vals[i] * vals[i];
    }
    double mean = s / n, var = s2 / n - mean * mean;
    free(blocks);
    free(vals);
    cache[t] = var > 0 ? (float)sqrt(var) : 1.0f; // benign race: every thread computes the same
    return cache[t];
}

void ft_quant_random_row(enum ft_type t, ft_rng *rng, float std, void *dst, int64_t n) {
    const ft_type_traits *tr = ft_type_traits_find(t);
    FT_ASSERT(tr && n % tr->block_elems == 0);
    if (is_float_type(t)) {
        for (int64_t i = 0; i < n; i++) {
            float v = std * ft_rng_normal(rng);
            if (t == FT_TYPE_F32) ((float *)dst)[i] = v;
            else if (t == FT_TYPE_F16) ((ft_half *)dst)[i] = ft_fp32_to_fp16(v);
            else ((ft_bf16 *)dst)[i] = ft_fp32_to_bf16(v);
        }
        return;
    }
    FT_ASSERT(ft_quant_ops_find(t) && t != FT_TYPE_Q8_1 && t != FT_TYPE_Q8_K);
    float d = std / unit_std(t);
    uint8_t *p = dst;
    size_t bytes = (size_t)(n / tr->block_elems) * tr->block_bytes;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t r = ft_rng_next(rng);
        memcpy(p + i, &r, 8);
    }
    for (; i < bytes; i++) p[i] = (uint8_t)ft_rng_next(rng);
    // Vary the super-scale a little per block, as real weights do.
    for (int64_t b = 0; b < n / tr->block_elems; b++)
        set_block_scales(t, p + (size_t)b * tr->block_bytes, d * (0.75f + 0.5f * ft_rng_uniform(rng)));
}
