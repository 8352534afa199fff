// synth.c: writing synthetic models (see synth.h) from an architecture's description.
//
// The keys go out as the description's rows say, and are read back the way the loader reads
// them; the tensors are then planned from the rows (name, type, shape from those keys, value
// scale) and the plan is checked (block divisibility) before anything is written. The header
// goes out, then each tensor's data is generated row by row and streamed, so memory use is
// one tensor at most.
#include "model_impl.h"
#include "synth_vocab.h"
#include "../gguf/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[96];
    enum ft_type type;
    uint32_t n_dims;
    int64_t ne[3];
    float std;  // standard deviation of the values
    float mean; // added to float values (norm weights sit around 1)
    void (*fill)(const ft_synth_params *p, float *v, int64_t n, ft_rng *rng); // set values instead (f32)
} tensor_plan;

typedef struct {
    tensor_plan *items;
    int n, cap;
} plan;

static void plan_add(plan *p, enum ft_type type, float std, float mean, uint32_t n_dims,
                     int64_t ne0, int64_t ne1, int64_t ne2, const char *fmt, ...)
    __attribute__((format(printf, 9, 10)));

static void plan_add(plan *p, enum ft_type type, float std, float mean, uint32_t n_dims,
                     int64_t ne0, int64_t ne1, int64_t ne2, const char *fmt, ...) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->items = ft_realloc(p->items, (size_t)p->cap * sizeof(*p->items));
    }
    tensor_plan *t = &p->items[p->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
    t->type = type;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->std = std;
    t->mean = mean;
    t->fill = NULL;
}

ft_synth_params ft_synth_default_params(void) {
    ft_synth_params p = {
        .arch = "qwen3moe",
        .name = "ft demo (random weights)",
        .n_layer = 4,
        .n_embd = 256,
        .n_head = 4,
        .n_head_kv = 2,
        .head_dim = 64,
        .n_expert = 8,
        .n_expert_used = 2,
        .n_ff_exp = 256,
        .n_ctx_train = 4096,
        .rope_freq_base = 1000000.0f,
        .rms_eps = 1e-6f,
        .dense_type = FT_TYPE_Q8_0,
        .n_expert_types = 1,
        .expert_types = {FT_TYPE_Q4_K},
        .seed = 42,
    };
    return p;
}

static enum ft_type layer_type(const enum ft_type *types, int n, int layer) {
    return types[layer < n ? layer : n - 1];
}

bool synth_has_n_rot(const ft_synth_params *p) { return p->n_rot != 0; }
bool synth_qkv_bias(const ft_synth_params *p) { return p->qkv_bias; }
bool synth_qk_norm(const ft_synth_params *p) { return p->qk_norm; }
bool synth_has_mtp(const ft_synth_params *p) { return p->n_mtp > 0; }
bool synth_fused_gate_up(const ft_synth_params *p) { return p->fused_gate_up; }
bool synth_split_gate_up(const ft_synth_params *p) { return !p->fused_gate_up; }

int64_t synth_block_count(const ft_synth_params *p, int il) { return (int64_t)p->n_layer + p->n_mtp; }

int64_t synth_dense_ff(const ft_synth_params *p, int il) {
    return p->n_ff_dense ? p->n_ff_dense : 2 * p->n_ff_exp;
}

int64_t synth_ff_used_experts(const ft_synth_params *p, int il) {
    return (int64_t)p->n_ff_exp * p->n_expert_used;
}

int64_t synth_ssm_head_dim(const ft_synth_params *p, int il) {
    (void)il;
    return p->ssm_head_dim ? p->ssm_head_dim : p->head_dim;
}

int64_t synth_ssm_inner(const ft_synth_params *p, int il) {
    return (p->ssm_n_v_heads ? p->ssm_n_v_heads : 4) * synth_ssm_head_dim(p, il);
}

// ---------------------------------------------------------------------------------------------
// Keys

_Static_assert(offsetof(ft_synth_params, arch) == 0, "ft_key_synth takes offset 0 for no field");

static int64_t synth_int(const ft_synth_params *p, const ft_key_synth *s, int il) {
    if (s->fn) return s->fn(p, il);
    const char *base = (const char *)p;
    int v = s->field ? *(const int *)(base + s->field) : 0;
    if (v == 0) return s->or_field ? *(const int *)(base + s->or_field) : (int64_t)s->value;
    return v;
}

static float synth_float(const ft_synth_params *p, const ft_key_synth *s) {
    const char *base = (const char *)p;
    float v = s->field ? *(const float *)(base + s->field) : 0.0f;
    if (v == 0) return s->or_field ? *(const float *)(base + s->or_field) : (float)s->value;
    return v;
}

// The architecture's keys, in its table's order, as its rows say ft synth writes them.
static void write_keys(const ft_synth_params *p, const ft_arch *a, gguf_writer *w) {
    for (int i = 0; i < a->n_keys; i++) {
        const ft_arch_key *k = &a->keys[i];
        const ft_key_synth *s = &k->synth;
        if (!s->write || (s->when && !s->when(p))) continue;
        char key[160];
        snprintf(key, sizeof(key), "%s.%s", a->name, k->suffix);
        switch (k->type) {
        case FT_KEY_TYPE_STR: gguf_writer_set_str(w, key, s->str); break;
        case FT_KEY_TYPE_BOOL: gguf_writer_set_bool(w, key, synth_int(p, s, -1) != 0); break;
        case FT_KEY_TYPE_F32: gguf_writer_set_f32(w, key, synth_float(p, s)); break;
        case FT_KEY_TYPE_U32: gguf_writer_set_u32(w, key, (uint32_t)synth_int(p, s, -1)); break;
        case FT_KEY_TYPE_U32_4: {
            uint32_t v[4];
            for (int e = 0; e < 4; e++) v[e] = (uint32_t)synth_int(p, s, e);
            gguf_writer_set_arr(w, key, GGUF_VALUE_TYPE_UINT32, v, 4);
            break;
        }
        case FT_KEY_TYPE_BOOL_LAYERS: { // an entry per block (fn's value 0 or not)
            uint8_t v[FT_SYNTH_MAX_LAYERS + FT_SYNTH_MAX_MTP];
            int n = p->n_layer + p->n_mtp;
            for (int l = 0; l < n; l++) v[l] = synth_int(p, s, l) != 0;
            gguf_writer_set_arr(w, key, GGUF_VALUE_TYPE_BOOL, v, (uint64_t)n);
            break;
        }
        case FT_KEY_TYPE_U32_LAYERS:
            if (s->per_layer) { // (an entry per block, the MTP ones too)
                uint32_t v[FT_SYNTH_MAX_LAYERS + FT_SYNTH_MAX_MTP];
                int n = p->n_layer + p->n_mtp;
                for (int l = 0; l < n; l++) v[l] = (uint32_t)synth_int(p, s, l);
                gguf_writer_set_arr(w, key, GGUF_VALUE_TYPE_UINT32, v, (uint64_t)n);
            } else {
                gguf_writer_set_u32(w, key, (uint32_t)synth_int(p, s, -1));
            }
            break;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tensors

typedef struct {
    const ft_synth_params *p;
    const ft_model *m; // the keys written, read back as the loader reads them
    plan *out;
    ft_err *err;
} plan_ctx;

static bool plan_row(void *ctx, const ft_arch_tensor *t, int il) {
    plan_ctx *c = ctx;
    const ft_synth_params *p = c->p;
    const ft_tensor_synth *s = &t->synth;
    if ((t->flags & FT_TENSOR_NO_SYNTH) || (s->when && !s->when(p)) || (s->when_layer && !s->when_layer(p, il)))
        return true;
    enum ft_type et = layer_type(p->expert_types, p->n_expert_types, il < 0 ? 0 : il);
    enum ft_type type = FT_TYPE_F32;
    switch (t->type) {
    case FT_WTYPE_F32:
    case FT_WTYPE_ANY_F32: type = FT_TYPE_F32; break;
    case FT_WTYPE_ANY: type = p->dense_type; break;
    case FT_WTYPE_EXPERT: type = et; break;
    case FT_WTYPE_EXPERT_DOWN:
        type = p->n_expert_down_types ? layer_type(p->expert_down_types, p->n_expert_down_types, il) : et;
        break;
    }
    uint32_t n_dims = 0;
    int64_t ne[3] = {1, 1, 1};
    for (; n_dims < 3 && t->ne[n_dims] != FT_DIM_NONE; n_dims++) {
        ne[n_dims] = t->ne[n_dims] == FT_DIM_ARCH ? c->m->arch->dim(c->m, t, il, NULL, p, c->err)
                                                  : model_dim(c->m, il, t->ne[n_dims]);
        if (ne[n_dims] < 0) return false;
    }
    float std = s->std;
    if (s->fan == FT_FAN_IN) std = s->std * (1.0f / sqrtf((float)ne[0]));
    if (s->fan == FT_FAN_IN_DIV) std = s->std / sqrtf((float)ne[0]);
    char name[96];
    model_tensor_name(t, il, name, sizeof(name));
    plan_add(c->out, type, std, s->mean, n_dims, ne[0], ne[1], ne[2], "%s", name);
    FT_ASSERT(!s->fill || type == FT_TYPE_F32);
    c->out->items[c->out->n - 1].fill = s->fill;
    return true;
}

static bool has_layers(const ft_arch *a, enum ft_layers layers) {
    for (int i = 0; i < a->n_tensors; i++)
        if (a->tensors[i].layers == layers) return true;
    return false;
}

static bool has_dense_layers(const ft_arch *a) { return has_layers(a, FT_LAYERS_DENSE); }

bool ft_synth_has_dense_layers(const char *arch) {
    const ft_arch *a = ft_arch_find(arch);
    return a && has_dense_layers(a);
}

bool ft_synth_has_linear_attention(const char *arch) {
    const ft_arch *a = ft_arch_find(arch);
    return a && has_layers(a, FT_LAYERS_RECURRENT);
}

static bool has_fused_gate_up(const ft_arch *a) {
    for (int i = 0; i < a->n_tensors; i++)
        if (a->tensors[i].flags & FT_TENSOR_FUSED_GATE) return true;
    return false;
}

bool ft_synth_has_fused_gate_up(const char *arch) {
    const ft_arch *a = ft_arch_find(arch);
    return a && has_fused_gate_up(a);
}

bool ft_synth_has_mtp(const char *arch) {
    const ft_arch *a = ft_arch_find(arch);
    return a && has_layers(a, FT_LAYERS_MTP);
}

// Whether the architecture writes rope.dimension_sections from rope_sections.
static bool writes_rope_sections(const ft_arch *a) {
    for (int i = 0; i < a->n_keys; i++)
        if (!strcmp(a->keys[i].suffix, "rope.dimension_sections") && a->keys[i].synth.when == synth_has_rope_sections)
            return true;
    return false;
}

bool synth_has_rope_sections(const ft_synth_params *p) {
    return p->rope_sections[0] || p->rope_sections[1] || p->rope_sections[2] || p->rope_sections[3];
}

int64_t synth_rope_sections(const ft_synth_params *p, int i) { return p->rope_sections[i]; }

static bool check_params(const ft_synth_params *p, const ft_arch *a, ft_err *err) {
    if (p->n_layer < 1 || p->n_layer > FT_SYNTH_MAX_LAYERS)
        return ft_err_set(err, "--layers must be 1..%d, got %d", FT_SYNTH_MAX_LAYERS, p->n_layer);
    if (p->n_embd < 1 || p->n_head < 1 || p->n_head_kv < 1 || p->head_dim < 1 || p->n_ff_exp < 1)
        return ft_err_set(err, "--embd, --heads, --kv-heads, --head-dim and --ff must be positive");
    if (p->n_head % p->n_head_kv)
        return ft_err_set(err, "--heads %d is not a multiple of --kv-heads %d", p->n_head, p->n_head_kv);
    if (p->n_expert < 1 || p->n_expert_used < 1 || p->n_expert_used > p->n_expert)
        return ft_err_set(err, "--top-k must be 1..--experts (%d), got %d", p->n_expert, p->n_expert_used);
    if (p->n_expert_types < 1) return ft_err_set(err, "no expert type given");
    if (p->n_head_swa && p->n_head_swa % p->n_head_kv)
        return ft_err_set(err, "sliding-window heads %d are not a multiple of --kv-heads %d", p->n_head_swa, p->n_head_kv);
    if (p->n_dense_lead < 0 || p->n_dense_lead > p->n_layer)
        return ft_err_set(err, "leading dense layers must be 0..%d, got %d", p->n_layer, p->n_dense_lead);
    if ((p->n_dense_lead || p->n_ff_dense) && !has_dense_layers(a))
        return ft_err_set(err, "--dense-lead and --dense-ff are for architectures with dense layers (%s has none)",
                          p->arch);
    if ((p->full_attn_interval || p->ssm_n_k_heads || p->ssm_n_v_heads || p->ssm_head_dim || p->ssm_d_conv) &&
        !has_layers(a, FT_LAYERS_RECURRENT))
        return ft_err_set(err, "--full-attn-interval and --ssm-* are for architectures with linear-attention layers "
                               "(%s has none)", p->arch);
    if (p->n_mtp < 0 || p->n_mtp > FT_SYNTH_MAX_MTP)
        return ft_err_set(err, "MTP blocks must be 0..%d, got %d", FT_SYNTH_MAX_MTP, p->n_mtp);
    if (p->n_mtp && !has_layers(a, FT_LAYERS_MTP))
        return ft_err_set(err, "--mtp is for architectures whose files may hold MTP blocks ft synth writes (%s's "
                               "do not)", p->arch);
    if (synth_has_rope_sections(p) && !writes_rope_sections(a))
        return ft_err_set(err, "--rope-sections is for architectures with M-RoPE sections ft synth writes from it "
                               "(not %s)", p->arch);
    if (p->fused_gate_up && !has_fused_gate_up(a))
        return ft_err_set(err, "--fused-gate-up is for architectures whose experts may fuse gate and up "
                               "(%s's do not)", p->arch);
    int head_swa = p->head_dim_swa ? p->head_dim_swa : p->head_dim;
    if ((p->n_rot && (p->n_rot % 2 || p->n_rot > p->head_dim)) || (p->n_rot_swa && (p->n_rot_swa % 2 || p->n_rot_swa > head_swa)))
        return ft_err_set(err, "rotary dims must be even and at most the head size (--head-dim %d, sliding layers %d)",
                          p->head_dim, head_swa);
    return !a->synth_check || a->synth_check(p, err);
}

static bool check_plan(const plan *pl, ft_err *err) {
    for (int i = 0; i < pl->n; i++) {
        const tensor_plan *t = &pl->items[i];
        const ft_quant_ops *ops = ft_quant_ops_find(t->type);
        if (!ops || !ops->vec_dot)
            return ft_err_set(err, "tensor '%s': type %s cannot hold weights", t->name, ft_type_name(t->type));
        int be = ft_type_traits_find(t->type)->block_elems;
        if (t->ne[0] % be)
            return ft_err_set(err, "tensor '%s': row length %lld is not a multiple of %s's block of %d",
                              t->name, (long long)t->ne[0], ft_type_name(t->type), be);
    }
    return true;
}

// Copies every tokenizer.* key of a vocabulary GGUF. Returns the token count, or -1.
static int64_t copy_vocab(const char *path, gguf_writer *w, ft_err *err) {
    gguf_file *vf = gguf_open(path, err);
    if (!vf) return -1;
    uint64_t n_tokens = 0;
    enum gguf_value_type et;
    if (!gguf_get_arr(vf, "tokenizer.ggml.tokens", &et, &n_tokens) || et != GGUF_VALUE_TYPE_STRING ||
        n_tokens == 0) {
        gguf_close(vf);
        ft_err_set(err, "%s: no tokenizer.ggml.tokens string array: not a vocabulary", path);
        return -1;
    }
    for (int64_t i = 0; i < gguf_n_kv(vf); i++) {
        gguf_str k = gguf_kv_key(vf, i);
        if (k.len >= 10 && !memcmp(k.ptr, "tokenizer.", 10)) gguf_writer_copy_kv(w, vf, i);
    }
    gguf_close(vf);
    return (int64_t)n_tokens;
}

// The model the loader makes of the keys written so far: ft synth takes every shape from it,
// so the tensors it writes have the shapes ft expects. image holds the model's file.
static ft_model *read_back(const ft_arch *a, const gguf_writer *w, void **image, ft_err *err) {
    size_t size;
    *image = gguf_writer_kv_image(w, &size);
    gguf_file *f = gguf_open_buffer(*image, size, err);
    if (!f) return NULL;
    ft_model *m = ft_calloc(1, sizeof(*m));
    m->arch = a;
    m->file = f;
    if (!model_read_hparams(m, err)) {
        ft_err_prefix(err, "ft would not load the file");
        ft_model_free(m);
        return NULL;
    }
    return m;
}

bool ft_synth_write(const ft_synth_params *p, const char *path, ft_err *err) {
    const ft_arch *arch = ft_arch_find(p->arch);
    if (!arch) return ft_err_set(err, "--arch %s: unknown (ft synth knows: %s)", p->arch, ft_arch_names());
    if (!check_params(p, arch, err)) return false;

    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", p->arch);
    gguf_writer_set_str(w, "general.name", p->name);
    gguf_writer_set_u32(w, "general.alignment", GGUF_DEFAULT_ALIGNMENT);
    write_keys(p, arch, w);
    void *image = NULL;
    ft_model *m = read_back(arch, w, &image, err);
    int64_t n_vocab = !m               ? -1
                      : p->vocab_from ? copy_vocab(p->vocab_from, w, err)
                                      : synth_vocab_write_builtin(w);
    plan pl = {0};
    bool ok = n_vocab > 0;
    if (ok) {
        m->hp.n_vocab = (int)n_vocab;
        plan_ctx c = {p, m, &pl, err};
        ok = model_for_each_file_row(m, plan_row, &c) && check_plan(&pl, err);
    }
    ft_model_free(m);
    free(image);
    for (int i = 0; ok && i < pl.n; i++)
        gguf_writer_add_tensor(w, pl.items[i].name, pl.items[i].type, pl.items[i].n_dims, pl.items[i].ne);
    ok = ok && gguf_writer_begin(w, path, err);

    // One buffer as large as the largest tensor, reused.
    size_t max_bytes = 0;
    for (int i = 0; ok && i < pl.n; i++) {
        const tensor_plan *t = &pl.items[i];
        size_t b = ft_row_bytes(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2]);
        if (b > max_bytes) max_bytes = b;
    }
    uint8_t *buf = ok ? ft_malloc(max_bytes) : NULL;
    ft_rng rng = ft_rng_init(p->seed);
    double t0 = ft_time_s(), last = t0;
    uint64_t written = 0;
    for (int i = 0; ok && i < pl.n; i++) {
        const tensor_plan *t = &pl.items[i];
        size_t row = ft_row_bytes(t->type, t->ne[0]);
        int64_t rows = t->ne[1] * t->ne[2];
        for (int64_t r = 0; r < rows && t->fill; r++) t->fill(p, (float *)(buf + (size_t)r * row), t->ne[0], &rng);
        for (int64_t r = 0; r < rows && !t->fill; r++) {
            uint8_t *dst = buf + (size_t)r * row;
            ft_quant_random_row(t->type, &rng, t->std, dst, t->ne[0]);
            if (t->mean != 0) {
                FT_ASSERT(t->type == FT_TYPE_F32);
                for (int64_t j = 0; j < t->ne[0]; j++) ((float *)dst)[j] += t->mean;
            }
        }
        ok = gguf_writer_tensor_data(w, buf, row * (size_t)rows, err);
        written += row * (size_t)rows;
        if (ft_time_s() - last > 2.0) {
            last = ft_time_s();
            FT_LOG_INFO("synth: %d/%d tensors, %.1f MiB", i + 1, pl.n, written / 1048576.0);
        }
    }
    ok = ok && gguf_writer_finish(w, err);
    if (ok)
        FT_LOG_INFO("synth: wrote %s: %s, %d layers%s, %lld tokens, %.1f MiB in %.1f s", path, p->arch,
                    p->n_layer, p->n_mtp ? " and MTP blocks" : "", (long long)n_vocab, written / 1048576.0,
                    ft_time_s() - t0);
    free(buf);
    free(pl.items);
    gguf_writer_free(w);
    return ok;
}

int ft_synth_parse_types(const char *list, enum ft_type *types, int max, ft_err *err) {
    int n = 0;
    const char *s = list;
    while (*s) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char name[32];
        if (len == 0 || len >= sizeof(name)) {
            ft_err_set(err, "bad type list '%s'", list);
            return -1;
        }
        memcpy(name, s, len);
        name[len] = 0;
        if (n == max) {
            ft_err_set(err, "type list '%s' has more than %d entries", list, max);
            return -1;
        }
        if (!ft_type_from_name(name, &types[n])) {
            ft_err_set(err, "unknown type '%s' in '%s'", name, list);
            return -1;
        }
        n++;
        s = e ? e + 1 : s + len;
    }
    if (n == 0) ft_err_set(err, "empty type list");
    return n ? n : -1;
}
