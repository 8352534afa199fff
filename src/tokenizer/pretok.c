// pretok.c: pre-tokenizers, which split text into words before BPE merges them.
//
// A pre-tokenizer is a list of steps; each step splits every piece produced by the previous
// one further (llama.cpp's unicode_regex_split). The text is first decoded to code points
// (invalid bytes become U+FFFD), and a word is a run of code points.
//
// For four common patterns llama.cpp runs hand-written splitters instead of a regex engine, and
// their results differ from a true regex in corner cases (unassigned code points, a lone
// trailing space); PRETOK_GPT2/LLAMA3/QWEN2/QWEN35 reproduce those splitters. The other patterns
// llama.cpp runs with std::regex in one of two ways, reproduced here with PCRE2:
//   - patterns using \p{..} classes run on a "collapsed" text, one byte per code point: ASCII
//     stays itself, other code points become a byte naming their category (0xD1 number,
//     0xD2 letter, 0xD3 punctuation, 0xD4 mark, 0xD5 symbol, 0x0B white space, 0xD0 other), and
//     each \p{X} in the pattern becomes a class of that byte and X's ASCII members;
//   - patterns without \p{..} run on the code points, non-ASCII white space replaced by 0x0B
//     (here: UTF-8 with PCRE2_UTF, ASCII-only \s as std::wregex has).
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// The pre-tokenizers, by tokenizer.ggml.pre (patterns as llama.cpp writes them; its non-ASCII
// characters are written here as PCRE2 escapes \x{...}, which mean the same code points)

#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3                                                                               \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                             \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN35                                                                         \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+" \
                    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_NEWLINES "[^\\n]+|[\\n]+"
#define RE_CJK_DS "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

#define STEP(k) {PRETOK_##k, RE_##k}
#define REGEX(r) {PRETOK_REGEX, r}

static const pretok_def g_pretoks[] = {
    {.names = "default",
     .steps = {REGEX("[\\p{P}\\$\\+<=>\\^~\\|]+"), STEP(GPT2), REGEX("\\p{N}+"),
               REGEX("[0-9][0-9][0-9]")},
     .clean_spaces = true},
    {.names = "llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano",
     .steps = {STEP(LLAMA3)},
     .clean_spaces = true, .ignore_merges = true, .add_bos = true},
    {.names = "deepseek-llm",
     .steps = {REGEX("[\r\n]"),
               REGEX("\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
                     "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
                     "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}"
                     "\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
                     "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
                     "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
                     "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
                     "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
                     "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
                     "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
                     "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"
                     "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
                     "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"
                     "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"
                     "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
                     "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
                     "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
                     "\\x{1E900}-\\x{1E943}]+"),
               REGEX("\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}"
                     "\\x{3000}-\\x{3002}]+"),
               REGEX("\\s+$"), REGEX(RE_CJK_DS),
               REGEX("\\p{N}+")}},
    {.names = "deepseek-coder",
     .steps = {REGEX("[\r\n]"), REGEX("\\s?\\p{L}+"), REGEX("\\s?\\p{P}+"), REGEX(RE_CJK_DS),
               REGEX("\\p{N}")}},
    {.names = "deepseek-v3",
     .steps = {REGEX("\\p{N}{1,3}"), REGEX("[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+"),
               REGEX("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
                     "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")}},
    {.names = "gpt-2|phi-2|gigachat|a.x-4.0|mellum|exaone4", .steps = {STEP(GPT2)},
     .clean_spaces = true},
    {.names = "qwen2|deepseek-r1-qwen|kormo|f2llmv2|megrez", .steps = {STEP(QWEN2)}},
    {.names = "qwen35", .steps = {STEP(QWEN35)}},
    {.names = "gpt-4o|llama4|kanana2|talkie",
     .steps = {REGEX("[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
                     RE_CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])"
                     "([^A-Z]))*" RE_CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
                     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")}},
    {.names = "laguna", .steps = {STEP(NEWLINES), STEP(QWEN2)}},
    {.names = "falcon",
     .steps = {REGEX("[\\p{P}\\$\\+<=>\\^~\\|`]+"), STEP(GPT2), REGEX("[0-9][0-9][0-9]")},
     .clean_spaces = true},
    {.names = "starcoder|refact|codeshell|exaone|minerva-7b|mellum2",
     .steps = {REGEX("\\p{N}"), STEP(GPT2)},
     .clean_spaces = true},
    {.names = "command-r|smollm", .steps = {REGEX("\\p{N}"), STEP(GPT2)}},
    {.names = "mpt|olmo|jais", .steps = {STEP(GPT2)}, .clean_spaces = true},
    {.names = "dbrx|smaug-bpe", .steps = {STEP(LLAMA3)}, .clean_spaces = true},
    {.names = "glm4|chatglm-bpe", .steps = {STEP(LLAMA3)}, .clean_spaces = true, .no_bos = true},
    {.names = "gemma4|granite-embed-multi-311m", .steps = {STEP(NEWLINES)}, .clean_spaces = true,
     .add_bos = true, .spm_bpe = true},
};

const pretok_def *pretok_find(const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < FT_ARRAY_LEN(g_pretoks); i++) {
        const char *p = g_pretoks[i].names;
        while (*p) {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            if (len == n && !memcmp(p, name, n)) return &g_pretoks[i];
            p += len + (bar ? 1 : 0);
        }
    }
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Compiling: the collapsed form of a \p{..} pattern

typedef struct {
    const char *name;
    uint8_t byte;      // the category's byte in the collapsed text
    const char *ascii; // the category's ASCII members, as class contents
} ucat_class;

static const ucat_class g_classes[] = {
    {"\\p{N}", 0xD1, "0-9"},
    {"\\p{L}", 0xD2, "A-Za-z"},
    {"\\p{P}", 0xD3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
    {"\\p{M}", 0xD4, ""},
    {"\\p{S}", 0xD5, "\\$\\+<->^`\\|\\~"},
    {"\\p{Lu}", 0xD2, "A-Za-z"},
    {"\\p{Ll}", 0xD2, "A-Za-z"},
    {"\\p{Lt}", 0xD2, "A-Za-z"},
    {"\\p{Lm}", 0xD2, "A-Za-z"},
    {"\\p{Lo}", 0xD2, "A-Za-z"},
};

static bool uses_categories(const char *re) {
    for (size_t i = 0; i < FT_ARRAY_LEN(g_classes); i++)
        if (strstr(re, g_classes[i].name)) return true;
    return false;
}

static void buf_add(char **b, size_t *n, size_t *cap, const char *s, size_t len) {
    tok_grow((void **)b, cap, *n + len + 1, 1);
    memcpy(*b + *n, s, len);
    *n += len;
    (*b)[*n] = 0;
}

// Rewrites each \p{X} as a class of X's byte and ASCII members ([..] outside a class, bare
// inside one), tracking brackets the simple way llama.cpp does (a '[' or ']' preceded by a
// backslash is literal).
static char *collapse_pattern(const char *re) {
    char *out = NULL;
    size_t n = 0, cap = 0;
    bool inside = false;
    size_t len = strlen(re);
    for (size_t i = 0; i < len; i++) {
        char c = re[i];
        if (c == '[' && (i == 0 || re[i - 1] != '\\')) {
            inside = true;
        } else if (inside && c == ']' && re[i - 1] != '\\') {
            inside = false;
        } else if (c == '\\' && i + 3 < len && re[i + 1] == 'p' && re[i + 2] == '{') {
            const char *close = strchr(re + i + 3, '}');
            if (close && (size_t)(close - re) <= i + 10) {
                size_t plen = (size_t)(close - re) - i + 1;
                const ucat_class *k = NULL;
                for (size_t j = 0; j < FT_ARRAY_LEN(g_classes) && !k; j++)
                    if (strlen(g_classes[j].name) == plen && !memcmp(g_classes[j].name, re + i, plen))
                        k = &g_classes[j];
                if (k) {
                    char byte = (char)k->byte;
                    if (!inside) buf_add(&out, &n, &cap, "[", 1);
                    buf_add(&out, &n, &cap, &byte, 1);
                    buf_add(&out, &n, &cap, k->ascii, strlen(k->ascii));
                    if (!inside) buf_add(&out, &n, &cap, "]", 1);
                    i += plen - 1;
                    continue;
                }
            }
        }
        buf_add(&out, &n, &cap, &c, 1);
    }
    return out;
}

bool pretok_compile(pretok_compiled *pc, const pretok_def *def, ft_err *err) {
    memset(pc, 0, sizeof(*pc));
    pc->def = def;
    for (int i = 0; i < PRETOK_MAX_STEPS && def->steps[i].kind != PRETOK_END; i++) {
        if (def->steps[i].kind != PRETOK_REGEX) continue;
        const char *src = def->steps[i].regex;
        char *collapsed = NULL;
        uint32_t opts = PCRE2_DOLLAR_ENDONLY; // std::regex's $ is the end of the text only
        if (uses_categories(src)) {
            collapsed = collapse_pattern(src);
            src = collapsed;
            pc->collapsed[i] = true;
        } else {
            opts |= PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
        }
        int code;
        PCRE2_SIZE where;
        pc->re[i] = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED, opts, &code, &where, NULL);
        free(collapsed);
        if (!pc->re[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof(msg));
            pretok_release(pc);
            return ft_err_set(err, "pre-tokenizer regex %d: %s at offset %zu", i, (char *)msg,
                              (size_t)where);
        }
        pcre2_jit_compile(pc->re[i], PCRE2_JIT_COMPLETE); // the interpreter serves if JIT fails
    }
    return true;
}

void pretok_release(pretok_compiled *pc) {
    for (int i = 0; i < PRETOK_MAX_STEPS; i++) {
        pcre2_code_free(pc->re[i]);
        pc->re[i] = NULL;
    }
}

// ---------------------------------------------------------------------------------------------
// Splitting helpers

typedef struct {
    size_t *out;
    size_t n, cap;
} offsets;

static void offsets_push(offsets *o, size_t len) {
    tok_grow((void **)&o->out, &o->cap, o->n + 1, sizeof(size_t));
    o->out[o->n++] = len;
}

#define OUT_OF_RANGE 0xFFFFFFFFu

// One piece [ini, end) of the text being split by a hand-written splitter.
typedef struct {
    const uint32_t *cpts;
    size_t ini, end;
    size_t prev_end; // end of the last word emitted
    offsets *o;
} piece;

static uint32_t cpt_at(const piece *p, size_t pos) {
    return pos >= p->ini && pos < p->end ? p->cpts[pos] : OUT_OF_RANGE;
}

// Flags of the code point at pos; 0 outside the piece.
static uint16_t flags_at(const piece *p, size_t pos) {
    return pos >= p->ini && pos < p->end ? ucp_flags(p->cpts[pos]) : 0;
}

// Emits the word ending at end (if non-empty) and returns its length.
static size_t emit(piece *p, size_t end) {
    size_t len = end - p->prev_end;
    if (len > 0) offsets_push(p->o, len);
    p->prev_end = end;
    return len;
}

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// Length of a contraction ('s 't 'm 'd 're 've 'll) at pos, 0 if none.
static size_t contraction_at(const piece *p, size_t pos, bool fold_case) {
    if (cpt_at(p, pos) != '\'' || pos + 1 >= p->end) return 0;
    uint32_t a = cpt_at(p, pos + 1);
    if (fold_case) a = ascii_lower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= p->end) return 0;
    uint32_t b = cpt_at(p, pos + 2);
    if (fold_case) b = ascii_lower(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

// Counts the white space from pos; *last_newline gets one past the last \r or \n in it (0 if
// none).
static size_t whitespace_run(const piece *p, size_t pos, size_t *last_newline) {
    size_t n = 0;
    *last_newline = 0;
    while (flags_at(p, pos + n) & UFLAG_WHITESPACE) {
        uint32_t c = cpt_at(p, pos + n);
        if (c == '\r' || c == '\n') *last_newline = pos + n + 1;
        n++;
    }
    return n;
}

#define WLN (UFLAG_WHITESPACE | UCAT_LETTER | UCAT_NUMBER)

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S), the way llama.cpp's
// hand-written GPT-2 splitter runs it.
static void split_gpt2(piece *p) {
    for (size_t pos = p->ini; pos < p->end;) {
        uint32_t c = cpt_at(p, pos);
        uint16_t f = flags_at(p, pos);
        size_t k = contraction_at(p, pos, false);
        if (k) {
            pos += emit(p, pos + k);
            continue;
        }
        uint16_t f2 = c == ' ' ? flags_at(p, pos + 1) : f;
        uint16_t run = f2 & UCAT_LETTER ? UCAT_LETTER : f2 & UCAT_NUMBER ? UCAT_NUMBER : 0;
        if (run) { // ' ?\p{L}+' or ' ?\p{N}+'
            pos += c == ' ';
            while (f2 & run) f2 = flags_at(p, ++pos);
            emit(p, pos);
            continue;
        }
        if (!(f2 & WLN) && f2) { // ' ?[^\s\p{L}\p{N}]+'
            pos += c == ' ';
            while (!(f2 & WLN) && f2) f2 = flags_at(p, ++pos);
            emit(p, pos);
            continue;
        }
        size_t nl;
        size_t n_ws = whitespace_run(p, pos, &nl);
        if (n_ws > 1 && cpt_at(p, pos + n_ws) != OUT_OF_RANGE) { // '\s+(?!\S)'
            pos += n_ws - 1;
            emit(p, pos);
            continue;
        }
        if (n_ws > 0) {
            pos += n_ws;
            emit(p, pos);
            continue;
        }
        emit(p, ++pos); // no alternative matched: one code point alone
    }
}

// The Llama 3 / Qwen2 / Qwen3.5 pattern family:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
//   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// where with marks (Qwen3.5) letters runs also take \p{M} and the punctuation run excludes it,
// the way llama.cpp's hand-written splitters run it.
static void split_llama3_family(piece *p, int max_digits, bool marks) {
    const uint16_t letter = marks ? (UCAT_LETTER | UCAT_MARK) : UCAT_LETTER;
    const uint16_t wln = WLN | (marks ? UCAT_MARK : 0);
    for (size_t pos = p->ini; pos < p->end;) {
        uint32_t c = cpt_at(p, pos);
        uint16_t f = flags_at(p, pos);
        size_t k = contraction_at(p, pos, true);
        if (k) {
            pos += emit(p, pos + k);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if (!(c == '\r' || c == '\n' || (f & UCAT_NUMBER)) &&
            ((f & letter) || (flags_at(p, pos + 1) & letter))) {
            pos++;
            while (flags_at(p, pos) & letter) pos++;
            emit(p, pos);
            continue;
        }
        // \p{N}{1,max_digits}
        if (f & UCAT_NUMBER) {
            size_t ini = pos;
            while (flags_at(p, pos) & UCAT_NUMBER) {
                if ((int)(++pos - ini) >= max_digits) {
                    emit(p, pos);
                    ini = pos;
                }
            }
            emit(p, pos);
            continue;
        }
        // ' ?[^\s\p{L}\p{N}]+[\r\n]*' (the first test looks at the current code point's flags)
        uint16_t f2 = c == ' ' ? flags_at(p, pos + 1) : f;
        if (!(f2 & wln) && f) {
            pos += c == ' ';
            while (!(f2 & wln) && f2) f2 = flags_at(p, ++pos);
            uint32_t c2 = cpt_at(p, pos);
            while (c2 == '\r' || c2 == '\n') c2 = cpt_at(p, ++pos);
            emit(p, pos);
            continue;
        }
        size_t nl;
        size_t n_ws = whitespace_run(p, pos, &nl);
        if (nl > 0) { // '\s*[\r\n]+'
            pos = nl;
            emit(p, pos);
            continue;
        }
        if (n_ws > 1 && cpt_at(p, pos + n_ws) != OUT_OF_RANGE) { // '\s+(?!\S)'
            pos += n_ws - 1;
            emit(p, pos);
            continue;
        }
        if (n_ws > 0) { // '\s+'
            pos += n_ws;
            emit(p, pos);
            continue;
        }
        emit(p, ++pos);
    }
}

static void split_newlines(piece *p) {
    for (size_t pos = p->ini; pos < p->end;) {
        bool nl = p->cpts[pos] == '\n';
        while (pos < p->end && (p->cpts[pos] == '\n') == nl) pos++;
        emit(p, pos);
    }
}

// ---------------------------------------------------------------------------------------------
// Regex steps

// The subject a regex step runs on: the collapsed text (one byte per code point), or UTF-8
// with non-ASCII white space as 0x0B and s->byte_off mapping code points to bytes.
static size_t build_subject(const uint32_t *cpts, size_t n, bool collapsed, tok_scratch *s) {
    if (collapsed) {
        tok_grow((void **)&s->bytes, &s->cap_bytes, n + 1, 1);
        for (size_t i = 0; i < n; i++) {
            uint32_t c = cpts[i];
            uint8_t b;
            if (c < 128) {
                b = (uint8_t)c;
            } else {
                uint16_t f = ucp_flags(c);
                switch (f & UCAT_MASK) {
                case UCAT_NUMBER: b = 0xD1; break;
                case UCAT_LETTER: b = 0xD2; break;
                case UCAT_PUNCT: b = 0xD3; break;
                case UCAT_MARK: b = 0xD4; break;
                case UCAT_SYMBOL: b = 0xD5; break;
                default: b = 0xD0; break;
                }
                if (f & UFLAG_WHITESPACE) b = 0x0B;
            }
            s->bytes[i] = (char)b;
        }
        return n;
    }
    tok_grow((void **)&s->bytes, &s->cap_bytes, 4 * n + 1, 1);
    tok_grow((void **)&s->byte_off, &s->cap_byte_off, n + 1, sizeof(size_t));
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cpts[i];
        if (c >= 128 && (ucp_flags(c) & UFLAG_WHITESPACE)) c = 0x0B;
        s->byte_off[i] = at;
        at += (size_t)utf8_encode(c, s->bytes + at);
    }
    s->byte_off[n] = at;
    return at;
}

// Code point index of a byte offset that starts a code point.
static size_t cpt_index(const tok_scratch *s, size_t n_cpts, size_t byte) {
    size_t lo = 0, hi = n_cpts;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->byte_off[mid] < byte) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int run_match(const pcre2_code *re, const char *subj, size_t len, size_t start,
                     tok_scratch *s) {
    int rc = pcre2_match(re, (PCRE2_SPTR)subj, len, start, 0, s->md, s->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) // a very long word: the interpreter has a larger limit
        rc = pcre2_match(re, (PCRE2_SPTR)subj, len, start, PCRE2_NO_JIT, s->md, s->mctx);
    return rc;
}

// Splits each piece with the regex as std::regex_iterator walks it: text before a match and
// each match become words.
static void split_regex(const pcre2_code *re, bool collapsed, const uint32_t *cpts, size_t n_cpts,
                        const size_t *in, size_t n_in, offsets *o, tok_scratch *s) {
    if (!s->md) {
        s->md = pcre2_match_data_create(16, NULL);
        s->mctx = pcre2_match_context_create(NULL);
        s->jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, NULL);
        FT_ASSERT(s->md && s->mctx && s->jit_stack);
        pcre2_jit_stack_assign(s->mctx, NULL, s->jit_stack);
    }
    build_subject(cpts, n_cpts, collapsed, s);
    size_t start = 0; // in code points
    for (size_t k = 0; k < n_in; k++) {
        size_t len = in[k];
        size_t b0 = collapsed ? start : s->byte_off[start];
        size_t b1 = collapsed ? start + len : s->byte_off[start + len];
        const char *subj = s->bytes + b0;
        size_t blen = b1 - b0, at = 0; // bytes into the piece
        size_t done = 0;               // code points of the piece already emitted
        while (at < blen) {
            int rc = run_match(re, subj, blen, at, s);
            if (rc < 0) break; // no further match (or a resource limit: keep the rest whole)
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
            size_t m0 = ov[0], m1 = ov[1];
            if (m1 == m0) { // empty match: step over one code point
                at = m0 + 1;
                while (!collapsed && at < blen && (subj[at] & 0xC0) == 0x80) at++;
                continue;
            }
            size_t c0 = collapsed ? m0 : cpt_index(s, n_cpts, b0 + m0) - start;
            size_t c1 = collapsed ? m1 : cpt_index(s, n_cpts, b0 + m1) - start;
            if (c0 > done) offsets_push(o, c0 - done);
            offsets_push(o, c1 - c0);
            done = c1;
            at = m1;
        }
        if (done < len) offsets_push(o, len - done);
        start += len;
    }
}

// ---------------------------------------------------------------------------------------------

void pretok_split(const pretok_compiled *pc, const char *text, size_t len, tok_scratch *s) {
    // decode
    tok_grow((void **)&s->cpts, &s->cap_cpts, len + 1, sizeof(uint32_t));
    size_t n = 0;
    for (size_t i = 0; i < len;) s->cpts[n++] = utf8_decode_lenient((const uint8_t *)text, len, &i);
    s->n_cpts = n;

    offsets cur = {s->words, 0, s->cap_words};
    offsets next = {s->tmp, 0, s->cap_tmp};
    offsets_push(&cur, n);
    for (int i = 0; i < PRETOK_MAX_STEPS && pc->def->steps[i].kind != PRETOK_END; i++) {
        next.n = 0;
        enum pretok_kind kind = pc->def->steps[i].kind;
        if (kind == PRETOK_REGEX) {
            split_regex(pc->re[i], pc->collapsed[i], s->cpts, n, cur.out, cur.n, &next, s);
        } else {
            size_t start = 0;
            for (size_t k = 0; k < cur.n; k++) {
                piece p = {s->cpts, start, start + cur.out[k], start, &next};
                switch (kind) {
                case PRETOK_GPT2: split_gpt2(&p); break;
                case PRETOK_LLAMA3: split_llama3_family(&p, 3, false); break;
                case PRETOK_QWEN2: split_llama3_family(&p, 1, false); break;
                case PRETOK_QWEN35: split_llama3_family(&p, 1, true); break;
                case PRETOK_NEWLINES: split_newlines(&p); break;
                default: FT_ASSERT(!"unreachable");
                }
                start += cur.out[k];
            }
        }
        offsets t = cur;
        cur = next;
        next = t;
    }
    s->words = cur.out;
    s->cap_words = cur.cap;
    s->n_words = cur.n;
    s->tmp = next.out;
    s->cap_tmp = next.cap;
}

void tok_scratch_free(tok_scratch *s) {
    free(s->cpts);
    free(s->words);
    free(s->tmp);
    free(s->bytes);
    free(s->byte_off);
    free(s->word);
    free(s->sym);
    free(s->heap);
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jit_stack);
    memset(s, 0, sizeof(*s));
}
