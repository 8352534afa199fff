// probs_compare.c: see probs_compare.h.
#include "probs_compare.h"
#include "gpu_test.h"
#include "../src/util/util.h"

#include "../src/model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void probs_softmax(const float *logits, double *out, int n) {
    float mx = logits[0];
    for (int i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double s = 0;
    for (int i = 0; i < n; i++) s += out[i] = exp((double)logits[i] - mx);
    for (int i = 0; i < n; i++) out[i] /= s;
}

// The worst difference over ref's 10 most likely tokens (no checks, no messages).
static double top10_diff(const float *ref, const float *got, int n) {
    double *pr = ft_malloc((size_t)n * sizeof(double)), *pg = ft_malloc((size_t)n * sizeof(double));
    probs_softmax(ref, pr, n);
    probs_softmax(got, pg, n);
    double worst = 0;
    for (int j = 0; j < FT_MIN(10, n); j++) {
        int best = 0;
        for (int i = 1; i < n; i++) best = pr[i] > pr[best] ? i : best;
        worst = fmax(worst, fabs(pr[best] - pg[best]));
        pr[best] = -1; // taken
    }
    free(pr);
    free(pg);
    return worst;
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

bool probs_reference_init(probs_reference *r, const char *path, const ft_engine_params *ep, float eps, ft_err *err) {
    memset(r, 0, sizeof(*r));
    ft_engine_params cpu = *ep;
    cpu.device = FT_PLACEMENT_CPU;
    for (int i = 0; i <= PROBS_REF_PERTURBED; i++) {
        r->m[i] = ft_model_load(path, err);
        if (!r->m[i]) goto fail;
        if (i > 0) {
            ft_tensor *w = &r->m[i]->layers[0].attn_norm;
            FT_ASSERT(w->type == FT_TYPE_F32 && w->ne[1] == 1);
            r->norm[i] = ft_malloc((size_t)w->ne[0] * sizeof(float));
            memcpy(r->norm[i], w->data, (size_t)w->ne[0] * sizeof(float));
            for (int64_t k = i - 1; k < w->ne[0]; k += 3) r->norm[i][k] *= 1.0f + eps;
            w->data = r->norm[i];
        }
        r->e[i] = ft_engine_init(r->m[i], &cpu, err);
        if (!r->e[i]) goto fail;
    }
    r->n_vocab = r->m[0]->hp.n_vocab;
    r->logits = ft_malloc((size_t)r->n_vocab * sizeof(float));
    return true;
fail:
    probs_reference_free(r);
    return false;
}

const float *probs_reference_eval(probs_reference *r, const int32_t *t, int n, double tol, bool *stable, ft_err *err) {
    const float *lg = ft_engine_eval(r->e[0], t, n, err);
    if (!lg) return NULL;
    memcpy(r->logits, lg, (size_t)r->n_vocab * sizeof(float));
    r->spread = 0;
    for (int i = 1; i <= PROBS_REF_PERTURBED; i++) {
        if (!(lg = ft_engine_eval(r->e[i], t, n, err))) return NULL;
        r->spread = fmax(r->spread, top10_diff(r->logits, lg, r->n_vocab));
    }
    *stable = r->spread <= tol;
    r->n_steps++;
    r->n_stable += *stable;
    return r->logits;
}

double probs_step_tol(const probs_reference *r, double tol) {
    return r->spread <= tol / 2 ? tol : 2 * tol;
}

void probs_reference_free(probs_reference *r) {
    for (int i = 0; i <= PROBS_REF_PERTURBED; i++) {
        ft_engine_free(r->e[i]);
        ft_model_free(r->m[i]);
        free(r->norm[i]);
    }
    free(r->logits);
    memset(r, 0, sizeof(*r));
}
