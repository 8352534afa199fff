// oracle.h: llama.cpp, loaded at run time, as the truth the tests compare against.
//
// The npm package @node-llama-cpp/linux-x64@3.21.1 (installed by `make deps` into
// node_modules/) ships llama.cpp's CPU build as shared libraries. The tests dlopen them rather
// than link them so the suite still builds and runs where they are absent: then each oracle
// test is skipped, or fails when FT_REQUIRE_ORACLE=1 (as in CI), so a missing oracle can
// never pass silently there.
#ifndef FT_TEST_ORACLE_H
#define FT_TEST_ORACLE_H

#include <stdbool.h>
#include <stddef.h>

// Directory of the libraries: $FT_LLAMA_LIB_DIR, else the npm package's bins folder.
const char *oracle_lib_dir(void);

// Handles of libggml-base (quant functions, gguf reader) and libllama; NULL when the library
// cannot be loaded, after calling test_skip or test_fail (see above) with the reason.
void *oracle_ggml_base(void);
void *oracle_llama(void);

// True when node and node-llama-cpp can run tests/oracle/llama_eval.mjs; otherwise skips (or
// fails, see above) the current test and returns false.
bool oracle_node_available(void);

// Runs tests/oracle/llama_eval.mjs with the given arguments (shell-quoted by the caller) and
// captures its one line of JSON in out. Returns false (and fails the test) on a non-zero exit.
bool oracle_llama_eval(const char *args, char *out, size_t cap);

// A symbol of a loaded library; fails the current test and returns NULL when absent.
void *oracle_sym(void *lib, const char *name);

#endif
