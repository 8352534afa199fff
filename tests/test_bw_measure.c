// test_bw_measure.c: the bandwidth profile's timing rules (src/backend/bw_measure.c): a
// measurement whose fixed cost exceeds what a layer's experts take is measured again on other
// experts, and the attempt with the smallest fixed cost is kept.
#include "test.h"
#include "../src/backend/bw_measure.h"

#include <math.h>

// Timings of n experts: fixed + n * per seconds, the fixed cost of each attempt in turn (an
// attempt is the ft_bw_slope between two calls of `again`), the last one for any later attempt.
typedef struct fake_timing {
    double per;
    double fixed[3];
    int attempt, agains;
} fake_timing;

static double fake_time(void *ctx, const int32_t *sel, int n) {
    (void)sel;
    fake_timing *f = ctx;
    return f->fixed[f->attempt < 3 ? f->attempt : 2] + n * f->per;
}

static void fake_again(void *ctx) {
    fake_timing *f = ctx;
    f->attempt++;
    f->agains++;
}

TEST(bw_slope_measures_again_while_the_fixed_cost_exceeds_the_experts) {
    double slope, icpt;
    // a quiet machine: one attempt
    fake_timing quiet = {.per = 20e-6, .fixed = {10e-6, 10e-6, 10e-6}};
    CHECK(ft_bw_slope_settled(fake_time, fake_again, &quiet, 8, 2, &slope, &icpt) && quiet.agains == 0);
    CHECK(fabs(slope - 20e-6) < 1e-9 && fabs(icpt - 10e-6) < 1e-9, "slope %g intercept %g", slope, icpt);
    // busy for the first attempt (3.4 ms a call, as a busy host read once): the second one is kept
    fake_timing busy = {.per = 20e-6, .fixed = {3.4e-3, 12e-6, 9e-6}};
    CHECK(ft_bw_slope_settled(fake_time, fake_again, &busy, 8, 2, &slope, &icpt) && busy.agains == 1);
    CHECK(fabs(icpt - 12e-6) < 1e-9, "intercept %g", icpt);
    // busy throughout: every retry made, the smallest fixed cost kept, and reported as unsettled
    fake_timing loaded = {.per = 20e-6, .fixed = {3.4e-3, 2e-3, 5e-3}};
    CHECK(!ft_bw_slope_settled(fake_time, fake_again, &loaded, 8, 2, &slope, &icpt) && loaded.agains == 2);
    CHECK(fabs(icpt - 2e-3) < 1e-9, "intercept %g", icpt);
}
