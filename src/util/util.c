// util.c: errors, logging, checked allocation, clock.
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool ft_err_set(ft_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return false;
}

bool ft_err_prefix(ft_err *err, const char *fmt, ...) {
    if (err) {
        char prefix[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof(prefix), fmt, ap);
        va_end(ap);
        size_t cap = sizeof(err->msg), p = strlen(prefix) + 2; // "prefix: "
        size_t old = strnlen(err->msg, cap - 1);
        if (p >= cap) p = cap - 1;
        if (old > cap - 1 - p) old = cap - 1 - p; // keep the tail cut, not the prefix
        memmove(err->msg + p, err->msg, old);
        err->msg[p + old] = 0;
        memcpy(err->msg, prefix, p - 2);
        if (p >= 2) memcpy(err->msg + p - 2, ": ", 2);
    }
    return false;
}

static enum ft_log_level g_log_level = FT_LOG_LEVEL_INFO;

void ft_log_set_level(enum ft_log_level level) { g_log_level = level; }

void ft_log(enum ft_log_level level, const char *fmt, ...) {
    if (level > g_log_level) return;
    static const char *const prefix[] = {"error: ", "warning: ", "", ""};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s\n", prefix[level], line);
}

void ft_abort(const char *file, int line, const char *fmt, ...) {
    fprintf(stderr, "ft: internal error at %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void *ft_malloc(size_t size) {
    void *p = malloc(size ? size : 1);
    if (!p) ft_abort(__FILE__, __LINE__, "out of memory allocating %zu bytes", size);
    return p;
}

void *ft_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) ft_abort(__FILE__, __LINE__, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *ft_realloc(void *p, size_t size) {
    void *q = realloc(p, size ? size : 1);
    if (!q) ft_abort(__FILE__, __LINE__, "out of memory reallocating %zu bytes", size);
    return q;
}

char *ft_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(ft_malloc(n), s, n);
}

double ft_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t ft_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024;
}

bool ft_cache_dir(char *out, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(out, cap, "%s/ft", xdg);
    else if (home && *home) snprintf(out, cap, "%s/.cache/ft", home);
    else return false;
    return true;
}
