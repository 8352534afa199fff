// fuzz_route_trace.c: libFuzzer target for the route-trace reader (src/moe/route_trace.c).
//
// Parses the input; when it is accepted, reads every selection through moe_route_trace_at (and
// every prediction of a version-2 file through moe_route_trace_predicted_at) and checks what the
// reader promises: ids below n_expert, distinct within a sequence's top-k, layers ascending. Seeds: fuzz/seeds/fuzz_route_trace/ (a small generated trace).
#include "../src/moe/route_trace.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    moe_route_trace t;
    if (!moe_route_trace_parse(data, size, &t, NULL)) return 0;
    for (int i = 1; i < t.n_layers; i++)
        if (t.layers[i] <= t.layers[i - 1]) abort();
    for (int64_t s = 0; s < t.n_steps; s++)
        for (int li = 0; li < t.n_layers; li++) {
            for (int v = 0; v < (t.predicted ? 2 : 1); v++) {
                const uint16_t *sel = v ? moe_route_trace_predicted_at(&t, s, li) : moe_route_trace_at(&t, s, li);
                for (int q = 0; q < t.n_seq; q++)
                    for (int j = 0; j < t.top_k; j++) {
                        const uint16_t e = sel[q * t.top_k + j];
                        if (e >= t.n_expert) abort();
                        for (int k = 0; k < j; k++)
                            if (sel[q * t.top_k + k] == e) abort();
                    }
            }
        }
    moe_route_trace_free(&t);
    return 0;
}
