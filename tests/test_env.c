// test_env.c: the FT_* environment table (src/util/env.h): its accessors' rules, its list
// against docs/development.md, and that no file under src/ reads an FT_* variable beside it.
#include "fixtures.h"
#include "../src/util/env.h"
#include "../src/util/util.h"

#include <stdlib.h>
#include <string.h>

// Reads a whole file into a NUL-terminated buffer (NULL when it cannot be read).
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = 0, cap = 1 << 16;
    char *s = ft_malloc(cap);
    size_t got;
    while ((got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) s = ft_realloc(s, cap *= 2);
    }
    fclose(f);
    s[n] = 0;
    return s;
}

TEST(env_table_names_are_unique_and_documented_in_one_line) {
    for (int i = 0; i < FT_ENV_COUNT; i++) {
        const ft_env_var *v = ft_env_info((enum ft_env)i);
        REQUIRE(v->name && v->doc, "entry %d is empty", i);
        CHECK(!strncmp(v->name, "FT_", 3), "%s", v->name);
        CHECK(*v->doc && !strchr(v->doc, '\n'), "%s: one line of description", v->name);
        for (int j = 0; j < i; j++) CHECK(strcmp(v->name, ft_env_info((enum ft_env)j)->name), "%s twice", v->name);
    }
}

// Every variable of the table appears, in backquotes, in docs/development.md.
TEST(env_every_variable_is_in_docs_development) {
    char *doc = read_text("docs/development.md");
    REQUIRE(doc, "docs/development.md: cannot read it (the tests run from the repository root)");
    for (int i = 0; i < FT_ENV_COUNT; i++) {
        char quoted[96];
        snprintf(quoted, sizeof(quoted), "`%s`", ft_env_info((enum ft_env)i)->name);
        CHECK(strstr(doc, quoted), "docs/development.md does not mention %s", quoted);
    }
    free(doc);
}

// Where a test sets a variable it restores what the environment had.
typedef struct {
    const char *name;
    char *saved;
} env_save;

static env_save env_push(enum ft_env v, const char *value) {
    env_save s = {ft_env_info(v)->name, NULL};
    const char *old = getenv(s.name);
    if (old) s.saved = ft_strdup(old);
    if (value) setenv(s.name, value, 1);
    else unsetenv(s.name);
    return s;
}

static void env_pop(env_save s) {
    if (s.saved) setenv(s.name, s.saved, 1);
    else unsetenv(s.name);
    free(s.saved);
}

static bool flag_with(enum ft_env v, const char *value) {
    env_save s = env_push(v, value);
    bool on = ft_env_flag(v);
    env_pop(s);
    return on;
}

// The rules every call site relied on before the table: "0" turns a default-on switch off and
// anything else (an empty value too) leaves it on; a default-off switch needs a non-empty value
// other than "0".
TEST(env_flag_rules) {
    CHECK(ft_env_info(FT_ENV_CUDA_GRAPHS)->flag_default && !ft_env_info(FT_ENV_REFERENCE)->flag_default);
    CHECK(flag_with(FT_ENV_CUDA_GRAPHS, NULL));
    CHECK(flag_with(FT_ENV_CUDA_GRAPHS, ""));
    CHECK(flag_with(FT_ENV_CUDA_GRAPHS, "1"));
    CHECK(flag_with(FT_ENV_CUDA_GRAPHS, "off"), "only 0 turns it off");
    CHECK(!flag_with(FT_ENV_CUDA_GRAPHS, "0"));
    CHECK(!flag_with(FT_ENV_REFERENCE, NULL));
    CHECK(!flag_with(FT_ENV_REFERENCE, ""));
    CHECK(!flag_with(FT_ENV_REFERENCE, "0"));
    CHECK(flag_with(FT_ENV_REFERENCE, "1"));
    CHECK(flag_with(FT_ENV_REFERENCE, "yes"));

    env_save s = env_push(FT_ENV_CPU_EXPERTS_MEETING, "event");
    CHECK(ft_env_is(FT_ENV_CPU_EXPERTS_MEETING, "event"));
    CHECK(!ft_env_is(FT_ENV_CPU_EXPERTS_MEETING, "even"));
    CHECK(!strcmp(ft_env_str(FT_ENV_CPU_EXPERTS_MEETING), "event"));
    env_pop(s);
    s = env_push(FT_ENV_CPU_EXPERTS_MEETING, NULL);
    CHECK(!ft_env_str(FT_ENV_CPU_EXPERTS_MEETING) && !ft_env_is(FT_ENV_CPU_EXPERTS_MEETING, ""));
    env_pop(s);
}

// Fails for each getenv("FT_ call in a source file (ctx counts them); src/util/env.c itself
// reads by name, not by literal.
static void ft_getenv_calls(void *ctx, const char *path) {
    char *s = read_text(path);
    if (!s) return;
    for (const char *p = s; (p = strstr(p, "getenv(\"FT_")); p++) {
        test_fail(__FILE__, __LINE__, "%s reads an FT_ variable with getenv: add it to src/util/env.c", path);
        ++*(int *)ctx;
    }
    free(s);
}

TEST(env_no_ft_getenv_outside_the_table) {
    int calls = 0;
    REQUIRE(fixture_for_each_source("src", ft_getenv_calls, &calls) > 100,
            "src/: not found (the tests run from the repository root)");
    CHECK(calls == 0);
}
