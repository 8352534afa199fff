// test_conformance.h: comparing ft with llama.cpp on a synthetic model (shared by the
// conformance tests of each architecture).
//
// conf_check writes the model with ft_synth_write, runs the node oracle once for all prompts
// (top-10 after each prompt plus 32 greedy tokens), runs ft on the same prompts and checks:
//   - the reference is not degenerate: its top-1 probability is below 0.9 after each prompt;
//   - every top-10 probability of the reference is matched by ft's within CONF_TOL; where one
//     is not, the prompt is evaluated again one token per step (every row then on the per-row
//     kernels, whose summation order differs from the prefill GEMM's), which must match within
//     CONF_TOL, and the first evaluation must still be within 2 CONF_TOL;
//   - the arg-max agrees unless the reference's two best are within CONF_TOL of each other, or
//     ft's choice is within 2 CONF_TOL of the reference's best in the reference's own top 10
//     and ft's other order (the prompt one token per step) picks the reference's best;
//   - greedy tokens agree step by step up to the first such near-tie (the probabilities along
//     the way are reported but not bounded: they drift with sequence length, see the .c); a
//     swap with the reference's second within 2 CONF_TOL, which ft's other order (the prompt
//     one token per step, then the greedy tokens so far) does not make, ends the comparison
//     like a near-tie;
//   - a check that fails is not judged when the step is chaotic: ft's own result moves by more
//     than CONF_TOL when one weight in three of the first attention norm is scaled by 1 + 1e-5
//     (the GPU suite's test of its CPU reference). One prompt per model may be left so.
// Why order matters: both engines pick a dot product's summation order by the batch's shape
// (ft: AMX GEMMs in the scalar reference's order for prefill chunks, AVX lanes per row;
// llama.cpp: its own choices), and both requantize (q8_0/q8_K activations before each matmul,
// and with a q8_0 cache every K and V), where a rounding-level difference can move a code by
// one. On these small random models that moves a probability by up to about CONF_TOL: seen on
// qwen2moe_kv_q8_0's 9-token prompt (0.014 with the GEMM, 0.00000 row by row, and the opposite
// way with an f16 cache on its 40-token prompt). Each probability within CONF_TOL allows two
// tokens within 2 CONF_TOL of each other to swap; a difference larger than that, or one that
// ft's other order also shows (a bug common to both, not their order), still fails. The worst difference returned is the first
// evaluation's.
#ifndef FT_TEST_CONFORMANCE_H
#define FT_TEST_CONFORMANCE_H

#include "../src/model/synth.h"

#define CONF_TOL 0.01
#define CONF_MAX_PROMPT 1024 // tokens of one prompt

typedef struct conf_opts {
    enum ft_type kv_type;  // FT_TYPE_F16 (default when 0 is passed? no: set it) or FT_TYPE_Q8_0
    int n_prompts;
    int prompt_len[8];     // tokens per prompt
    int n_gen;             // greedy tokens compared (after the first prompt only)
    int n_batch;           // ft's prefill batch (0: default)
    uint64_t seed;         // for the prompt tokens
} conf_opts;

// The default: f16 KV, prompts of 1, 9 and 40 tokens, 32 greedy tokens.
conf_opts conf_default_opts(void);

double conf_check(const char *label, const ft_synth_params *sp, const conf_opts *o);

// A small model for the suite: embd 256, 2 layers, 8 experts, top-2, given expert types.
ft_synth_params conf_small_params(const char *arch);

#endif
