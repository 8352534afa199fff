// test_moe_mode_cost.c: the predicted expert time of each --moe-backend (src/moe/mode_cost.c)
// and auto's choice from it (moe_placement_auto): the three formulas against a brute-force
// expectation over every pattern of misses, on the profile `ft bench bw` measured on the H100
// machine, with two shapes whose best mode was measured there by hand: the Qwen3-30B-A3B shape
// at 12 GiB (offload 196 tok/s, hybrid 152-180: offload) and GPT-OSS-20B's at 8 GiB (hybrid
// 203, offload 132: hybrid); then the margin, and a profile lacking a figure.
#include "test.h"
#include "../src/moe/mode_cost.h"
#include "../src/moe/placement.h"

#include <math.h>
#include <stdlib.h>

static moe_bw_profile h100_profile(void) {
    moe_bw_profile p = {.copy_fixed_us = 0, .copy_gbps = 51.3, .meet_us = 12.4, .cpu_fixed_us = 71.4};
    // (the rates without a fixed cost of their own: the profile's applies)
    *moe_bw_rate_add(&p, FT_TYPE_Q4_K) = (moe_bw_rate){.type = FT_TYPE_Q4_K, .cpu_gbps = 121.0, .gpu_gbps = 968.1};
    *moe_bw_rate_add(&p, FT_TYPE_MXFP4) = (moe_bw_rate){.type = FT_TYPE_MXFP4, .cpu_gbps = 118.6, .gpu_gbps = 850.3};
    return p;
}

// n layers of one expert shape (three banks of `bank` bytes of type t).
static moe_geometry shape(int n, enum ft_type t, uint64_t bank) {
    moe_geometry g = {.n_layers = n, .layers = calloc((size_t)n, sizeof(moe_layer_geometry))};
    for (int i = 0; i < n; i++) {
        g.layers[i] = (moe_layer_geometry){.layer = i, .n_expert = 128};
        for (int b = 0; b < MOE_BANK_COUNT; b++)
            g.layers[i].type[b] = t, g.layers[i].bytes[b] = bank;
    }
    return g;
}

// hybrid's expected layer time by enumerating every subset of the k selections that misses
static double hybrid_layer_brute(int k, double q, double c, double p, double t, double f,
                                 const moe_hybrid_costs *hc) {
    double sum = 0;
    for (unsigned mask = 0; mask < (1u << k); mask++) {
        int m = __builtin_popcount(mask);
        double pr = pow(q, m) * pow(1 - q, k - m);
        int n = moe_hybrid_cpu_share(m, hc);
        sum += pr * (n > 0 ? fmax((m - n) * c, t + f + n * p) : m * c + t);
    }
    return sum;
}

static bool near(double a, double b) {
    return fabs(a - b) <= 1e-9 * fmax(1, fabs(b));
}

TEST(moe_mode_cost_formulas_and_auto_on_measured_shapes) {
    moe_bw_profile prof = h100_profile();
    const struct {
        int layers, k;
        enum ft_type type;
        uint64_t bank;
        double miss;
        enum ft_moe_backend want;
    } cases[] = {
        {48, 8, FT_TYPE_Q4_K, 884736, 0.19, FT_MOE_BACKEND_OFFLOAD}, // Qwen3-30B-A3B, 12 GiB
        {24, 4, FT_TYPE_MXFP4, 4423680, 0.5, FT_MOE_BACKEND_HYBRID}, // GPT-OSS-20B, 8 GiB
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        moe_geometry g = shape(cases[i].layers, cases[i].type, cases[i].bank);
        double *miss = malloc(sizeof(double) * (size_t)g.n_layers);
        for (int l = 0; l < g.n_layers; l++)
            miss[l] = cases[i].miss;
        moe_mode_costs mc;
        REQUIRE(moe_mode_costs_predict(&prof, &g, miss, cases[i].k, &mc));
        const moe_layer_geometry *l0 = &g.layers[0];
        double c = moe_bw_copy_us(&prof, l0->bytes), p = moe_bw_cpu_us(&prof, l0->type, l0->bytes);
        double gpu = 3.0 * cases[i].bank / (moe_bw_rate_of(&prof, cases[i].type)->gpu_gbps * 1e3);
        moe_hybrid_costs hc;
        REQUIRE(moe_bw_hybrid_costs(&prof, l0->type, l0->bytes, &hc));
        int k = cases[i].k, L = g.n_layers;
        double q = cases[i].miss;
        CHECK(near(mc.offload_us, L * (k * gpu + k * q * c)), "offload %g", mc.offload_us);
        CHECK(near(mc.cpu_us, L * (prof.meet_us + prof.cpu_fixed_us + k * p)), "cpu %g", mc.cpu_us);
        double hy = L * (k * gpu + hybrid_layer_brute(k, q, c, p, prof.meet_us, prof.cpu_fixed_us, &hc));
        CHECK(fabs(mc.hybrid_us - hy) <= 1e-9 * hy, "hybrid %g against %g", mc.hybrid_us, hy);
        CHECK(near(mc.misses, L * k * q) && near(mc.copy_us, c) && near(mc.cpu_expert_us, p) &&
              near(mc.gpu_expert_us, gpu));
        moe_auto_facts f = {
            .n_expert = 128, .device_takes_types = true, .fused_need = 2, .budget = 1, .costs = &mc};
        CHECK(moe_placement_auto(&f) == cases[i].want,
              "case %zu: %s (offload %.0f, hybrid %.0f, cpu %.0f us)", i,
              ft_moe_backend_name(moe_placement_auto(&f)), mc.offload_us, mc.hybrid_us, mc.cpu_us);
        f.budget = 3; // it fits: fused, whatever the costs
        CHECK(moe_placement_auto(&f) == FT_MOE_BACKEND_FUSED);
        free(miss);
        free(g.layers);
    }

    // a profile without a CPU rate for the type predicts nothing
    moe_geometry g = shape(2, FT_TYPE_Q6_K, 1000000);
    double miss[2] = {0.5, 0.5};
    moe_mode_costs mc;
    CHECK(!moe_mode_costs_predict(&prof, &g, miss, 8, &mc));
    free(g.layers);
}

TEST(moe_placement_auto_takes_another_mode_only_by_the_margin) {
    moe_mode_costs mc = {.offload_us = 1000, .hybrid_us = 1000 / (1 + MOE_AUTO_MARGIN) + 1, .cpu_us = 5000};
    moe_auto_facts f = {
        .n_expert = 8, .device_takes_types = true, .fused_need = 2, .budget = 1, .costs = &mc};
    CHECK(moe_placement_auto(&f) == FT_MOE_BACKEND_OFFLOAD);
    mc.hybrid_us = 1000 / (1 + MOE_AUTO_MARGIN) - 1;
    CHECK(moe_placement_auto(&f) == FT_MOE_BACKEND_HYBRID);
    mc.cpu_us = mc.hybrid_us / (1 + MOE_AUTO_MARGIN) - 1; // cpu beats hybrid by the margin too
    CHECK(moe_placement_auto(&f) == FT_MOE_BACKEND_CPU);
    f.costs = NULL; // no profile: offload
    CHECK(moe_placement_auto(&f) == FT_MOE_BACKEND_OFFLOAD);
    f.device_takes_types = false;
    CHECK(moe_placement_auto(&f) == FT_MOE_BACKEND_CPU);
}
