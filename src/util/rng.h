// rng.h: a small, fast, seedable pseudo-random generator (xoshiro256** seeded by splitmix64).
// Deterministic across platforms, so a seed names the same synthetic model everywhere.
// Not thread-safe per state: give each thread its own ft_rng.
#ifndef FT_RNG_H
#define FT_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct ft_rng {
    uint64_t s[4];
} ft_rng;

static inline uint64_t ft_rng_splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline ft_rng ft_rng_init(uint64_t seed) {
    ft_rng r;
    for (int i = 0; i < 4; i++) r.s[i] = ft_rng_splitmix(&seed);
    return r;
}

static inline uint64_t ft_rng_next(ft_rng *r) {
    uint64_t *s = r->s;
    uint64_t t = s[1] << 17, v = s[1] * 5;
    uint64_t result = ((v << 7) | (v >> 57)) * 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

// Uniform in [0, 1).
static inline float ft_rng_uniform(ft_rng *r) { return (float)(ft_rng_next(r) >> 40) * 0x1p-24f; }

// Standard normal (Box-Muller; one of the pair is discarded for simplicity).
static inline float ft_rng_normal(ft_rng *r) {
    float u1 = ft_rng_uniform(r), u2 = ft_rng_uniform(r);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
}

#endif
