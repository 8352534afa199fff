// fuzz_bw_profile.c: libFuzzer target for the bandwidth profile's parser (src/moe/bw_profile.c).
//
// Parses the input; when it is accepted, checks what the parser promises (a key, figures finite
// and >= 0, distinct rate types) and that its text form parses back to the same figures.
// Seeds: fuzz/seeds/fuzz_bw_profile/.
#include "../src/moe/bw_profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void check_figures(const moe_bw_profile *p) {
    double v[] = {p->copy_fixed_us, p->copy_gbps, p->meet_us, p->cpu_fixed_us};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (!isfinite(v[i]) || v[i] < 0) abort();
    if (!p->gpu[0] || !p->cpu[0] || p->threads < 1 || p->n_rates < 0 || p->n_rates > MOE_BW_MAX_TYPES)
        abort();
    for (int i = 0; i < p->n_rates; i++) {
        if (!isfinite(p->rates[i].cpu_gbps) || p->rates[i].cpu_gbps < 0 || !isfinite(p->rates[i].gpu_gbps))
            abort();
        for (int j = 0; j < i; j++)
            if (p->rates[j].type == p->rates[i].type) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    moe_bw_profile p, q;
    if (!moe_bw_profile_parse((const char *)data, size, &p, NULL)) return 0;
    check_figures(&p);
    char *s = moe_bw_profile_format(&p);
    if (!moe_bw_profile_parse(s, strlen(s), &q, NULL) || !moe_bw_same_key(&p, &q) || q.n_rates != p.n_rates)
        abort();
    free(s);
    return 0;
}
