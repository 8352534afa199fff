// util: the small pieces every module uses: assertions, errors, logging.
//
// Errors: a function that can fail on untrusted input takes an `ft_err *` and, on failure,
// writes one human-readable line into it ("what was wrong, where") and returns an error value
// (NULL, false or -1, as its contract says). `ft_err *` may be NULL when the caller does not
// want the message. Programmer errors are FT_ASSERT: they print file and line and abort.
//
// Logging goes to stderr; results belong on stdout. Thread-safe (one fprintf per line).
#ifndef FT_UTIL_H
#define FT_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FT_VERSION "0.1.0" // `ft --version`, and the server's build_info

typedef struct ft_err {
    char msg[512];
} ft_err;

// Formats a message into err (if non-NULL). Always returns false, so a failing path can
// `return ft_err_set(err, ...)`.
bool ft_err_set(ft_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Prepends "prefix: " to the message already in err (if non-NULL). Returns false.
bool ft_err_prefix(ft_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

enum ft_log_level { FT_LOG_LEVEL_ERROR, FT_LOG_LEVEL_WARN, FT_LOG_LEVEL_INFO, FT_LOG_LEVEL_DEBUG };

void ft_log_set_level(enum ft_log_level level);
void ft_log(enum ft_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define FT_LOG_ERROR(...) ft_log(FT_LOG_LEVEL_ERROR, __VA_ARGS__)
#define FT_LOG_WARN(...) ft_log(FT_LOG_LEVEL_WARN, __VA_ARGS__)
#define FT_LOG_INFO(...) ft_log(FT_LOG_LEVEL_INFO, __VA_ARGS__)
#define FT_LOG_DEBUG(...) ft_log(FT_LOG_LEVEL_DEBUG, __VA_ARGS__)

_Noreturn void ft_abort(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define FT_ASSERT(cond)                                                         \
    do {                                                                        \
        if (!(cond)) ft_abort(__FILE__, __LINE__, "assertion failed: %s", #cond); \
    } while (0)

// Allocation that cannot fail (aborts with a message when memory is exhausted). For sizes
// that come from untrusted input, check them against a limit first.
void *ft_malloc(size_t size);
void *ft_calloc(size_t n, size_t size);
void *ft_realloc(void *p, size_t size);
char *ft_strdup(const char *s);

// ft's cache folder: $XDG_CACHE_HOME/ft, else $HOME/.cache/ft (not created here). False when
// neither variable is set.
bool ft_cache_dir(char *out, size_t cap);

// Overflow-checked arithmetic for sizes derived from untrusted input. Return false on overflow.
static inline bool ft_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool ft_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

#define FT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define FT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FT_MAX(a, b) ((a) > (b) ? (a) : (b))

// Wall-clock seconds from a monotonic clock.
double ft_time_s(void);
// Memory the kernel says is available for new allocations without swapping (MemAvailable of
// /proc/meminfo), in bytes; 0 when unknown.
size_t ft_mem_available(void);

#endif
