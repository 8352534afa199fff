// cli_model: loading the model (and its tokenizer) the way run, probs, bench and serve do, and
// the engine parameters of a command that shows its start-up (internal to cli/).
#ifndef FT_CLI_MODEL_H
#define FT_CLI_MODEL_H

#include "engine_args.h"
#include "../tokenizer/tokenizer.h"

typedef struct cli_model {
    ft_model *m;
    tok_vocab *v;        // NULL unless asked for
    char demo[1024];     // the demo model's path when no -m was given
} cli_model;

// Loads the model at path (NULL: the demo model, written on first use) and, with vocab, its
// tokenizer. Returns false after printing "ft <cmd>: why" (nothing stays loaded).
bool cli_model_open(const char *cmd, const char *path, bool vocab, cli_model *cm);
void cli_model_close(cli_model *cm); // a zeroed one is a no-op

// Sets ep->n_ctx from -c / --num-tokens (engine_args_n_ctx: default_ctx without -c), within
// the model's training context. Returns false after printing why.
bool cli_model_context(const engine_args *ea, const cli_model *cm, int default_ctx, ft_engine_params *ep);

// Without --device and GPU flags, a model that needs op features the CUDA backend lacks
// (gpt-oss's attention sinks and expert biases) runs on the CPU, with a notice, instead of being
// refused on the GPU picked by default. With --device cuda (or a GPU flag) the engine refuses it.
void cli_model_pick_device(const engine_args *ea, const cli_model *cm, ft_engine_params *ep);

// For a command a person watches start: the memory plan printed and, with bar, progress bars
// for the long steps (uploading the weights, reading them into memory) drawn by bar, which
// must outlive the engines made with ep.
void cli_show_startup(ft_engine_params *ep, ft_progress *bar);

#endif
