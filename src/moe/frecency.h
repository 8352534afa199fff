// frecency: the score by which the expert cache's frecency victims are chosen
// (moe_cache_policy_params.victims = MOE_VICTIMS_FRECENCY; the rule: expert_cache.h), and the
// update of an expert's use counters. Defined here so that the C reference (expert_cache.c) and
// the device's lookup (expert_cache.cu) run this very code and agree bit for bit.
//
// Per (layer, expert): c, the layer's steps that selected it; l, the step of its last use; h, a
// 64-bit history (bit i: selected at step l - i). Per layer: u, its steps so far.
//
// Plain data and pure functions; thread-safe.
#ifndef FT_MOE_FRECENCY_H
#define FT_MOE_FRECENCY_H

#include <stdint.h>

#ifdef __CUDACC__
#define MOE_FRECENCY_FN static inline __host__ __device__
#else
#define MOE_FRECENCY_FN static inline
#endif

// Recent steps weighed: the 8 before the current one.
enum { MOE_FRECENCY_WINDOW = 8 };

MOE_FRECENCY_FN uint32_t moe_frecency_popcount(uint64_t x) {
#ifdef __CUDA_ARCH__
    return (uint32_t)__popcll(x);
#else
    return (uint32_t)__builtin_popcountll(x);
#endif
}

// 8 w + floor(80 c / u) at layer step u: w, the steps u - 1 .. u - 8 that selected the expert;
// the second term 0 while u = 0. At most 8 x 8 + 80 = 144 (c <= u).
MOE_FRECENCY_FN uint32_t moe_frecency_score(uint64_t u, uint32_t count, uint64_t last, uint64_t hist) {
    uint64_t age = u - last;
    uint64_t h = age >= 64 ? 0 : hist << age;
    uint64_t window = ((1ull << MOE_FRECENCY_WINDOW) - 1) << 1;
    uint64_t rate = u ? 80 * (uint64_t)count / u : 0;
    return 8 * moe_frecency_popcount(h & window) + (uint32_t)rate;
}

// The expert's counters after a use at layer step u (u > its last use).
MOE_FRECENCY_FN void moe_frecency_use(uint64_t u, uint32_t *count, uint64_t *last, uint64_t *hist) {
    uint64_t age = u - *last;
    *hist = (age >= 64 ? 0 : *hist << age) | 1;
    *last = u;
    *count += 1;
}

#endif
