// bench_parallel: `ft bench --parallel N[,N...]`: aggregate decode of N sequences stepping
// together (continuous batching, batch.h), as llama-batched-bench measures it (-npl).
#ifndef FT_CLI_BENCH_PARALLEL_H
#define FT_CLI_BENCH_PARALLEL_H

#include "../engine/engine.h"

#include <stdbool.h>

#define BENCH_MAX_PARALLEL 16

// For each count in n_seqs: a batch engine of that many sequences of n_prompt + n_gen
// positions (ep otherwise, prefix cache off); per run every sequence prefills its own prompt
// (several prompts a step, cut at multiples of the chunk), then n_gen steps decode one token of
// each, with logits for all. Prints per count the medians over reps runs of the prompt tok/s
// (all prompts' tokens over the prefill's time) and the aggregate decode tok/s (n_seq x n_gen
// over the decode's time), a table or one JSON line. Returns an FT_EXIT_* code.
int bench_parallel(const ft_model *m, const ft_engine_params *ep, const char *model_path, const int *n_seqs,
                   int n_counts, int n_prompt, int n_gen, int reps, bool json);

#endif
