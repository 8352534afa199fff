// test_layering.c: the module order of DESIGN.md holds in src/: cli -> server -> engine ->
// model -> tokenizer, kv -> backend -> moe -> gguf -> quant -> util. Every #include "..." of
// a file under src/M/ names a file of M or of a module below M (tokenizer and kv are on one
// level and include neither each other), and only src/backend/ includes src/backend/cuda/:
// the rest of the engine sees backend.h and its constructor.
#include "fixtures.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int level;
} g_modules[] = {
    {"util", 0}, {"quant", 1}, {"gguf", 2}, {"moe", 3}, {"backend", 4}, {"kv", 5},
    {"tokenizer", 5}, {"model", 6}, {"engine", 7}, {"server", 8}, {"cli", 9},
};

// The module a path under src/ belongs to, or -1.
static int module_of(const char *path) {
    if (strncmp(path, "src/", 4)) return -1;
    const char *m = path + 4, *slash = strchr(m, '/');
    if (!slash) return -1;
    for (int i = 0; i < (int)(sizeof(g_modules) / sizeof(g_modules[0])); i++)
        if ((size_t)(slash - m) == strlen(g_modules[i].name) && !strncmp(m, g_modules[i].name, (size_t)(slash - m)))
            return i;
    return -1;
}

// dir/inc with "." and ".." folded, into out.
static void join_normal(const char *dir, const char *inc, char *out, size_t cap) {
    char buf[2 * PATH_MAX];
    snprintf(buf, sizeof(buf), "%s/%s", dir, inc);
    char *parts[128];
    int n = 0;
    for (char *t = strtok(buf, "/"); t && n < 128; t = strtok(NULL, "/")) {
        if (!strcmp(t, ".")) continue;
        if (!strcmp(t, "..")) {
            if (n > 0) n--;
            continue;
        }
        parts[n++] = t;
    }
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        strncat(out, parts[i], cap - strlen(out) - 1);
        if (i + 1 < n) strncat(out, "/", cap - strlen(out) - 1);
    }
}

static int g_files, g_includes;

static void check_file(const char *path) {
    int from = module_of(path);
    if (from < 0) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    g_files++;
    char dir[PATH_MAX], line[1024];
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = 0;
    bool in_backend = !strncmp(path, "src/backend/", 12);
    for (int ln = 1; fgets(line, sizeof(line), f); ln++) {
        const char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (strncmp(s, "#include \"", 10)) continue;
        char inc[512];
        const char *q = strchr(s + 10, '"');
        if (!q || (size_t)(q - (s + 10)) >= sizeof(inc)) continue;
        memcpy(inc, s + 10, (size_t)(q - (s + 10)));
        inc[q - (s + 10)] = 0;
        char target[PATH_MAX];
        join_normal(dir, inc, target, sizeof(target));
        int to = module_of(target);
        if (to < 0) continue;
        g_includes++;
        if (to != from && g_modules[to].level >= g_modules[from].level)
            test_fail(__FILE__, __LINE__, "%s:%d includes %s: module %s may not include %s (DESIGN.md's order)", path, ln,
                      target, g_modules[from].name, g_modules[to].name);
        if (!in_backend && !strncmp(target, "src/backend/cuda/", 17))
            test_fail(__FILE__, __LINE__, "%s:%d includes %s: only src/backend/ sees the CUDA backend", path, ln, target);
    }
    fclose(f);
}

static void check_source(void *ctx, const char *path) {
    (void)ctx;
    check_file(path);
}

TEST(layering_follows_the_module_order) {
    g_files = g_includes = 0;
    fixture_for_each_source("src", check_source, NULL);
    REQUIRE(g_files > 100 && g_includes > 200, "scanned %d files, %d includes: run from the repository root", g_files,
            g_includes);
    printf("    %d files, %d includes between modules of src/\n", g_files, g_includes);
}
