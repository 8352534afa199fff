// types.c: the traits table of every GGUF element type.
#include "quant.h"
#include "../util/util.h"

#include <strings.h>

// Sizes of the block types ft does not declare structs for (IQ1..IQ3, ternary, NVFP4, Q1_0,
// Q2_0); they are only needed to size and skip tensors of those types.
static const ft_type_traits g_traits[FT_TYPE_COUNT] = {
    [FT_TYPE_F32] = {"f32", 1, 4},
    [FT_TYPE_F16] = {"f16", 1, 2},
    [FT_TYPE_Q4_0] = {"q4_0", QK4_0, sizeof(block_q4_0)},
    [FT_TYPE_Q4_1] = {"q4_1", QK4_1, sizeof(block_q4_1)},
    [FT_TYPE_Q5_0] = {"q5_0", QK5_0, sizeof(block_q5_0)},
    [FT_TYPE_Q5_1] = {"q5_1", QK5_1, sizeof(block_q5_1)},
    [FT_TYPE_Q8_0] = {"q8_0", QK8_0, sizeof(block_q8_0)},
    [FT_TYPE_Q8_1] = {"q8_1", QK8_1, sizeof(block_q8_1)},
    [FT_TYPE_Q2_K] = {"q2_K", QK_K, sizeof(block_q2_K)},
    [FT_TYPE_Q3_K] = {"q3_K", QK_K, sizeof(block_q3_K)},
    [FT_TYPE_Q4_K] = {"q4_K", QK_K, sizeof(block_q4_K)},
    [FT_TYPE_Q5_K] = {"q5_K", QK_K, sizeof(block_q5_K)},
    [FT_TYPE_Q6_K] = {"q6_K", QK_K, sizeof(block_q6_K)},
    [FT_TYPE_Q8_K] = {"q8_K", QK_K, sizeof(block_q8_K)},
    [FT_TYPE_IQ2_XXS] = {"iq2_xxs", QK_K, 2 + QK_K / 8 * 2},
    [FT_TYPE_IQ2_XS] = {"iq2_xs", QK_K, 2 + QK_K / 8 * 2 + QK_K / 32},
    [FT_TYPE_IQ3_XXS] = {"iq3_xxs", QK_K, 2 + 3 * (QK_K / 8)},
    [FT_TYPE_IQ1_S] = {"iq1_s", QK_K, 2 + QK_K / 8 + QK_K / 16},
    [FT_TYPE_IQ4_NL] = {"iq4_nl", QK4_NL, sizeof(block_iq4_nl)},
    [FT_TYPE_IQ3_S] = {"iq3_s", QK_K, 2 + 13 * (QK_K / 32) + QK_K / 64},
    [FT_TYPE_IQ2_S] = {"iq2_s", QK_K, 2 + QK_K / 4 + QK_K / 16},
    [FT_TYPE_IQ4_XS] = {"iq4_xs", QK_K, sizeof(block_iq4_xs)},
    [FT_TYPE_I8] = {"i8", 1, 1},
    [FT_TYPE_I16] = {"i16", 1, 2},
    [FT_TYPE_I32] = {"i32", 1, 4},
    [FT_TYPE_I64] = {"i64", 1, 8},
    [FT_TYPE_F64] = {"f64", 1, 8},
    [FT_TYPE_IQ1_M] = {"iq1_m", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32},
    [FT_TYPE_BF16] = {"bf16", 1, 2},
    [FT_TYPE_TQ1_0] = {"tq1_0", QK_K, (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64 + 2},
    [FT_TYPE_TQ2_0] = {"tq2_0", QK_K, QK_K / 4 + 2},
    [FT_TYPE_MXFP4] = {"mxfp4", QK_MXFP4, sizeof(block_mxfp4)},
    [FT_TYPE_NVFP4] = {"nvfp4", 64, 64 / 16 + 64 / 2},
    [FT_TYPE_Q1_0] = {"q1_0", 128, 2 + 128 / 8},
    [FT_TYPE_Q2_0] = {"q2_0", 64, 2 + 64 / 4},
};

const ft_type_traits *ft_type_traits_find(uint32_t type_id) {
    if (type_id >= FT_TYPE_COUNT || g_traits[type_id].block_elems == 0) return NULL;
    return &g_traits[type_id];
}

const char *ft_type_name(uint32_t type_id) {
    const ft_type_traits *t = ft_type_traits_find(type_id);
    return t ? t->name : "unknown";
}

bool ft_type_from_name(const char *name, enum ft_type *out) {
    for (int i = 0; i < FT_TYPE_COUNT; i++) {
        if (g_traits[i].block_elems && strcasecmp(g_traits[i].name, name) == 0) {
            *out = (enum ft_type)i;
            return true;
        }
    }
    return false;
}

size_t ft_row_bytes(enum ft_type type, int64_t n) {
    const ft_type_traits *t = ft_type_traits_find(type);
    FT_ASSERT(t && n >= 0 && n % t->block_elems == 0);
    return (size_t)(n / t->block_elems) * (size_t)t->block_bytes;
}
