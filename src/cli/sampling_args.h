// sampling_args: the sampling flags `ft run` and `ft serve` share (internal to cli/), and the
// defaults a model recommends in its GGUF (general.sampling.*, which llama.cpp reads the same
// way) for the flags the command line leaves out.
//
// `ft run` samples with them; `ft serve` makes them the defaults of every request that names
// no value of its own, over each API's defaults (srv_params.sampling).
#ifndef FT_CLI_SAMPLING_ARGS_H
#define FT_CLI_SAMPLING_ARGS_H

#include "../engine/sampler.h"
#include "../gguf/gguf.h"

#include <stddef.h>
#include <stdio.h>

typedef struct sampling_args {
    ft_sampler_params p; // the values: given, the model's, else ft_sampler_default_params
    unsigned given;      // FT_SAMPLE_* bits set on the command line
    unsigned from_model; // FT_SAMPLE_* bits the model's metadata set (sampling_args_from_model)
} sampling_args;

sampling_args sampling_args_init(void);

// Recognises one sampling flag (and its value) at argv[*i]: --temp, --top-k, --top-p, --min-p,
// --repeat-penalty, --repeat-last-n, --presence-penalty, --frequency-penalty, --seed. A value
// out of its range prints an error and sets *bad.
bool sampling_args_take(sampling_args *s, const char *cmd, int argc, char **argv, int *i, bool *bad);

// The fields the command line left out, from f's general.sampling.temp, top_k, top_p, min_p,
// penalty_repeat and penalty_last_n where present and in range (a value out of range is
// skipped with a notice).
void sampling_args_from_model(sampling_args *s, const char *cmd, const gguf_file *f);

// The defaults set (given or the model's), for the start-up line: "temp 0.6 (the model's),
// top-k 20 (--top-k)"; "" when none is.
void sampling_args_describe(const sampling_args *s, char *buf, size_t cap);

// The flags' help lines: with ft run's defaults, or (serve) as the defaults of requests.
void sampling_args_usage(FILE *out, bool serve);

#endif
