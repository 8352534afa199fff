// fixtures.c: see fixtures.h.
#include "fixtures.h"
#include "../src/gguf/gguf.h"
#include "../src/quant/quant.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// Synthetic models

ft_synth_params fixture_moe_params(int n_layer, int n_expert) {
    ft_synth_params p = ft_synth_default_params();
    p.n_layer = n_layer;
    p.n_embd = 256;
    p.n_ff_exp = 256;
    p.n_expert = n_expert;
    p.n_expert_used = 2;
    return p;
}

void fixture_expert_types(ft_synth_params *p, const char *gate_up, const char *down) {
    ft_err err = {{0}};
    p->n_expert_types = ft_synth_parse_types(gate_up, p->expert_types, FT_SYNTH_MAX_LAYERS, &err);
    FT_ASSERT(p->n_expert_types > 0 && "fixture_expert_types: a bad gate/up list");
    p->n_expert_down_types = 0;
    if (down) {
        p->n_expert_down_types = ft_synth_parse_types(down, p->expert_down_types, FT_SYNTH_MAX_LAYERS, &err);
        FT_ASSERT(p->n_expert_down_types > 0 && "fixture_expert_types: a bad down list");
    }
}

ft_synth_params fixture_compare_params(const char *arch, int head_dim, bool strict) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = arch;
    p.n_layer = 3;
    p.n_ctx_train = 256;
    p.head_dim = head_dim;
    if (strict) {
        p.dense_type = FT_TYPE_Q8_0;
        fixture_expert_types(&p, "q8_0", NULL);
    }
    if (!strcmp(arch, "laguna")) p.n_dense_lead = 1;
    if (!strcmp(arch, "glm4moe")) fixture_glm4moe(&p);
    if (!strcmp(arch, "gpt-oss")) {
        fixture_gptoss(&p);
        p.n_expert_used = 4;
        if (!strict) fixture_expert_types(&p, "mxfp4,q4_K,mxfp4", NULL);
    }
    return p;
}

void fixture_gptoss(ft_synth_params *p) {
    p->qkv_bias = true;
    p->n_swa = 8;
    p->yarn_factor = 4.0f;
}

void fixture_glm4moe(ft_synth_params *p) {
    p->n_dense_lead = 1;
    p->n_rot = p->head_dim / 2;
    p->qkv_bias = true;
    p->qk_norm = true;
    p->n_mtp = 1;
}

void fixture_bf16_tail(ft_synth_params *p, bool strict) {
    p->n_layer = 4;
    fixture_expert_types(p, strict ? "q8_0,q8_0,q8_0,bf16" : "q4_K,q4_K,q4_K,bf16", NULL);
}

// One of 8 rotating copies of path.
static const char *keep_path(const char *path) {
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof(bufs[0]), "%s", path);
    return b;
}

const char *fixture_write(const ft_synth_params *p, const char *name) {
    const char *path = keep_path(test_path(name));
    ft_err err = {{0}};
    if (!ft_synth_write(p, path, &err)) {
        test_fail(__FILE__, __LINE__, "synth %s: %s", name, err.msg);
        return NULL;
    }
    return path;
}

ft_model *fixture_model(const ft_synth_params *p, const char *name) {
    const char *path = fixture_write(p, name);
    if (!path) return NULL;
    ft_err err = {{0}};
    ft_model *m = ft_model_load(path, &err);
    if (!m) test_fail(__FILE__, __LINE__, "load %s: %s", name, err.msg);
    return m;
}

const char *fixture_cli_model(const char *name, const char *synth_args) {
    const char *path = keep_path(test_path(name));
    if (access(path, R_OK) == 0) return path;
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof(cmd), "%s synth '%s' %s 2>&1", test_ft_bin(), path, synth_args);
    if (test_run(cmd, out, sizeof(out)) != 0) {
        unlink(path); // a later call must not take a partial file for the model
        test_fail(__FILE__, __LINE__, "ft synth %s %s: %s", name, synth_args, out);
        return NULL;
    }
    return path;
}

// "blk.L.ffn_gate_up_exps.weight": the names of its split halves into gate and up.
static bool fused_gate_up_name(gguf_str name, char gate[128], char up[128]) {
    char buf[128];
    int l, n = 0;
    if (name.len >= sizeof(buf)) return false;
    memcpy(buf, name.ptr, name.len);
    buf[name.len] = 0;
    if (sscanf(buf, "blk.%d.ffn_gate_up_exps.weight%n", &l, &n) != 1 || n == 0 || buf[n]) return false;
    snprintf(gate, 128, "blk.%d.ffn_gate_exps.weight", l);
    snprintf(up, 128, "blk.%d.ffn_up_exps.weight", l);
    return true;
}

bool fixture_gguf_rewrite(const char *src, const char *dst, const char *drop, void (*add)(gguf_writer *w, void *ctx),
                          void *ctx) {
    ft_err err = {{0}};
    gguf_file *f = gguf_open(src, &err);
    if (!f) return test_fail(__FILE__, __LINE__, "%s", err.msg), false;
    gguf_writer *w = gguf_writer_init();
    for (int64_t k = 0; k < gguf_n_kv(f); k++)
        if (!drop || !gguf_str_eq(gguf_kv_key(f, k), drop)) gguf_writer_copy_kv(w, f, k);
    if (add) add(w, ctx);
    for (int64_t t = 0; t < gguf_n_tensors(f); t++) {
        const gguf_tensor *g = gguf_tensor_at(f, t);
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)g->name.len, g->name.ptr);
        gguf_writer_add_tensor(w, name, g->type, g->n_dims, g->ne);
    }
    bool ok = gguf_writer_begin(w, dst, &err);
    for (int64_t t = 0; ok && t < gguf_n_tensors(f); t++)
        ok = gguf_writer_tensor_data(w, gguf_tensor_at(f, t)->data, gguf_tensor_at(f, t)->bytes, &err);
    ok = ok && gguf_writer_finish(w, &err);
    gguf_writer_free(w);
    gguf_close(f);
    if (!ok) test_fail(__FILE__, __LINE__, "%s", err.msg);
    return ok;
}

const char *fixture_split_gate_up(const char *src, const char *name) {
    const char *path = keep_path(test_path(name));
    ft_err err = {{0}};
    gguf_file *f = gguf_open(src, &err);
    if (!f) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return NULL;
    }
    gguf_writer *w = gguf_writer_init();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) gguf_writer_copy_kv(w, f, i);
    int n_fused = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char gate[128], up[128], own[128];
        if (fused_gate_up_name(t->name, gate, up)) {
            const int64_t ne[4] = {t->ne[0], t->ne[1] / 2, t->ne[2], t->ne[3]};
            gguf_writer_add_tensor(w, gate, t->type, t->n_dims, ne);
            gguf_writer_add_tensor(w, up, t->type, t->n_dims, ne);
            n_fused++;
        } else {
            snprintf(own, sizeof(own), "%.*s", (int)t->name.len, t->name.ptr);
            gguf_writer_add_tensor(w, own, t->type, t->n_dims, t->ne);
        }
    }
    bool ok = gguf_writer_begin(w, path, &err);
    for (int64_t i = 0; ok && i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char gate[128], up[128];
        if (!fused_gate_up_name(t->name, gate, up)) {
            ok = gguf_writer_tensor_data(w, t->data, t->bytes, &err);
            continue;
        }
        // expert e of the fused tensor: gate's rows, then up's, half its bytes each
        uint64_t half = t->bytes / (uint64_t)t->ne[2] / 2;
        uint8_t *bank = ft_malloc((size_t)(t->bytes / 2));
        for (int h = 0; ok && h < 2; h++) {
            for (int64_t e = 0; e < t->ne[2]; e++)
                memcpy(bank + e * half, (const uint8_t *)t->data + (2 * (uint64_t)e + (uint64_t)h) * half, half);
            ok = gguf_writer_tensor_data(w, bank, t->bytes / 2, &err);
        }
        free(bank);
    }
    ok = ok && gguf_writer_finish(w, &err);
    gguf_writer_free(w);
    gguf_close(f);
    if (!ok) test_fail(__FILE__, __LINE__, "%s: %s", name, err.msg);
    else if (!n_fused) test_fail(__FILE__, __LINE__, "%s: %s has no fused gate/up experts to split", name, src);
    return ok && n_fused ? path : NULL;
}

bool fixture_open_moe(const char *path, gguf_file **f, moe_geometry *g) {
    ft_err err = {{0}};
    *f = gguf_open(path, &err);
    if (*f && moe_geometry_read(*f, g, &err)) return true;
    test_fail(__FILE__, __LINE__, "%s: %s", path, err.msg);
    gguf_close(*f);
    *f = NULL;
    return false;
}

// ---------------------------------------------------------------------------------------------
// Tensors

ft_tensor fixture_kv_cache(enum ft_type t, int width, int n_ctx) {
    ft_tensor c = {.name = "cache", .type = t, .ne = {width, n_ctx, 1}, .placement = FT_PLACEMENT_CPU};
    c.row_bytes = ft_row_bytes(t, width);
    c.mat_bytes = c.row_bytes * (size_t)n_ctx;
    c.data = ft_calloc(1, c.mat_bytes);
    return c;
}

// ---------------------------------------------------------------------------------------------
// Files

char *fixture_read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *buf = NULL;
    long n = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    if (n >= 0 && fseek(fp, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (fread(buf, 1, (size_t)n, fp) == (size_t)n) {
            buf[n] = 0;
            if (len) *len = (size_t)n;
        } else {
            free(buf);
            buf = NULL;
        }
    }
    fclose(fp);
    return buf;
}

tok_vocab *fixture_vocab(const char *path) {
    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    tok_vocab *v = f ? tok_vocab_load(f, &err) : NULL;
    gguf_close(f);
    if (!v) test_fail(__FILE__, __LINE__, "%s: %s", path, err.msg);
    return v;
}

// ---------------------------------------------------------------------------------------------
// stderr

static FILE *g_saved_stderr, *g_null;
static int g_mute_depth;

void fixture_stderr_mute(void) {
    if (g_mute_depth++ > 0) return;
    g_saved_stderr = stderr;
    g_null = fopen("/dev/null", "w");
    if (g_null) stderr = g_null;
}

void fixture_stderr_restore(void) {
    FT_ASSERT(g_mute_depth > 0);
    if (--g_mute_depth > 0) return;
    if (g_null) {
        stderr = g_saved_stderr;
        fclose(g_null);
        g_null = NULL;
    }
}

// ---------------------------------------------------------------------------------------------
// Bytes written by hand

void fixture_buf_put(fixture_buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

void fixture_buf_u8(fixture_buf *b, uint8_t v) {
    fixture_buf_put(b, &v, 1);
}

void fixture_buf_u32(fixture_buf *b, uint32_t v) {
    fixture_buf_put(b, &v, 4);
}

void fixture_buf_u64(fixture_buf *b, uint64_t v) {
    fixture_buf_put(b, &v, 8);
}

void fixture_buf_str(fixture_buf *b, const char *s) {
    fixture_buf_u64(b, strlen(s));
    fixture_buf_put(b, s, strlen(s));
}

void fixture_buf_free(fixture_buf *b) {
    free(b->p);
    *b = (fixture_buf){0};
}

int fixture_for_each_source(const char *dir, void (*fn)(void *ctx, const char *path), void *ctx) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            n += fixture_for_each_source(path, fn, ctx);
            continue;
        }
        const char *dot = strrchr(e->d_name, '.');
        if (!dot || (strcmp(dot, ".c") && strcmp(dot, ".h") && strcmp(dot, ".cu") && strcmp(dot, ".cuh"))) continue;
        fn(ctx, path);
        n++;
    }
    closedir(d);
    return n;
}

// ---------------------------------------------------------------------------------------------
// Op inputs

void fixture_fill_nan(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

void fixture_fill_normal(ft_rng *r, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = ft_rng_normal(r) * scale;
}

ft_tensor fixture_weight(enum ft_type type, int64_t ne0, int64_t ne1, int64_t ne2, ft_rng *r) {
    ft_tensor t = {.type = type, .ne = {ne0, ne1, ne2}, .placement = FT_PLACEMENT_CPU};
    snprintf(t.name, sizeof(t.name), "w_%s", ft_type_name(type));
    t.row_bytes = ft_row_bytes(type, ne0);
    t.mat_bytes = t.row_bytes * (size_t)ne1;
    t.data = ft_malloc(t.mat_bytes * (size_t)ne2);
    for (int64_t i = 0; i < ne1 * ne2; i++)
        ft_quant_random_row(type, r, 1.0f / sqrtf((float)ne0), (uint8_t *)t.data + (size_t)i * t.row_bytes, ne0);
    return t;
}
