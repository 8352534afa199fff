// test.h: the tiny test framework of ft's suite.
//
// TEST(name) { ... } defines and registers a test. CHECK records a failure (with file, line
// and an optional printf message) and carries on; REQUIRE returns from the test on failure.
// test_skip() marks a test skipped (it neither passes nor fails). The runner (tests/main.c)
// runs every test, or those whose name contains argv[1], and ends with "N passed, N failed".
#ifndef FT_TEST_H
#define FT_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool test_failed(void); // has the current test failed so far

// A scratch directory private to this run of the suite (created on first use).
const char *test_tmpdir(void);
// Joins test_tmpdir() and name into a static buffer (one of 8 rotating buffers).
const char *test_path(const char *name);
// Path of the built ft binary (FT_BIN, else build/ft) and of ../shared (FT_SHARED, else
// ../shared relative to the repository root).
const char *test_ft_bin(void);
const char *test_shared_dir(void);

// Runs a shell command, captures up to cap-1 bytes of its stdout into out (NUL-terminated;
// out may be NULL), and returns its exit status (-1 if it did not exit normally).
int test_run(const char *cmd, char *out, size_t cap);

#define TEST(name)                                                             \
    static void name(void);                                                    \
    __attribute__((constructor)) static void name##_register(void) {          \
        test_register(#name, name);                                            \
    }                                                                          \
    static void name(void)

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(" #cond ") " __VA_ARGS__); \
    } while (0)

#define REQUIRE(cond, ...)                                                     \
    do {                                                                       \
        if (!(cond)) {                                                         \
            test_fail(__FILE__, __LINE__, "REQUIRE(" #cond ") " __VA_ARGS__);  \
            return;                                                            \
        }                                                                      \
    } while (0)

#endif
