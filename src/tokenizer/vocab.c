// vocab.c: building a tok_vocab from the tokenizer.* keys of a GGUF file.
//
// The steps and defaults follow llama.cpp's vocabulary loader, in its order: tokenizer model and
// pre-tokenizer with their defaults, tokens / scores / types, special token ids (defaults, then
// keys), add_bos / add_eos, then the tokens llama.cpp recognises by their text (end-of-turn,
// fill-in-the-middle and end-of-generation tokens become control tokens), then the list of
// special tokens cut out of the text, longest first.
#include "tok_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tok_grow(void **buf, size_t *cap, size_t n, size_t elem) {
    if (n <= *cap) return;
    size_t c = *cap ? *cap : 16;
    while (c < n) c *= 2;
    *buf = ft_realloc(*buf, c * elem);
    *cap = c;
}

uint64_t tok_hash(const char *s, size_t len, uint64_t h) {
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

// ---------------------------------------------------------------------------------------------
// Lookup tables

static uint32_t table_size(uint64_t n) {
    uint32_t size = 16;
    while (size < 2 * n) size *= 2;
    return size;
}

tok_id vocab_lookup(const tok_vocab *v, const char *s, size_t len) {
    uint64_t h = tok_hash(s, len, TOK_HASH_SEED);
    for (uint32_t i = (uint32_t)h & v->by_text.mask;; i = (i + 1) & v->by_text.mask) {
        uint32_t slot = v->by_text.slots[i];
        if (!slot) return TOK_NULL;
        if (v->by_text.hashes[i] != (uint32_t)h) continue;
        size_t tl;
        const char *t = vocab_text(v, (tok_id)(slot - 1), &tl);
        if (tl == len && !memcmp(t, s, len)) return (tok_id)(slot - 1);
    }
}

// Inserts id under its text; returns the id already there if the text is taken.
static tok_id text_insert(tok_vocab *v, tok_id id) {
    size_t len;
    const char *s = vocab_text(v, id, &len);
    uint64_t h = tok_hash(s, len, TOK_HASH_SEED);
    for (uint32_t i = (uint32_t)h & v->by_text.mask;; i = (i + 1) & v->by_text.mask) {
        uint32_t slot = v->by_text.slots[i];
        if (!slot) {
            v->by_text.slots[i] = (uint32_t)id + 1;
            v->by_text.hashes[i] = (uint32_t)h;
            return id;
        }
        size_t tl;
        const char *t = vocab_text(v, (tok_id)(slot - 1), &tl);
        if (v->by_text.hashes[i] == (uint32_t)h && tl == len && !memcmp(t, s, len))
            return (tok_id)(slot - 1);
    }
}

static uint64_t merge_hash(const char *l, size_t ll, const char *r, size_t rl) {
    uint64_t h = tok_hash(l, ll, TOK_HASH_SEED);
    h = tok_hash((const char *)&ll, sizeof(ll), h);
    return tok_hash(r, rl, h);
}

// The two halves of merge m ("left right", split at its first space after the first byte).
static void merge_parts(const tok_vocab *v, uint32_t m, const char **l, size_t *ll,
                        const char **r, size_t *rl) {
    const char *s = v->merges + v->merge_off[m];
    size_t len = (size_t)(v->merge_off[m + 1] - v->merge_off[m]);
    *l = s;
    *ll = v->merge_split[m];
    *r = s + *ll + 1;
    *rl = len - *ll - 1;
}

int32_t vocab_merge_rank(const tok_vocab *v, const char *l, size_t ll, const char *r, size_t rl) {
    if (!v->n_merges) return -1;
    uint64_t h = merge_hash(l, ll, r, rl);
    for (uint32_t i = (uint32_t)h & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        uint32_t slot = v->merge_slots[i];
        if (!slot) return -1;
        const char *ml, *mr;
        size_t mll, mrl;
        merge_parts(v, slot - 1, &ml, &mll, &mr, &mrl);
        if (mll == ll && mrl == rl && !memcmp(ml, l, ll) && !memcmp(mr, r, rl))
            return (int32_t)(slot - 1);
    }
}

// ---------------------------------------------------------------------------------------------
// Loading

static bool get_string_array(const gguf_file *f, const char *key, uint64_t *n, ft_err *err) {
    enum gguf_value_type et;
    if (!gguf_get_arr(f, key, &et, n)) return ft_err_set(err, "tokenizer: %s missing", key);
    if (et != GGUF_VALUE_TYPE_STRING)
        return ft_err_set(err, "tokenizer: %s is an array of %s, not of strings", key,
                          gguf_value_type_name(et));
    return true;
}

static bool load_tokens(tok_vocab *v, const gguf_file *f, ft_err *err) {
    uint64_t n;
    if (!get_string_array(f, "tokenizer.ggml.tokens", &n, err)) return false;
    if (n == 0 || n >= INT32_MAX)
        return ft_err_set(err, "tokenizer: tokenizer.ggml.tokens holds %llu tokens",
                          (unsigned long long)n);
    v->n_tokens = (int32_t)n;

    // texts, with llama.cpp's stand-in for empty ones
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += gguf_arr_str(f, "tokenizer.ggml.tokens", i).len + 24;
    v->text = ft_malloc(total + 1);
    v->text_off = ft_malloc((n + 1) * sizeof(uint64_t));
    uint64_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(f, "tokenizer.ggml.tokens", i);
        v->text_off[i] = at;
        if (s.len == 0) {
            at += (uint64_t)sprintf(v->text + at, "[EMPTY_%llu]", (unsigned long long)i);
        } else {
            memcpy(v->text + at, s.ptr, s.len);
            at += s.len;
        }
    }
    v->text_off[n] = at;

    // scores
    v->scores = ft_calloc(n, sizeof(float));
    enum gguf_value_type et;
    uint64_t count;
    if (gguf_find_key(f, "tokenizer.ggml.scores") >= 0) {
        if (!gguf_get_arr(f, "tokenizer.ggml.scores", &et, &count) ||
            (et != GGUF_VALUE_TYPE_FLOAT32 && et != GGUF_VALUE_TYPE_INT32))
            return ft_err_set(err, "tokenizer: tokenizer.ggml.scores is not an array of float32");
        if (count < n)
            return ft_err_set(err, "tokenizer: %llu scores for %llu tokens",
                              (unsigned long long)count, (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++)
            v->scores[i] = et == GGUF_VALUE_TYPE_FLOAT32
                               ? (float)gguf_arr_float(f, "tokenizer.ggml.scores", i)
                               : (float)gguf_arr_int(f, "tokenizer.ggml.scores", i);
    }

    // attributes from token types (GGUF: 1 normal, 2 unknown, 3 control, 4 user-defined,
    // 5 unused, 6 byte; anything else undefined)
    v->attr = ft_malloc(n * sizeof(uint32_t));
    bool has_types = gguf_find_key(f, "tokenizer.ggml.token_type") >= 0;
    if (has_types) {
        if (!gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &count) || et != GGUF_VALUE_TYPE_INT32)
            return ft_err_set(err, "tokenizer: tokenizer.ggml.token_type is not an array of int32");
        if (count < n)
            return ft_err_set(err, "tokenizer: %llu token types for %llu tokens",
                              (unsigned long long)count, (unsigned long long)n);
    }
    static const uint32_t type_attr[7] = {0, TOK_ATTR_NORMAL, TOK_ATTR_UNKNOWN, TOK_ATTR_CONTROL,
                                          TOK_ATTR_USER_DEFINED, TOK_ATTR_UNUSED, TOK_ATTR_BYTE};
    for (uint64_t i = 0; i < n; i++) {
        if (!has_types) {
            v->attr[i] = TOK_ATTR_NORMAL;
            continue;
        }
        int64_t t = gguf_arr_int(f, "tokenizer.ggml.token_type", i);
        v->attr[i] = t >= 0 && t < 7 ? type_attr[t] : 0;
    }

    // text -> id
    v->by_text.mask = table_size(n) - 1;
    v->by_text.slots = ft_calloc((size_t)v->by_text.mask + 1, sizeof(uint32_t));
    v->by_text.hashes = ft_calloc((size_t)v->by_text.mask + 1, sizeof(uint32_t));
    for (uint64_t i = 0; i < n; i++) {
        tok_id other = text_insert(v, (tok_id)i);
        if (other != (tok_id)i) {
            size_t len;
            const char *s = vocab_text(v, (tok_id)i, &len);
            return ft_err_set(err, "tokenizer: tokens %d and %llu have the same text '%.*s'",
                              other, (unsigned long long)i, (int)FT_MIN(len, 64), s);
        }
    }
    return true;
}

static bool load_merges(tok_vocab *v, const gguf_file *f, ft_err *err) {
    uint64_t n;
    if (!get_string_array(f, "tokenizer.ggml.merges", &n, err)) return false;
    if (n >= UINT32_MAX) return ft_err_set(err, "tokenizer: too many merges");
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += gguf_arr_str(f, "tokenizer.ggml.merges", i).len;
    v->merges = ft_malloc(total + 1);
    v->merge_off = ft_malloc((n + 1) * sizeof(uint64_t));
    v->merge_split = ft_malloc((n ? n : 1) * sizeof(uint32_t));
    v->n_merges = (uint32_t)n;
    v->merge_mask = table_size(n) - 1;
    v->merge_slots = ft_calloc((size_t)v->merge_mask + 1, sizeof(uint32_t));
    uint64_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(f, "tokenizer.ggml.merges", i);
        if (s.len >= UINT32_MAX) return ft_err_set(err, "tokenizer: merge %llu too long", (unsigned long long)i);
        v->merge_off[i] = at;
        memcpy(v->merges + at, s.ptr, s.len);
        at += s.len;
        // split at the first space after the first byte; no space: an empty pair, as llama.cpp
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        v->merge_split[i] = sp ? (uint32_t)(sp - s.ptr) : 0;
    }
    v->merge_off[n] = at;
    for (uint32_t i = 0; i < (uint32_t)n; i++) {
        if (!v->merge_split[i]) continue; // no space: llama.cpp's empty pair, never matched
        const char *l, *r;
        size_t ll, rl;
        merge_parts(v, i, &l, &ll, &r, &rl);
        uint64_t h = merge_hash(l, ll, r, rl);
        for (uint32_t k = (uint32_t)h & v->merge_mask;; k = (k + 1) & v->merge_mask) {
            uint32_t slot = v->merge_slots[k];
            if (!slot) {
                v->merge_slots[k] = i + 1;
                break;
            }
            const char *ml, *mr;
            size_t mll, mrl;
            merge_parts(v, slot - 1, &ml, &mll, &mr, &mrl);
            if (mll == ll && mrl == rl && !memcmp(ml, l, ll) && !memcmp(mr, r, rl)) break; // first wins
        }
    }
    return true;
}

// An optional token id key: out-of-range values keep the default (llama.cpp warns).
static void get_token_key(const tok_vocab *v, const gguf_file *f, const char *key, tok_id *id) {
    uint64_t u;
    if (gguf_get_uint(f, key, &u) && u < (uint64_t)v->n_tokens) *id = (tok_id)u;
    else if (gguf_find_key(f, key) >= 0)
        FT_LOG_WARN("tokenizer: %s is out of range, using %d", key, *id);
}

static bool text_is(const tok_vocab *v, tok_id id, const char *s) {
    size_t len;
    const char *t = vocab_text(v, id, &len);
    return len == strlen(s) && !memcmp(t, s, len);
}

static bool text_in(const tok_vocab *v, tok_id id, const char *const *names) {
    for (; *names; names++)
        if (text_is(v, id, *names)) return true;
    return false;
}

// Tokens llama.cpp knows by their text.
static const char *const g_eot_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>", NULL};
static const char *const g_eom_names[] = {"<|eom_id|>", NULL};
static const char *const g_fim_pre_names[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                              "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                                              "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const g_fim_suf_names[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                              "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                                              "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const g_fim_mid_names[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                              "<｜fim▁end｜>", "<MID>", "▁<MID>",
                                              "<|code_middle|>", "<|middle|>", NULL};
static const char *const g_fim_pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                              "[PAD]", NULL};
static const char *const g_fim_rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                              "<REPO>", "<reponame>", NULL};
static const char *const g_fim_sep_names[] = {"<|file_sep|>", NULL};
static const char *const g_eog_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[", NULL};
static const char *const g_always_rendered[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                "<|constrain|>", NULL};

// Where the id was not given by a key, the token with the earliest name in the list becomes it,
// and a control token. (llama.cpp takes the first candidate it meets in a hash map; the list
// order gives its choice on the vocabularies in use, e.g. "<|im_end|>" over "<|endoftext|>".)
static void detect_by_name(tok_vocab *v, tok_id *id, const char *const *names) {
    if (*id != TOK_NULL) return;
    for (; *names; names++) {
        tok_id t = vocab_lookup(v, *names, strlen(*names));
        if (t != TOK_NULL) {
            *id = t;
            v->attr[t] |= TOK_ATTR_CONTROL;
            return;
        }
    }
}

static tok_id find_name(const tok_vocab *v, const char *name) {
    return vocab_lookup(v, name, strlen(name));
}

static void special_tokens(tok_vocab *v, const gguf_file *f) {
    // defaults out of range are disabled
    tok_id *ids[] = {&v->bos, &v->eos, &v->eot, &v->eom, &v->unk, &v->sep, &v->pad, &v->mask,
                     &v->fim_pre, &v->fim_suf, &v->fim_mid, &v->fim_pad, &v->fim_rep, &v->fim_sep};
    for (size_t i = 0; i < FT_ARRAY_LEN(ids); i++)
        if (*ids[i] >= v->n_tokens) *ids[i] = TOK_NULL;
    get_token_key(v, f, "tokenizer.ggml.bos_token_id", &v->bos);
    get_token_key(v, f, "tokenizer.ggml.eos_token_id", &v->eos);
    get_token_key(v, f, "tokenizer.ggml.eot_token_id", &v->eot);
    get_token_key(v, f, "tokenizer.ggml.eom_token_id", &v->eom);
    get_token_key(v, f, "tokenizer.ggml.unknown_token_id", &v->unk);
    get_token_key(v, f, "tokenizer.ggml.seperator_token_id", &v->sep);
    get_token_key(v, f, "tokenizer.ggml.padding_token_id", &v->pad);
    get_token_key(v, f, "tokenizer.ggml.mask_token_id", &v->mask);
    get_token_key(v, f, "tokenizer.ggml.fim_pre_token_id", &v->fim_pre);
    get_token_key(v, f, "tokenizer.ggml.fim_suf_token_id", &v->fim_suf);
    get_token_key(v, f, "tokenizer.ggml.fim_mid_token_id", &v->fim_mid);
    get_token_key(v, f, "tokenizer.ggml.fim_pad_token_id", &v->fim_pad);
    get_token_key(v, f, "tokenizer.ggml.fim_rep_token_id", &v->fim_rep);
    get_token_key(v, f, "tokenizer.ggml.fim_sep_token_id", &v->fim_sep);
    get_token_key(v, f, "tokenizer.ggml.prefix_token_id", &v->fim_pre);
    get_token_key(v, f, "tokenizer.ggml.suffix_token_id", &v->fim_suf);
    get_token_key(v, f, "tokenizer.ggml.middle_token_id", &v->fim_mid);

    bool b;
    if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b)) v->add_bos = b;
    if (gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b)) v->add_eos = b;

    detect_by_name(v, &v->eot, g_eot_names);
    detect_by_name(v, &v->eom, g_eom_names);
    detect_by_name(v, &v->fim_pre, g_fim_pre_names);
    detect_by_name(v, &v->fim_suf, g_fim_suf_names);
    detect_by_name(v, &v->fim_mid, g_fim_mid_names);
    detect_by_name(v, &v->fim_pad, g_fim_pad_names);
    detect_by_name(v, &v->fim_rep, g_fim_rep_names);
    detect_by_name(v, &v->fim_sep, g_fim_sep_names);

    // control tokens named "unused..." are unused
    for (tok_id t = 0; t < v->n_tokens; t++) {
        size_t len;
        const char *s = vocab_text(v, t, &len);
        if ((v->attr[t] & TOK_ATTR_CONTROL) && memmem(s, len, "unused", 6))
            v->attr[t] |= TOK_ATTR_UNUSED;
    }

    // end of generation
    v->eog = ft_calloc((size_t)v->n_tokens, 1);
    tok_id fims[] = {v->fim_pad, v->fim_rep, v->fim_sep};
    for (size_t i = 0; i < FT_ARRAY_LEN(fims); i++)
        if (fims[i] != TOK_NULL) v->eog[fims[i]] = 1;
    for (tok_id t = 0; t < v->n_tokens; t++) {
        if (text_in(v, t, g_eog_names)) {
            v->eog[t] = 1;
            v->attr[t] |= TOK_ATTR_CONTROL;
        }
        if (text_in(v, t, g_always_rendered)) v->attr[t] = TOK_ATTR_USER_DEFINED;
    }
    tok_id ends[] = {v->eos, v->eot, v->eom};
    for (size_t i = 0; i < FT_ARRAY_LEN(ends); i++)
        if (ends[i] != TOK_NULL) v->eog[ends[i]] = 1;

    // o200k_harmony / solar-open: "<|end|>" ends a message, not generation
    tok_id t_return = find_name(v, "<|return|>"), t_call = find_name(v, "<|call|>");
    tok_id t_calls = find_name(v, "<|calls|>"), t_flush = find_name(v, "<|flush|>");
    tok_id t_end = find_name(v, "<|end|>");
    bool has_return = t_return != TOK_NULL && v->eog[t_return];
    bool has_call = (t_call != TOK_NULL && v->eog[t_call]) || (t_calls != TOK_NULL && v->eog[t_calls]);
    bool has_flush = t_flush != TOK_NULL && v->eog[t_flush];
    if (t_end != TOK_NULL && v->eog[t_end] && ((has_return && has_call) || (has_call && has_flush))) {
        v->eog[t_end] = 0;
        v->attr[t_end] = TOK_ATTR_USER_DEFINED;
    }
    // gemma4 / paddleocr: "</s>" is not an end of generation next to "<|tool_response>"
    tok_id t_tool = find_name(v, "<|tool_response>"), t_s = find_name(v, "</s>");
    if (t_tool != TOK_NULL && v->eog[t_tool] && t_s != TOK_NULL && v->eog[t_s]) {
        v->eog[t_s] = 0;
        v->attr[t_s] = TOK_ATTR_NORMAL;
    }
}

typedef struct {
    uint64_t len;
    tok_id id;
} special_key;

static int by_length_desc(const void *a, const void *b) {
    const special_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

// Special tokens, longest first (ties by id; llama.cpp's sort leaves their order unspecified).
static void build_specials(tok_vocab *v) {
    special_key *keys = ft_malloc((size_t)v->n_tokens * sizeof(special_key));
    for (tok_id t = 0; t < v->n_tokens; t++)
        if (v->attr[t] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))
            keys[v->n_specials++] = (special_key){v->text_off[t + 1] - v->text_off[t], t};
    qsort(keys, (size_t)v->n_specials, sizeof(special_key), by_length_desc);
    v->specials = ft_malloc(((size_t)v->n_specials + 1) * sizeof(tok_id));
    for (int32_t i = 0; i < v->n_specials; i++) v->specials[i] = keys[i].id;
    free(keys);
}

// llama.cpp's per-model token attributes, chosen by the model's name: Phi-3's special tokens
// take the white space after them.
static void attrs_by_model_name(tok_vocab *v, const gguf_file *f) {
    gguf_str name;
    if (!gguf_get_str(f, "general.name", &name)) return;
    char lower[256];
    size_t n = FT_MIN(name.len, sizeof(lower) - 1);
    for (size_t i = 0; i < n; i++)
        lower[i] = (char)(name.ptr[i] >= 'A' && name.ptr[i] <= 'Z' ? name.ptr[i] + 32 : name.ptr[i]);
    lower[n] = 0;
    if (!memmem(lower, n, "phi-3", 5) && !memmem(lower, n, "phi3", 4)) return;
    for (int32_t i = 0; i < v->n_specials; i++) v->attr[v->specials[i]] |= TOK_ATTR_RSTRIP;
    static const char *const on[] = {"</s>"}, *const off[] = {"<unk>", "<s>", "<|endoftext|>"};
    tok_id t = find_name(v, on[0]);
    if (t != TOK_NULL) v->attr[t] |= TOK_ATTR_RSTRIP;
    for (size_t i = 0; i < FT_ARRAY_LEN(off); i++)
        if ((t = find_name(v, off[i])) != TOK_NULL) v->attr[t] &= ~(uint32_t)TOK_ATTR_RSTRIP;
}

static void byte_tokens(tok_vocab *v) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        tok_id id = vocab_lookup(v, buf, 6);
        if (id == TOK_NULL) {
            char c = (char)b;
            id = vocab_lookup(v, &c, 1);
        }
        v->byte_tok[b] = id;
    }
}

static char *text_copy(const tok_vocab *v, tok_id id) {
    size_t len = 0;
    const char *t = id == TOK_NULL ? "" : vocab_text(v, id, &len);
    char *s = ft_malloc(len + 1);
    memcpy(s, t, len);
    s[len] = 0;
    return s;
}

// A BPE vocabulary's pre-tokenizer (v->pre_name) and the defaults it brings.
static bool bpe_pre(tok_vocab *v, ft_err *err) {
    const pretok_def *def = pretok_find(v->pre_name[0] ? v->pre_name : "default");
    if (!def)
        return ft_err_set(err, "tokenizer: unknown pre-tokenizer '%s' (tokenizer.ggml.pre)", v->pre_name);
    if (!pretok_compile(&v->pre, def, err)) return false;
    v->clean_spaces = def->clean_spaces;
    v->ignore_merges = def->ignore_merges;
    v->add_bos = def->add_bos;
    if (def->no_bos) v->bos = TOK_NULL;
    return true;
}

static bool load(tok_vocab *v, const gguf_file *f, ft_err *err) {
    gguf_str model;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model))
        return ft_err_set(err, "tokenizer: tokenizer.ggml.model missing (no vocabulary in this file)");
    if (gguf_str_eq(model, "gpt2")) {
        v->kind = TOK_KIND_BPE;
        v->bos = v->eos = 11;
        v->unk = TOK_NULL;
        gguf_str pre = {"", 0};
        gguf_get_str(f, "tokenizer.ggml.pre", &pre);
        if (pre.len >= sizeof(v->pre_name))
            return ft_err_set(err, "tokenizer: unknown pre-tokenizer '%.*s'", 64, pre.ptr);
        memcpy(v->pre_name, pre.ptr, pre.len);
        v->pre_name[pre.len] = 0;
        if (strlen(v->pre_name) != pre.len)
            return ft_err_set(err, "tokenizer: tokenizer.ggml.pre holds a NUL byte");
        if (!bpe_pre(v, err)) return false;
    } else if (gguf_str_eq(model, "gemma4")) {
        // SentencePiece-style BPE with merges; llama.cpp gives it the pre-tokenizer "gemma4"
        // whatever tokenizer.ggml.pre says, and no default special ids
        v->kind = TOK_KIND_BPE;
        v->bos = v->eos = v->unk = TOK_NULL;
        snprintf(v->pre_name, sizeof(v->pre_name), "gemma4");
        if (!bpe_pre(v, err)) return false;
    } else if (gguf_str_eq(model, "llama")) {
        v->kind = TOK_KIND_SPM;
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
        v->add_space_prefix = true;
        v->add_bos = true;
    } else {
        return ft_err_set(err, "tokenizer: unsupported tokenizer model '%.*s' (ft reads gpt2, gemma4 and llama)",
                          (int)FT_MIN(model.len, 64), model.ptr);
    }
    bool b;
    if (gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &b)) v->add_space_prefix = b;

    if (!load_tokens(v, f, err)) return false;
    if (v->kind == TOK_KIND_BPE && !load_merges(v, f, err)) return false;
    special_tokens(v, f);
    // SentencePiece-style BPE always adds BOS, whatever add_bos_token says (as llama.cpp does)
    if (v->kind == TOK_KIND_BPE && v->pre.def->spm_bpe) v->add_bos = true;
    build_specials(v);
    byte_tokens(v);
    vocab_build_pieces(v);
    attrs_by_model_name(v, f);
    v->bos_text = text_copy(v, v->bos);
    v->eos_text = text_copy(v, v->eos);
    return true;
}

tok_vocab *tok_vocab_load(const gguf_file *f, ft_err *err) {
    tok_vocab *v = ft_calloc(1, sizeof(tok_vocab));
    v->eot = v->eom = v->sep = v->pad = v->mask = TOK_NULL;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = TOK_NULL;
    if (!load(v, f, err)) {
        tok_vocab_free(v);
        return NULL;
    }
    return v;
}

void tok_vocab_free(tok_vocab *v) {
    if (!v) return;
    pretok_release(&v->pre);
    free(v->text);
    free(v->text_off);
    free(v->scores);
    free(v->attr);
    free(v->by_text.slots);
    free(v->by_text.hashes);
    free(v->merges);
    free(v->merge_off);
    free(v->merge_split);
    free(v->merge_slots);
    free(v->piece);
    free(v->piece_off);
    free(v->eog);
    free(v->specials);
    free(v->bos_text);
    free(v->eos_text);
    free(v);
}

// ---------------------------------------------------------------------------------------------
// Accessors

enum tok_kind tok_vocab_kind(const tok_vocab *v) { return v->kind; }
const char *tok_vocab_pre(const tok_vocab *v) { return v->pre_name; }
int32_t tok_n_tokens(const tok_vocab *v) { return v->n_tokens; }
tok_id tok_bos(const tok_vocab *v) { return v->bos; }
tok_id tok_eos(const tok_vocab *v) { return v->eos; }
tok_id tok_eot(const tok_vocab *v) { return v->eot; }
bool tok_adds_bos(const tok_vocab *v) { return v->add_bos; }
bool tok_adds_eos(const tok_vocab *v) { return v->add_eos; }

bool tok_is_eog(const tok_vocab *v, tok_id id) {
    return id >= 0 && id < v->n_tokens && v->eog[id];
}

uint32_t tok_attrs(const tok_vocab *v, tok_id id) {
    FT_ASSERT(id >= 0 && id < v->n_tokens);
    return v->attr[id];
}

const char *tok_text(const tok_vocab *v, tok_id id, size_t *len) {
    FT_ASSERT(id >= 0 && id < v->n_tokens);
    return vocab_text(v, id, len);
}

tok_id tok_find(const tok_vocab *v, const char *text, size_t len) {
    return vocab_lookup(v, text, len);
}
