// probs_compare.c: see probs_compare.h.
#include "probs_compare.h"
#include "gpu_test.h"
#include "../src/util/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void probs_softmax(const float *logits, double *out, int n) {
    float mx = logits[0];
    for (int i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double s = 0;
    for (int i = 0; i < n; i++) s += out[i] = exp((double)logits[i] - mx);
    for (int i = 0; i < n; i++) out[i] /= s;
}

double probs_compare(const char *what, const float *ref, const float *got, int n, double tol, bool check) {
    double *pr = ft_malloc((size_t)n * sizeof(double)), *pg = ft_malloc((size_t)n * sizeof(double));
    probs_softmax(ref, pr, n);
    probs_softmax(got, pg, n);
    int top[10] = {0}, k = FT_MIN(10, n);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            bool taken = false;
            for (int m = 0; m < j; m++) taken |= top[m] == i;
            if (!taken && (best < 0 || pr[i] > pr[best])) best = i;
        }
        top[j] = best;
    }
    int arg_g = 0;
    for (int i = 1; i < n; i++) arg_g = pg[i] > pg[arg_g] ? i : arg_g;
    double worst = 0;
    for (int j = 0; j < k; j++) worst = fmax(worst, fabs(pr[top[j]] - pg[top[j]]));
    bool near_tie = k > 1 && pr[top[0]] - pr[top[1]] < tol;
    if (check) {
        CHECK(arg_g == top[0] || near_tie, "%s: arg-max %d (p %.4f) against the reference's %d (p %.4f)", what, arg_g,
              pr[arg_g], top[0], pr[top[0]]);
        CHECK(worst <= tol, "%s: top-10 probability difference %.4g > %.4g", what, worst, tol);
    } else if (arg_g != top[0] && !near_tie) {
        printf("    %s: arg-max differs (reference %d p %.4f, this %d p %.4f), routing near a tie: not checked\n", what,
               top[0], pr[top[0]], arg_g, pr[arg_g]);
    }
    free(pr);
    free(pg);
    return worst;
}
