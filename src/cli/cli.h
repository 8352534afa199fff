// cli: the `ft` command's subcommands. Each takes the arguments after its name and returns the
// process exit status: 0 success, 1 bad input (message on stderr says what and where), 2 bad
// usage. Results go to stdout, logs and progress to stderr.
#ifndef FT_CLI_H
#define FT_CLI_H

#include <stdbool.h>
#include <stddef.h>

enum { FT_EXIT_OK = 0, FT_EXIT_INPUT = 1, FT_EXIT_USAGE = 2 };

int cmd_inspect(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_probs(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_bw(int argc, char **argv); // `ft bench bw`, from cmd_bench
int cmd_trace_gen(int argc, char **argv);
int cmd_replay(int argc, char **argv);

// The built-in demo model (a small qwen3moe with random weights): its path in the cache
// folder ($XDG_CACHE_HOME/ft or ~/.cache/ft), written by `ft synth` on first use. Returns false
// and prints why (prefixed "ft <cmd>: ") on failure.
bool cli_demo_model(const char *cmd, char *path, size_t cap);

#endif
