// test_conformance.h: comparing ft with llama.cpp on a synthetic model (shared by the
// conformance tests of each architecture).
//
// conf_check writes the model with ft_synth_write, runs the node oracle once for all prompts
// (top-10 after each prompt plus 32 greedy tokens), runs ft on the same prompts and checks:
//   - the reference is not degenerate: its top-1 probability is below 0.9 after each prompt;
//   - every top-10 probability of the reference is matched by ft's within CONF_TOL;
//   - the arg-max agrees unless the reference's two best are within CONF_TOL of each other;
//   - greedy tokens agree step by step up to the first such near-tie (the probabilities along
//     the way are reported but not bounded: they drift with sequence length, see the .c).
// It returns the worst probability difference seen (for the report), or -1 when skipped.
#ifndef FT_TEST_CONFORMANCE_H
#define FT_TEST_CONFORMANCE_H

#include "../src/model/synth.h"

#define CONF_TOL 0.01

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
