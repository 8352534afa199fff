// model.c: the table of architectures, and loading a model from an architecture's description
// (see model.h): reading its keys, deriving what every architecture derives, binding its
// tensors, each with a check that names what is wrong.
#include "model_impl.h"
#include "../util/mapping.h"
#include "../util/pool.h"

#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The architectures ft runs. NAME.c defines `const ft_arch ft_arch_NAME`; a new architecture
// is that file and one line here.
#define FT_ARCHS(X)                                                                               \
    X(qwen3moe)                                                                                   \
    X(qwen2moe)                                                                                   \
    X(llama)                                                                                      \
    X(laguna)                                                                                     \
    X(qwen35moe)                                                                                  \
    X(qwen3next)                                                                                  \
    X(glm4moe)                                                                                    \
    X(gptoss)                                                                                     \
    X(gemma4)

#define X(name) extern const ft_arch ft_arch_##name;
FT_ARCHS(X)
#undef X

static const ft_arch *const g_archs[] = {
#define X(name) &ft_arch_##name,
    FT_ARCHS(X)
#undef X
};

const ft_arch *ft_arch_find(const char *name) {
    for (size_t i = 0; i < FT_ARRAY_LEN(g_archs); i++)
        if (!strcmp(g_archs[i]->name, name)) return g_archs[i];
    return NULL;
}

int ft_arch_count(void) { return (int)FT_ARRAY_LEN(g_archs); }

const ft_arch *ft_arch_at(int i) {
    FT_ASSERT(i >= 0 && i < ft_arch_count());
    return g_archs[i];
}

static char g_arch_names[512];
static pthread_once_t g_arch_names_once = PTHREAD_ONCE_INIT;

static void list_arch_names(void) {
    size_t n = 0;
    for (size_t i = 0; i < FT_ARRAY_LEN(g_archs); i++) {
        const ft_arch *a = g_archs[i];
        n += (size_t)snprintf(g_arch_names + n, sizeof(g_arch_names) - n, "%s%s%s%s%s", i ? ", " : "",
                              a->name, a->note ? " (" : "", a->note ? a->note : "", a->note ? ")" : "");
        FT_ASSERT(n < sizeof(g_arch_names));
    }
}

const char *ft_arch_names(void) {
    pthread_once(&g_arch_names_once, list_arch_names);
    return g_arch_names;
}

// ---------------------------------------------------------------------------------------------
// Keys

static const char *key_name(const ft_model *m, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", m->arch->name, suffix);
    return buf;
}

static const ft_arch_key *find_key(const ft_arch *a, const char *suffix) {
    for (int i = 0; i < a->n_keys; i++)
        if (!strcmp(a->keys[i].suffix, suffix)) return &a->keys[i];
    return NULL;
}

static bool present(const ft_model *m, const char *suffix) {
    char key[160];
    return find_key(m->arch, suffix) && gguf_find_key(m->file, key_name(m, suffix, key, sizeof(key))) >= 0;
}

// An out-of-range message in the key reader's form, for a range that depends on other keys.
static bool key_range_err(const ft_model *m, const char *suffix, int64_t v, int64_t lo, int64_t hi, ft_err *err) {
    char key[160];
    return ft_err_set(err, "key %s = %lld: out of range [%lld, %lld]", key_name(m, suffix, key, sizeof(key)),
                      (long long)v, (long long)lo, (long long)hi);
}

// The upper bound of an integer key's values. A key bounded by the head size is checked once
// that is known (derive_common), so not here.
static int64_t key_hi(const ft_model *m, const ft_arch_key *k) {
    return k->flags & FT_KEY_HI_LAYERS ? m->hp.n_layer : k->hi;
}

static bool in_range(const ft_model *m, const ft_arch_key *k, int64_t v) {
    return (k->flags & FT_KEY_HI_HEAD_DIM) || (v >= k->lo && v <= key_hi(m, k));
}

static void *field_of(void *base, size_t off) { return (char *)base + off; }

// Stores the integer v of key k (into every layer for a per-layer key given once).
static void store_int(ft_model *m, const ft_arch_key *k, int64_t v) {
    if (k->field == FT_KEY_NO_FIELD) return;
    v = FT_MAX(FT_MIN(v, INT32_MAX), INT32_MIN); // a key not range-checked yet (FT_KEY_HI_HEAD_DIM)
    if (k->type == FT_KEY_TYPE_U32_LAYERS && !(k->flags & FT_KEY_UNIFORM)) {
        for (int l = 0; l < m->hp.n_layer; l++) *(int *)field_of(&m->layers[l], k->field) = (int)v;
        return;
    }
    *(int *)field_of(&m->hp, k->field) = (int)v;
}

// A per-layer key given as an array: each entry in range, and with FT_KEY_UNIFORM all equal.
static bool read_layer_array(ft_model *m, const ft_arch_key *k, const char *key, enum gguf_value_type et,
                             uint64_t count, ft_err *err) {
    int n = m->hp.n_layer;
    int64_t hi = key_hi(m, k);
    if (et == GGUF_VALUE_TYPE_FLOAT32 || et == GGUF_VALUE_TYPE_FLOAT64 || et == GGUF_VALUE_TYPE_STRING ||
        et == GGUF_VALUE_TYPE_BOOL)
        return ft_err_set(err, "key %s: not an integer array", key);
    if (count != (uint64_t)n)
        return ft_err_set(err, "key %s: %llu entries for %d layers", key, (unsigned long long)count, n);
    int64_t first = 0;
    for (int i = 0; i < n; i++) {
        int64_t v = gguf_arr_int(m->file, key, (uint64_t)i);
        if (!in_range(m, k, v))
            return ft_err_set(err, "key %s[%d] = %lld: out of range [%lld, %lld]", key, i, (long long)v,
                              (long long)k->lo, (long long)hi);
        if (i == 0) first = v;
        if (k->flags & FT_KEY_UNIFORM) continue;
        if (k->field != FT_KEY_NO_FIELD) *(int *)field_of(&m->layers[i], k->field) = (int)v;
    }
    if (k->flags & FT_KEY_UNIFORM) {
        for (int i = 1; i < n; i++)
            if (gguf_arr_int(m->file, key, (uint64_t)i) != first)
                return ft_err_set(err, "key %s: differs between layers", key);
        store_int(m, k, first);
    }
    return true;
}

// A per-layer bool key (FT_KEY_TYPE_BOOL_LAYERS): an array of one bool per layer, or one for all.
static bool read_bool_layers(ft_model *m, const ft_arch_key *k, const char *key, ft_err *err) {
    enum gguf_value_type et;
    uint64_t count;
    int n = m->hp.n_layer;
    bool one;
    const uint8_t *v = NULL;
    if (gguf_get_arr(m->file, key, &et, &count)) {
        if (et != GGUF_VALUE_TYPE_BOOL) return ft_err_set(err, "key %s: not a bool array", key);
        if (count != (uint64_t)n)
            return ft_err_set(err, "key %s: %llu entries for %d layers", key, (unsigned long long)count, n);
        v = gguf_arr_data(m->file, key); // (0 or 1 each, as the reader checked)
    } else if (!gguf_get_bool(m->file, key, &one)) {
        return ft_err_set(err, "key %s: not a bool or bool array", key);
    }
    if (k->field != FT_KEY_NO_FIELD)
        for (int l = 0; l < n; l++) *(bool *)field_of(&m->layers[l], k->field) = v ? v[l] != 0 : one;
    return true;
}

// A key of 4 integers: an array of exactly 4, or one integer for all; each in range.
static bool read_fixed_array(ft_model *m, const ft_arch_key *k, const char *key, ft_err *err) {
    enum gguf_value_type et;
    uint64_t count;
    int64_t v[4], hi = key_hi(m, k);
    if (gguf_get_arr(m->file, key, &et, &count)) {
        if (et == GGUF_VALUE_TYPE_FLOAT32 || et == GGUF_VALUE_TYPE_FLOAT64 || et == GGUF_VALUE_TYPE_STRING ||
            et == GGUF_VALUE_TYPE_BOOL)
            return ft_err_set(err, "key %s: not an integer array", key);
        if (count != (uint64_t)4)
            return ft_err_set(err, "key %s: %llu entries, expected %d", key, (unsigned long long)count, 4);
        for (int i = 0; i < 4; i++) v[i] = gguf_arr_int(m->file, key, (uint64_t)i);
    } else {
        if (!gguf_get_int(m->file, key, &v[0])) return ft_err_set(err, "key %s: not an integer", key);
        for (int i = 1; i < 4; i++) v[i] = v[0];
    }
    for (int i = 0; i < 4; i++) {
        if (!in_range(m, k, v[i]))
            return ft_err_set(err, "key %s[%d] = %lld: out of range [%lld, %lld]", key, i, (long long)v[i],
                              (long long)k->lo, (long long)hi);
        if (k->field != FT_KEY_NO_FIELD) ((int *)field_of(&m->hp, k->field))[i] = (int)v[i];
    }
    return true;
}

// Reads key k of the file into its field, its default when the file lacks it.
static bool read_key(ft_model *m, const ft_arch_key *k, ft_err *err) {
    char key[160];
    key_name(m, k->suffix, key, sizeof(key));
    bool has_field = k->field != FT_KEY_NO_FIELD;
    if (gguf_find_key(m->file, key) < 0) {
        if (k->flags & FT_KEY_REQUIRED) return ft_err_set(err, "missing key %s", key);
        if (!has_field) return true;
        switch (k->type) {
        case FT_KEY_TYPE_U32:
        case FT_KEY_TYPE_U32_LAYERS: store_int(m, k, (int64_t)k->def); break;
        case FT_KEY_TYPE_F32: *(float *)field_of(&m->hp, k->field) = (float)k->def; break;
        case FT_KEY_TYPE_BOOL: *(bool *)field_of(&m->hp, k->field) = k->def != 0; break;
        case FT_KEY_TYPE_STR: break;
        case FT_KEY_TYPE_U32_4:
            for (int i = 0; i < 4; i++) ((int *)field_of(&m->hp, k->field))[i] = (int)k->def;
            break;
        case FT_KEY_TYPE_BOOL_LAYERS:
            for (int l = 0; l < m->hp.n_layer; l++) *(bool *)field_of(&m->layers[l], k->field) = k->def != 0;
            break;
        }
        return true;
    }
    if (k->type == FT_KEY_TYPE_U32_4) return read_fixed_array(m, k, key, err);
    if (k->type == FT_KEY_TYPE_BOOL_LAYERS) return read_bool_layers(m, k, key, err);
    enum gguf_value_type et;
    uint64_t count;
    if (k->type == FT_KEY_TYPE_U32_LAYERS && gguf_get_arr(m->file, key, &et, &count))
        return read_layer_array(m, k, key, et, count, err);
    switch (k->type) {
    case FT_KEY_TYPE_U32_LAYERS: // one integer for all layers
    case FT_KEY_TYPE_U32: {
        int64_t v, hi = key_hi(m, k);
        if (!gguf_get_int(m->file, key, &v)) return ft_err_set(err, "key %s: not an integer", key);
        if (!in_range(m, k, v))
            return ft_err_set(err, "key %s = %lld: out of range [%lld, %lld]", key, (long long)v, (long long)k->lo,
                              (long long)hi);
        store_int(m, k, v);
        return true;
    }
    case FT_KEY_TYPE_F32: {
        double v;
        if (!gguf_get_float(m->file, key, &v)) return ft_err_set(err, "key %s: not a number", key);
        if (!isfinite(v)) return ft_err_set(err, "key %s: not finite", key);
        if (has_field) *(float *)field_of(&m->hp, k->field) = (float)v;
        return true;
    }
    case FT_KEY_TYPE_BOOL: {
        bool b;
        if (!gguf_get_bool(m->file, key, &b)) return ft_err_set(err, "key %s: not a bool", key);
        if (has_field) *(bool *)field_of(&m->hp, k->field) = b;
        return true;
    }
    case FT_KEY_TYPE_STR: {
        gguf_str s;
        if (!gguf_get_str(m->file, key, &s)) return ft_err_set(err, "key %s: not a string", key);
        return true;
    }
    case FT_KEY_TYPE_U32_4:
    case FT_KEY_TYPE_BOOL_LAYERS: break; // read above
    }
    return true;
}

static const ft_arch_key *key_row(const ft_model *m, const char *suffix, enum ft_key_type type) {
    const ft_arch_key *k = find_key(m->arch, suffix);
    FT_ASSERT(k && (k->type == type || (type == FT_KEY_TYPE_U32 && k->type == FT_KEY_TYPE_U32_LAYERS)));
    return k;
}

bool model_key_int(const ft_model *m, const char *suffix, int64_t *out) {
    const ft_arch_key *k = key_row(m, suffix, FT_KEY_TYPE_U32);
    char key[160];
    *out = (int64_t)k->def;
    return gguf_get_int(m->file, key_name(m, suffix, key, sizeof(key)), out);
}

bool model_key_float(const ft_model *m, const char *suffix, float *out) {
    const ft_arch_key *k = key_row(m, suffix, FT_KEY_TYPE_F32);
    char key[160];
    double v;
    *out = (float)k->def;
    if (!gguf_get_float(m->file, key_name(m, suffix, key, sizeof(key)), &v)) return false;
    *out = (float)v;
    return true;
}

bool model_key_str(const ft_model *m, const char *suffix, gguf_str *out) {
    key_row(m, suffix, FT_KEY_TYPE_STR);
    char key[160];
    return gguf_get_str(m->file, key_name(m, suffix, key, sizeof(key)), out);
}

// Context extension (rope.scaling.*), with llama.cpp's defaults and its YaRN magnitude
// arithmetic: the attention factor is pre-divided by the 1 + 0.1 ln(factor) that the rope
// op multiplies back in, then scaled by rope.scaling.attn_factor.
static bool rope_scaling(const ft_model *m, ft_rope_params *r, ft_err *err) {
    char key[160];
    gguf_str type = {"linear", 6};
    model_key_str(m, "rope.scaling.type", &type);
    bool none = gguf_str_eq(type, "none"), yarn = gguf_str_eq(type, "yarn");
    if (!none && !yarn && !gguf_str_eq(type, "linear"))
        return ft_err_set(err, "key %s = '%.*s': only none, linear and yarn are supported",
                          key_name(m, "rope.scaling.type", key, sizeof(key)), (int)FT_MIN(type.len, 32), type.ptr);
    float factor, attn;
    model_key_float(m, "rope.scaling.factor", &factor);
    model_key_float(m, "rope.scaling.attn_factor", &attn);
    if (factor == 0) model_key_float(m, "rope.scale_linear", &factor);
    if (factor < 0) return ft_err_set(err, "key %s.rope.scaling.factor: negative", m->arch->name);
    r->freq_scale = none || factor == 0 ? 1.0f : 1.0f / factor;
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

// What every architecture derives from the keys and checks across them: the defaults that
// depend on other keys, the head size, RoPE and the expert counts.
static bool derive_common(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    const char *an = m->arch->name;
    // KV heads: the key's one value, else each layer's where the architecture reads the key per
    // layer (hp's then the first layer's), else the first layer's head count
    if (!present(m, "attention.head_count_kv")) hp->n_head_kv = m->layers[0].n_head;
    if (hp->n_head_kv == 0) hp->n_head_kv = m->layers[0].n_head_kv;
    for (int l = 0; l < hp->n_layer; l++) {
        ft_layer *L = &m->layers[l];
        if (L->n_head_kv == 0) L->n_head_kv = hp->n_head_kv;
        if (L->n_head % L->n_head_kv)
            return ft_err_set(err, "key %s.attention.head_count: layer %d has %d heads, not a multiple of %d KV heads",
                              an, l, L->n_head, L->n_head_kv);
    }
    if (!present(m, "attention.key_length")) hp->head_dim = hp->n_embd / m->layers[0].n_head;
    int64_t v_dim = hp->head_dim;
    if (present(m, "attention.value_length")) model_key_int(m, "attention.value_length", &v_dim);
    if (v_dim != hp->head_dim)
        return ft_err_set(err, "key %s.attention.value_length %lld differs from key_length %d", an, (long long)v_dim,
                          hp->head_dim);
    if (hp->head_dim < 2 || hp->head_dim % 2) return ft_err_set(err, "head size %d must be even", hp->head_dim);
    for (int i = 0; i < m->arch->n_keys; i++) {
        const ft_arch_key *k = &m->arch->keys[i];
        int64_t v;
        if ((k->flags & FT_KEY_HI_HEAD_DIM) && present(m, k->suffix) && model_key_int(m, k->suffix, &v) &&
            (v < k->lo || v > hp->head_dim))
            return key_range_err(m, k->suffix, v, k->lo, hp->head_dim, err);
    }
    if (!(hp->rms_eps >= 0)) return ft_err_set(err, "key %s.attention.layer_norm_rms_epsilon: negative", an);

    ft_rope_params *r = &hp->rope;
    if (!present(m, "rope.dimension_count")) r->n_rot = hp->head_dim;
    if (r->n_rot % 2) return ft_err_set(err, "key %s.rope.dimension_count %d: must be even", an, r->n_rot);
    if (!(r->freq_base > 0)) return ft_err_set(err, "key %s.rope.freq_base: must be positive", an);
    r->beta_fast = 32.0f;
    r->beta_slow = 1.0f;
    if (!present(m, "rope.scaling.original_context_length")) r->n_ctx_orig = hp->n_ctx_train;
    if (!rope_scaling(m, r, err)) return false;
    hp->rope_swa = *r;

    if (hp->n_expert_used > hp->n_expert)
        return ft_err_set(err, "key %s.expert_used_count %d exceeds expert_count %d", an, hp->n_expert_used,
                          hp->n_expert);
    if (hp->n_expert > 0 && hp->n_expert_used < 1)
        return ft_err_set(err, "key %s.expert_used_count: missing or 0 with %d experts", an, hp->n_expert);
    if (hp->n_expert < 1)
        return ft_err_set(err, "key %s.expert_count: missing or 0 (ft runs %s files with experts only)", an, an);
    return true;
}

bool model_mtp_layers(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    int64_t nextn = 0;
    model_key_int(m, "nextn_predict_layers", &nextn);
    if (nextn >= hp->n_layer)
        return ft_err_set(err, "key %s.nextn_predict_layers %lld: no layers left", m->arch->name, (long long)nextn);
    hp->n_layer -= (int)nextn;
    hp->n_layer_mtp = (int)nextn;
    return true;
}

bool model_linear_attention_hparams(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    const char *an = m->arch->name;
    int64_t interval = 4, inner = 0;
    model_key_int(m, "full_attention_interval", &interval);
    model_key_int(m, "ssm.inner_size", &inner);
    if (!model_mtp_layers(m, err)) return false;
    if (hp->n_ff_exp == 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (hp->n_ff_exp < 1) return ft_err_set(err, "key %s.expert_feed_forward_length: missing or 0", an);
    if (hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->n_ff;
    if (hp->ssm_n_v_heads % hp->ssm_n_k_heads)
        return ft_err_set(err, "key %s.ssm.time_step_rank %d: not a multiple of ssm.group_count %d", an,
                          hp->ssm_n_v_heads, hp->ssm_n_k_heads);
    if (inner != (int64_t)hp->ssm_n_v_heads * hp->ssm_head_dim)
        return ft_err_set(err, "key %s.ssm.inner_size %lld: expected time_step_rank x state_size = %d", an,
                          (long long)inner, hp->ssm_n_v_heads * hp->ssm_head_dim);
    for (int l = 0; l < hp->n_layer; l++) m->layers[l].is_recurrent = (l + 1) % interval != 0;
    return true;
}

bool model_read_hparams(ft_model *m, ft_err *err) {
    const ft_arch *a = m->arch;
    ft_hparams *hp = &m->hp;
    *hp = a->fixed;
    for (int i = 0; i < a->n_keys; i++) {
        const ft_arch_key *k = &a->keys[i];
        // the per-layer keys come after block_count, which sizes the layers
        if (k->type == FT_KEY_TYPE_U32_LAYERS && !m->layers) {
            FT_ASSERT(hp->n_layer > 0);
            m->layers = ft_calloc((size_t)hp->n_layer, sizeof(ft_layer));
        }
        if (!read_key(m, k, err)) return false;
    }
    if (!m->layers) m->layers = ft_calloc((size_t)hp->n_layer, sizeof(ft_layer));
    if (!derive_common(m, err)) return false;
    // every layer's head size and its own KV cache, unless the architecture's hook says otherwise
    for (int l = 0; l < hp->n_layer; l++) {
        m->layers[l].head_dim = hp->head_dim;
        m->layers[l].kv_from = l;
    }
    if (a->hparams && !a->hparams(m, err)) return false;
    // n_ff is the width of the dense layers, 0 in a model without
    if (hp->n_dense_lead > 0 && hp->n_ff < 1)
        return ft_err_set(err, "key %s.feed_forward_length: missing or 0", a->name);
    if (hp->n_dense_lead == 0) hp->n_ff = 0;
    // (the MTP blocks too, for ft synth, which writes them)
    for (int l = 0; l < hp->n_layer + hp->n_layer_mtp; l++) m->layers[l].is_moe = l >= hp->n_dense_lead;
    return true;
}

static int32_t token_id(const ft_model *m, const char *key) {
    int64_t v;
    if (!gguf_get_int(m->file, key, &v) || v < 0 || v >= m->hp.n_vocab) return -1;
    return (int32_t)v;
}

// The vocabulary size is the embedding's row count (checked against the tokenizer's list).
static bool read_vocab(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
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

bool model_layer_has(const ft_model *m, const ft_arch_tensor *t, int il) {
    switch (t->layers) {
    case FT_LAYERS_NONE: return il < 0;
    case FT_LAYERS_ALL: return il >= 0;
    case FT_LAYERS_MOE: return il >= 0 && m->layers[il].is_moe;
    case FT_LAYERS_DENSE: return il >= 0 && !m->layers[il].is_moe;
    case FT_LAYERS_ATTN: return il >= 0 && !m->layers[il].is_recurrent;
    case FT_LAYERS_KV: return il >= 0 && !m->layers[il].is_recurrent && m->layers[il].kv_from == il;
    case FT_LAYERS_RECURRENT: return il >= 0 && m->layers[il].is_recurrent;
    case FT_LAYERS_MTP: return il >= m->hp.n_layer;
    }
    return false;
}

int64_t model_dim(const ft_model *m, int il, enum ft_dim d) {
    const ft_hparams *hp = &m->hp;
    switch (d) {
    case FT_DIM_NONE: return 1;
    case FT_DIM_EMBD: return hp->n_embd;
    case FT_DIM_VOCAB: return hp->n_vocab;
    case FT_DIM_HEAD: return m->layers[il].head_dim;
    case FT_DIM_Q: return (int64_t)m->layers[il].n_head * m->layers[il].head_dim;
    case FT_DIM_KV: return (int64_t)m->layers[il].n_head_kv * m->layers[il].head_dim;
    case FT_DIM_EXPERT: return hp->n_expert;
    case FT_DIM_FF: return hp->n_ff;
    case FT_DIM_FF_EXP: return hp->n_ff_exp;
    case FT_DIM_FF_EXP_2: return 2 * (int64_t)hp->n_ff_exp;
    case FT_DIM_FF_SHEXP: return hp->n_ff_shexp;
    case FT_DIM_Q_GATED: return 2 * (int64_t)m->layers[il].n_head * m->layers[il].head_dim;
    case FT_DIM_LIN_QKV: return (2 * (int64_t)hp->ssm_n_k_heads + hp->ssm_n_v_heads) * hp->ssm_head_dim;
    case FT_DIM_LIN_V: return (int64_t)hp->ssm_n_v_heads * hp->ssm_head_dim;
    case FT_DIM_SSM_HEADS: return hp->ssm_n_v_heads;
    case FT_DIM_SSM_BA: return 2 * (int64_t)hp->ssm_n_v_heads;
    case FT_DIM_SSM_HEAD: return hp->ssm_head_dim;
    case FT_DIM_SSM_CONV: return hp->ssm_d_conv;
    case FT_DIM_EMBD_2: return 2 * (int64_t)hp->n_embd;
    case FT_DIM_HEADS: return m->layers[il].n_head;
    case FT_DIM_ONE: return 1;
    case FT_DIM_HEAD_HALF: return hp->head_dim / 2;
    case FT_DIM_ARCH: break;
    }
    FT_ASSERT(!"an FT_DIM_ARCH size comes from the architecture's dim hook");
    return -1;
}

// The rows of layers 0 .. n_layer - 1 (see model_for_each_row).
static bool for_each_row(const ft_model *m, int n_layer, bool (*fn)(void *ctx, const ft_arch_tensor *t, int il),
                         void *ctx) {
    const ft_arch *a = m->arch;
    for (int i = 0; i < a->n_tensors;) {
        if (a->tensors[i].layers == FT_LAYERS_NONE) {
            if (!fn(ctx, &a->tensors[i++], -1)) return false;
            continue;
        }
        int end = i;
        while (end < a->n_tensors && a->tensors[end].layers != FT_LAYERS_NONE) end++;
        for (int il = 0; il < n_layer; il++)
            for (int k = i; k < end; k++)
                if (model_layer_has(m, &a->tensors[k], il) && !fn(ctx, &a->tensors[k], il)) return false;
        i = end;
    }
    return true;
}

bool model_for_each_row(const ft_model *m, bool (*fn)(void *ctx, const ft_arch_tensor *t, int il), void *ctx) {
    return for_each_row(m, m->hp.n_layer, fn, ctx);
}

bool model_for_each_file_row(const ft_model *m, bool (*fn)(void *ctx, const ft_arch_tensor *t, int il), void *ctx) {
    return for_each_row(m, m->hp.n_layer + m->hp.n_layer_mtp, fn, ctx);
}

void model_tensor_name(const ft_arch_tensor *t, int il, char *buf, size_t cap) {
    if (il < 0) snprintf(buf, cap, "%s", t->name);
    else snprintf(buf, cap, t->name, il);
}

static ft_tensor *tensor_of(ft_model *m, const ft_arch_tensor *t, int il) {
    FT_ASSERT(t->field != FT_TENSOR_NO_FIELD && il < m->hp.n_layer);
    return field_of(il < 0 ? (void *)m : (void *)&m->layers[il], t->field);
}

// Row t (gate or up experts, FT_TENSOR_FUSED_*) of layer il, whose gate_up_exps is bound: a
// view of the row's half of each expert there, named as the file's tensor. Refused when the
// file also has the row's own tensor (called name).
static bool bind_fused_half(ft_model *m, const ft_arch_tensor *t, int il, const char *name, ft_err *err) {
    const ft_tensor *gu = &m->layers[il].gate_up_exps;
    if (gguf_find_tensor(m->file, name))
        return ft_err_set(err, "tensor %s: the layer has %s too (gate and up experts are either fused or not)",
                          name, gu->name);
    ft_tensor *dst = tensor_of(m, t, il);
    *dst = *gu;
    dst->ne[1] = gu->ne[1] / 2; // even: FT_DIM_FF_EXP_2
    dst->mat_bytes = dst->row_bytes * (size_t)dst->ne[1];
    dst->mat_stride = gu->mat_bytes;
    if (t->flags & FT_TENSOR_FUSED_UP) dst->data = (uint8_t *)gu->data + dst->mat_bytes;
    return true;
}

// Binds row t of layer il after checking the file's tensor exists, has the row's dims and a
// type ft can compute with (f32 where the row says so); or as a view into the layer's fused
// gate/up experts (FT_TENSOR_FUSED_*).
static bool bind_tensor(ft_model *m, const ft_arch_tensor *t, int il, ft_err *err) {
    char name[128];
    model_tensor_name(t, il, name, sizeof(name));
    ft_tensor *dst = tensor_of(m, t, il);
    memset(dst, 0, sizeof(*dst));
    bool fusable = t->flags & (FT_TENSOR_FUSED_GATE | FT_TENSOR_FUSED_UP);
    if (fusable && ft_tensor_present(&m->layers[il].gate_up_exps)) return bind_fused_half(m, t, il, name, err);
    const gguf_tensor *g = gguf_find_tensor(m->file, name);
    if (!g && fusable)
        return ft_err_set(err, "tensor %s: missing (nor are the layer's gate and up experts fused in "
                               "blk.%d.ffn_gate_up_exps.weight)", name, il);
    if (!g) return (t->flags & FT_TENSOR_OPTIONAL) ? true : ft_err_set(err, "tensor %s: missing", name);
    int n_dims = 0;
    int64_t want[3] = {1, 1, 1};
    for (; n_dims < 3 && t->ne[n_dims] != FT_DIM_NONE; n_dims++) {
        want[n_dims] = t->ne[n_dims] == FT_DIM_ARCH ? m->arch->dim(m, t, il, g, NULL, err)
                                                     : model_dim(m, il, t->ne[n_dims]);
        if (want[n_dims] < 0) return false;
    }
    // GGUF may store trailing dims of 1 explicitly or not: compare the dims that matter
    bool shape_ok = (int)g->n_dims <= FT_MAX(n_dims, 1) || g->ne[3] == 1;
    for (int i = 0; i < 3; i++) shape_ok = shape_ok && g->ne[i] == want[i];
    shape_ok = shape_ok && g->ne[3] == 1;
    if (!shape_ok)
        return ft_err_set(err, "tensor %s: shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
                          (long long)g->ne[0], (long long)g->ne[1], (long long)g->ne[2], (long long)g->ne[3],
                          (long long)want[0], (long long)want[1], (long long)want[2]);
    if (t->type == FT_WTYPE_F32 && g->type != FT_TYPE_F32)
        return ft_err_set(err, "tensor %s: type %s, expected f32", name, ft_type_name(g->type));
    const ft_quant_ops *q = ft_quant_ops_find(g->type);
    if (!q || !q->vec_dot)
        return ft_err_set(err, "tensor %s: type %s is not supported for weights", name, ft_type_name(g->type));
    snprintf(dst->name, sizeof(dst->name), "%s", name);
    dst->type = g->type;
    dst->ne[0] = want[0];
    dst->ne[1] = want[1];
    dst->ne[2] = want[2];
    dst->row_bytes = ft_row_bytes(g->type, want[0]);
    dst->mat_bytes = dst->row_bytes * (size_t)want[1];
    dst->data = (void *)g->data;
    dst->placement = FT_PLACEMENT_CPU;
    return true;
}

typedef struct {
    ft_model *m;
    ft_err *err;
    void (*problem)(void *ctx, const char *msg); // NULL: the first problem stops the binding
    void *problem_ctx;
} bind_ctx;

static bool bind_row(void *ctx, const ft_arch_tensor *t, int il) {
    bind_ctx *c = ctx;
    if (bind_tensor(c->m, t, il, c->err)) return true;
    if (!c->problem) return false;
    c->problem(c->problem_ctx, c->err->msg);
    return true;
}

typedef struct {
    const ft_model *m;
    void (*fn)(void *ctx, const ft_tensor *t);
    void *ctx;
} each_ctx;

static bool each_row(void *ctx, const ft_arch_tensor *t, int il) {
    each_ctx *c = ctx;
    char name[128];
    model_tensor_name(t, il, name, sizeof(name));
    const ft_tensor *bound = tensor_of((ft_model *)c->m, t, il);
    if (ft_tensor_present(bound) && !strcmp(bound->name, name)) c->fn(c->ctx, bound);
    return true;
}

void ft_model_for_each_tensor(const ft_model *m, void (*fn)(void *ctx, const ft_tensor *t), void *ctx) {
    each_ctx c = {m, fn, ctx};
    model_for_each_row(m, each_row, &c);
}

// ---------------------------------------------------------------------------------------------
// Loading

static ft_model *load(const char *path, void (*problem)(void *ctx, const char *msg), void *problem_ctx,
                      ft_err *err) {
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
    bind_ctx bc = {m, err, problem, problem_ctx};
    if (!model_read_hparams(m, err) || !read_vocab(m, err) || !model_for_each_row(m, bind_row, &bc)) {
        ft_err_prefix(err, "%s", path);
        ft_model_free(m);
        return NULL;
    }
    if (!ft_tensor_present(&m->output)) m->output = m->tok_embd;
    return m;
}

ft_model *ft_model_load(const char *path, ft_err *err) { return load(path, NULL, NULL, err); }

ft_model *ft_model_load_checked(const char *path, void (*problem)(void *ctx, const char *msg), void *ctx,
                                ft_err *err) {
    return load(path, problem, ctx, err);
}

// ---------------------------------------------------------------------------------------------
// Placement on a backend

typedef struct {
    ft_weights *w;
    bool experts_on_host;
    void (*fn)(ft_tensor *t, void *ctx);
    void *ctx;
} placed_each;

// w's copy of one of the model's layer tensors (the same field of the same layer); for fused
// gate/up experts, w's gate and up views of them (what the forward pass reads).
static void placed_one(void *ctx, const ft_tensor *t) {
    placed_each *e = ctx;
    const ft_model *m = e->w->m;
    const char *base = (const char *)m->layers;
    if ((const char *)t < base || (const char *)t >= base + (size_t)m->hp.n_layer * sizeof(ft_layer)) return;
    size_t off = (size_t)((const char *)t - base), in_layer = off % sizeof(ft_layer);
    bool fused = in_layer == offsetof(ft_layer, gate_up_exps);
    if (e->experts_on_host &&
        (fused || in_layer == offsetof(ft_layer, gate_exps) || in_layer == offsetof(ft_layer, up_exps) ||
         in_layer == offsetof(ft_layer, down_exps)))
        return;
    if (fused) {
        ft_layer *l = &e->w->layers[off / sizeof(ft_layer)];
        e->fn(&l->gate_exps, e->ctx);
        e->fn(&l->up_exps, e->ctx);
        return;
    }
    e->fn((ft_tensor *)((char *)e->w->layers + off), e->ctx);
}

// Calls fn on every tensor of w that a device placement copies: every tensor the description
// bound but the embedding table, the output (also when tied to the embedding), RoPE's
// frequency factors, and not the routed experts when they stay on the host.
static void for_each_placed_tensor(ft_weights *w, bool experts_on_host, void (*fn)(ft_tensor *t, void *ctx),
                                   void *ctx) {
    fn(&w->output_norm, ctx);
    fn(&w->output, ctx);
    fn(&w->rope_freqs, ctx);
    placed_each e = {w, experts_on_host, fn, ctx};
    ft_model_for_each_tensor(w->m, placed_one, &e);
}

// (packed: what a copy of it takes)
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
    w->rope_freqs = m->rope_freqs;
    w->n_layer = m->hp.n_layer;
    w->m = m;
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
    if (ft_tensor_packed(t))
        be->ops->buffer_write(be, d, t->data, tensor_bytes(t));
    else // a fused gate/up view: its matrices gathered, packed
        for (int64_t e = 0; e < t->ne[2]; e++)
            be->ops->buffer_write(be, (uint8_t *)d + (size_t)e * t->mat_bytes, ft_tensor_mat(t, e),
                                  t->mat_bytes);
    t->data = d;
    t->mat_stride = 0;
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

typedef struct {
    ft_progress_fn progress;
    void *progress_ctx;
    size_t done, total, reported; // bytes
} prefault_ctx;

static void add_tensor_bytes(void *ctx, const ft_tensor *t) {
    ((prefault_ctx *)ctx)->total += t->mat_bytes * (size_t)t->ne[2];
}

// Reads one byte of every page of t (its matrices may be strided views: the whole span).
static void prefault_tensor(void *ctx, const ft_tensor *t) {
    prefault_ctx *c = ctx;
    const size_t page = 4096, report = (size_t)64 << 20;
    size_t span = ft_tensor_mat_stride(t) * (size_t)(t->ne[2] - 1) + t->mat_bytes;
    const volatile uint8_t *p = t->data;
    uint8_t sink = 0;
    for (size_t i = 0; i < span; i += page) sink ^= p[i];
    (void)sink;
    c->done += t->mat_bytes * (size_t)t->ne[2];
    if (c->progress && (c->done - c->reported >= report || c->done == c->total)) {
        c->reported = c->done;
        c->progress(c->progress_ctx, "reading weights into memory", c->done, c->total);
    }
}

void ft_model_prefault(const ft_model *m, ft_progress_fn progress, void *progress_ctx) {
    prefault_ctx c = {progress, progress_ctx, 0, 0, 0};
    ft_model_for_each_tensor(m, add_tensor_bytes, &c);
    size_t avail = ft_mem_available();
    if (avail && c.total > avail)
        FT_LOG_WARN("%s: the weights (%.1f GB) are larger than the available memory (%.1f GB): "
                    "pages will be read from disk again while running",
                    m->path, c.total / 1e9, avail / 1e9);
    ft_model_for_each_tensor(m, prefault_tensor, &c);
}

typedef struct {
    const ft_model *m;
    bool experts_only;
    uintptr_t (*r)[2]; // [start, end) of each tensor's span
    size_t n, cap;
} span_list;

// Whether t is one of m's routed expert banks (gate, up, down or fused gate/up).
static bool is_expert_bank(const ft_model *m, const ft_tensor *t) {
    const char *base = (const char *)m->layers;
    if ((const char *)t < base || (const char *)t >= base + (size_t)m->hp.n_layer * sizeof(ft_layer)) return false;
    size_t in_layer = (size_t)((const char *)t - base) % sizeof(ft_layer);
    return in_layer == offsetof(ft_layer, gate_exps) || in_layer == offsetof(ft_layer, up_exps) ||
           in_layer == offsetof(ft_layer, down_exps) || in_layer == offsetof(ft_layer, gate_up_exps);
}

static void add_span(void *ctx, const ft_tensor *t) {
    span_list *l = ctx;
    if (l->experts_only && !is_expert_bank(l->m, t)) return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->r = ft_realloc(l->r, l->cap * sizeof(*l->r));
    }
    uintptr_t a = (uintptr_t)t->data;
    l->r[l->n][0] = a;
    l->r[l->n][1] = a + ft_tensor_mat_stride(t) * (size_t)(t->ne[2] - 1) + t->mat_bytes;
    l->n++;
}

static int cmp_span(const void *a, const void *b) {
    uintptr_t x = ((const uintptr_t *)a)[0], y = ((const uintptr_t *)b)[0];
    return x < y ? -1 : x > y;
}

// The spans of the tensors to copy, sorted and merged where at most a huge page apart (a gap
// that small is cheaper copied than left as two partial huge pages).
static span_list copy_spans(const ft_model *m, bool experts_only) {
    span_list l = {m, experts_only, NULL, 0, 0};
    if (!gguf_is_mapped(m->file)) return l;
    ft_model_for_each_tensor(m, add_span, &l);
    if (!l.n) return l;
    qsort(l.r, l.n, sizeof(*l.r), cmp_span);
    size_t k = 0;
    for (size_t i = 1; i < l.n; i++) {
        if (l.r[i][0] <= l.r[k][1] + FT_HUGE_PAGE) {
            if (l.r[i][1] > l.r[k][1]) l.r[k][1] = l.r[i][1];
        } else {
            k++;
            l.r[k][0] = l.r[i][0];
            l.r[k][1] = l.r[i][1];
        }
    }
    l.n = k + 1;
    return l;
}

size_t ft_model_copy_bytes(const ft_model *m, bool experts_only) {
    span_list l = copy_spans(m, experts_only);
    size_t n = 0;
    for (size_t i = 0; i < l.n; i++) n += ft_mapping_movable((const void *)l.r[i][0], l.r[i][1] - l.r[i][0]);
    free(l.r);
    return n;
}

// The copy in units of at least COPY_UNIT bytes (whole huge pages) that the threads claim in
// turn, and at most COPY_MAX_UNITS of them: each unit moved is a mapping of its own, and a
// process may hold some 65,000 (vm.max_map_count).
#define COPY_UNIT ((size_t)16 << 20)
#define COPY_MAX_UNITS 2048

typedef struct {
    const ft_model *m;
    uintptr_t (*unit)[2]; // [start, end) of each unit, huge-page aligned
    size_t n_unit;
    atomic_size_t next, moved;
    atomic_bool failed;   // a unit could not move (no memory): no thread claims another
    ft_progress_fn progress;
    void *progress_ctx;
    size_t total;
} copy_job;

static void copy_worker(void *ctx, int ith, int nth) {
    (void)nth;
    copy_job *j = ctx;
    const gguf_file *f = j->m->file;
    for (;;) {
        size_t u = atomic_fetch_add(&j->next, 1);
        if (u >= j->n_unit || atomic_load(&j->failed)) return;
        size_t len = j->unit[u][1] - j->unit[u][0];
        size_t got = ft_mapping_to_anonymous(gguf_file_base(f), gguf_fd(f), (void *)j->unit[u][0], len);
        size_t done = atomic_fetch_add(&j->moved, got) + got;
        if (got < len) atomic_store(&j->failed, true);
        if (ith == 0 && j->progress) j->progress(j->progress_ctx, "copying weights into memory", done, j->total);
    }
}

size_t ft_model_copy_into_memory(const ft_model *m, bool experts_only, int n_threads, ft_progress_fn progress,
                                 void *progress_ctx) {
    span_list l = copy_spans(m, experts_only);
    copy_job j = {.m = m, .progress = progress, .progress_ctx = progress_ctx};
    size_t cap = 0;
    for (size_t i = 0; i < l.n; i++) j.total += ft_mapping_movable((const void *)l.r[i][0], l.r[i][1] - l.r[i][0]);
    size_t unit = FT_MAX(COPY_UNIT, (j.total / COPY_MAX_UNITS + FT_HUGE_PAGE - 1) & ~(FT_HUGE_PAGE - 1));
    for (size_t i = 0; i < l.n; i++) {
        uintptr_t a = (l.r[i][0] + FT_HUGE_PAGE - 1) & ~(uintptr_t)(FT_HUGE_PAGE - 1);
        uintptr_t b = l.r[i][1] & ~(uintptr_t)(FT_HUGE_PAGE - 1);
        for (; a < b; a += unit) {
            if (j.n_unit == cap) {
                cap = cap ? 2 * cap : 64;
                j.unit = ft_realloc(j.unit, cap * sizeof(*j.unit));
            }
            j.unit[j.n_unit][0] = a;
            j.unit[j.n_unit][1] = b - a < unit ? b : a + unit;
            j.n_unit++;
        }
    }
    free(l.r);
    atomic_init(&j.next, 0);
    atomic_init(&j.moved, 0);
    atomic_init(&j.failed, false);
    if (j.n_unit) {
        // each thread reads and pages in its units alone: the copy goes as fast as the threads
        // together move memory (the kernel zeroes each huge page first)
        ft_pool *pool = ft_pool_init(FT_MAX(1, FT_MIN(n_threads, (int)j.n_unit)));
        ft_pool_run(pool, copy_worker, &j);
        ft_pool_free(pool);
    }
    free(j.unit);
    return atomic_load(&j.moved);
}

void ft_model_free(ft_model *m) {
    if (!m) return;
    gguf_close(m->file);
    free(m->layers);
    free(m->path);
    free(m);
}

int ft_model_max_q_width(const ft_model *m) {
    const ft_hparams *hp = &m->hp;
    int w = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        const ft_layer *L = &m->layers[l];
        w = FT_MAX(w, L->is_recurrent ? hp->ssm_n_v_heads * hp->ssm_head_dim : L->n_head * L->head_dim);
    }
    return w;
}

int ft_model_max_head_dim(const ft_model *m) {
    int d = m->hp.ssm_head_dim;
    for (int l = 0; l < m->hp.n_layer; l++) d = FT_MAX(d, m->layers[l].head_dim);
    return d;
}

int64_t ft_model_max_kv_width(const ft_model *m) {
    int64_t w = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const ft_layer *L = &m->layers[l];
        if (!L->is_recurrent) w = FT_MAX(w, (int64_t)L->n_head_kv * L->head_dim);
    }
    return w;
}

int64_t ft_model_wide_width(const ft_model *m) {
    int64_t w = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const ft_layer *L = &m->layers[l];
        if (ft_tensor_present(&L->wq) && L->wq.ne[1] > (int64_t)L->n_head * L->head_dim) w = FT_MAX(w, L->wq.ne[1]);
        if (ft_tensor_present(&L->lin_qkv)) w = FT_MAX(w, L->lin_qkv.ne[1]);
    }
    return w;
}

int ft_model_recurrent_heads(const ft_model *m) {
    for (int l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].is_recurrent) return m->hp.ssm_n_v_heads;
    return 0;
}

void ft_forward_alloc(ft_forward *f, const ft_model *m, const ft_weights *w, ft_backend *be, int n_batch) {
    const ft_hparams *hp = &m->hp;
    size_t B = (size_t)n_batch, E = (size_t)hp->n_embd, Q = (size_t)ft_model_max_q_width(m),
           KV = (size_t)ft_model_max_kv_width(m);
    f->be = be;
    f->w = w;
    f->seg = NULL;
    f->n_seg = 0;
    f->seqs = NULL;
    f->x = be->ops->alloc(be, B * E);
    f->xn = be->ops->alloc(be, B * E);
    f->q = be->ops->alloc(be, B * Q);
    f->k = be->ops->alloc(be, B * KV);
    f->v = be->ops->alloc(be, B * KV);
    f->attn = be->ops->alloc(be, B * Q);
    f->gate = be->ops->alloc(be, B * Q);
    f->out = be->ops->alloc(be, B * E);
    f->out2 = be->ops->alloc(be, B * E);
    size_t W = (size_t)ft_model_wide_width(m), H = (size_t)ft_model_recurrent_heads(m);
    f->wide = W ? be->ops->alloc(be, B * W) : NULL;
    f->ab = H ? be->ops->alloc(be, 4 * B * H) : NULL; // alpha, beta, and their fused projection
}

unsigned ft_model_op_features(const ft_model *m) {
    const ft_hparams *hp = &m->hp;
    unsigned f = m->arch->op_features;
    if (hp->gating == FT_GATING_SOFTMAX_WEIGHT) f |= FT_OPS_MOE_SOFTMAX_WEIGHT;
    if (hp->glu == FT_GLU_SWIGLU_OAI) f |= FT_OPS_SWIGLU_OAI;
    if (hp->glu == FT_GLU_GELU) f |= FT_OPS_GELU;
    if (hp->embd_scale != 0 || hp->logit_softcap != 0) f |= FT_OPS_SCALE_SOFTCAP;
    if (ft_tensor_present(&m->rope_freqs)) f |= FT_OPS_ROPE_FREQ_FACTORS;
    for (int l = 0; l < hp->n_layer; l++) {
        const ft_layer *L = &m->layers[l];
        if (ft_tensor_present(&L->sinks)) f |= FT_OPS_ATTN_SINKS;
        if (ft_tensor_present(&L->router_b) || ft_tensor_present(&L->gate_exps_b) ||
            ft_tensor_present(&L->up_exps_b) || ft_tensor_present(&L->down_exps_b))
            f |= FT_OPS_MOE_BIASES;
        if (ft_tensor_present(&L->down_exps_s)) f |= FT_OPS_MOE_DOWN_SCALE;
        if (ft_tensor_present(&L->out_scale)) f |= FT_OPS_SCALE_SOFTCAP;
    }
    return f;
}

int64_t ft_model_max_width(const ft_model *m) {
    const ft_hparams *hp = &m->hp;
    int64_t w = FT_MAX(hp->n_embd, ft_model_max_q_width(m));
    w = FT_MAX(w, ft_model_wide_width(m));
    w = FT_MAX(w, hp->n_ff);
    w = FT_MAX(w, hp->n_ff_exp);
    w = FT_MAX(w, hp->n_ff_shexp);
    return w;
}
