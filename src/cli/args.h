// args.h: small helpers for parsing subcommand options (internal to cli/).
#ifndef FT_CLI_ARGS_H
#define FT_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

// If argv[*i] is `name` (or one of its '|'-separated spellings, e.g. "-t|--threads"), takes the
// next argument as its value, advances *i and returns true. A missing value prints an error and
// sets *bad. Integers must parse completely and lie in [lo, hi].
bool args_str(int argc, char **argv, int *i, const char *name, const char **out, bool *bad);
bool args_int(int argc, char **argv, int *i, const char *name, int64_t lo, int64_t hi,
              int64_t *out, bool *bad);
bool args_float(int argc, char **argv, int *i, const char *name, double *out, bool *bad);
// A flag without value.
bool args_flag(char **argv, int i, const char *name);

#endif
