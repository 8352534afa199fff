// main.c: the test runner.
#include "test.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    const char *name;
    test_fn fn;
} test_entry;

static test_entry g_tests[1024];
static int g_n_tests;
static bool g_failed, g_skipped;
static int g_fail_lines;

void test_register(const char *name, test_fn fn) {
    if (g_n_tests == (int)(sizeof(g_tests) / sizeof(g_tests[0]))) {
        fprintf(stderr, "too many tests\n");
        exit(2);
    }
    g_tests[g_n_tests++] = (test_entry){name, fn};
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    g_failed = true;
    if (++g_fail_lines > 20) return; // one broken loop should not flood the log
    fprintf(stderr, "    %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void test_skip(const char *fmt, ...) {
    g_skipped = true;
    fprintf(stderr, "    skipped: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

bool test_failed(void) { return g_failed; }

static char g_tmpdir[256];

const char *test_tmpdir(void) {
    if (!g_tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(g_tmpdir, sizeof(g_tmpdir), "%s/ft-test-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(g_tmpdir)) {
            fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
            exit(2);
        }
    }
    return g_tmpdir;
}

const char *test_path(const char *name) {
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof(bufs[0]), "%s/%s", test_tmpdir(), name);
    return b;
}

const char *test_ft_bin(void) {
    const char *e = getenv("FT_BIN");
    return e ? e : "build/ft";
}

const char *test_shared_dir(void) {
    const char *e = getenv("FT_SHARED");
    return e ? e : "../shared";
}

int test_run(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = 0;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), p)) > 0) {
        if (out && n + 1 < cap) {
            size_t take = got < cap - 1 - n ? got : cap - 1 - n;
            memcpy(out + n, buf, take);
            n += take;
        }
    }
    if (out && cap) out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Whether a test runs: no filters given, or its name contains one of them.
static bool selected(const char *name, int n_filters, char **filters) {
    for (int k = 0; k < n_filters; k++)
        if (strstr(name, filters[k])) return true;
    return n_filters == 0;
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < g_n_tests; i++) {
        if (!selected(g_tests[i].name, argc - 1, argv + 1)) continue;
        g_failed = g_skipped = false;
        g_fail_lines = 0;
        fprintf(stderr, "%s\n", g_tests[i].name);
        g_tests[i].fn();
        if (g_failed) {
            failed++;
            fprintf(stderr, "  FAIL %s\n", g_tests[i].name);
        } else if (g_skipped) {
            skipped++;
        } else {
            passed++;
        }
    }
    if (g_tmpdir[0] && !getenv("FT_KEEP_TMP")) {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmpdir);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
