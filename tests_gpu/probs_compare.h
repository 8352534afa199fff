// probs_compare.h: next-token distributions compared the way the GPU tests judge a model on
// the GPU against a reference run (the CPU path, or the fused GPU path).
#ifndef FT_PROBS_COMPARE_H
#define FT_PROBS_COMPARE_H

#include <stdbool.h>

#include "../src/engine/engine.h"

// Probabilities (softmax, in double) of n logits into out.
void probs_softmax(const float *logits, double *out, int n);

// The worst difference over the reference's 10 most likely tokens between the distributions
// of the reference logits ref and the logits got. When check: fails the running test if it
// exceeds tol, or if got's arg-max is not the reference's unless the reference's two best are
// within tol of each other (a near-tie). When not check (routing near a tie), an arg-max
// difference is only printed. what names the step in messages.
double probs_compare(const char *what, const float *ref, const float *got, int n, double tol, bool check);

// The CPU reference of a whole-model comparison, with its own sensitivity measured alongside.
// Random-weight models are chaotic: the CPU against itself, with one weight in three of the
// first layer's attention norm scaled by 1 + eps, moves some steps' top-10 probabilities by
// 0.1 to 0.5 (a q8 code or a routing choice flips and random experts amplify it); measured on
// qwen3moe and laguna in 2026-11. So the reference runs PROBS_REF_PERTURBED perturbed copies
// (every third norm weight from offset 0, 1, 2) next to the exact one, and a step is stable
// where all of them stay within the tolerance of it: only stable steps can judge another
// implementation. Even there three copies sample a step's sensitivity thinly: on laguna with
// windows of 8 one step's copies moved by 0.017 (tolerance 0.03), the same step moved by 0.01 to
// 0.028 with eps from 1e-5 to 1e-3 (a flip, not rounding) and the GPU's by 0.037. So a step
// whose copies move by more than half the tolerance is held to twice it. eps is the size of the differences
// expected between the two: 1e-5 where both quantize to the same codes and differ by float rounding (q8_0
// weights and KV), 1e-2 where the activation quantization differs (q8_1 against q8_K: about 1 % per matmul
// input).
enum { PROBS_REF_PERTURBED = 3 };

typedef struct probs_reference {
    ft_model *m[1 + PROBS_REF_PERTURBED];
    ft_engine *e[1 + PROBS_REF_PERTURBED];
    float *norm[1 + PROBS_REF_PERTURBED]; // the perturbed norm weights (the copies' own)
    float *logits;                        // the exact run's last logits
    int n_vocab;
    double spread; // the last step's: the copies' largest top-10 difference
    int n_steps, n_stable;
} probs_reference;

// Loads the model at path 1 + PROBS_REF_PERTURBED times and starts CPU engines on it with ep
// (its device is ignored), the copies perturbed by eps. False with *err set on failure (r is
// then freed).
bool probs_reference_init(probs_reference *r, const char *path, const ft_engine_params *ep, float eps, ft_err *err);

// Evaluates n tokens on every run. Returns the exact run's logits (kept until the next call),
// sets r->spread and *stable: every perturbed run's top-10 probabilities within tol of the exact
// run's. NULL with *err set on failure.
const float *probs_reference_eval(probs_reference *r, const int32_t *t, int n, double tol, bool *stable, ft_err *err);

// The tolerance another implementation is held to at the last (stable) step: tol where its
// spread is at most tol / 2, else 2 tol.
double probs_step_tol(const probs_reference *r, double tol);

void probs_reference_free(probs_reference *r);

#endif
