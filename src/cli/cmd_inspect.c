// cmd_inspect.c: `ft inspect FILE.gguf [--json]`: what a GGUF file holds.
//
// Architecture and hyper-parameters (the "<arch>.*" keys, next to the values the
// architecture's description reads from them), a tokenizer summary, every tensor grouped by
// layer with type, shape and bytes (marking the ones the architecture does not use), what
// keeps ft from loading the file, and for MoE models the expert geometry: the bytes of one
// expert per bank and layer, the groups of layers that share a geometry, and the expert bytes
// at native width against the bytes if every expert were padded to the widest. With
// --moe-cache-size N (or --gpu-memory GIB to size it from a budget) it also prints the GPU
// expert cache's plan for the file (src/moe/cache_plan.h).
#include "cli.h"
#include "args.h"
#include "../gguf/gguf.h"
#include "../model/model.h"
#include "../moe/cache_plan.h"
#include "../moe/cache_replay.h"
#include "../moe/geometry.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_bank_names[MOE_BANK_COUNT] = {"gate", "up", "down"};

static json_t *json_strn(gguf_str s) { return json_stringn_nocheck(s.ptr, s.len); }

// A key's value as JSON; arrays longer than max_arr are summarized by their length.
static json_t *kv_to_json(const gguf_file *f, int64_t i, uint64_t max_arr) {
    gguf_str key = gguf_kv_key(f, i);
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)(key.len < 255 ? key.len : 255), key.ptr);
    int64_t iv;
    double fv;
    bool bv;
    gguf_str sv;
    switch (gguf_kv_type(f, i)) {
    case GGUF_VALUE_TYPE_BOOL: return gguf_get_bool(f, name, &bv) ? json_boolean(bv) : json_null();
    case GGUF_VALUE_TYPE_STRING: return gguf_get_str(f, name, &sv) ? json_strn(sv) : json_null();
    case GGUF_VALUE_TYPE_FLOAT32:
    case GGUF_VALUE_TYPE_FLOAT64: return gguf_get_float(f, name, &fv) ? json_real(fv) : json_null();
    case GGUF_VALUE_TYPE_UINT64: {
        uint64_t uv;
        return gguf_get_uint(f, name, &uv) ? json_integer((json_int_t)uv) : json_null();
    }
    case GGUF_VALUE_TYPE_ARRAY: {
        enum gguf_value_type et;
        uint64_t n;
        if (!gguf_get_arr(f, name, &et, &n)) return json_null();
        if (n > max_arr) return json_pack("{s:s, s:I}", "type", gguf_value_type_name(et), "length", (json_int_t)n);
        json_t *a = json_array();
        for (uint64_t k = 0; k < n; k++) {
            if (et == GGUF_VALUE_TYPE_STRING) json_array_append_new(a, json_strn(gguf_arr_str(f, name, k)));
            else if (et == GGUF_VALUE_TYPE_FLOAT32 || et == GGUF_VALUE_TYPE_FLOAT64)
                json_array_append_new(a, json_real(gguf_arr_float(f, name, k)));
            else if (et == GGUF_VALUE_TYPE_BOOL)
                json_array_append_new(a, json_boolean(gguf_arr_int(f, name, k)));
            else json_array_append_new(a, json_integer(gguf_arr_int(f, name, k)));
        }
        return a;
    }
    default: return gguf_get_int(f, name, &iv) ? json_integer(iv) : json_null();
    }
}

static bool has_prefix(gguf_str s, const char *prefix) {
    size_t n = strlen(prefix);
    return s.len >= n && !memcmp(s.ptr, prefix, n);
}

typedef struct {
    gguf_str arch;
    gguf_str name;
    bool has_name;
} model_id;

static model_id read_id(const gguf_file *f) {
    model_id id = {{"unknown", 7}, {"", 0}, false};
    gguf_get_str(f, "general.architecture", &id.arch);
    id.has_name = gguf_get_str(f, "general.name", &id.name);
    return id;
}

// ---------------------------------------------------------------------------------------------
// The file against its architecture's description

typedef struct {
    const ft_arch *arch; // NULL: ft does not run the file's architecture
    ft_model *m;         // the file as ft reads it, tensors with a problem unbound; NULL: its keys do not load
    json_t *problems;    // messages: what keeps ft_model_load from loading the file
    char **used;         // the tensors the architecture binds, sorted
    int n_used, cap_used;
} arch_view;

static void add_problem(void *ctx, const char *msg) {
    json_array_append_new(((arch_view *)ctx)->problems, json_string(msg));
}

static void add_used(void *ctx, const ft_tensor *t) {
    arch_view *v = ctx;
    if (v->n_used == v->cap_used) {
        v->cap_used = v->cap_used ? 2 * v->cap_used : 256;
        v->used = ft_realloc(v->used, (size_t)v->cap_used * sizeof(*v->used));
    }
    v->used[v->n_used++] = ft_strdup(t->name);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static arch_view view_read(const char *path, const gguf_file *f) {
    arch_view v = {.problems = json_array()};
    model_id id = read_id(f);
    char name[80];
    snprintf(name, sizeof(name), "%.*s", (int)(id.arch.len < 64 ? id.arch.len : 64), id.arch.ptr);
    v.arch = ft_arch_find(name);
    ft_err err = {{0}};
    if (!v.arch) {
        ft_err_set(&err, "architecture '%s' is not supported (ft runs: %s)", name, ft_arch_names());
        add_problem(&v, err.msg);
        return v;
    }
    v.m = ft_model_load_checked(path, add_problem, &v, &err);
    if (!v.m) {
        size_t n = strlen(path);
        add_problem(&v, !strncmp(err.msg, path, n) && !strncmp(err.msg + n, ": ", 2) ? err.msg + n + 2 : err.msg);
        return v;
    }
    ft_model_for_each_tensor(v.m, add_used, &v);
    qsort(v.used, (size_t)v.n_used, sizeof(*v.used), cmp_str);
    return v;
}

static void view_free(arch_view *v) {
    for (int i = 0; i < v->n_used; i++) free(v->used[i]);
    free(v->used);
    ft_model_free(v->m);
    json_decref(v->problems);
}

static bool view_uses(const arch_view *v, gguf_str name) {
    char buf[256];
    snprintf(buf, sizeof(buf), "%.*s", (int)(name.len < 255 ? name.len : 255), name.ptr);
    const char *key = buf;
    return v->n_used && bsearch(&key, v->used, (size_t)v->n_used, sizeof(*v->used), cmp_str);
}

// The row of the description for a file key "<arch>.<suffix>" (prefix_len: of "<arch>."), or NULL.
static const ft_arch_key *view_key(const arch_view *v, gguf_str key, size_t prefix_len) {
    for (int i = 0; v->arch && i < v->arch->n_keys; i++) {
        const char *s = v->arch->keys[i].suffix;
        if (strlen(s) == key.len - prefix_len && !memcmp(s, key.ptr + prefix_len, key.len - prefix_len))
            return &v->arch->keys[i];
    }
    return NULL;
}

// Key k's value as the architecture reads it, with its default where the file lacks it; null
// where the value is worked out where it is used (a string's, or a default from other keys
// that lands in no field).
static json_t *key_value_json(const arch_view *v, const gguf_file *f, const ft_arch_key *k) {
    const ft_model *m = v->m;
    if (k->field != FT_KEY_NO_FIELD) {
        const char *hp = (const char *)&m->hp;
        switch (k->type) {
        case FT_KEY_TYPE_U32: return json_integer(*(const int *)(hp + k->field));
        case FT_KEY_TYPE_U32_LAYERS: {
            if (k->flags & FT_KEY_UNIFORM) return json_integer(*(const int *)(hp + k->field));
            json_t *a = json_array();
            int first = *(const int *)((const char *)&m->layers[0] + k->field);
            bool same = true;
            for (int l = 0; l < m->hp.n_layer; l++) {
                int x = *(const int *)((const char *)&m->layers[l] + k->field);
                same = same && x == first;
                json_array_append_new(a, json_integer(x));
            }
            if (!same) return a;
            json_decref(a);
            return json_integer(first);
        }
        case FT_KEY_TYPE_F32: return json_real(*(const float *)(hp + k->field));
        case FT_KEY_TYPE_BOOL: return json_boolean(*(const bool *)(hp + k->field));
        case FT_KEY_TYPE_STR: break;
        case FT_KEY_TYPE_U32_4: {
            json_t *a = json_array();
            for (int i = 0; i < 4; i++) json_array_append_new(a, json_integer(((const int *)(hp + k->field))[i]));
            return a;
        }
        case FT_KEY_TYPE_BOOL_LAYERS: {
            json_t *a = json_array();
            for (int l = 0; l < m->hp.n_layer; l++)
                json_array_append_new(a, json_boolean(*(const bool *)((const char *)&m->layers[l] + k->field)));
            return a;
        }
        }
    }
    char key[160];
    snprintf(key, sizeof(key), "%s.%s", m->arch->name, k->suffix);
    int64_t i = gguf_find_key(f, key);
    if (i >= 0) return kv_to_json(f, i, 1024);
    if (k->type == FT_KEY_TYPE_STR || (k->flags & FT_KEY_DERIVED)) return json_null();
    if (k->type == FT_KEY_TYPE_F32) return json_real(k->def);
    if (k->type == FT_KEY_TYPE_BOOL) return json_boolean(k->def != 0);
    return json_integer((json_int_t)k->def);
}

static json_t *tokenizer_json(const gguf_file *f) {
    json_t *t = json_object();
    gguf_str s;
    enum gguf_value_type et;
    uint64_t n;
    int64_t v;
    if (gguf_get_str(f, "tokenizer.ggml.model", &s)) json_object_set_new(t, "model", json_strn(s));
    if (gguf_get_str(f, "tokenizer.ggml.pre", &s)) json_object_set_new(t, "pre", json_strn(s));
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n)) json_object_set_new(t, "n_tokens", json_integer((json_int_t)n));
    if (gguf_get_arr(f, "tokenizer.ggml.merges", &et, &n)) json_object_set_new(t, "n_merges", json_integer((json_int_t)n));
    if (gguf_get_int(f, "tokenizer.ggml.bos_token_id", &v)) json_object_set_new(t, "bos", json_integer(v));
    if (gguf_get_int(f, "tokenizer.ggml.eos_token_id", &v)) json_object_set_new(t, "eos", json_integer(v));
    json_object_set_new(t, "chat_template", json_boolean(gguf_find_key(f, "tokenizer.chat_template") >= 0));
    return t;
}

static json_t *shape_json(const gguf_tensor *t) {
    json_t *a = json_array();
    for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(a, json_integer(t->ne[d]));
    return a;
}

static json_t *inspect_json(const char *path, const gguf_file *f, const moe_geometry *g, const arch_view *v) {
    model_id id = read_id(f);
    json_t *o = json_object();
    json_object_set_new(o, "file", json_string(path));
    json_object_set_new(o, "version", json_integer(gguf_version(f)));
    json_object_set_new(o, "file_bytes", json_integer((json_int_t)gguf_file_size(f)));
    json_object_set_new(o, "arch", json_strn(id.arch));
    if (id.has_name) json_object_set_new(o, "name", json_strn(id.name));
    json_t *hp = json_object(), *unread = json_array();
    char prefix[80];
    snprintf(prefix, sizeof(prefix), "%.*s.", (int)(id.arch.len < 64 ? id.arch.len : 64), id.arch.ptr);
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_kv_key(f, i);
        if (!has_prefix(k, prefix)) continue;
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)(k.len - strlen(prefix) < 255 ? k.len - strlen(prefix) : 255),
                 k.ptr + strlen(prefix));
        json_object_set_new(hp, key, kv_to_json(f, i, 1024));
        if (v->arch && !view_key(v, k, strlen(prefix))) json_array_append_new(unread, json_string(key));
    }
    json_object_set_new(o, "hparams", hp);
    if (v->arch) json_object_set_new(o, "hparams_unread", unread);
    else json_decref(unread);
    if (v->m) {
        json_t *read = json_object();
        for (int i = 0; i < v->arch->n_keys; i++)
            json_object_set_new(read, v->arch->keys[i].suffix, key_value_json(v, f, &v->arch->keys[i]));
        json_object_set_new(o, "hparams_read", read);
    }
    json_object_set_new(o, "loads", json_boolean(json_array_size(v->problems) == 0));
    json_object_set_new(o, "problems", json_deep_copy(v->problems));
    json_object_set_new(o, "tokenizer", tokenizer_json(f));
    json_t *ts = json_array();
    uint64_t total = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        json_t *tj = json_pack("{s:o, s:s, s:o, s:I}", "name", json_strn(t->name), "type", ft_type_name(t->type),
                               "shape", shape_json(t), "bytes", (json_int_t)t->bytes);
        if (v->m) json_object_set_new(tj, "used", json_boolean(view_uses(v, t->name)));
        json_array_append_new(ts, tj);
        total += t->bytes;
    }
    json_object_set_new(o, "tensors", ts);
    json_object_set_new(o, "tensor_bytes", json_integer((json_int_t)total));
    json_t *eg = json_array();
    for (int i = 0; i < g->n_layers; i++) {
        const moe_layer_geometry *l = &g->layers[i];
        json_array_append_new(
            eg, json_pack("{s:i, s:i, s:I, s:I, s:I, s:[s,s,s], s:b}", "layer", l->layer, "n_expert", l->n_expert,
                          "gate_bytes", (json_int_t)l->bytes[MOE_BANK_GATE], "up_bytes",
                          (json_int_t)l->bytes[MOE_BANK_UP], "down_bytes", (json_int_t)l->bytes[MOE_BANK_DOWN],
                          "types", ft_type_name(l->type[0]), ft_type_name(l->type[1]), ft_type_name(l->type[2]),
                          "gate_up_fused", (int)l->gate_up_fused));
    }
    json_object_set_new(o, "expert_geometry", eg);
    json_t *gg = json_array();
    for (int i = 0; i < g->n_groups; i++) {
        json_t *layers = json_array();
        for (int k = 0; k < g->groups[i].n_layers; k++) json_array_append_new(layers, json_integer(g->groups[i].layers[k]));
        json_array_append_new(gg, json_pack("{s:o, s:[I,I,I]}", "layers", layers, "bytes",
                                            (json_int_t)g->groups[i].bytes[0], (json_int_t)g->groups[i].bytes[1],
                                            (json_int_t)g->groups[i].bytes[2]));
    }
    json_object_set_new(o, "geometry_groups", gg);
    json_object_set_new(o, "expert_bytes_native", json_integer((json_int_t)g->bytes_native));
    json_object_set_new(o, "expert_bytes_padded", json_integer((json_int_t)g->bytes_padded));
    return o;
}

// ---------------------------------------------------------------------------------------------
// Text output

static void print_bytes(FILE *out, uint64_t b) {
    if (b >= (1ull << 30)) fprintf(out, "%.2f GiB", b / 1073741824.0);
    else if (b >= (1ull << 20)) fprintf(out, "%.2f MiB", b / 1048576.0);
    else if (b >= 1024) fprintf(out, "%.1f KiB", b / 1024.0);
    else fprintf(out, "%llu B", (unsigned long long)b);
}

// Layer index of a "blk.N." tensor name, or -1.
static int tensor_layer(gguf_str name) {
    if (!has_prefix(name, "blk.")) return -1;
    int l = 0;
    uint64_t i = 4;
    if (i >= name.len || name.ptr[i] < '0' || name.ptr[i] > '9') return -1;
    for (; i < name.len && name.ptr[i] >= '0' && name.ptr[i] <= '9' && l < 1000000; i++) l = l * 10 + (name.ptr[i] - '0');
    return l;
}

static void print_tensor(const gguf_tensor *t, int indent, const arch_view *v) {
    char shape[96];
    int n = snprintf(shape, sizeof(shape), "[");
    for (uint32_t d = 0; d < t->n_dims; d++)
        n += snprintf(shape + n, sizeof(shape) - (size_t)n, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    snprintf(shape + n, sizeof(shape) - (size_t)n, "]");
    printf("%*s%-*.*s %-7s %-22s ", indent, "", 40 - indent, (int)t->name.len, t->name.ptr, ft_type_name(t->type), shape);
    print_bytes(stdout, t->bytes);
    if (v->m && tensor_layer(t->name) >= v->m->hp.n_layer) printf("  (MTP block: not run)");
    else if (v->m && !view_uses(v, t->name)) printf("  (not used by %s)", v->arch->name);
    printf("\n");
}

// A value key_value_json gave, for humans (and freed).
static void print_key_value(json_t *j, const ft_arch_key *k) {
    if (json_is_null(j)) {
        printf(k->flags & FT_KEY_DERIVED ? "(from other keys)" : "(ft's default)");
    } else {
        char *s = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(7));
        printf("%s", s ? s : "?");
        free(s);
    }
    json_decref(j);
}

static void inspect_text(const char *path, const gguf_file *f, const moe_geometry *g, const arch_view *v) {
    model_id id = read_id(f);
    printf("%s: GGUF v%u, ", path, gguf_version(f));
    print_bytes(stdout, gguf_file_size(f));
    printf(", %lld keys, %lld tensors, alignment %u\n", (long long)gguf_n_kv(f), (long long)gguf_n_tensors(f),
           gguf_alignment(f));
    printf("architecture: %.*s (%s)\n", (int)id.arch.len, id.arch.ptr,
           json_array_size(v->problems) == 0 ? "ft loads it"
           : v->arch                         ? "ft cannot load it: see the problems below"
                                             : "ft does not run it");
    if (id.has_name) printf("name: %.*s\n", (int)id.name.len, id.name.ptr);

    char prefix[80], val[256];
    snprintf(prefix, sizeof(prefix), "%.*s.", (int)(id.arch.len < 64 ? id.arch.len : 64), id.arch.ptr);
    if (v->m) printf("\nhyper-parameters:%38s%-24s as %s reads it\n", "", "in the file", v->arch->name);
    else printf("\nhyper-parameters:\n");
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_kv_key(f, i);
        if (!has_prefix(k, prefix)) continue;
        gguf_kv_format(f, i, val, sizeof(val));
        const ft_arch_key *row = view_key(v, k, strlen(prefix));
        if (!v->arch) {
            printf("  %-52.*s %s\n", (int)k.len, k.ptr, val);
            continue;
        }
        printf("  %-52.*s %-23s ", (int)k.len, k.ptr, val);
        if (!row) printf("(not read by ft)");
        else if (v->m) print_key_value(key_value_json(v, f, row), row);
        printf("\n");
    }
    // the keys the architecture reads that the file leaves out, at their defaults
    for (int i = 0; v->m && i < v->arch->n_keys; i++) {
        const ft_arch_key *row = &v->arch->keys[i];
        char key[160];
        snprintf(key, sizeof(key), "%s.%s", v->arch->name, row->suffix);
        if (gguf_find_key(f, key) >= 0) continue;
        printf("  %-52s %-23s ", key, "-");
        print_key_value(key_value_json(v, f, row), row);
        printf("\n");
    }

    printf("\ntokenizer:");
    json_t *tj = tokenizer_json(f);
    const char *key;
    json_t *tv;
    json_object_foreach(tj, key, tv) {
        char *s = json_dumps(tv, JSON_ENCODE_ANY);
        printf(" %s=%s", key, s);
        free(s);
    }
    json_decref(tj);
    printf("\n\ntensors:\n");
    int last_layer = -2;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        int l = tensor_layer(t->name);
        if (l >= 0 && l != last_layer) printf("  layer %d:\n", l);
        last_layer = l;
        print_tensor(t, l >= 0 ? 4 : 2, v);
    }
    if (json_array_size(v->problems)) {
        printf("\nproblems (what keeps ft from loading the file):\n");
        for (size_t i = 0; i < json_array_size(v->problems); i++)
            printf("  %s\n", json_string_value(json_array_get(v->problems, i)));
    }
    if (g->n_layers == 0) return;

    printf("\nexpert geometry (bytes of one expert):\n");
    printf("  %-6s %-8s %-22s %10s %10s %10s\n", "layer", "experts", "types gate/up/down", "gate", "up", "down");
    for (int i = 0; i < g->n_layers; i++) {
        const moe_layer_geometry *l = &g->layers[i];
        char types[64];
        snprintf(types, sizeof(types), "%s/%s/%s", ft_type_name(l->type[0]), ft_type_name(l->type[1]),
                 ft_type_name(l->type[2]));
        printf("  %-6d %-8d %-22s %10llu %10llu %10llu%s\n", l->layer, l->n_expert, types,
               (unsigned long long)l->bytes[0], (unsigned long long)l->bytes[1],
               (unsigned long long)l->bytes[2], l->gate_up_fused ? "  (gate/up fused)" : "");
    }
    printf("\ngeometry groups (layers sharing one expert geometry):\n");
    for (int i = 0; i < g->n_groups; i++) {
        const moe_geometry_group *grp = &g->groups[i];
        printf("  group %d: %d layer%s [", i, grp->n_layers, grp->n_layers == 1 ? "" : "s");
        for (int k = 0; k < grp->n_layers; k++) {
            int a = grp->layers[k], b = a;
            while (k + 1 < grp->n_layers && grp->layers[k + 1] == b + 1) b = grp->layers[++k];
            printf("%s%d", a == grp->layers[0] ? "" : ",", a);
            if (b > a) printf("-%d", b);
        }
        printf("]:");
        for (int b = 0; b < MOE_BANK_COUNT; b++)
            printf(" %s %llu", g_bank_names[b], (unsigned long long)grp->bytes[b]);
        printf("\n");
    }
    printf("\nexpert bytes: native ");
    print_bytes(stdout, g->bytes_native);
    printf(", padded to the widest expert of each bank ");
    print_bytes(stdout, g->bytes_padded);
    printf(" (%+.1f%%)\n", g->bytes_native ? 100.0 * ((double)g->bytes_padded / (double)g->bytes_native - 1) : 0.0);
}

// ---------------------------------------------------------------------------------------------
// Expert cache plan

typedef struct {
    bool want;                    // a plan was asked for
    moe_cache_plan_params params;
    double gpu_gib;               // --gpu-memory: size the cache from this budget
    const char *trace_path;       // --moe-route-trace: replay it through the plan
    int64_t warmup;               // steps of the trace not counted (-1: a tenth)
    int n_trunk;                  // the blocks ft runs (the MTP ones after them are not placed)
} plan_request;

// Replays the trace through plan and prints hit rates and bytes copied per step.
static void print_replay(const moe_cache_plan *plan, const moe_geometry *g, const moe_route_trace *t, int64_t warmup) {
    moe_replay_result r;
    ft_err err = {{0}};
    const char *name = plan->layout == MOE_POOL_LAYOUT_EXACT ? "exact" : "uniform";
    if (!moe_cache_replay(plan, g, t, warmup, &r, &err)) {
        printf("    %-7s %s\n", name, err.msg);
        return;
    }
    printf("    %-7s hit rate %.3f, %.1f misses and %.1f MiB copied per step", name,
           r.total.selections ? (double)r.total.hits / (double)r.total.selections : 0.0,
           (double)r.total.misses / (double)r.steps, (double)r.total.bytes_copied / (double)r.steps / 1048576.0);
    for (int k = 0; k < r.n_pools && r.n_pools > 1; k++)
        printf("%s pool %d %.3f", k ? "," : "; hit rate by pool:", k,
               r.pools[k].selections ? (double)r.pools[k].hits / (double)r.pools[k].selections : 0.0);
    printf("\n");
    moe_replay_result_free(&r);
}

static bool arch_int(const gguf_file *f, const char *suffix, int64_t *out) {
    gguf_str arch = {"", 0};
    gguf_get_str(f, "general.architecture", &arch);
    char key[160];
    snprintf(key, sizeof(key), "%.*s.%s", (int)(arch.len < 64 ? arch.len : 64), arch.ptr, suffix);
    if (gguf_get_int(f, key, out)) return true;
    enum gguf_value_type et;
    uint64_t n;
    if (!gguf_get_arr(f, key, &et, &n) || n == 0) return false;
    *out = 0; // per-layer arrays: the largest entry
    for (uint64_t i = 0; i < n; i++) *out = FT_MAX(*out, gguf_arr_int(f, key, i));
    return true;
}

// KV bytes of one token at f16 over all layers (at most n_trunk), 0 when the keys are missing.
static uint64_t kv_bytes_per_token(const gguf_file *f, int n_trunk) {
    int64_t n_layer, n_kv, head_dim, n_embd, n_head;
    if (!arch_int(f, "block_count", &n_layer) || !arch_int(f, "attention.head_count_kv", &n_kv)) return 0;
    if (n_layer > n_trunk) n_layer = n_trunk;
    if (!arch_int(f, "attention.key_length", &head_dim)) {
        if (!arch_int(f, "embedding_length", &n_embd) || !arch_int(f, "attention.head_count", &n_head) || n_head <= 0)
            return 0;
        head_dim = n_embd / n_head;
    }
    return (uint64_t)(2 * n_layer * n_kv * head_dim * 2);
}

static int print_plan(const gguf_file *f, const moe_geometry *g, plan_request *req) {
    moe_cache_plan_params *p = &req->params;
    int64_t k;
    if (!arch_int(f, "expert_used_count", &k) || k < 1) {
        fprintf(stderr, "ft inspect: the file has no expert_used_count key: top-k unknown\n");
        return FT_EXIT_INPUT;
    }
    p->top_k = (int)k;
    moe_route_trace trace = {0};
    if (req->trace_path) {
        ft_err terr = {{0}};
        if (!moe_route_trace_read(req->trace_path, &trace, &terr)) {
            fprintf(stderr, "ft inspect: %s\n", terr.msg);
            return FT_EXIT_INPUT;
        }
        // one cache step serves every traced sequence: the floor must cover them
        if (trace.n_seq > p->n_running) p->n_running = trace.n_seq;
        if (trace.top_k > p->top_k) p->top_k = trace.top_k;
    }
    if (req->gpu_gib > 0) {
        uint64_t dense = 0;
        for (int64_t i = 0; i < gguf_n_tensors(f); i++)
            if (tensor_layer(gguf_tensor_at(f, i)->name) < req->n_trunk) dense += gguf_tensor_at(f, i)->bytes;
        p->dense_bytes = dense - g->bytes_native;
        p->vram_free = (uint64_t)(req->gpu_gib * 1073741824.0);
        p->kv_bytes_per_token = kv_bytes_per_token(f, req->n_trunk);
        printf("\nbudget: %.2f GiB x memory ratio %.2f, dense weights %.1f MiB, KV floor %lld tokens x %llu B "
               "(f16), workspace not counted\n",
               req->gpu_gib, p->memory_ratio, p->dense_bytes / 1048576.0, (long long)p->kv_reserve_tokens,
               (unsigned long long)p->kv_bytes_per_token);
    }
    ft_err err = {{0}};
    moe_cache_plan plan;
    if (!moe_cache_plan_make(g, p, &plan, &err)) {
        fprintf(stderr, "ft inspect: %s\n", err.msg);
        moe_route_trace_free(&trace);
        return FT_EXIT_INPUT;
    }
    printf("\n");
    moe_cache_plan_print(&plan, stdout);
    // the other layout at the same bytes, for comparison
    moe_cache_plan_params q = *p;
    q.n_slots = plan.n_slots;
    q.layout = p->layout == MOE_POOL_LAYOUT_EXACT ? MOE_POOL_LAYOUT_UNIFORM : MOE_POOL_LAYOUT_EXACT;
    moe_cache_plan other = {0};
    if (moe_cache_plan_make(g, &q, &other, &err)) {
        int total = 0;
        for (int i = 0; i < other.n_pools; i++) total += other.pools[i].n_slots;
        printf("  the %s layout in the same bytes: %d slots in %d pool%s, %.1f per layer\n",
               q.layout == MOE_POOL_LAYOUT_EXACT ? "exact" : "uniform", total, other.n_pools,
               other.n_pools == 1 ? "" : "s", (double)total / g->n_layers);
    } else {
        printf("  the %s layout in the same bytes: %s\n", q.layout == MOE_POOL_LAYOUT_EXACT ? "exact" : "uniform",
               err.msg);
    }
    if (req->trace_path) {
        int64_t warmup = req->warmup >= 0 ? req->warmup : trace.n_steps / 10;
        printf("  replay of %s (%lld steps, %d sequence%s, top-%d; the first %lld not counted; LRU victims, "
               "ft replay sets frecency's beside them):\n", req->trace_path, (long long)trace.n_steps, trace.n_seq,
               trace.n_seq == 1 ? "" : "s", trace.top_k, (long long)warmup);
        print_replay(&plan, g, &trace, warmup);
        if (other.n_pools) print_replay(&other, g, &trace, warmup);
    }
    moe_cache_plan_free(&other);
    moe_cache_plan_free(&plan);
    moe_route_trace_free(&trace);
    return FT_EXIT_OK;
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL, *layout = NULL;
    bool json = false, bad = false;
    plan_request req = {false, moe_cache_plan_default_params(), 0, NULL, -1, INT_MAX};
    for (int i = 1; i < argc && !bad; i++) {
        int64_t v;
        if (args_flag(argv, i, "-h|--help")) {
            printf("usage: ft inspect FILE.gguf [--json] [--moe-cache-size N | --gpu-memory GIB] [plan options]\n"
                   "Shows a GGUF file: architecture, hyper-parameters, tokenizer, tensors per layer,\n"
                   "and for MoE models the expert geometry of each layer and its groups. Where ft runs\n"
                   "the architecture, the file is read against its description: next to each key the\n"
                   "value the architecture reads (its default where the file leaves the key out),\n"
                   "the keys and tensors it does not use, and what keeps ft from loading the file.\n"
                   "  --json                  one JSON object on one line; besides the file's contents:\n"
                   "                          loads (ft would load it), problems (what keeps it from\n"
                   "                          loading: messages), hparams_read (each key the\n"
                   "                          architecture reads: the value it uses, null where that\n"
                   "                          comes from other keys or is a string default),\n"
                   "                          hparams_unread (file keys it does not read) and, per\n"
                   "                          tensor, used (bound by the architecture);\n"
                   "                          hparams_unread only where ft runs the architecture,\n"
                   "                          hparams_read and used where its keys load too\n"
                   "GPU expert cache plan (README: \"Expert cache\"):\n"
                   "  --moe-cache-size N      cache of N expert slots, each priced at the widest expert\n"
                   "  --gpu-memory GIB        size the cache from this much free GPU memory instead\n"
                   "  --memory-ratio R        share of it ft may use (default 0.9)\n"
                   "  --kv-reserve-tokens T   KV floor reserved first (default 0)\n"
                   "  --moe-pool-layout L     exact (default: a pool per expert geometry) or uniform\n"
                   "  --running R             sequences decoded together (default 1)\n"
                   "  --moe-route-trace F     replay a route trace (ft trace-gen) through both layouts:\n"
                   "                          hit rates and bytes copied per step\n"
                   "  --warmup N              trace steps not counted (default a tenth)\n");
            return FT_EXIT_OK;
        }
        if (args_flag(argv, i, "--json")) json = true;
        else if (args_int(argc, argv, &i, "--moe-cache-size", 1, INT32_MAX, &v, &bad))
            req.params.n_slots = (int)v, req.want = true;
        else if (args_float(argc, argv, &i, "--gpu-memory", &req.gpu_gib, &bad)) req.want = true;
        else if (args_float(argc, argv, &i, "--memory-ratio", &req.params.memory_ratio, &bad)) {}
        else if (args_int(argc, argv, &i, "--kv-reserve-tokens", 0, INT32_MAX, &v, &bad)) req.params.kv_reserve_tokens = v;
        else if (args_int(argc, argv, &i, "--running", 1, 4096, &v, &bad)) req.params.n_running = (int)v;
        else if (args_str(argc, argv, &i, "--moe-pool-layout", &layout, &bad)) {}
        else if (args_str(argc, argv, &i, "--moe-route-trace", &req.trace_path, &bad)) {}
        else if (args_int(argc, argv, &i, "--warmup", 0, INT64_MAX, &v, &bad)) req.warmup = v;
        else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "ft inspect: unexpected argument '%s' (see ft inspect --help)\n", argv[i]);
            return FT_EXIT_USAGE;
        } else path = argv[i];
    }
    if (bad) return FT_EXIT_USAGE;
    if (!path) {
        fprintf(stderr, "usage: ft inspect FILE.gguf [--json] [--moe-cache-size N] (see ft inspect --help)\n");
        return FT_EXIT_USAGE;
    }
    if (layout && strcmp(layout, "exact") && strcmp(layout, "uniform")) {
        fprintf(stderr, "ft inspect: --moe-pool-layout is exact or uniform, not '%s'\n", layout);
        return FT_EXIT_USAGE;
    }
    if (layout && !strcmp(layout, "uniform")) req.params.layout = MOE_POOL_LAYOUT_UNIFORM;
    if (req.want && (json || (req.params.n_slots && req.gpu_gib > 0) || !(req.params.memory_ratio > 0 && req.params.memory_ratio <= 1))) {
        fprintf(stderr, "ft inspect: a plan takes --moe-cache-size or --gpu-memory (not both), a memory ratio in "
                        "(0, 1], and text output\n");
        return FT_EXIT_USAGE;
    }
    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    if (!f) {
        fprintf(stderr, "ft inspect: %s\n", err.msg);
        return FT_EXIT_INPUT;
    }
    moe_geometry g;
    bool geometry_ok = moe_geometry_read(f, &g, &err);
    if (!geometry_ok && req.want) {
        fprintf(stderr, "ft inspect: %s: %s\n", path, err.msg);
        gguf_close(f);
        return FT_EXIT_INPUT;
    }
    arch_view view = view_read(path, f);
    // the experts of MTP blocks are neither run nor cached
    if (geometry_ok && view.m) moe_geometry_keep_below(&g, view.m->hp.n_layer);
    if (view.m) req.n_trunk = view.m->hp.n_layer;
    // the file is still shown, without its expert geometry; the description's check already
    // names the tensors behind it where it found any
    if (!geometry_ok && (!view.m || json_array_size(view.problems) == 0)) add_problem(&view, err.msg);
    if (json) {
        json_t *o = inspect_json(path, f, &g, &view);
        char *s = json_dumps(o, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        inspect_text(path, f, &g, &view);
    }
    view_free(&view);
    int rc = FT_EXIT_OK;
    if (req.want && g.n_layers == 0) {
        fprintf(stderr, "ft inspect: %s has no routed experts: there is no expert cache to plan\n", path);
        rc = FT_EXIT_INPUT;
    } else if (req.want) {
        rc = print_plan(f, &g, &req);
    }
    moe_geometry_free(&g);
    gguf_close(f);
    return rc;
}
