// oracle.c: finding and loading llama.cpp's shared libraries for the tests.
#include "oracle.h"
#include "test.h"

#include <dlfcn.h>
#include <stdlib.h>

const char *oracle_lib_dir(void) {
    const char *e = getenv("FT_LLAMA_LIB_DIR");
    return e ? e : "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64";
}

static void *load(const char *file, void **cache, bool *tried) {
    if (*tried) {
        if (!*cache) test_skip("llama.cpp library %s is not loaded", file);
        return *cache;
    }
    *tried = true;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", oracle_lib_dir(), file);
    *cache = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!*cache) {
        const char *req = getenv("FT_REQUIRE_ORACLE");
        if (req && *req && *req != '0')
            test_fail(__FILE__, __LINE__, "oracle required but not loadable: %s", dlerror());
        else
            test_skip("llama.cpp oracle not installed (run `make deps`): %s", dlerror());
    }
    return *cache;
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
