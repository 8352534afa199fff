// probs_compare.h: next-token distributions compared the way the GPU tests judge a model on
// the GPU against a reference run (the CPU path, or the fused GPU path).
#ifndef FT_PROBS_COMPARE_H
#define FT_PROBS_COMPARE_H

#include <stdbool.h>

// Probabilities (softmax, in double) of n logits into out.
void probs_softmax(const float *logits, double *out, int n);

// The worst difference over the reference's 10 most likely tokens between the distributions
// of the reference logits ref and the logits got. When check: fails the running test if it
// exceeds tol, or if got's arg-max is not the reference's unless the reference's two best are
// within tol of each other (a near-tie). When not check (routing near a tie), an arg-max
// difference is only printed. what names the step in messages.
double probs_compare(const char *what, const float *ref, const float *got, int n, double tol, bool check);

#endif
