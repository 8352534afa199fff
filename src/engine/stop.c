// stop.c: stop-string matching (see stop.h).
#include "stop.h"
#include "../util/util.h"

#include <stdlib.h>
#include <string.h>

struct ft_stop {
    char **stops;
    size_t *lens;
    int n;
    size_t max_len;
    char *held;   // (max_len) text that may still start a stop string
    size_t n_held;
    const char *matched; // the stop string that completed, or NULL
};

ft_stop *ft_stop_init(const char *const *stops, int n) {
    ft_stop *s = ft_calloc(1, sizeof(*s));
    s->stops = ft_calloc((size_t)FT_MAX(n, 1), sizeof(char *));
    s->lens = ft_calloc((size_t)FT_MAX(n, 1), sizeof(size_t));
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) continue;
        s->stops[s->n] = ft_strdup(stops[i]);
        s->lens[s->n] = strlen(stops[i]);
        s->max_len = FT_MAX(s->max_len, s->lens[s->n]);
        s->n++;
    }
    s->held = ft_malloc(s->max_len + 1);
    return s;
}

void ft_stop_free(ft_stop *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->held);
    free(s);
}

// Length of the longest suffix of buf[0..n) that is a proper prefix of some stop string.
static size_t partial_suffix(const ft_stop *s, const char *buf, size_t n) {
    size_t best = 0;
    for (int i = 0; i < s->n; i++)
        for (size_t k = FT_MIN(n, s->lens[i] - 1); k > best; k--)
            if (!memcmp(buf + n - k, s->stops[i], k)) {
                best = k;
                break;
            }
    return best;
}

bool ft_stop_feed(ft_stop *s, const char *text, size_t len, ft_emit_fn emit, void *ctx) {
    if (s->n == 0) {
        if (len) emit(ctx, text, len);
        return false;
    }
    // Byte by byte through the held window: at most max_len bytes are kept, so this needs no
    // buffer beyond it.
    for (size_t i = 0; i < len; i++) {
        s->held[s->n_held++] = text[i];
        for (int k = 0; k < s->n; k++)
            if (s->n_held >= s->lens[k] && !memcmp(s->held + s->n_held - s->lens[k], s->stops[k], s->lens[k])) {
                if (s->n_held > s->lens[k]) emit(ctx, s->held, s->n_held - s->lens[k]);
                s->n_held = 0;
                s->matched = s->stops[k];
                return true;
            }
        size_t keep = partial_suffix(s, s->held, s->n_held);
        if (keep < s->n_held) {
            emit(ctx, s->held, s->n_held - keep);
            memmove(s->held, s->held + s->n_held - keep, keep);
            s->n_held = keep;
        }
    }
    return false;
}

const char *ft_stop_matched(const ft_stop *s) { return s->matched; }

void ft_stop_flush(ft_stop *s, ft_emit_fn emit, void *ctx) {
    if (s->n_held) emit(ctx, s->held, s->n_held);
    s->n_held = 0;
}
