// args.c: option parsing helpers.
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool args_flag(char **argv, int i, const char *name) {
    size_t len = strlen(argv[i]);
    for (const char *s = name; *s;) {
        const char *e = strchr(s, '|');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == len && !memcmp(s, argv[i], n)) return true;
        s += n + (e ? 1 : 0);
    }
    return false;
}

bool args_str(int argc, char **argv, int *i, const char *name, const char **out, bool *bad) {
    if (!args_flag(argv, *i, name)) return false;
    if (*i + 1 >= argc) {
        fprintf(stderr, "ft: option %s needs a value\n", argv[*i]);
        *bad = true;
        return true;
    }
    *out = argv[++*i];
    return true;
}

bool args_int(int argc, char **argv, int *i, const char *name, int64_t lo, int64_t hi,
              int64_t *out, bool *bad) {
    const char *v;
    if (!args_str(argc, argv, i, name, &v, bad)) return false;
    if (*bad) return true;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "ft: option %s: '%s' is not an integer in [%lld, %lld]\n", argv[*i - 1], v,
                (long long)lo, (long long)hi);
        *bad = true;
        return true;
    }
    *out = x;
    return true;
}

bool args_float(int argc, char **argv, int *i, const char *name, double *out, bool *bad) {
    const char *v;
    if (!args_str(argc, argv, i, name, &v, bad)) return false;
    if (*bad) return true;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end) {
        fprintf(stderr, "ft: option %s: '%s' is not a number\n", argv[*i - 1], v);
        *bad = true;
        return true;
    }
    *out = x;
    return true;
}
