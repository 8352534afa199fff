// hybrid_tune: the hybrid split's CPU cost corrected by what decode measures.
//
// The bandwidth profile prices the CPU road on a quiet machine. During a hybrid decode the
// copies stream from the same host memory while the CPU reads its experts, and the CPU op runs
// slower than priced (measured on an H100 host: 67 GB/s of expert weights against the
// profile's 99), so the split gives the CPU more misses than it can take in time. The engine
// therefore times each one-token layer step's CPU op on the host (n experts: predicted
// cpu_fixed_ns + n cpu_ns) and, once a window has enough of them, moves a scale s towards the
// window's measured / predicted ratio (over all layers; halfway, clamped to [1/4, 4]). The
// device's costs are then the base costs with the CPU's part scaled:
//   cpu_ns' = cpu_ns s,  meet_ns' = meet_ns + cpu_fixed_ns (s - 1)  (the meeting itself is not
//   the CPU's), copy_ns' = copy_ns.
// Off unless FT_HYBRID_TUNE=1: the copies slow down too when both roads read host memory, and
// correcting the CPU's road alone measured slower than the starting costs (docs/expert-cache.md).
//
// Plain data and pure functions on it; not thread-safe (one owner).
#ifndef FT_MOE_HYBRID_TUNE_H
#define FT_MOE_HYBRID_TUNE_H

#include "hybrid.h"

#include <stdbool.h>
#include <stdint.h>

enum { MOE_HYBRID_TUNE_MIN_OBS = 8 }; // one-token CPU ops a window needs to move the scale

typedef struct moe_hybrid_tune {
    int n_layers;
    moe_hybrid_costs *base; // (n_layers) the costs the scale applies to
    uint32_t *cpu_fixed_ns; // (n_layers) the CPU op's fixed part of each base meet_ns
    double scale;           // the CPU's: 1 until a window moves it
    double meas_ns, pred_ns; // the window so far
    uint64_t n_obs;
} moe_hybrid_tune;

// base: the costs of the n_layers layers as set up (meet_ns includes cpu_fixed_ns[i]).
void moe_hybrid_tune_init(moe_hybrid_tune *t, int n_layers, const moe_hybrid_costs *base,
                          const uint32_t *cpu_fixed_ns);
void moe_hybrid_tune_free(moe_hybrid_tune *t);

// Layer li's one-token CPU ops since the last call: count of them, their experts in all and
// their host time in all (ns).
void moe_hybrid_tune_observe(moe_hybrid_tune *t, int li, uint64_t count, uint64_t experts, double ns);

// Ends the window when it has MOE_HYBRID_TUNE_MIN_OBS ops or more (else keeps it and returns
// false): moves the scale and writes the n_layers costs it gives into out. Returns whether
// any of them differs from what the last update gave (the base at first).
bool moe_hybrid_tune_update(moe_hybrid_tune *t, moe_hybrid_costs *out);

// The costs of layer li at scale s.
moe_hybrid_costs moe_hybrid_tune_costs(const moe_hybrid_tune *t, int li, double s);

#endif
