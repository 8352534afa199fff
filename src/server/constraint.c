// constraint.c: a request's output constraint (structured output): OpenAI's response_format
// (json_object, json_schema) and llama-server's grammar (GBNF) and json_schema fields, compiled
// into a grammar (src/engine/grammar.h) the scheduler's sampler follows token by token.
//
// Compiled grammars are kept in a small cache keyed by the constraint's text (a schema as
// jansson writes it compactly, keys in their order), so an agent that sends the same schema
// with every request compiles it once. The cache and the jobs share each grammar by reference
// count; the cache is guarded by one mutex (requests are parsed on the prep threads).
#include "srv_impl.h"
#include "tool_call.h"

#include "../engine/json_schema.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_SLOTS 32
#define MAX_GBNF_BYTES (1 << 20)

struct srv_grammar {
    ft_grammar *g;
    atomic_int refs;
};

typedef struct {
    char *key; // kind letter, lenient flag, then the text
    size_t len;
    srv_grammar *sg;
    uint64_t used;
} cache_entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static cache_entry g_cache[CACHE_SLOTS];
static uint64_t g_tick;

const ft_grammar *srv_grammar_get(const srv_grammar *sg) { return sg->g; }

void srv_grammar_unref(srv_grammar *sg) {
    if (!sg || atomic_fetch_sub(&sg->refs, 1) != 1) return;
    ft_grammar_free(sg->g);
    free(sg);
}

static srv_grammar *cache_find(const char *key, size_t len) {
    srv_grammar *found = NULL;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < CACHE_SLOTS; i++) {
        cache_entry *e = &g_cache[i];
        if (e->sg && e->len == len && !memcmp(e->key, key, len)) {
            e->used = ++g_tick;
            found = e->sg;
            atomic_fetch_add(&found->refs, 1);
            break;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return found;
}

// Keeps sg under key in place of the least recently used entry (a reference of its own).
static void cache_put(const char *key, size_t len, srv_grammar *sg) {
    pthread_mutex_lock(&g_mu);
    int victim = 0;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        if (!g_cache[i].sg) {
            victim = i;
            break;
        }
        if (g_cache[i].used < g_cache[victim].used) victim = i;
    }
    cache_entry *e = &g_cache[victim];
    srv_grammar_unref(e->sg);
    free(e->key);
    e->key = ft_malloc(len);
    memcpy(e->key, key, len);
    e->len = len;
    e->sg = sg;
    e->used = ++g_tick;
    atomic_fetch_add(&sg->refs, 1);
    pthread_mutex_unlock(&g_mu);
}

// The grammar of a constraint: kind 'G' (GBNF text), 'S' (a JSON schema's text) or 'O' (any
// JSON object; no text), from the cache or compiled. Returns NULL and sets *err ("what: why")
// when it does not compile.
static srv_grammar *grammar_for(const srv_params *p, char kind, const char *text, size_t n, const char *what,
                                ft_err *err) {
    size_t len = n + 2;
    char *key = ft_malloc(len);
    key[0] = kind;
    key[1] = p->lenient ? 'l' : 's';
    if (n) memcpy(key + 2, text, n);
    srv_grammar *sg = cache_find(key, len);
    if (sg) {
        free(key);
        return sg;
    }
    ft_grammar *g = NULL;
    if (kind == 'G') {
        g = ft_grammar_parse_gbnf(text, n, err);
    } else {
        json_t *schema = kind == 'S' ? json_loadb(text, n, JSON_DECODE_ANY, NULL) : NULL;
        if (kind == 'S' && !schema)
            ft_err_set(err, "the schema does not read back as JSON");
        else
            g = ft_json_schema_grammar(schema, p->lenient, err);
        json_decref(schema);
    }
    if (!g) {
        ft_err_prefix(err, "%s", what);
        free(key);
        return NULL;
    }
    sg = ft_calloc(1, sizeof(*sg));
    sg->g = g;
    atomic_init(&sg->refs, 1);
    cache_put(key, len, sg);
    free(key);
    return sg;
}

srv_grammar *srv_grammar_tools(const srv_params *p, enum tok_tool_format f, json_t *tools, const char *only,
                               bool parallel, ft_err *err) {
    char *text = json_dumps(tools, JSON_COMPACT);
    if (!text) return ft_err_set(err, "'tools' cannot be written as JSON"), NULL;
    // the key: format, parallel, the named tool, then the tools
    srv_buf key = {0};
    char head[200];
    snprintf(head, sizeof(head), "%d%c%s", (int)f, parallel ? 'p' : '1', only ? only : "");
    srv_buf_add(&key, head, strlen(head) + 1);
    srv_buf_add(&key, text, strlen(text));
    free(text);
    size_t len = key.n + 2;
    char *k = ft_malloc(len);
    k[0] = 'T';
    k[1] = p->lenient ? 'l' : 's';
    memcpy(k + 2, key.p, key.n);
    srv_buf_free(&key);
    srv_grammar *sg = cache_find(k, len);
    if (!sg) {
        ft_grammar *g = srv_tools_grammar(f, tools, only, parallel, p->lenient, err);
        if (g) {
            sg = ft_calloc(1, sizeof(*sg));
            sg->g = g;
            atomic_init(&sg->refs, 1);
            cache_put(k, len, sg);
        } else
            ft_err_prefix(err, "'tool_choice' forces a call, whose grammar");
    }
    free(k);
    return sg;
}

static srv_grammar *schema_grammar(const srv_params *p, json_t *schema, const char *what, ft_err *err) {
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return ft_err_set(err, "%s must be a JSON Schema (an object)", what), NULL;
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return ft_err_set(err, "%s cannot be written as JSON", what), NULL;
    srv_grammar *sg = grammar_for(p, 'S', text, strlen(text), what, err);
    free(text);
    return sg;
}

// OpenAI's response_format: {"type": "text"}, {"type": "json_object"} (llama-server: with an
// optional "schema"), {"type": "json_schema", "json_schema": {"name", "schema", "strict",
// "description"}}. *out stays NULL for text.
static bool parse_response_format(const srv_params *p, json_t *rf, srv_grammar **out, ft_err *err) {
    if (!json_is_object(rf)) return ft_err_set(err, "'response_format' must be an object");
    json_t *type = json_object_get(rf, "type");
    const char *t = json_is_string(type) ? json_string_value(type) : NULL;
    if (!t) return ft_err_set(err, "'response_format' needs a 'type' (\"text\", \"json_object\" or \"json_schema\")");
    if (!strcmp(t, "text")) return true;
    if (!strcmp(t, "json_object")) {
        json_t *schema = json_object_get(rf, "schema");
        *out = schema && !json_is_null(schema) ? schema_grammar(p, schema, "'response_format.schema'", err)
                                               : grammar_for(p, 'O', NULL, 0, "'response_format'", err);
        return *out != NULL;
    }
    if (strcmp(t, "json_schema"))
        return ft_err_set(err, "'response_format' type '%.40s' is not one of \"text\", \"json_object\", \"json_schema\"",
                          t);
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return ft_err_set(err, "'response_format' of type \"json_schema\" needs a 'json_schema' object");
    json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict"),
           *schema = json_object_get(js, "schema");
    if (name && !json_is_string(name)) return ft_err_set(err, "'response_format.json_schema.name' must be a string");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return ft_err_set(err, "'response_format.json_schema.strict' must be a boolean");
    if (!schema || json_is_null(schema))
        return ft_err_set(err, "'response_format.json_schema' needs a 'schema' (ft does not guess one)");
    *out = schema_grammar(p, schema, "'response_format.json_schema.schema'", err);
    return *out != NULL;
}

bool srv_parse_constraint(const srv_params *p, json_t *body, srv_job *j, ft_err *err) {
    json_t *rf = json_object_get(body, "response_format"), *gr = json_object_get(body, "grammar"),
           *js = json_object_get(body, "json_schema");
    if (rf && json_is_null(rf)) rf = NULL;
    if (gr && (json_is_null(gr) || (json_is_string(gr) && !json_string_length(gr)))) gr = NULL;
    if (js && json_is_null(js)) js = NULL;
    srv_grammar *sg = NULL;
    const char *from = NULL;
    if (rf) {
        if (!parse_response_format(p, rf, &sg, err)) return false;
        if (sg) from = "'response_format'";
    }
    if (gr) {
        if (!json_is_string(gr)) return srv_grammar_unref(sg), ft_err_set(err, "'grammar' must be a string (GBNF)");
        if (sg)
            return srv_grammar_unref(sg), ft_err_set(err, "'grammar' beside %s: give one constraint", from);
        if (json_string_length(gr) > MAX_GBNF_BYTES)
            return ft_err_set(err, "'grammar' is longer than %d bytes", MAX_GBNF_BYTES);
        if (!(sg = grammar_for(p, 'G', json_string_value(gr), json_string_length(gr), "'grammar'", err))) return false;
        from = "'grammar'";
    }
    if (js) {
        if (sg) return srv_grammar_unref(sg), ft_err_set(err, "'json_schema' beside %s: give one constraint", from);
        if (!(sg = schema_grammar(p, js, "'json_schema'", err))) return false;
    }
    j->grammar = sg;
    return true;
}

void srv_constraint_cache_clear(void) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < CACHE_SLOTS; i++) {
        srv_grammar_unref(g_cache[i].sg);
        free(g_cache[i].key);
        g_cache[i] = (cache_entry){0};
    }
    pthread_mutex_unlock(&g_mu);
}
