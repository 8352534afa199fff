// mode_cost.c: the predicted expert time of each --moe-backend (see mode_cost.h).
#include "mode_cost.h"

#include <math.h>

// P(m = j) for j = 0..k, m ~ Binomial(k, q), into pm.
static void binomial(int k, double q, double *pm) {
    for (int j = 0; j <= k; j++) {
        double c = 1;
        for (int i = 0; i < j; i++)
            c = c * (k - i) / (i + 1);
        pm[j] = c * pow(q, j) * pow(1 - q, k - j);
    }
}

bool moe_mode_costs_predict(const moe_bw_profile *prof, const moe_geometry *g, const double *miss_rate, int k,
                            moe_mode_costs *out) {
    *out = (moe_mode_costs){0};
    if (k < 1 || k > 64) return false;
    double pm[65];
    uint64_t widest = 0;
    for (int i = 0; i < g->n_layers; i++) {
        const moe_layer_geometry *l = &g->layers[i];
        double c = moe_bw_copy_us(prof, l->bytes), p = moe_bw_cpu_us(prof, l->type, l->bytes),
               gu = moe_bw_gpu_us(prof, l->type, l->bytes);
        moe_hybrid_costs hc; // (false also where c or p is missing)
        if (!moe_bw_hybrid_costs(prof, l->type, l->bytes, &hc)) return false;
        const double t = prof->meet_us, f = moe_bw_cpu_fixed_us(prof, l->type, l->bytes), q = fmin(fmax(miss_rate[i], 0.0), 1.0);
        binomial(k, q, pm);
        double hybrid = 0;
        for (int m = 0; m <= k; m++) {
            int n = moe_hybrid_cpu_share(m, &hc);
            hybrid += pm[m] * (n > 0 ? fmax((m - n) * c, t + f + n * p) : m * c + t);
        }
        out->offload_us += k * gu + k * q * c;
        out->hybrid_us += k * gu + hybrid;
        out->cpu_us += t + f + k * p;
        out->misses += k * q;
        uint64_t bytes = l->bytes[0] + l->bytes[1] + l->bytes[2];
        if (bytes > widest) {
            widest = bytes;
            out->copy_us = c, out->cpu_expert_us = p, out->gpu_expert_us = gu;
        }
    }
    return true;
}
