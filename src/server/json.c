// json.c: request-field readers with type checks, UTF-8-safe JSON strings, the byte buffer
// and the <think> splitter shared by the API files.
#include "srv_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void srv_buf_add(srv_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = FT_MAX(b->n + n + 1, b->cap * 2 + 64);
        b->p = ft_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void srv_buf_free(srv_buf *b) {
    free(b->p);
    *b = (srv_buf){0};
}

// Length of the valid UTF-8 character at s (1..4), or 0 if invalid.
static int utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) return c ? 1 : 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if ((size_t)len > n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

json_t *srv_json_str(const char *s, size_t n) {
    json_t *r = json_stringn(s, n);
    if (r) return r;
    srv_buf b = {0};
    srv_buf_add(&b, "", 0);
    for (size_t i = 0; i < n;) {
        int l = utf8_len((const unsigned char *)s + i, n - i);
        if (l) {
            srv_buf_add(&b, s + i, (size_t)l);
            i += (size_t)l;
        } else {
            srv_buf_add(&b, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    r = json_stringn(b.p, b.n);
    srv_buf_free(&b);
    return r ? r : json_string("");
}

bool srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, ft_err *err) {
    json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x)) return true;
    if (!json_is_number(x)) return ft_err_set(err, "'%s' must be a number", key);
    double v = json_number_value(x);
    if (!isfinite(v) || v < lo || v > hi) return ft_err_set(err, "'%s' must be in [%g, %g]", key, lo, hi);
    *out = v;
    return true;
}

bool srv_get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, ft_err *err) {
    json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x)) return true;
    double v;
    if (json_is_integer(x))
        v = (double)json_integer_value(x);
    else if (json_is_real(x) && json_real_value(x) == floor(json_real_value(x)))
        v = json_real_value(x);
    else
        return ft_err_set(err, "'%s' must be an integer", key);
    if (!(v >= (double)lo && v <= (double)hi))
        return ft_err_set(err, "'%s' must be an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
    *out = json_is_integer(x) ? json_integer_value(x) : (int64_t)v;
    return true;
}

bool srv_get_bool(json_t *o, const char *key, bool *out, ft_err *err) {
    json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x)) return true;
    if (!json_is_boolean(x)) return ft_err_set(err, "'%s' must be a boolean", key);
    *out = json_is_true(x);
    return true;
}

static ft_sampler_params openai_sampling(void) {
    ft_sampler_params sp = ft_sampler_default_params();
    // OpenAI's defaults: temperature 1, top_p 1, no top-k / min-p
    sp.temp = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    return sp;
}

bool srv_parse_sampling(const srv_params *p, json_t *body, srv_job *j, const char *stop_key, ft_err *err) {
    return srv_parse_sampling_from(p, body, j, stop_key, openai_sampling(), err);
}

bool srv_parse_sampling_from(const srv_params *p, json_t *body, srv_job *j, const char *stop_key,
                             ft_sampler_params base, ft_err *err) {
    ft_sampler_params sp = ft_sampler_overlay(base, &p->sampling, p->sampling_set);
    double d;
    int64_t i;
#define NUM(key, lo, hi, field)                                                                              \
    d = sp.field;                                                                                            \
    if (!srv_get_num(body, key, lo, hi, &d, err)) return false;                                              \
    sp.field = (float)d;
    NUM("temperature", 0, 100, temp)
    NUM("top_p", 0, 1, top_p)
    NUM("min_p", 0, 1, min_p)
    NUM("presence_penalty", -2, 2, presence_penalty)
    NUM("frequency_penalty", -2, 2, frequency_penalty)
    NUM("repeat_penalty", 0, 100, repeat_penalty)
#undef NUM
    i = sp.top_k;
    if (!srv_get_int(body, "top_k", -1, 1 << 30, &i, err)) return false;
    sp.top_k = i < 0 ? 0 : (int)i;
    i = -1;
    if (!srv_get_int(body, "seed", INT64_MIN, INT64_MAX, &i, err)) return false;
    sp.seed = i >= 0                                 ? (uint64_t)i
              : (p->sampling_set & FT_SAMPLE_SEED) ? p->sampling.seed
                                                   : (uint64_t)(ft_time_s() * 1e6) ^ j->id;
    j->sp = sp;
    if (!srv_get_bool(body, "ignore_eos", &j->ignore_eos, err)) return false;

    json_t *st = json_object_get(body, stop_key);
    if (st && !json_is_null(st)) {
        if (json_is_string(st)) {
            if (json_string_length(st)) j->stops[j->n_stops++] = ft_strdup(json_string_value(st));
        } else if (json_is_array(st)) {
            if (json_array_size(st) > SRV_MAX_STOPS)
                return ft_err_set(err, "'%s' has more than %d entries", stop_key, SRV_MAX_STOPS);
            size_t k;
            json_t *x;
            json_array_foreach(st, k, x) {
                if (!json_is_string(x))
                    return ft_err_set(err, "'%s' must be a string or an array of strings", stop_key);
                if (json_string_length(x)) j->stops[j->n_stops++] = ft_strdup(json_string_value(x));
            }
        } else
            return ft_err_set(err, "'%s' must be a string or an array of strings", stop_key);
    }
    return true;
}

bool srv_job_cut_short(const srv_job *j) { return j->finish == SRV_FINISH_CANCEL || j->finish == SRV_FINISH_ERROR; }

const char *srv_job_cut_message(const srv_job *j) {
    if (j->finish == SRV_FINISH_CANCEL)
        return j->disconnected // seen only by a client that half-closed where that counts as gone (HTTP/1.0)
                   ? "the request was cancelled: the client closed the connection (an HTTP/1.0 client "
                     "must not half-close it before the answer)"
                   : "the server is shutting down: the request was cancelled";
    return j->errmsg[0] ? j->errmsg : "generation failed";
}

static bool unset(json_t *v) {
    return !v || json_is_null(v) || (json_is_array(v) && !json_array_size(v)) || (json_is_object(v) && !json_object_size(v));
}

bool srv_refuse_unimplemented(const srv_params *p, json_t *body, const char *const *fields, ft_err *err) {
    for (; *fields; fields++) {
        if (unset(json_object_get(body, *fields))) continue;
        if (!p->lenient)
            return ft_err_set(err, "'%s' is not supported yet (ft serve --lenient ignores such fields)", *fields);
        FT_LOG_INFO("ignoring the request's '%s' (--lenient)", *fields);
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// <think> splitting (and gpt-oss's channels, tok_harmony)

static const char k_open[] = "<think>", k_close[] = "</think>";

static void route(srv_think *t, const char *s, size_t n, srv_buf *content, srv_buf *reasoning) {
    if (t->state == 1) {
        srv_buf_add(reasoning, s, n);
        return;
    }
    if (t->state == 3) { // drop the white space between </think> and the answer
        while (n && (*s == '\n' || *s == ' ' || *s == '\r' || *s == '\t'))
            s++, n--;
        if (!n) return;
        t->state = 2;
    }
    srv_buf_add(content, s, n);
}

typedef struct {
    srv_buf *content, *reasoning;
} channel_bufs;

// A harmony channel's text into the answer or the reasoning; the rest (tool calls, where the
// request has no tools to parse them: tool_call.c) is dropped.
static void to_channel(void *ctx, enum tok_channel ch, const char *s, size_t n) {
    channel_bufs *b = ctx;
    if (ch == TOK_CHANNEL_CONTENT || ch == TOK_CHANNEL_REASONING)
        srv_buf_add(ch == TOK_CHANNEL_REASONING ? b->reasoning : b->content, s, n);
}

void srv_think_feed(srv_think *t, const char *s, size_t n, srv_buf *content, srv_buf *reasoning) {
    if (t->harmony) {
        channel_bufs b = {content, reasoning};
        tok_harmony_feed(&t->h, s, n, to_channel, &b);
        return;
    }
    const char *open = t->open ? t->open : k_open, *close = t->close ? t->close : k_close;
    size_t n_open = strlen(open), n_close = strlen(close);
    FT_ASSERT(n_open < sizeof(t->hold) && n_close < sizeof(t->hold));
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (t->state == 2) {
            srv_buf_add(content, s + i, n - i);
            return;
        }
        if (t->state == 0) {
            if (t->n_hold == 0 && (c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
                if (t->n_ws < sizeof(t->ws)) {
                    t->ws[t->n_ws++] = c;
                    continue;
                }
                t->hold[t->n_hold++] = c; // too much white space for a <think> to follow
            } else {
                t->hold[t->n_hold++] = c;
            }
            if (memcmp(t->hold, open, t->n_hold) != 0) {
                t->state = 2; // no <think>: the white space before it was content
                srv_buf_add(content, t->ws, t->n_ws);
                srv_buf_add(content, t->hold, t->n_hold);
                t->n_hold = t->n_ws = 0;
            } else if (t->n_hold == n_open) {
                t->state = 1;
                t->n_hold = t->n_ws = 0;
            }
            continue;
        }
        // states 1 and 3: look for </think> while in think
        if (t->state == 1) {
            t->hold[t->n_hold++] = c;
            if (memcmp(t->hold, close, t->n_hold) == 0) {
                if (t->n_hold == n_close) {
                    t->state = 3;
                    t->n_hold = 0;
                }
                continue;
            }
            // not a prefix any more: release the first byte, retry the rest
            size_t h = t->n_hold;
            char tmp[sizeof(t->hold)];
            memcpy(tmp, t->hold, h);
            t->n_hold = 0;
            srv_buf_add(reasoning, tmp, 1);
            for (size_t k = 1; k < h; k++) {
                if (t->n_hold == 0 && tmp[k] != close[0]) {
                    srv_buf_add(reasoning, tmp + k, 1);
                    continue;
                }
                t->hold[t->n_hold++] = tmp[k];
                if (memcmp(t->hold, close, t->n_hold) != 0) {
                    srv_buf_add(reasoning, t->hold, t->n_hold);
                    t->n_hold = 0;
                }
            }
            continue;
        }
        route(t, &c, 1, content, reasoning);
    }
}

void srv_think_flush(srv_think *t, srv_buf *content, srv_buf *reasoning) {
    if (t->harmony) {
        channel_bufs b = {content, reasoning};
        tok_harmony_flush(&t->h, to_channel, &b);
        return;
    }
    if (t->state == 0) srv_buf_add(content, t->ws, t->n_ws);
    t->n_ws = 0;
    if (t->n_hold) {
        if (t->state == 1)
            srv_buf_add(reasoning, t->hold, t->n_hold);
        else
            srv_buf_add(content, t->hold, t->n_hold);
    }
    t->n_hold = 0;
}
