// tables.h: the code books of the non-linear 4-bit formats (internal to quant/ and CUDA).
#ifndef FT_QUANT_TABLES_H
#define FT_QUANT_TABLES_H

#include <stdint.h>

// IQ4_NL / IQ4_XS: 16 non-uniform levels, denser near zero.
static const int8_t ft_kvalues_iq4nl[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

// MXFP4: the E2M1 values {0, 0.5, 1, 1.5, 2, 3, 4, 6} and their negatives, doubled so they are
// integers (the block's scale is halved to compensate).
static const int8_t ft_kvalues_mxfp4[16] = {
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
};

#endif
