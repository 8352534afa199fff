// oracle.c: finding and loading llama.cpp's shared libraries for the tests.
#include "oracle.h"
#include "test.h"

#include <dlfcn.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// llama.h comes from the source bundle (see the Makefile); without it the C API oracles skip.
#if defined(__has_include)
#if __has_include("llama.h")
#define ORACLE_HAVE_LLAMA_H 1
#include "llama.h"
#endif
#endif

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
    size_t n = strlen(args) + 64;
    char *cmd = malloc(n);
    snprintf(cmd, n, "node tests/oracle/llama_eval.mjs %s", args);
    int rc = test_run(cmd, out, cap);
    if (rc != 0) test_fail(__FILE__, __LINE__, "`%.300s...` exited with %d", cmd, rc);
    free(cmd);
    return rc == 0;
}

json_t *oracle_jinja_render(json_t *job) {
    const char *job_path = test_path("jinja-job.json"), *out_path = test_path("jinja-out.json");
    if (json_dump_file(job, job_path, JSON_COMPACT) != 0) {
        test_fail(__FILE__, __LINE__, "cannot write %s", job_path);
        return NULL;
    }
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "node tests/oracle/jinja_render.mjs '%s' '%s'", job_path, out_path);
    if (test_run(cmd, NULL, 0) != 0) {
        test_fail(__FILE__, __LINE__, "`%s` failed", cmd);
        return NULL;
    }
    json_error_t jerr;
    json_t *out = json_load_file(out_path, 0, &jerr);
    if (!json_is_array(out) || json_array_size(out) != json_array_size(job)) {
        test_fail(__FILE__, __LINE__, "bad output from tests/oracle/jinja_render.mjs: %s", jerr.text);
        json_decref(out);
        return NULL;
    }
    return out;
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

// ---------------------------------------------------------------------------------------------
// llama.cpp's tokenizer through its C API

const char *oracle_llama_src(void) {
    const char *e = getenv("FT_LLAMA_SRC");
    const char *dir = e ? e : "build/llama.cpp";
    char path[1024];
    struct stat st;
    snprintf(path, sizeof(path), "%s/models", dir);
    if (stat(path, &st) != 0) {
        missing("llama.cpp sources unpacked from node-llama-cpp's bundle (build/llama.cpp)");
        return NULL;
    }
    return dir;
}

#ifdef ORACLE_HAVE_LLAMA_H

// The C API, looked up once.
typedef struct {
    __typeof__(&llama_backend_init) backend_init;
    __typeof__(&llama_log_set) log_set;
    __typeof__(&llama_model_default_params) model_default_params;
    __typeof__(&llama_model_load_from_file) model_load_from_file;
    __typeof__(&llama_model_free) model_free;
    __typeof__(&llama_model_get_vocab) model_get_vocab;
    __typeof__(&llama_tokenize) tokenize;
    __typeof__(&llama_token_to_piece) token_to_piece;
    __typeof__(&llama_detokenize) detokenize;
    __typeof__(&llama_vocab_n_tokens) n_tokens;
    __typeof__(&llama_vocab_bos) bos;
    __typeof__(&llama_vocab_eos) eos;
    __typeof__(&llama_vocab_eot) eot;
    __typeof__(&llama_vocab_get_add_bos) get_add_bos;
    __typeof__(&llama_vocab_get_add_eos) get_add_eos;
    __typeof__(&llama_vocab_get_attr) get_attr;
    __typeof__(&llama_vocab_is_eog) is_eog;
} llama_api;

struct oracle_vocab {
    struct llama_model *model;
    const struct llama_vocab *vocab;
};

static void quiet_log(enum ggml_log_level level, const char *text, void *user) {
    (void)level, (void)text, (void)user;
}

static const llama_api *api(void) {
    static llama_api a;
    static int state = -1;
    if (state < 0) {
        void *lib = oracle_llama();
        if (!lib) return NULL;
        state = 0;
#define SYM(field, name) if (!(a.field = (__typeof__(a.field))oracle_sym(lib, name))) return NULL
        SYM(backend_init, "llama_backend_init");
        SYM(log_set, "llama_log_set");
        SYM(model_default_params, "llama_model_default_params");
        SYM(model_load_from_file, "llama_model_load_from_file");
        SYM(model_free, "llama_model_free");
        SYM(model_get_vocab, "llama_model_get_vocab");
        SYM(tokenize, "llama_tokenize");
        SYM(token_to_piece, "llama_token_to_piece");
        SYM(detokenize, "llama_detokenize");
        SYM(n_tokens, "llama_vocab_n_tokens");
        SYM(bos, "llama_vocab_bos");
        SYM(eos, "llama_vocab_eos");
        SYM(eot, "llama_vocab_eot");
        SYM(get_add_bos, "llama_vocab_get_add_bos");
        SYM(get_add_eos, "llama_vocab_get_add_eos");
        SYM(get_attr, "llama_vocab_get_attr");
        SYM(is_eog, "llama_vocab_is_eog");
#undef SYM
        a.log_set(quiet_log, NULL);
        a.backend_init();
        state = 1;
    }
    if (!state) missing("llama.cpp C API symbols");
    return state ? &a : NULL;
}

oracle_vocab *oracle_vocab_load(const char *path) {
    const llama_api *a = api();
    if (!a) return NULL;
    struct llama_model_params mp = a->model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = a->model_load_from_file(path, mp);
    if (!m) {
        test_fail(__FILE__, __LINE__, "llama.cpp cannot load %s", path);
        return NULL;
    }
    oracle_vocab *o = calloc(1, sizeof(*o));
    o->model = m;
    o->vocab = a->model_get_vocab(m);
    return o;
}

void oracle_vocab_free(oracle_vocab *o) {
    if (!o) return;
    api()->model_free(o->model);
    free(o);
}

int oracle_tokenize(oracle_vocab *o, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t *ids, int cap) {
    int n = api()->tokenize(o->vocab, text, (int32_t)len, ids, cap, add_special, parse_special);
    return n < 0 ? -1 : n;
}

int oracle_token_to_piece(oracle_vocab *o, int32_t id, bool special, char *buf, int cap) {
    int n = api()->token_to_piece(o->vocab, id, buf, cap, 0, special);
    return n < 0 ? -1 : n;
}

int oracle_detokenize(oracle_vocab *o, const int32_t *ids, int n, bool remove_special,
                      bool unparse_special, char *buf, int cap) {
    int r = api()->detokenize(o->vocab, ids, n, buf, cap, remove_special, unparse_special);
    return r < 0 ? -1 : r;
}

oracle_vocab_info oracle_vocab_get_info(oracle_vocab *o) {
    const llama_api *a = api();
    return (oracle_vocab_info){a->n_tokens(o->vocab), a->bos(o->vocab), a->eos(o->vocab),
                               a->eot(o->vocab), a->get_add_bos(o->vocab),
                               a->get_add_eos(o->vocab)};
}

uint32_t oracle_token_attr(oracle_vocab *o, int32_t id) {
    return (uint32_t)api()->get_attr(o->vocab, id);
}

bool oracle_token_is_eog(oracle_vocab *o, int32_t id) { return api()->is_eog(o->vocab, id); }

#else // no llama.h: every oracle here is missing

oracle_vocab *oracle_vocab_load(const char *path) {
    (void)path;
    missing("llama.h (unpacked by the Makefile from node-llama-cpp's bundle)");
    return NULL;
}
void oracle_vocab_free(oracle_vocab *o) { (void)o; }
int oracle_tokenize(oracle_vocab *o, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t *ids, int cap) {
    (void)o, (void)text, (void)len, (void)add_special, (void)parse_special, (void)ids, (void)cap;
    return -1;
}
int oracle_token_to_piece(oracle_vocab *o, int32_t id, bool special, char *buf, int cap) {
    (void)o, (void)id, (void)special, (void)buf, (void)cap;
    return -1;
}
int oracle_detokenize(oracle_vocab *o, const int32_t *ids, int n, bool remove_special,
                      bool unparse_special, char *buf, int cap) {
    (void)o, (void)ids, (void)n, (void)remove_special, (void)unparse_special, (void)buf, (void)cap;
    return -1;
}

oracle_vocab_info oracle_vocab_get_info(oracle_vocab *o) {
    (void)o;
    return (oracle_vocab_info){0, -1, -1, -1, false, false};
}
uint32_t oracle_token_attr(oracle_vocab *o, int32_t id) {
    (void)o, (void)id;
    return 0;
}
bool oracle_token_is_eog(oracle_vocab *o, int32_t id) {
    (void)o, (void)id;
    return false;
}

#endif

oracle_flags_fn oracle_unicode_flags(void) {
    void *lib = oracle_llama();
    if (!lib) return NULL;
    // unicode_cpt_flags unicode_cpt_flags_from_cpt(uint32_t): a 16-bit struct, returned as such
    return (oracle_flags_fn)oracle_sym(lib, "_Z26unicode_cpt_flags_from_cptj");
}
