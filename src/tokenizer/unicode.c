// unicode.c: code points as llama.cpp's pre-tokenizers see them.
//
// llama.cpp classifies each code point by its Unicode 15.1 general category (one of
// N, L, Z, M, P, S, C, or undefined when unassigned) and a White_Space flag. We ask PCRE2's
// Unicode tables for the category (\p{..}) and correct the two places where they can disagree
// with 15.1: characters added in Unicode 15.0/15.1 that an older PCRE2 (10.42 has Unicode 14)
// calls unassigned, and characters added in 16.0/17.0 that a newer PCRE2 knows but llama.cpp
// does not. tests/test_tokenizer.c compares every code point with llama.cpp's own table.
//
// Categories are computed a block of 256 code points at a time, on first use, under a mutex;
// readers see a block only after its "ready" flag is published (release/acquire).
#include "tok_impl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define UCP_MAX 0x110000u
#define UCP_BLOCK_BITS 8
#define UCP_N_BLOCKS (UCP_MAX >> UCP_BLOCK_BITS)

typedef struct {
    uint32_t first, last;
    uint8_t cat;
} ucp_range;

// Characters assigned in Unicode 15.0 and 15.1, with their categories.
static const ucp_range g_added_15[] = {
    {0x00CF3, 0x00CF3, UCAT_MARK}, {0x00ECE, 0x00ECE, UCAT_MARK}, {0x02FFC, 0x02FFF, UCAT_SYMBOL},
    {0x031EF, 0x031EF, UCAT_SYMBOL}, {0x10EFD, 0x10EFF, UCAT_MARK}, {0x1123F, 0x11240, UCAT_LETTER},
    {0x11241, 0x11241, UCAT_MARK}, {0x11B00, 0x11B09, UCAT_PUNCT}, {0x11F00, 0x11F01, UCAT_MARK},
    {0x11F02, 0x11F02, UCAT_LETTER}, {0x11F03, 0x11F03, UCAT_MARK}, {0x11F04, 0x11F10, UCAT_LETTER},
    {0x11F12, 0x11F33, UCAT_LETTER}, {0x11F34, 0x11F3A, UCAT_MARK}, {0x11F3E, 0x11F42, UCAT_MARK},
    {0x11F43, 0x11F4F, UCAT_PUNCT}, {0x11F50, 0x11F59, UCAT_NUMBER}, {0x1342F, 0x1342F, UCAT_LETTER},
    {0x13439, 0x1343F, UCAT_CONTROL}, {0x13440, 0x13440, UCAT_MARK}, {0x13441, 0x13446, UCAT_LETTER},
    {0x13447, 0x13455, UCAT_MARK}, {0x1B132, 0x1B132, UCAT_LETTER}, {0x1B155, 0x1B155, UCAT_LETTER},
    {0x1D2C0, 0x1D2D3, UCAT_NUMBER}, {0x1DF25, 0x1DF2A, UCAT_LETTER}, {0x1E030, 0x1E06D, UCAT_LETTER},
    {0x1E08F, 0x1E08F, UCAT_MARK}, {0x1E4D0, 0x1E4EB, UCAT_LETTER}, {0x1E4EC, 0x1E4EF, UCAT_MARK},
    {0x1E4F0, 0x1E4F9, UCAT_NUMBER}, {0x1F6DC, 0x1F6DC, UCAT_SYMBOL}, {0x1F774, 0x1F776, UCAT_SYMBOL},
    {0x1F77B, 0x1F77F, UCAT_SYMBOL}, {0x1F7D9, 0x1F7D9, UCAT_SYMBOL}, {0x1FA75, 0x1FA77, UCAT_SYMBOL},
    {0x1FA87, 0x1FA88, UCAT_SYMBOL}, {0x1FAAD, 0x1FAAF, UCAT_SYMBOL}, {0x1FABB, 0x1FABD, UCAT_SYMBOL},
    {0x1FABF, 0x1FABF, UCAT_SYMBOL}, {0x1FACE, 0x1FACF, UCAT_SYMBOL}, {0x1FADA, 0x1FADB, UCAT_SYMBOL},
    {0x1FAE8, 0x1FAE8, UCAT_SYMBOL}, {0x1FAF7, 0x1FAF8, UCAT_SYMBOL}, {0x2B739, 0x2B739, UCAT_LETTER},
    {0x2EBF0, 0x2EE5D, UCAT_LETTER}, {0x31350, 0x323AF, UCAT_LETTER},
};

// Characters assigned in Unicode 16.0 and 17.0: unassigned for llama.cpp.
static const ucp_range g_added_16_17[] = {
    {0x0088F, 0x0088F, 0}, {0x00897, 0x00897, 0}, {0x00C5C, 0x00C5C, 0}, {0x00CDC, 0x00CDC, 0},
    {0x01ACF, 0x01ADD, 0}, {0x01AE0, 0x01AEB, 0}, {0x01B4E, 0x01B4F, 0}, {0x01B7F, 0x01B7F, 0},
    {0x01C89, 0x01C8A, 0}, {0x020C1, 0x020C1, 0}, {0x02427, 0x02429, 0}, {0x02B96, 0x02B96, 0},
    {0x031E4, 0x031E5, 0}, {0x0A7CB, 0x0A7CF, 0}, {0x0A7D2, 0x0A7D2, 0}, {0x0A7D4, 0x0A7D4, 0},
    {0x0A7DA, 0x0A7DC, 0}, {0x0A7F1, 0x0A7F1, 0}, {0x0FBC3, 0x0FBD2, 0}, {0x0FD90, 0x0FD91, 0},
    {0x0FDC8, 0x0FDCE, 0}, {0x105C0, 0x105F3, 0}, {0x10940, 0x10959, 0}, {0x10D40, 0x10D65, 0},
    {0x10D69, 0x10D85, 0}, {0x10D8E, 0x10D8F, 0}, {0x10EC2, 0x10EC7, 0}, {0x10ED0, 0x10ED8, 0},
    {0x10EFA, 0x10EFC, 0}, {0x11380, 0x11389, 0}, {0x1138B, 0x1138B, 0}, {0x1138E, 0x1138E, 0},
    {0x11390, 0x113B5, 0}, {0x113B7, 0x113C0, 0}, {0x113C2, 0x113C2, 0}, {0x113C5, 0x113C5, 0},
    {0x113C7, 0x113CA, 0}, {0x113CC, 0x113D5, 0}, {0x113D7, 0x113D8, 0}, {0x113E1, 0x113E2, 0},
    {0x116D0, 0x116E3, 0}, {0x11B60, 0x11B67, 0}, {0x11BC0, 0x11BE1, 0}, {0x11BF0, 0x11BF9, 0},
    {0x11DB0, 0x11DDB, 0}, {0x11DE0, 0x11DE9, 0}, {0x11F5A, 0x11F5A, 0}, {0x13460, 0x143FA, 0},
    {0x16100, 0x16139, 0}, {0x16D40, 0x16D79, 0}, {0x16EA0, 0x16EB8, 0}, {0x16EBB, 0x16ED3, 0},
    {0x16FF2, 0x16FF6, 0}, {0x187F8, 0x187FF, 0}, {0x18CFF, 0x18CFF, 0}, {0x18D09, 0x18D1E, 0},
    {0x18D80, 0x18DF2, 0}, {0x1CC00, 0x1CCFC, 0}, {0x1CD00, 0x1CEB3, 0}, {0x1CEBA, 0x1CED0, 0},
    {0x1CEE0, 0x1CEF0, 0}, {0x1E5D0, 0x1E5FA, 0}, {0x1E5FF, 0x1E5FF, 0}, {0x1E6C0, 0x1E6DE, 0},
    {0x1E6E0, 0x1E6F5, 0}, {0x1E6FE, 0x1E6FF, 0}, {0x1F6D8, 0x1F6D8, 0}, {0x1F777, 0x1F77A, 0},
    {0x1F8B2, 0x1F8BB, 0}, {0x1F8C0, 0x1F8C1, 0}, {0x1F8D0, 0x1F8D8, 0}, {0x1FA54, 0x1FA57, 0},
    {0x1FA89, 0x1FA8A, 0}, {0x1FA8E, 0x1FA8F, 0}, {0x1FABE, 0x1FABE, 0}, {0x1FAC6, 0x1FAC6, 0},
    {0x1FAC8, 0x1FAC8, 0}, {0x1FACD, 0x1FACD, 0}, {0x1FADC, 0x1FADC, 0}, {0x1FADF, 0x1FADF, 0},
    {0x1FAE9, 0x1FAEA, 0}, {0x1FAEF, 0x1FAEF, 0}, {0x1FBCB, 0x1FBEF, 0}, {0x1FBFA, 0x1FBFA, 0},
    {0x2B73A, 0x2B73F, 0}, {0x2CEA2, 0x2CEAD, 0}, {0x323B0, 0x33479, 0},
};

// The White_Space property.
static bool is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static uint8_t g_cat[UCP_MAX];
static atomic_uchar g_ready[UCP_N_BLOCKS];
static pthread_mutex_t g_fill_lock = PTHREAD_MUTEX_INITIALIZER;
static pcre2_code *g_cat_re;
static pcre2_match_data *g_cat_md;

// One alternative per category; the number of the group that matched gives the category.
static const uint8_t g_group_cat[] = {0, UCAT_UNDEFINED, UCAT_NUMBER, UCAT_LETTER, UCAT_SEPARATOR,
                                      UCAT_MARK, UCAT_PUNCT, UCAT_SYMBOL, UCAT_CONTROL};

static void compile_category_regex(void) {
    static const char pattern[] =
        "(\\p{Cn})|(\\p{N})|(\\p{L})|(\\p{Z})|(\\p{M})|(\\p{P})|(\\p{S})|(\\p{C})";
    int code;
    PCRE2_SIZE where;
    g_cat_re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &code, &where, NULL);
    if (!g_cat_re) ft_abort(__FILE__, __LINE__, "PCRE2 without Unicode support (error %d)", code);
    g_cat_md = pcre2_match_data_create_from_pattern(g_cat_re, NULL);
    FT_ASSERT(g_cat_md);
}

static uint8_t pcre2_category(uint32_t c) {
    if (c >= 0xD800 && c <= 0xDFFF) return UCAT_CONTROL; // surrogates: Cs (no UTF-8 form)
    char buf[4];
    int n = utf8_encode(c, buf);
    int rc = pcre2_match(g_cat_re, (PCRE2_SPTR)buf, (PCRE2_SIZE)n, 0, 0, g_cat_md, NULL);
    if (rc < 2) return UCAT_UNDEFINED;
    return g_group_cat[rc - 1]; // the last group set is the one that matched
}

static void apply_ranges(uint32_t lo, uint32_t hi, const ucp_range *r, size_t n, bool undefined) {
    for (size_t i = 0; i < n; i++) {
        if (r[i].last < lo || r[i].first > hi) continue;
        uint32_t a = FT_MAX(lo, r[i].first), b = FT_MIN(hi, r[i].last);
        for (uint32_t c = a; c <= b; c++) g_cat[c] = undefined ? UCAT_UNDEFINED : r[i].cat;
    }
}

static void fill_block(uint32_t block) {
    pthread_mutex_lock(&g_fill_lock);
    if (!atomic_load_explicit(&g_ready[block], memory_order_relaxed)) {
        if (!g_cat_re) compile_category_regex();
        uint32_t lo = block << UCP_BLOCK_BITS, hi = lo + (1u << UCP_BLOCK_BITS) - 1;
        for (uint32_t c = lo; c <= hi; c++) g_cat[c] = pcre2_category(c);
        apply_ranges(lo, hi, g_added_15, FT_ARRAY_LEN(g_added_15), false);
        apply_ranges(lo, hi, g_added_16_17, FT_ARRAY_LEN(g_added_16_17), true);
        atomic_store_explicit(&g_ready[block], 1, memory_order_release);
    }
    pthread_mutex_unlock(&g_fill_lock);
}

uint16_t ucp_flags(uint32_t cpt) {
    if (cpt >= UCP_MAX) return UCAT_UNDEFINED;
    uint32_t block = cpt >> UCP_BLOCK_BITS;
    if (!atomic_load_explicit(&g_ready[block], memory_order_acquire)) fill_block(block);
    return (uint16_t)(g_cat[cpt] | (is_white_space(cpt) ? UFLAG_WHITESPACE : 0));
}

// ---------------------------------------------------------------------------------------------
// UTF-8

static bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

uint32_t utf8_decode_lenient(const uint8_t *s, size_t n, size_t *i) {
    size_t p = *i;
    uint8_t b = s[p];
    if (b < 0x80) {
        *i = p + 1;
        return b;
    }
    uint32_t c = 0;
    int len = 0;
    if ((b & 0xE0) == 0xC0) c = b & 0x1F, len = 2;
    else if ((b & 0xF0) == 0xE0) c = b & 0x0F, len = 3;
    else if ((b & 0xF8) == 0xF0) c = b & 0x07, len = 4;
    if (len && p + (size_t)len <= n) {
        bool ok = true;
        for (int k = 1; k < len && ok; k++) {
            ok = is_cont(s[p + k]);
            c = (c << 6) | (s[p + k] & 0x3F);
        }
        if (ok && c < UCP_MAX) {
            *i = p + (size_t)len;
            return c;
        }
    }
    *i = p + 1;
    return 0xFFFD;
}

int utf8_encode(uint32_t c, char out[4]) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    FT_ASSERT(c < UCP_MAX);
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

int utf8_lead_len(uint8_t b) {
    static const int by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[b >> 4];
}

// ---------------------------------------------------------------------------------------------
// The byte-level BPE alphabet (GPT-2's bytes_to_unicode)

typedef struct {
    char utf8[256][2];
    uint8_t len[256];
    int16_t byte_of[0x144]; // code point -> byte, -1 if none
} gpt2_alphabet;

static gpt2_alphabet g_alpha;
static pthread_once_t g_alpha_once = PTHREAD_ONCE_INIT;

static bool printable_latin1(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void build_alphabet(void) {
    memset(g_alpha.byte_of, -1, sizeof(g_alpha.byte_of));
    int next = 0x100;
    for (int b = 0; b < 256; b++) {
        uint32_t c = printable_latin1(b) ? (uint32_t)b : (uint32_t)next++;
        char buf[4];
        int n = utf8_encode(c, buf);
        memcpy(g_alpha.utf8[b], buf, (size_t)n);
        g_alpha.len[b] = (uint8_t)n;
        g_alpha.byte_of[c] = (int16_t)b;
    }
}

const char *gpt2_byte_char(uint8_t b, int *len) {
    pthread_once(&g_alpha_once, build_alphabet);
    *len = g_alpha.len[b];
    return g_alpha.utf8[b];
}

int gpt2_char_byte(uint32_t cpt) {
    pthread_once(&g_alpha_once, build_alphabet);
    return cpt < 0x144 ? g_alpha.byte_of[cpt] : -1;
}
