// hybrid_tune.c: the CPU road's scale measured during decode (see hybrid_tune.h).
#include "hybrid_tune.h"
#include "../util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void moe_hybrid_tune_init(moe_hybrid_tune *t, int n_layers, const moe_hybrid_costs *base,
                          const uint32_t *cpu_fixed_ns) {
    FT_ASSERT(n_layers >= 1);
    *t = (moe_hybrid_tune){.n_layers = n_layers, .scale = 1.0};
    t->base = ft_malloc((size_t)n_layers * sizeof(*t->base));
    t->cpu_fixed_ns = ft_malloc((size_t)n_layers * sizeof(*t->cpu_fixed_ns));
    memcpy(t->base, base, (size_t)n_layers * sizeof(*t->base));
    for (int i = 0; i < n_layers; i++) // (a fixed part larger than the road's whole is not one)
        t->cpu_fixed_ns[i] = cpu_fixed_ns[i] < base[i].meet_ns ? cpu_fixed_ns[i] : base[i].meet_ns;
}

void moe_hybrid_tune_free(moe_hybrid_tune *t) {
    free(t->base);
    free(t->cpu_fixed_ns);
    *t = (moe_hybrid_tune){0};
}

void moe_hybrid_tune_observe(moe_hybrid_tune *t, int li, uint64_t count, uint64_t experts, double ns) {
    FT_ASSERT(li >= 0 && li < t->n_layers);
    if (!count) return;
    t->meas_ns += ns;
    t->pred_ns += (double)count * t->cpu_fixed_ns[li] + (double)experts * t->base[li].cpu_ns;
    t->n_obs += count;
}

moe_hybrid_costs moe_hybrid_tune_costs(const moe_hybrid_tune *t, int li, double s) {
    const moe_hybrid_costs *b = &t->base[li];
    const double cap = 4e9; // ns: within 32 bits
    double meet = (double)b->meet_ns + (double)t->cpu_fixed_ns[li] * (s - 1.0);
    return (moe_hybrid_costs){b->copy_ns, (uint32_t)fmin(round(b->cpu_ns * s), cap), (uint32_t)fmin(round(meet), cap)};
}

bool moe_hybrid_tune_update(moe_hybrid_tune *t, moe_hybrid_costs *out) {
    if (t->n_obs < MOE_HYBRID_TUNE_MIN_OBS) return false;
    double old = t->scale;
    if (t->pred_ns > 0) {
        double r = fmin(fmax(t->meas_ns / t->pred_ns, 0.25), 4.0);
        t->scale = 0.5 * old + 0.5 * r;
    }
    t->meas_ns = t->pred_ns = 0;
    t->n_obs = 0;
    bool changed = false;
    for (int i = 0; i < t->n_layers; i++) {
        out[i] = moe_hybrid_tune_costs(t, i, t->scale);
        moe_hybrid_costs was = moe_hybrid_tune_costs(t, i, old);
        changed |= memcmp(&out[i], &was, sizeof(was)) != 0;
    }
    return changed;
}
