// decode.c: token ids -> text.
//
// Each token's piece (llama.cpp's token_to_piece with special = true) is computed once at load:
//   - control, unknown and user-defined tokens: their text as it is;
//   - normal tokens: BPE text mapped back from the byte-level alphabet to bytes (a character
//     outside the alphabet gives llama.cpp's "[UNK_BYTE_0x..]" marker); SPM and SentencePiece-
//     style BPE (Gemma 4) text with "▁" as ' ';
//   - byte tokens <0xXX>: the byte; anything else: nothing.
// With special = false, control and unknown tokens decode to nothing.
#include "tok_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *b;
    size_t n, cap;
} strbuf;

static void sb_add(strbuf *sb, const void *p, size_t len) {
    tok_grow((void **)&sb->b, &sb->cap, sb->n + len + 1, 1);
    memcpy(sb->b + sb->n, p, len);
    sb->n += len;
}

static void piece_of(const tok_vocab *v, tok_id id, strbuf *sb) {
    size_t len;
    const char *t = vocab_text(v, id, &len);
    uint32_t a = v->attr[id];
    if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED)) {
        sb_add(sb, t, len);
    } else if (a & TOK_ATTR_NORMAL) {
        if (v->kind == TOK_KIND_SPM || v->pre.def->spm_bpe) {
            for (size_t i = 0; i < len;) {
                if (i + 3 <= len && !memcmp(t + i, "\xE2\x96\x81", 3)) {
                    sb_add(sb, " ", 1);
                    i += 3;
                } else {
                    sb_add(sb, t + i++, 1);
                }
            }
            return;
        }
        for (size_t i = 0; i < len;) {
            uint32_t c = utf8_decode_lenient((const uint8_t *)t, len, &i);
            int b = gpt2_char_byte(c);
            if (b >= 0) {
                char byte = (char)b;
                sb_add(sb, &byte, 1);
                continue;
            }
            char utf8[4], hex[16];
            int n = utf8_encode(c, utf8);
            sb_add(sb, "[UNK_BYTE_0x", 12);
            for (int k = 0; k < n; k++) {
                snprintf(hex, sizeof(hex), "%02x", (uint8_t)utf8[k]);
                sb_add(sb, hex, 2);
            }
            sb_add(sb, t, len);
            sb_add(sb, "]", 1);
        }
    } else if (a & TOK_ATTR_BYTE) {
        // the two characters after "<0x", read as hex (strtol, as llama.cpp)
        char hex[3] = {0};
        if (len > 3) memcpy(hex, t + 3, FT_MIN(len - 3, (size_t)2));
        char byte = (char)strtol(hex, NULL, 16);
        if (len >= 3) sb_add(sb, &byte, 1);
    }
}

void vocab_build_pieces(tok_vocab *v) {
    strbuf sb = {0};
    v->piece_off = ft_malloc(((size_t)v->n_tokens + 1) * sizeof(uint64_t));
    v->max_piece = 0;
    for (tok_id id = 0; id < v->n_tokens; id++) {
        v->piece_off[id] = sb.n;
        piece_of(v, id, &sb);
        v->max_piece = FT_MAX(v->max_piece, sb.n - v->piece_off[id]);
    }
    v->piece_off[v->n_tokens] = sb.n;
    sb_add(&sb, "", 0);
    v->piece = sb.b;
}

const char *tok_piece(const tok_vocab *v, tok_id id, bool special, size_t *len) {
    FT_ASSERT(id >= 0 && id < v->n_tokens);
    if (!special && (v->attr[id] & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL))) {
        *len = 0;
        return v->piece;
    }
    *len = (size_t)(v->piece_off[id + 1] - v->piece_off[id]);
    return v->piece + v->piece_off[id];
}

size_t tok_max_piece_len(const tok_vocab *v) { return v->max_piece; }

// ---------------------------------------------------------------------------------------------
// Whole-sequence detokenization

// llama.cpp's clean-up of tokenization spaces, three in-place passes over the text.
static size_t clean_spaces(char *t, size_t total) {
    // " ?", " !", " .", " ," lose the space
    size_t n = total, out = total ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) out--;
        t[out++] = x;
    }
    // " ' " loses both spaces
    n = out;
    out = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = t[i];
        if (x == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
            out--;
            t[++i] = 0;
        }
        t[out++] = x;
    }
    // " 's", " 'm", " 're", " 've" lose the space
    n = out;
    out = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < n) {
            char x1 = t[i + 1];
            if (x1 == 's' || x1 == 'm') out--;
            else if (x1 != 't' && x1 != 'd' && i + 2 < n) {
                char x2 = t[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) out--;
            }
        }
        t[out++] = x;
    }
    return out;
}

char *tok_detokenize(const tok_vocab *v, const tok_id *ids, size_t n, bool remove_special,
                     bool unparse_special, size_t *len) {
    bool remove_space = v->add_space_prefix;
    if (remove_special && v->add_bos && n > 0 && ids[0] == v->bos) {
        remove_space = false;
        ids++;
        n--;
    }
    if (remove_special && v->add_eos && n > 0 && ids[n - 1] == v->eos) n--;

    strbuf sb = {0};
    sb_add(&sb, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v->n_tokens) continue; // not a token: nothing
        size_t plen;
        const char *p = tok_piece(v, ids[i], unparse_special, &plen);
        if (plen && remove_space && p[0] == ' ') p++, plen--;
        remove_space = false;
        sb_add(&sb, p, plen);
    }
    if (v->clean_spaces) sb.n = clean_spaces(sb.b, sb.n);
    sb.b[sb.n] = 0;
    if (len) *len = sb.n;
    return sb.b;
}

// ---------------------------------------------------------------------------------------------
// Streaming

void tok_stream_init(tok_stream *s, const tok_vocab *v, bool special) {
    memset(s, 0, sizeof(*s));
    s->v = v;
    s->special = special;
    // each byte in gives at most 3 out (U+FFFD), plus the held-back bytes
    s->cap = 3 * (tok_max_piece_len(v) + 8);
    s->out = ft_malloc(s->cap);
}

void tok_stream_free(tok_stream *s) {
    free(s->out);
    memset(s, 0, sizeof(*s));
}

static void put_fffd(tok_stream *s, size_t *n) {
    memcpy(s->out + *n, "\xEF\xBF\xBD", 3);
    *n += 3;
}

// One byte through the UTF-8 decoder (the WHATWG algorithm: a byte that cannot continue the
// current character ends it with U+FFFD and is read again).
static void feed(tok_stream *s, uint8_t b, size_t *n) {
    for (;;) {
        if (s->need == 0) {
            if (b < 0x80) {
                s->out[(*n)++] = (char)b;
                return;
            }
            s->lower = 0x80;
            s->upper = 0xBF;
            if (b >= 0xC2 && b <= 0xDF) s->need = 2;
            else if (b >= 0xE0 && b <= 0xEF) {
                s->need = 3;
                if (b == 0xE0) s->lower = 0xA0; // no overlong forms
                if (b == 0xED) s->upper = 0x9F; // no surrogates
            } else if (b >= 0xF0 && b <= 0xF4) {
                s->need = 4;
                if (b == 0xF0) s->lower = 0x90;
                if (b == 0xF4) s->upper = 0x8F; // nothing above U+10FFFF
            } else {
                put_fffd(s, n);
                return;
            }
            s->seq[0] = b;
            s->seen = 1;
            return;
        }
        if (b < s->lower || b > s->upper) {
            s->need = s->seen = 0;
            put_fffd(s, n);
            continue; // read b again as the start of something new
        }
        s->lower = 0x80;
        s->upper = 0xBF;
        s->seq[s->seen++] = b;
        if (s->seen == s->need) {
            memcpy(s->out + *n, s->seq, s->need);
            *n += s->need;
            s->need = s->seen = 0;
        }
        return;
    }
}

const char *tok_stream_push(tok_stream *s, tok_id id, size_t *len) {
    size_t n = 0;
    if (id >= 0 && id < s->v->n_tokens) {
        size_t plen;
        const char *p = tok_piece(s->v, id, s->special, &plen);
        FT_ASSERT(3 * (plen + 1) <= s->cap);
        for (size_t i = 0; i < plen; i++) feed(s, (uint8_t)p[i], &n);
    }
    *len = n;
    return s->out;
}

const char *tok_stream_flush(tok_stream *s, size_t *len) {
    size_t n = 0;
    if (s->need) {
        put_fffd(s, &n);
        s->need = s->seen = 0;
    }
    *len = n;
    return s->out;
}
