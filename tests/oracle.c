// oracle.c: finding and loading llama.cpp's shared libraries for the tests.
#include "oracle.h"
#include "test.h"

#include <dlfcn.h>
#include <stdlib.h>

const char *oracle_lib_dir(void) {
    const char *e = getenv("FT_LLAMA_LIB_DIR");
    return e ? e : "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64";
}

// Reports a missing oracle: a failure where it is required (CI), a skip elsewhere.
static void missing(const char *what) {
    const char *req = getenv("FT_REQUIRE_ORACLE");
    if (req && *req && *req != '0')
        test_fail(__FILE__, __LINE__, "oracle required but unavailable: %s", what);
    else
        test_skip("llama.cpp oracle unavailable (run `make deps`): %s", what);
}

static void *load(const char *file, void **cache, bool *tried) {
    static char why[1024];
    if (!*tried) {
        *tried = true;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", oracle_lib_dir(), file);
        *cache = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (!*cache) snprintf(why, sizeof(why), "%s", dlerror());
    }
    if (!*cache) missing(why);
    return *cache;
}

bool oracle_node_available(void) {
    static int state = -1;
    if (state < 0)
        state = test_run("node -e \"require.resolve('node-llama-cpp')\" >/dev/null 2>&1", NULL, 0) == 0;
    if (!state) missing("node with node-llama-cpp (tests/oracle/llama_eval.mjs)");
    return state;
}

bool oracle_llama_eval(const char *args, char *out, size_t cap) {
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "node tests/oracle/llama_eval.mjs %s", args);
    int rc = test_run(cmd, out, cap);
    if (rc != 0) test_fail(__FILE__, __LINE__, "`%s` exited with %d", cmd, rc);
    return rc == 0;
}

void *oracle_ggml_base(void) {
    static void *h;
    static bool tried;
    return load("libggml-base.so", &h, &tried);
}

void *oracle_llama(void) {
    static void *h;
    static bool tried;
    return load("libllama.v0.4.0.so", &h, &tried);
}

void *oracle_sym(void *lib, const char *name) {
    void *p = lib ? dlsym(lib, name) : NULL;
    if (!p) test_fail(__FILE__, __LINE__, "llama.cpp symbol %s not found", name);
    return p;
}
