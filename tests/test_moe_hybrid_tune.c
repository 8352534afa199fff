// test_moe_hybrid_tune.c: the hybrid split's CPU cost corrected by measured CPU ops
// (src/moe/hybrid_tune.c): windows, the scale's steps and clamps, the costs it gives.
#include "test.h"
#include "../src/moe/hybrid_tune.h"

#include <math.h>

static moe_hybrid_tune two_layers(void) {
    moe_hybrid_costs base[2] = {{52000, 26000, 31000}, {40000, 20000, 15000}};
    uint32_t fixed[2] = {20000, 99999}; // the second more than its road's whole: clamped
    moe_hybrid_tune t;
    moe_hybrid_tune_init(&t, 2, base, fixed);
    return t;
}

TEST(moe_hybrid_tune_moves_the_cpu_scale_by_windows) {
    moe_hybrid_tune t = two_layers();
    moe_hybrid_costs out[2];
    CHECK(t.cpu_fixed_ns[1] == 15000);
    // too few ops: the window stays open, nothing changes
    moe_hybrid_tune_observe(&t, 0, 3, 6, 1.5 * (3 * 20000.0 + 6 * 26000.0));
    CHECK(!moe_hybrid_tune_update(&t, out) && t.scale == 1.0 && t.n_obs == 3);
    // the window's ops took 1.5x their prediction: the scale goes halfway, to 1.25
    moe_hybrid_tune_observe(&t, 1, 5, 5, 1.5 * (5 * 15000.0 + 5 * 20000.0));
    moe_hybrid_tune_observe(&t, 1, 0, 0, 1e9); // (no ops: ignored)
    REQUIRE(moe_hybrid_tune_update(&t, out));
    CHECK(fabs(t.scale - 1.25) < 1e-12 && t.n_obs == 0, "%g", t.scale);
    CHECK(out[0].copy_ns == 52000 && out[0].cpu_ns == 32500 && out[0].meet_ns == 31000 + 5000,
          "%u %u %u", out[0].copy_ns, out[0].cpu_ns, out[0].meet_ns);
    CHECK(out[1].copy_ns == 40000 && out[1].cpu_ns == 25000 && out[1].meet_ns == 15000 + 3750);
    // windows at the same ratio converge on it; equal times leave the costs as they are
    for (int w = 0; w < 40; w++) {
        moe_hybrid_tune_observe(&t, 0, 8, 16, 1.5 * (8 * 20000.0 + 16 * 26000.0));
        moe_hybrid_tune_update(&t, out);
    }
    CHECK(fabs(t.scale - 1.5) < 1e-6, "%g", t.scale);
    moe_hybrid_tune_observe(&t, 0, 8, 8, t.scale * (8 * 20000.0 + 8 * 26000.0));
    CHECK(!moe_hybrid_tune_update(&t, out) && out[0].cpu_ns == 39000);
    moe_hybrid_tune_free(&t);
}

TEST(moe_hybrid_tune_clamps_and_never_prices_below_the_meeting) {
    moe_hybrid_tune t = two_layers();
    moe_hybrid_costs out[2];
    moe_hybrid_tune_observe(&t, 0, 10, 10, 1e12); // far slower than priced: one step to (1 + 4) / 2
    REQUIRE(moe_hybrid_tune_update(&t, out));
    CHECK(t.scale == 2.5);
    for (int w = 0; w < 60; w++) { // far faster: towards the floor of 1/4
        moe_hybrid_tune_observe(&t, 0, 10, 10, 1.0);
        moe_hybrid_tune_update(&t, out);
    }
    CHECK(fabs(t.scale - 0.25) < 1e-9, "%g", t.scale);
    // the CPU's fixed part shrinks with it; the meeting's (meet_ns - fixed) stays
    CHECK(out[0].cpu_ns == 6500 && out[0].meet_ns == 11000 + 5000, "%u %u", out[0].cpu_ns, out[0].meet_ns);
    CHECK(out[1].meet_ns >= 15000 * 0.25 - 1 && out[1].meet_ns <= 15000 * 0.25 + 1, "%u", out[1].meet_ns);
    moe_hybrid_tune_free(&t);
}
