// model.c: loading a model (see model.h): the architecture table, hyper-parameter readers and
// tensor binding with their checks.
#include "model_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const ft_arch ft_arch_qwen3moe, ft_arch_qwen2moe, ft_arch_llama, ft_arch_laguna;

static const ft_arch *const g_archs[] = {&ft_arch_qwen3moe, &ft_arch_qwen2moe, &ft_arch_llama,
                                         &ft_arch_laguna};

const ft_arch *ft_arch_find(const char *name) {
    for (size_t i = 0; i < FT_ARRAY_LEN(g_archs); i++)
        if (!strcmp(g_archs[i]->name, name)) return g_archs[i];
    return NULL;
}

const char *ft_arch_names(void) { return "qwen3moe, qwen2moe, llama (with experts), laguna"; }

// ---------------------------------------------------------------------------------------------
// Hyper-parameters

static const char *key_of(const ft_model *m, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", m->arch->name, suffix);
    return buf;
}

bool model_hp_int(const ft_model *m, const char *suffix, int *out, bool required, int64_t lo,
            int64_t hi, ft_err *err) {
    char key[160];
    key_of(m, suffix, key, sizeof(key));
    int64_t v;
    if (gguf_find_key(m->file, key) < 0) return required ? ft_err_set(err, "missing key %s", key) : true;
    if (!gguf_get_int(m->file, key, &v)) return ft_err_set(err, "key %s: not an integer", key);
    if (v < lo || v > hi)
        return ft_err_set(err, "key %s = %lld: out of range [%lld, %lld]", key, (long long)v, (long long)lo,
                          (long long)hi);
    *out = (int)v;
    return true;
}

bool model_hp_float(const ft_model *m, const char *suffix, float *out, bool required, ft_err *err) {
    char key[160];
    key_of(m, suffix, key, sizeof(key));
    double v;
    if (gguf_find_key(m->file, key) < 0) return required ? ft_err_set(err, "missing key %s", key) : true;
    if (!gguf_get_float(m->file, key, &v)) return ft_err_set(err, "key %s: not a number", key);
    if (!isfinite(v)) return ft_err_set(err, "key %s: not finite", key);
    *out = (float)v;
    return true;
}

bool model_hp_bool(const ft_model *m, const char *suffix, bool *out, ft_err *err) {
    char key[160];
    key_of(m, suffix, key, sizeof(key));
    if (gguf_find_key(m->file, key) < 0) return true;
    if (!gguf_get_bool(m->file, key, out)) return ft_err_set(err, "key %s: not a bool", key);
    return true;
}

bool model_hp_per_layer(const ft_model *m, const char *suffix, int *out, bool required, int64_t lo,
                  int64_t hi, ft_err *err) {
    char key[160];
    key_of(m, suffix, key, sizeof(key));
    enum gguf_value_type et;
    uint64_t count;
    int n = m->hp.n_layer;
    if (gguf_get_arr(m->file, key, &et, &count)) {
        if (et == GGUF_VALUE_TYPE_FLOAT32 || et == GGUF_VALUE_TYPE_FLOAT64 || et == GGUF_VALUE_TYPE_STRING ||
            et == GGUF_VALUE_TYPE_BOOL)
            return ft_err_set(err, "key %s: not an integer array", key);
        if (count != (uint64_t)n)
            return ft_err_set(err, "key %s: %llu entries for %d layers", key, (unsigned long long)count, n);
        for (int i = 0; i < n; i++) {
            int64_t v = gguf_arr_int(m->file, key, (uint64_t)i);
            if (v < lo || v > hi)
                return ft_err_set(err, "key %s[%d] = %lld: out of range [%lld, %lld]", key, i, (long long)v,
                                  (long long)lo, (long long)hi);
            out[i] = (int)v;
        }
        return true;
    }
    int v = out[0];
    if (!model_hp_int(m, suffix, &v, required, lo, hi, err)) return false;
    for (int i = 0; i < n; i++) out[i] = v;
    return true;
}

static int32_t token_id(const ft_model *m, const char *key) {
    int64_t v;
    if (!gguf_get_int(m->file, key, &v) || v < 0 || v >= m->hp.n_vocab) return -1;
    return (int32_t)v;
}

// Context extension (rope.scaling.*), with llama.cpp's defaults and its YaRN magnitude
// arithmetic: the attention factor is pre-divided by the 1 + 0.1 ln(factor) that the rope
// op multiplies back in, then scaled by rope.scaling.attn_factor.
static bool model_hp_rope_scaling(const ft_model *m, ft_rope_params *r, ft_err *err) {
    char key[160];
    gguf_str type = {"linear", 6};
    snprintf(key, sizeof(key), "%s.rope.scaling.type", m->arch->name);
    if (gguf_find_key(m->file, key) >= 0 && !gguf_get_str(m->file, key, &type))
        return ft_err_set(err, "key %s: not a string", key);
    bool none = gguf_str_eq(type, "none"), yarn = gguf_str_eq(type, "yarn");
    if (!none && !yarn && !gguf_str_eq(type, "linear"))
        return ft_err_set(err, "key %s = '%.*s': only none, linear and yarn are supported", key, (int)FT_MIN(type.len, 32),
                          type.ptr);
    float factor = 0, attn = 1.0f;
    if (!model_hp_float(m, "rope.scaling.factor", &factor, false, err) || !model_hp_float(m, "rope.scaling.attn_factor", &attn, false, err))
        return false;
    if (factor == 0 && !model_hp_float(m, "rope.scale_linear", &factor, false, err)) return false;
    if (factor < 0) return ft_err_set(err, "key %s.rope.scaling.factor: negative", m->arch->name);
    r->freq_scale = none || factor == 0 ? 1.0f : 1.0f / factor;
    if (!model_hp_int(m, "rope.scaling.original_context_length", &r->n_ctx_orig, false, 1, 1 << 26, err)) return false;
    r->ext_factor = yarn ? 1.0f : 0.0f;
    r->attn_factor = 1.0f;
    if (yarn) {
        float f = 1.0f / r->freq_scale;
        r->attn_factor = f <= 1.0f ? 1.0f : 0.1f * logf(f) + 1.0f;
        r->attn_factor *= 1.0f / (1.0f + 0.1f * logf(f));
    }
    r->attn_factor *= attn;
    return true;
}

bool model_hp_common(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    const int BIG = 1 << 20;
    if (!model_hp_int(m, "context_length", &hp->n_ctx_train, true, 1, 1 << 26, err) ||
        !model_hp_int(m, "embedding_length", &hp->n_embd, true, 1, BIG, err) ||
        !model_hp_int(m, "block_count", &hp->n_layer, true, 1, 4096, err))
        return false;
    m->layers = ft_calloc((size_t)hp->n_layer, sizeof(ft_layer));
    int *heads = ft_calloc((size_t)hp->n_layer, sizeof(int));
    bool ok = model_hp_per_layer(m, "attention.head_count", heads, true, 1, 65536, err);
    for (int l = 0; ok && l < hp->n_layer; l++) m->layers[l].n_head = heads[l];
    hp->n_head_kv = heads[0];
    ok = ok && model_hp_per_layer(m, "attention.head_count_kv", heads, false, 1, 65536, err);
    for (int l = 0; ok && l < hp->n_layer; l++)
        if (heads[l] != heads[0]) ok = ft_err_set(err, "key %s.attention.head_count_kv: differs between layers", m->arch->name);
    if (ok) hp->n_head_kv = heads[0];
    free(heads);
    if (!ok) return false;
    for (int l = 0; l < hp->n_layer; l++)
        if (m->layers[l].n_head % hp->n_head_kv)
            return ft_err_set(err, "key %s.attention.head_count: layer %d has %d heads, not a multiple of %d KV heads",
                              m->arch->name, l, m->layers[l].n_head, hp->n_head_kv);
    hp->head_dim = hp->n_embd / m->layers[0].n_head;
    int v_dim = hp->head_dim;
    if (!model_hp_int(m, "attention.key_length", &hp->head_dim, false, 2, 4096, err) ||
        !model_hp_int(m, "attention.value_length", &v_dim, false, 2, 4096, err))
        return false;
    if (v_dim != hp->head_dim)
        return ft_err_set(err, "key %s.attention.value_length %d differs from key_length %d", m->arch->name, v_dim, hp->head_dim);
    if (hp->head_dim < 2 || hp->head_dim % 2) return ft_err_set(err, "head size %d must be even", hp->head_dim);
    hp->rms_eps = 1e-5f;
    if (!model_hp_float(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err)) return false;
    if (!(hp->rms_eps >= 0)) return ft_err_set(err, "key %s.attention.layer_norm_rms_epsilon: negative", m->arch->name);

    ft_rope_params *r = &hp->rope;
    *r = (ft_rope_params){.n_rot = hp->head_dim, .freq_base = 10000.0f, .freq_scale = 1.0f, .attn_factor = 1.0f,
                          .beta_fast = 32.0f, .beta_slow = 1.0f, .n_ctx_orig = hp->n_ctx_train};
    if (!model_hp_float(m, "rope.freq_base", &r->freq_base, false, err) ||
        !model_hp_int(m, "rope.dimension_count", &r->n_rot, false, 2, hp->head_dim, err))
        return false;
    if (r->n_rot % 2) return ft_err_set(err, "key %s.rope.dimension_count %d: must be even", m->arch->name, r->n_rot);
    if (!(r->freq_base > 0)) return ft_err_set(err, "key %s.rope.freq_base: must be positive", m->arch->name);
    if (!model_hp_rope_scaling(m, r, err)) return false;
    hp->rope_swa = *r;

    if (!model_hp_int(m, "expert_count", &hp->n_expert, false, 0, FT_MAX_EXPERTS, err) ||
        !model_hp_int(m, "expert_used_count", &hp->n_expert_used, false, 0, FT_MAX_EXPERTS, err) ||
        !model_hp_int(m, "feed_forward_length", &hp->n_ff, false, 0, BIG, err) ||
        !model_hp_int(m, "expert_feed_forward_length", &hp->n_ff_exp, false, 0, BIG, err) ||
        !model_hp_int(m, "expert_shared_feed_forward_length", &hp->n_ff_shexp, false, 0, BIG, err))
        return false;
    if (hp->n_expert_used > hp->n_expert)
        return ft_err_set(err, "key %s.expert_used_count %d exceeds expert_count %d", m->arch->name, hp->n_expert_used,
                          hp->n_expert);
    if (hp->n_expert > 0 && hp->n_expert_used < 1)
        return ft_err_set(err, "key %s.expert_used_count: missing or 0 with %d experts", m->arch->name, hp->n_expert);
    hp->gating = FT_GATING_SOFTMAX;
    hp->norm_w = false;
    hp->w_scale = 0.0f;
    if (!model_hp_float(m, "expert_weights_scale", &hp->w_scale, false, err)) return false;

    // the vocabulary size is the embedding's row count (checked against the tokenizer's list)
    const gguf_tensor *te = gguf_find_tensor(m->file, "token_embd.weight");
    if (!te || te->n_dims != 2) return ft_err_set(err, "tensor token_embd.weight: missing or not 2-D");
    hp->n_vocab = (int)FT_MIN(te->ne[1], (int64_t)1 << 30);
    enum gguf_value_type et;
    uint64_t n_tokens;
    if (gguf_get_arr(m->file, "tokenizer.ggml.tokens", &et, &n_tokens) && n_tokens != (uint64_t)hp->n_vocab)
        return ft_err_set(err, "tensor token_embd.weight: %d rows but tokenizer.ggml.tokens has %llu entries",
                          hp->n_vocab, (unsigned long long)n_tokens);
    hp->bos = token_id(m, "tokenizer.ggml.bos_token_id");
    hp->eos = token_id(m, "tokenizer.ggml.eos_token_id");
    hp->add_bos = false;
    gguf_get_bool(m->file, "tokenizer.ggml.add_bos_token", &hp->add_bos);
    return true;
}

// ---------------------------------------------------------------------------------------------
// Tensors

bool model_bind(ft_model *m, ft_tensor *t, unsigned flags, int n_dims, int64_t ne0, int64_t ne1,
          int64_t ne2, ft_err *err, const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    memset(t, 0, sizeof(*t));
    const gguf_tensor *g = gguf_find_tensor(m->file, name);
    if (!g) return (flags & BIND_OPTIONAL) ? true : ft_err_set(err, "tensor %s: missing", name);
    int64_t want[3] = {ne0, n_dims >= 2 ? ne1 : 1, n_dims >= 3 ? ne2 : 1};
    // GGUF may store trailing dims of 1 explicitly or not: compare the dims that matter
    bool shape_ok = (int)g->n_dims <= FT_MAX(n_dims, 1) || g->ne[3] == 1;
    for (int i = 0; i < 3; i++) shape_ok = shape_ok && g->ne[i] == want[i];
    shape_ok = shape_ok && g->ne[3] == 1;
    if (!shape_ok)
        return ft_err_set(err, "tensor %s: shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
                          (long long)g->ne[0], (long long)g->ne[1], (long long)g->ne[2], (long long)g->ne[3],
                          (long long)want[0], (long long)want[1], (long long)want[2]);
    if ((flags & BIND_F32) && g->type != FT_TYPE_F32)
        return ft_err_set(err, "tensor %s: type %s, expected f32", name, ft_type_name(g->type));
    const ft_quant_ops *q = ft_quant_ops_find(g->type);
    if (!q || !q->vec_dot)
        return ft_err_set(err, "tensor %s: type %s is not supported for weights", name, ft_type_name(g->type));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->type = g->type;
    t->ne[0] = want[0];
    t->ne[1] = want[1];
    t->ne[2] = want[2];
    t->row_bytes = ft_row_bytes(g->type, want[0]);
    t->mat_bytes = t->row_bytes * (size_t)want[1];
    t->data = (void *)g->data;
    t->placement = FT_PLACEMENT_CPU;
    return true;
}

bool model_bind_embd_output(ft_model *m, ft_err *err) {
    const ft_hparams *hp = &m->hp;
    if (!model_bind(m, &m->tok_embd, 0, 2, hp->n_embd, hp->n_vocab, 0, err, "token_embd.weight") ||
        !model_bind(m, &m->output_norm, BIND_F32, 1, hp->n_embd, 0, 0, err, "output_norm.weight") ||
        !model_bind(m, &m->output, BIND_OPTIONAL, 2, hp->n_embd, hp->n_vocab, 0, err, "output.weight"))
        return false;
    if (!ft_tensor_present(&m->output)) m->output = m->tok_embd;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Loading

ft_model *ft_model_load(const char *path, ft_err *err) {
    gguf_file *f = gguf_open(path, err);
    if (!f) return NULL;
    gguf_str an;
    char arch_name[64] = "";
    if (!gguf_get_str(f, "general.architecture", &an) || an.len >= sizeof(arch_name)) {
        gguf_close(f);
        ft_err_set(err, "%s: missing or bad key general.architecture", path);
        return NULL;
    }
    memcpy(arch_name, an.ptr, an.len);
    const ft_arch *arch = ft_arch_find(arch_name);
    if (!arch) {
        gguf_close(f);
        ft_err_set(err, "%s: architecture '%s' is not supported (ft runs: %s)", path, arch_name, ft_arch_names());
        return NULL;
    }
    ft_model *m = ft_calloc(1, sizeof(*m));
    m->arch = arch;
    m->file = f;
    m->path = ft_strdup(path);
    if (!arch->load(m, err)) {
        ft_err_prefix(err, "%s", path);
        ft_model_free(m);
        return NULL;
    }
    return m;
}

// ---------------------------------------------------------------------------------------------
// Placement on a backend

// Calls fn on every tensor of w that a device placement copies (all but the embedding table,
// and the routed experts when they stay on the host).
static void for_each_placed_tensor(ft_weights *w, bool experts_on_host, void (*fn)(ft_tensor *t, void *ctx),
                                   void *ctx) {
    fn(&w->output_norm, ctx);
    fn(&w->output, ctx);
    for (int l = 0; l < w->n_layer; l++) {
        ft_layer *L = &w->layers[l];
        ft_tensor *ts[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->bq, &L->bk, &L->bv, &L->wo,
                           &L->q_norm, &L->k_norm, &L->attn_gate, &L->ffn_norm, &L->router, &L->sel_bias,
                           &L->gate_shexp, &L->up_shexp, &L->down_shexp, &L->gate_inp_shexp, &L->ffn_gate,
                           &L->ffn_up, &L->ffn_down};
        for (size_t i = 0; i < FT_ARRAY_LEN(ts); i++) fn(ts[i], ctx);
        if (!experts_on_host) {
            fn(&L->gate_exps, ctx);
            fn(&L->up_exps, ctx);
            fn(&L->down_exps, ctx);
        }
    }
}

static size_t tensor_bytes(const ft_tensor *t) { return t->mat_bytes * (size_t)t->ne[2]; }
static size_t placed_bytes(const ft_tensor *t) { return (tensor_bytes(t) + 255) / 256 * 256; }

static void add_bytes(ft_tensor *t, void *ctx) {
    if (ft_tensor_present(t)) *(size_t *)ctx += placed_bytes(t);
}

// The model's own tensors as a view (the layers array copied, the data still the mapping's).
static ft_weights *weights_view(const ft_model *m) {
    ft_weights *w = ft_calloc(1, sizeof(*w));
    w->tok_embd = m->tok_embd;
    w->output_norm = m->output_norm;
    w->output = m->output;
    w->n_layer = m->hp.n_layer;
    w->layers = ft_malloc((size_t)w->n_layer * sizeof(ft_layer));
    memcpy(w->layers, m->layers, (size_t)w->n_layer * sizeof(ft_layer));
    return w;
}

size_t ft_weights_place_bytes(const ft_model *m, bool experts_on_host) {
    ft_weights *w = weights_view(m);
    size_t n = 0;
    for_each_placed_tensor(w, experts_on_host, add_bytes, &n);
    free(w->layers);
    free(w);
    return n;
}

typedef struct {
    ft_weights *w;
    bool failed;
    ft_err *err;
    ft_progress_fn progress;
    void *progress_ctx;
    size_t done, total; // bytes, for the progress report
} place_ctx;

static void place_one(ft_tensor *t, void *ctx) {
    place_ctx *u = ctx;
    ft_backend *be = u->w->be;
    if (u->failed || !ft_tensor_present(t)) return;
    if (!be->ops->supports_type(be, t->type)) {
        ft_err_set(u->err, "tensor %s: type %s has no %s kernel", t->name, ft_type_name(t->type), be->ops->name);
        u->failed = true;
        return;
    }
    void *d = be->ops->buffer_alloc(be, tensor_bytes(t));
    if (!d) {
        ft_err_set(u->err, "out of %s memory placing %s (%zu bytes)", be->ops->name, t->name, tensor_bytes(t));
        u->failed = true;
        return;
    }
    be->ops->buffer_write(be, d, t->data, tensor_bytes(t));
    t->data = d;
    t->placement = be->placement;
    u->done += placed_bytes(t);
    if (u->progress) u->progress(u->progress_ctx, "uploading weights", u->done, u->total);
}

// Gives a copy back to its backend (ctx is the weights).
static void free_one(ft_tensor *t, void *ctx) {
    ft_weights *w = ctx;
    if (ft_tensor_present(t) && t->placement == w->be->placement) w->be->ops->buffer_free(w->be, t->data);
}

ft_weights *ft_weights_place(const ft_model *m, ft_backend *be, bool experts_on_host, ft_progress_fn progress,
                             void *progress_ctx, ft_err *err) {
    ft_weights *w = weights_view(m);
    w->experts_on_host = experts_on_host;
    if (be->placement == FT_PLACEMENT_CPU) return w; // the CPU computes from the mapping
    w->be = be;
    place_ctx u = {.w = w, .err = err, .progress = progress, .progress_ctx = progress_ctx,
                   .total = ft_weights_place_bytes(m, experts_on_host)};
    for_each_placed_tensor(w, experts_on_host, place_one, &u);
    if (u.failed) {
        ft_weights_free(w);
        return NULL;
    }
    return w;
}

void ft_weights_free(ft_weights *w) {
    if (!w) return;
    if (w->be) for_each_placed_tensor(w, w->experts_on_host, free_one, w);
    free(w->layers);
    free(w);
}

void ft_model_prefault(const ft_model *m, ft_progress_fn progress, void *progress_ctx) {
    const uint8_t *base = gguf_file_base(m->file);
    size_t off = (size_t)gguf_data_offset(m->file), size = (size_t)gguf_file_size(m->file);
    if (!base || off >= size) return;
    size_t total = size - off, avail = ft_mem_available();
    if (avail && total > avail)
        FT_LOG_WARN("%s: the weights (%.1f GB) are larger than the available memory (%.1f GB): "
                    "pages will be read from disk again while running",
                    m->path, total / 1e9, avail / 1e9);
    const size_t page = 4096, chunk = (size_t)64 << 20;
    volatile uint8_t sink = 0;
    for (size_t done = 0; done < total;) {
        size_t n = FT_MIN(chunk, total - done);
        for (size_t i = 0; i < n; i += page)
            sink ^= base[off + done + i];
        done += n;
        if (progress) progress(progress_ctx, "reading weights into memory", done, total);
    }
    (void)sink;
}

void ft_model_free(ft_model *m) {
    if (!m) return;
    gguf_close(m->file);
    free(m->layers);
    free(m->path);
    free(m);
}

int ft_model_max_q_width(const ft_model *m) {
    int w = 0;
    for (int l = 0; l < m->hp.n_layer; l++) w = FT_MAX(w, m->layers[l].n_head * m->hp.head_dim);
    return w;
}

void ft_forward_alloc(ft_forward *f, const ft_model *m, const ft_weights *w, ft_backend *be, int n_batch) {
    const ft_hparams *hp = &m->hp;
    size_t B = (size_t)n_batch, E = (size_t)hp->n_embd, Q = (size_t)ft_model_max_q_width(m),
           KV = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    f->be = be;
    f->w = w;
    f->seg = NULL;
    f->n_seg = 0;
    f->x = be->ops->alloc(be, B * E);
    f->xn = be->ops->alloc(be, B * E);
    f->q = be->ops->alloc(be, B * Q);
    f->k = be->ops->alloc(be, B * KV);
    f->v = be->ops->alloc(be, B * KV);
    f->attn = be->ops->alloc(be, B * Q);
    f->gate = be->ops->alloc(be, B * Q);
    f->out = be->ops->alloc(be, B * E);
    f->out2 = be->ops->alloc(be, B * E);
}

int64_t ft_model_max_width(const ft_model *m) {
    const ft_hparams *hp = &m->hp;
    int64_t w = FT_MAX(hp->n_embd, ft_model_max_q_width(m));
    w = FT_MAX(w, hp->n_ff);
    w = FT_MAX(w, hp->n_ff_exp);
    w = FT_MAX(w, hp->n_ff_shexp);
    return w;
}

bool model_bind_attention(ft_model *m, int il, bool qk_norm, ft_err *err) {
    const ft_hparams *hp = &m->hp;
    ft_layer *L = &m->layers[il];
    int64_t E = hp->n_embd, Q = (int64_t)L->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    const unsigned BIAS = BIND_OPTIONAL | BIND_F32;
    return model_bind(m, &L->attn_norm, BIND_F32, 1, E, 0, 0, err, "blk.%d.attn_norm.weight", il) &&
           model_bind(m, &L->wq, 0, 2, E, Q, 0, err, "blk.%d.attn_q.weight", il) &&
           model_bind(m, &L->wk, 0, 2, E, KV, 0, err, "blk.%d.attn_k.weight", il) &&
           model_bind(m, &L->wv, 0, 2, E, KV, 0, err, "blk.%d.attn_v.weight", il) &&
           model_bind(m, &L->wo, 0, 2, Q, E, 0, err, "blk.%d.attn_output.weight", il) &&
           model_bind(m, &L->bq, BIAS, 1, Q, 0, 0, err, "blk.%d.attn_q.bias", il) &&
           model_bind(m, &L->bk, BIAS, 1, KV, 0, 0, err, "blk.%d.attn_k.bias", il) &&
           model_bind(m, &L->bv, BIAS, 1, KV, 0, 0, err, "blk.%d.attn_v.bias", il) &&
           (!qk_norm || (model_bind(m, &L->q_norm, BIND_F32, 1, hp->head_dim, 0, 0, err, "blk.%d.attn_q_norm.weight", il) &&
                         model_bind(m, &L->k_norm, BIND_F32, 1, hp->head_dim, 0, 0, err, "blk.%d.attn_k_norm.weight", il)));
}

bool model_bind_experts(ft_model *m, int il, int n_ff, ft_err *err) {
    const ft_hparams *hp = &m->hp;
    ft_layer *L = &m->layers[il];
    int64_t E = hp->n_embd, X = hp->n_expert;
    L->is_moe = true;
    return model_bind(m, &L->ffn_norm, BIND_F32, 1, E, 0, 0, err, "blk.%d.ffn_norm.weight", il) &&
           model_bind(m, &L->router, 0, 2, E, X, 0, err, "blk.%d.ffn_gate_inp.weight", il) &&
           model_bind(m, &L->gate_exps, 0, 3, E, n_ff, X, err, "blk.%d.ffn_gate_exps.weight", il) &&
           model_bind(m, &L->up_exps, 0, 3, E, n_ff, X, err, "blk.%d.ffn_up_exps.weight", il) &&
           model_bind(m, &L->down_exps, 0, 3, n_ff, E, X, err, "blk.%d.ffn_down_exps.weight", il);
}
