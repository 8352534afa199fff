// llama_api.c: llama-server's own POST /completion, for the scripts and UIs written against it:
// request parsing into a job, and the responses (one JSON object, or SSE `data:` events of
// {"content", "stop": false} ending with one whose "stop" is true and which carries the totals).
#include "srv_impl.h"

#include <event2/http.h>

#include <stdio.h>
#include <string.h>

// Sampler fields ft does not implement, each with the value that switches it off (llama-server's
// web UI sends them so): any other value is refused. Their companions (mirostat_tau, dry_base,
// xtc_threshold, ...) do nothing while these are off, so they pass.
static const struct {
    const char *name;
    double off;
} k_off[] = {{"n_probs", 0},        {"mirostat", 0},         {"typical_p", 1}, {"dynatemp_range", 0},
             {"dry_multiplier", 0}, {"xtc_probability", 0},  {"n_keep", 0},    {"min_keep", 0},
             {"n_indent", 0},       {"t_max_predict_ms", 0}, {"id_slot", -1}};
static const char *const k_off_bool[] = {"post_sampling_probs", "return_tokens", "timings_per_token",
                                         "return_progress", NULL};
static const char *const k_unimplemented[] = {"logit_bias", "image_data", "multimodal_data", "lora",
                                              "samplers",   "response_fields", NULL};

static bool refuse_on(const srv_params *p, json_t *body, ft_err *err) {
    for (size_t i = 0; i < FT_ARRAY_LEN(k_off); i++) {
        json_t *x = json_object_get(body, k_off[i].name);
        if (!x || json_is_null(x) || (json_is_number(x) && json_number_value(x) == k_off[i].off)) continue;
        if (!p->lenient)
            return ft_err_set(
                err, "'%s' other than %g is not supported yet (ft serve --lenient ignores such fields)",
                k_off[i].name, k_off[i].off);
        FT_LOG_INFO("ignoring the request's '%s' (--lenient)", k_off[i].name);
    }
    for (const char *const *f = k_off_bool; *f; f++) {
        json_t *x = json_object_get(body, *f);
        if (!x || json_is_null(x) || json_is_false(x)) continue;
        if (!p->lenient)
            return ft_err_set(err, "'%s' is not supported yet (ft serve --lenient ignores such fields)", *f);
        FT_LOG_INFO("ignoring the request's '%s' (--lenient)", *f);
    }
    return srv_refuse_unimplemented(p, body, k_unimplemented, err);
}

bool srv_llama_parse_completion(const srv_params *p, const tok_vocab *v, int n_ctx, json_t *body, srv_job *j,
                                ft_err *err) {
    j->api = SRV_API_LLAMA_COMPLETION;
    if (!refuse_on(p, body, err) || !srv_parse_constraint(p, body, j, err)) return false;
    int64_t n_predict = -1, last_n = (p->sampling_set & FT_SAMPLE_PENALTY_LAST_N) ? p->sampling.penalty_last_n : 64;
    bool cache_prompt = true;
    // llama-server's sampling defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05) under
    // the server's own
    if (!srv_get_bool(body, "stream", &j->stream, err) ||
        !srv_get_int(body, "max_tokens", -1, INT32_MAX, &n_predict, err) ||
        !srv_get_int(body, "n_predict", -1, INT32_MAX, &n_predict, err) ||
        !srv_parse_sampling_from(p, body, j, "stop", ft_sampler_default_params(), err) ||
        !srv_get_int(body, "repeat_last_n", -1, 1 << 20, &last_n, err) ||
        !srv_get_bool(body, "cache_prompt", &cache_prompt, err))
        return false;
    if (!cache_prompt && !p->lenient)
        return ft_err_set(err, "'cache_prompt': false is not supported: the prefix cache is the server's "
                               "(ft serve --no-prefix-cache)");
    j->n_predict = (int)n_predict; // -1: until the end of generation or of the context
    j->sp.penalty_last_n = last_n < 0 ? n_ctx : (int)last_n;
    return srv_parse_completion_prompt(v, json_object_get(body, "prompt"), j, err);
}

static bool parse_completion(srv_http *h, json_t *body, srv_job *j, ft_err *err) {
    return srv_llama_parse_completion(srv_http_params(h), srv_http_vocab(h), srv_http_n_ctx(h), body, j, err);
}

void srv_llama_completion(srv_http *h, struct evhttp_request *req, json_t *body) {
    srv_http_prepare(h, srv_http_new_job(h, req, "cmpl-ft"), body, parse_completion, false);
}

// ---------------------------------------------------------------------------------------------
// Output

// The last object's fields: why it stopped, the token counts and the timings.
static void add_totals(const srv_job *j, json_t *o) {
    const char *stop_type = j->finish == SRV_FINISH_LENGTH ? "limit" : j->stop_matched ? "word" : "eos";
    const double prompt_ms = j->t_first > j->t_start ? 1e3 * (j->t_first - j->t_start) : 0;
    const double gen_ms = j->t_end > j->t_first && j->n_gen > 0 ? 1e3 * (j->t_end - j->t_first) : 0;
    const double n_computed = (double)j->prompt.n - (double)j->n_cached;
    json_object_set_new(o, "stop", json_true());
    json_object_set_new(o, "model", json_string(j->model_name));
    json_object_set_new(o, "stop_type", json_string(stop_type));
    json_object_set_new(o, "stopping_word", json_string(j->stop_matched ? j->stop_matched : ""));
    json_object_set_new(o, "tokens_predicted", json_integer(j->n_gen));
    json_object_set_new(o, "tokens_evaluated", json_integer((json_int_t)j->prompt.n));
    json_object_set_new(o, "tokens_cached", json_integer(j->n_cached));
    json_object_set_new(o, "truncated", json_false());
    json_object_set_new(
        o, "timings",
        json_pack("{s:i,s:f,s:f,s:i,s:f,s:f}", "prompt_n", (json_int_t)n_computed, "prompt_ms", prompt_ms,
                  "prompt_per_second", prompt_ms > 0 ? n_computed / (prompt_ms / 1e3) : 0.0, "predicted_n",
                  (json_int_t)j->n_gen, "predicted_ms", gen_ms, "predicted_per_second",
                  gen_ms > 0 ? (double)(j->n_gen > 1 ? j->n_gen - 1 : 0) / (gen_ms / 1e3) : 0.0));
}

// A job cut short: 503 after a shutdown, 500 on a failure.
static int cut_status(const srv_job *j) {
    return j->finish == SRV_FINISH_CANCEL ? 503 : 500;
}
static const char *cut_type(const srv_job *j) {
    return cut_status(j) == 503 ? "unavailable_error" : "server_error";
}

void srv_llama_output(srv_job *j, const char *text, size_t n, bool done) {
    if (j->stream) {
        if (n || !j->head_sent)
            srv_sse_send(j, NULL,
                         json_pack("{s:i,s:o,s:b}", "index", 0, "content", srv_json_str(text, n), "stop", 0));
        if (done && srv_job_cut_short(j)) {
            srv_sse_send(j, NULL,
                         json_pack("{s:{s:i,s:s,s:s}}", "error", "code", cut_status(j), "message",
                                   srv_job_cut_message(j), "type", cut_type(j)));
            srv_sse_end(j);
        } else if (done) {
            json_t *last = json_pack("{s:i,s:s}", "index", 0, "content", "");
            add_totals(j, last);
            srv_sse_send(j, NULL, last);
            srv_sse_end(j);
        }
        return;
    }
    srv_buf_add(&j->content, text, n);
    if (!done || !j->req) return;
    struct evhttp_request *req = srv_job_take_req(j);
    if (srv_job_cut_short(j)) {
        srv_reply_error(req, cut_status(j), cut_type(j), srv_job_cut_message(j));
        return;
    }
    json_t *res = json_pack("{s:i,s:o}", "index", 0, "content",
                            srv_json_str(j->content.p ? j->content.p : "", j->content.n));
    add_totals(j, res);
    srv_reply_json(req, 200, res);
}
