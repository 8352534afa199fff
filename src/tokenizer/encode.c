// encode.c: text -> token ids: special-token partition, then BPE or SPM on the text between.
//
// Partition (llama.cpp's tokenizer_st_partition): for each special token, longest text first,
// every occurrence in the not-yet-claimed text becomes that token and splits the text around
// it. Control and unknown tokens are looked for only in segments that allow it; user-defined
// tokens everywhere. A token with LSTRIP / RSTRIP also takes the white space before / after it. What remains are raw-text fragments; fragments of consecutive segments that
// touch are joined before BPE, so splitting a string into segments does not change its tokens.
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>

void tok_ids_push(tok_ids *t, tok_id id) {
    tok_grow((void **)&t->ids, &t->cap, t->n + 1, sizeof(tok_id));
    t->ids[t->n++] = id;
}

void tok_ids_free(tok_ids *t) {
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

typedef struct {
    tok_id token;       // TOK_NULL: raw text
    bool parse_special; // of the segment it came from
    size_t off, len;    // raw text: bytes of the joined input
} fragment;

typedef struct {
    fragment *f;
    size_t n, cap;
} fragments;

static void frag_push(fragments *fs, fragment f) {
    tok_grow((void **)&fs->f, &fs->cap, fs->n + 1, sizeof(fragment));
    fs->f[fs->n++] = f;
}

static bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Cuts every occurrence of special token id out of the raw fragments of *in, into *out.
static void partition_one(const tok_vocab *v, tok_id id, const char *text, const fragments *in,
                          fragments *out) {
    size_t tlen;
    const char *t = vocab_text(v, id, &tlen);
    uint32_t attr = v->attr[id];
    bool control = attr & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN);
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        fragment f = in->f[i];
        if (f.token != TOK_NULL || (control && !f.parse_special) || f.len < tlen) {
            frag_push(out, f);
            continue;
        }
        size_t at = f.off, end = f.off + f.len;
        for (;;) {
            const char *hit = memmem(text + at, end - at, t, tlen);
            if (!hit) break;
            size_t pos = (size_t)(hit - text), left_end = pos;
            if (attr & TOK_ATTR_LSTRIP)
                while (left_end > at && is_c_space(text[left_end - 1])) left_end--;
            if (left_end > at) frag_push(out, (fragment){TOK_NULL, f.parse_special, at, left_end - at});
            frag_push(out, (fragment){id, f.parse_special, 0, 0});
            at = pos + tlen;
            if (attr & TOK_ATTR_RSTRIP)
                while (at < end && is_c_space(text[at])) at++;
        }
        if (at < end) frag_push(out, (fragment){TOK_NULL, f.parse_special, at, end - at});
    }
}

size_t tok_encode_segments(const tok_vocab *v, const tok_segment *segs, size_t n_segs,
                           bool add_special, tok_ids *out) {
    size_t n0 = out->n;

    // the input, joined
    size_t total = 0;
    for (size_t i = 0; i < n_segs; i++) total += segs[i].len;
    char *joined = NULL;
    const char *text;
    if (n_segs == 1) {
        text = segs[0].text;
    } else {
        joined = ft_malloc(total + 1);
        size_t at = 0;
        for (size_t i = 0; i < n_segs; i++) {
            if (segs[i].len) memcpy(joined + at, segs[i].text, segs[i].len);
            at += segs[i].len;
        }
        text = joined;
    }

    fragments a = {0}, b = {0};
    size_t at = 0;
    for (size_t i = 0; i < n_segs; i++) {
        if (segs[i].len) frag_push(&a, (fragment){TOK_NULL, segs[i].parse_special, at, segs[i].len});
        at += segs[i].len;
    }
    for (int32_t k = 0; k < v->n_specials && a.n; k++) {
        partition_one(v, v->specials[k], text, &a, &b);
        fragments t = a;
        a = b;
        b = t;
    }
    // join raw fragments of consecutive segments
    size_t m = 0;
    for (size_t i = 0; i < a.n; i++) {
        fragment f = a.f[i];
        if (m && f.token == TOK_NULL && a.f[m - 1].token == TOK_NULL &&
            a.f[m - 1].off + a.f[m - 1].len == f.off)
            a.f[m - 1].len += f.len;
        else
            a.f[m++] = f;
    }
    a.n = m;

    tok_scratch s = {0};
    if (add_special && v->add_bos && v->bos != TOK_NULL) tok_ids_push(out, v->bos);
    bool prev_special = true; // SPM: a space before the first text and after each special token
    for (size_t i = 0; i < a.n; i++) {
        const fragment *f = &a.f[i];
        if (f->token != TOK_NULL) {
            tok_ids_push(out, f->token);
            prev_special = true;
        } else if (v->kind == TOK_KIND_BPE) {
            bpe_encode_fragment(v, text + f->off, f->len, &s, out);
        } else {
            spm_encode_fragment(v, text + f->off, f->len, v->add_space_prefix && prev_special, &s,
                                out);
            prev_special = false;
        }
    }
    if (add_special && v->add_eos && v->eos != TOK_NULL) tok_ids_push(out, v->eos);

    tok_scratch_free(&s);
    free(a.f);
    free(b.f);
    free(joined);
    return out->n - n0;
}

size_t tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
                  bool parse_special, tok_ids *out) {
    tok_segment seg = {text, len, parse_special};
    return tok_encode_segments(v, &seg, 1, add_special, out);
}
