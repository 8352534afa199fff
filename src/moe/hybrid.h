// hybrid: how `--moe-backend hybrid` splits a decode step's missed experts between the two
// roads from host memory: copy into a GPU slot over PCIe (then compute on the GPU), or compute
// on the CPU from the host bank (the result joins the layer's sum on the GPU).
//
// The rule is plain integer arithmetic on three measured costs per layer, so the device's
// lookup (expert_cache.cu) and this reference make the same choice bit for bit. Copies go one
// after another over the bus; the CPU computes its share after a meeting with the GPU, while
// the copies and the hits' GPU work run: the layer waits for the slower of the two roads.
// A miss computed on the CPU is still copied into the cache, behind the step (the cache keeps
// offload's LRU exactly): the split decides only which copies the step waits for.
//
// Plain data and a pure function; thread-safe.
#ifndef FT_MOE_HYBRID_H
#define FT_MOE_HYBRID_H

#include <stdint.h>

typedef struct moe_hybrid_costs {
    uint32_t copy_ns; // one of the layer's experts host-to-device (its three banks)
    uint32_t cpu_ns;  // one of the layer's experts computed on the CPU for one token
    uint32_t meet_ns; // the fixed cost of the CPU road: export, host wake-up, import
} moe_hybrid_costs;

#ifdef __CUDACC__
#define MOE_HYBRID_FN static inline __host__ __device__
#else
#define MOE_HYBRID_FN static inline
#endif

// Of k distinct missed experts, how many the CPU computes: the n in [0, k] minimising
// max((k - n) * copy_ns, n > 0 ? meet_ns + n * cpu_ns : 0), the smallest such n (a tie
// copies: a copied expert may hit later). The copies are the first k - n misses in order of
// first appearance, the CPU takes the rest. c NULL: 0 (copy every miss). Defined here so
// that the device's lookup runs this very code.
MOE_HYBRID_FN int moe_hybrid_cpu_share(int k, const moe_hybrid_costs *c) {
    if (!c || k <= 0) return 0;
    int best = 0;
    uint64_t best_t = (uint64_t)k * c->copy_ns;
    for (int n = 1; n <= k; n++) {
        uint64_t copy = (uint64_t)(k - n) * c->copy_ns, cpu = c->meet_ns + (uint64_t)n * c->cpu_ns;
        uint64_t t = copy > cpu ? copy : cpu;
        if (t < best_t) best = n, best_t = t;
    }
    return best;
}

#endif
