// metrics.c: request counters and latency histograms, written as Prometheus text (/metrics)
// and JSON (/v1/stats). Touched only by the HTTP thread; the scheduler's live figures
// (running, queued, KV use) and the expert cache's counters (--moe-backend offload: per pool
// and per MoE layer, cumulative since start-up) are passed in.
#include "srv_impl.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_BUCKETS 12

// Bucket upper bounds in seconds.
static const double k_ttft_le[N_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double k_tpot_le[N_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2.5, 5};

typedef struct hist {
    long count[N_BUCKETS + 1]; // the last: +Inf
    long n;
    double sum;
} hist;

struct srv_metrics {
    long http_requests;
    long requests[5]; // by finish reason (srv_finish)
    long prompt_tokens, prompt_cached, gen_tokens;
    hist ttft, tpot;
    double started;
};

srv_metrics *srv_metrics_init(void) {
    srv_metrics *m = ft_calloc(1, sizeof(*m));
    m->started = ft_time_s();
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    free(m);
}

void srv_metrics_request(srv_metrics *m) {
    m->http_requests++;
}

static void hist_add(hist *h, const double *le, double v) {
    int i = 0;
    while (i < N_BUCKETS && v > le[i])
        i++;
    h->count[i]++;
    h->n++;
    h->sum += v;
}

void srv_metrics_job(srv_metrics *m, const srv_job *j) {
    m->requests[j->finish]++;
    m->prompt_tokens += (long)j->prompt.n;
    m->prompt_cached += j->n_cached;
    m->gen_tokens += j->n_gen;
    if (j->t_first > 0) hist_add(&m->ttft, k_ttft_le, j->t_first - j->t_submit);
    if (j->n_gen > 1 && j->t_end > j->t_first)
        hist_add(&m->tpot, k_tpot_le, (j->t_end - j->t_first) / (j->n_gen - 1));
}

static void prom_hist(srv_buf *b, const char *name, const char *help, const hist *h, const double *le) {
    char line[200];
    int n = snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    srv_buf_add(b, line, (size_t)n);
    long cum = 0;
    for (int i = 0; i <= N_BUCKETS; i++) {
        cum += h->count[i];
        if (i < N_BUCKETS)
            n = snprintf(line, sizeof(line), "%s_bucket{le=\"%g\"} %ld\n", name, le[i], cum);
        else
            n = snprintf(line, sizeof(line), "%s_bucket{le=\"+Inf\"} %ld\n", name, cum);
        srv_buf_add(b, line, (size_t)n);
    }
    n = snprintf(line, sizeof(line), "%s_sum %.6f\n%s_count %ld\n", name, h->sum, name, h->n);
    srv_buf_add(b, line, (size_t)n);
}

static void prom_val(srv_buf *b, const char *name, const char *type, const char *help, double v) {
    char line[300];
    int n = snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type,
                     name, v);
    srv_buf_add(b, line, (size_t)n);
}

static const char *k_finish[5] = {"none", "stop", "length", "cancelled", "error"};

// The expert cache's counters: one series per pool and per MoE layer for each counter.
static void prom_moe(srv_buf *b, const ft_moe_stats *moe) {
    prom_val(b, "ft_moe_cache_slots", "gauge", "Expert slots of the GPU expert cache (--moe-cache-size)",
             moe->n_slots);
    prom_val(b, "ft_moe_cache_bytes", "gauge", "Device bytes of the expert cache's arenas", (double)moe->cache_bytes);
    if (moe->layer_slots) {
        static const char head[] = "# HELP ft_moe_layer_slots Expert slots the layer holds, per layer\n"
                                   "# TYPE ft_moe_layer_slots gauge\n";
        srv_buf_add(b, head, sizeof(head) - 1);
        char line[128];
        for (int j = 0; j < moe->n_layers; j++) {
            int n = snprintf(line, sizeof(line), "ft_moe_layer_slots{layer=\"%d\",pool=\"%d\"} %d\n", moe->layer_block[j],
                             moe->layer_pool[j], moe->layer_slots[j]);
            srv_buf_add(b, line, (size_t)n);
        }
    }
    static const struct {
        const char *name, *help;
        size_t off;
        double scale;
    } k[] = {
        {"selections_total", "Experts selected by the router", offsetof(ft_moe_counts, selections), 1},
        {"hits_total", "Selections served from a slot", offsetof(ft_moe_counts, hits), 1},
        {"misses_total", "Selections not in a slot (copied in, or computed on the CPU in hybrid mode)",
         offsetof(ft_moe_counts, misses), 1},
        {"cpu_computed_total", "Missed experts computed on the CPU instead of copied (hybrid mode)",
         offsetof(ft_moe_counts, cpu_computed), 1},
        {"h2d_bytes_total", "Host-to-device bytes of expert copies", offsetof(ft_moe_counts, bytes_copied), 1},
        {"copy_seconds_total", "Device time of the expert copies", offsetof(ft_moe_counts, copy_ns), 1e-9},
        {"guesses_total", "Experts a next-layer predictor guessed (prefetch)", offsetof(ft_moe_counts, guesses), 1},
        {"guesses_right_total", "Guesses the layer's step then selected", offsetof(ft_moe_counts, guesses_right), 1},
        {"prefetched_total", "Experts copied ahead of their layer's step (prefetch)", offsetof(ft_moe_counts, prefetched),
         1},
        {"prefetch_used_total", "Prefetched experts the step then hit", offsetof(ft_moe_counts, prefetch_used), 1},
        {"prefetch_h2d_bytes_total", "Host-to-device bytes of the prefetch's copies",
         offsetof(ft_moe_counts, prefetch_bytes), 1},
    };
    char line[256];
    for (size_t i = 0; i < FT_ARRAY_LEN(k); i++) {
        for (int level = 0; level < 2; level++) { // per pool, then per layer
            const char *what = level ? "layer" : "pool";
            int n = snprintf(line, sizeof(line), "# HELP ft_moe_%s_%s %s, per %s\n# TYPE ft_moe_%s_%s counter\n", what,
                             k[i].name, k[i].help, what, what, k[i].name);
            srv_buf_add(b, line, (size_t)n);
            int count = level ? moe->n_layers : moe->n_pools;
            for (int j = 0; j < count; j++) {
                const ft_moe_counts *c = level ? &moe->layers[j] : &moe->pools[j];
                double v = (double)*(const uint64_t *)((const char *)c + k[i].off) * k[i].scale;
                if (level)
                    n = snprintf(line, sizeof(line), "ft_moe_layer_%s{layer=\"%d\",pool=\"%d\"} %.17g\n", k[i].name,
                                 moe->layer_block[j], moe->layer_pool[j], v);
                else
                    n = snprintf(line, sizeof(line), "ft_moe_pool_%s{pool=\"%d\"} %.17g\n", k[i].name, j, v);
                srv_buf_add(b, line, (size_t)n);
            }
        }
    }
}

char *srv_metrics_prometheus(const srv_metrics *m, const srv_sched_stats *s, const ft_moe_stats *moe) {
    srv_buf b = {0};
    prom_val(&b, "ft_http_requests_total", "counter", "HTTP requests received", (double)m->http_requests);
    srv_buf_add(&b, "# HELP ft_requests_total Generation requests finished, by reason\n", 65);
    srv_buf_add(&b, "# TYPE ft_requests_total counter\n", 33);
    for (int i = 1; i < 5; i++) {
        char line[100];
        int n = snprintf(line, sizeof(line), "ft_requests_total{finish=\"%s\"} %ld\n", k_finish[i],
                         m->requests[i]);
        srv_buf_add(&b, line, (size_t)n);
    }
    prom_val(&b, "ft_prompt_tokens_total", "counter", "Prompt tokens processed", (double)m->prompt_tokens);
    prom_val(&b, "ft_prompt_tokens_cached_total", "counter", "Prompt tokens whose KV the prefix cache had",
             (double)m->prompt_cached);
    prom_val(&b, "ft_prompt_tokens_computed_total", "counter", "Prompt tokens computed",
             (double)(m->prompt_tokens - m->prompt_cached));
    prom_val(&b, "ft_generation_tokens_total", "counter", "Tokens generated", (double)m->gen_tokens);
    prom_hist(&b, "ft_time_to_first_token_seconds", "Time from arrival to the first generated token",
              &m->ttft, k_ttft_le);
    prom_hist(&b, "ft_time_per_output_token_seconds", "Decode time per generated token after the first",
              &m->tpot, k_tpot_le);
    prom_val(&b, "ft_requests_running", "gauge", "Sequences being decoded", s->running);
    prom_val(&b, "ft_requests_waiting", "gauge", "Requests in the queue", s->queued);
    prom_val(&b, "ft_kv_cache_used_tokens", "gauge", "KV cache positions held by sequences", (double)s->kv_used);
    prom_val(&b, "ft_kv_cache_capacity_tokens", "gauge", "KV cache positions all sequences share",
             (double)s->kv_total);
    prom_val(&b, "ft_prefix_cache_tokens", "gauge", "KV cache positions the prefix cache keeps",
             (double)s->kv_cached);
    prom_val(&b, "ft_kv_cache_usage_ratio", "gauge", "KV cache positions in use / capacity",
             s->kv_total ? (double)s->kv_used / (double)s->kv_total : 0.0);
    if (moe) prom_moe(&b, moe);
    return b.p;
}

static json_t *hist_json(const hist *h, const double *le) {
    json_t *buckets = json_array();
    long cum = 0;
    for (int i = 0; i <= N_BUCKETS; i++) {
        cum += h->count[i];
        json_array_append_new(buckets, json_pack("{s:o,s:i}", "le",
                                                 i < N_BUCKETS ? json_real(le[i]) : json_string("+Inf"),
                                                 "count", (json_int_t)cum));
    }
    return json_pack("{s:i,s:f,s:f,s:o}", "count", (json_int_t)h->n, "sum_s", h->sum, "mean_s",
                     h->n ? h->sum / (double)h->n : 0.0, "buckets", buckets);
}

static json_t *moe_counts_json(const ft_moe_counts *c) {
    json_t *o = json_pack("{s:I,s:I,s:I,s:I,s:f,s:I,s:f,s:f}", "selections", (json_int_t)c->selections, "hits",
                          (json_int_t)c->hits, "misses", (json_int_t)c->misses, "cpu_computed",
                          (json_int_t)c->cpu_computed, "hit_rate", ft_moe_hit_rate(c),
                          "h2d_bytes", (json_int_t)c->bytes_copied, "copy_seconds", (double)c->copy_ns * 1e-9,
                          "copy_gbs", ft_moe_copy_gbps(c));
    json_object_set_new(o, "prefetch",
                        json_pack("{s:I,s:I,s:f,s:I,s:I,s:f,s:I}", "guesses", (json_int_t)c->guesses, "guesses_right",
                                  (json_int_t)c->guesses_right, "accuracy", ft_moe_predict_accuracy(c), "copies",
                                  (json_int_t)c->prefetched, "used", (json_int_t)c->prefetch_used, "used_share",
                                  ft_moe_prefetch_used(c), "h2d_bytes", (json_int_t)c->prefetch_bytes));
    json_object_set_new(json_object_get(o, "prefetch"), "wasted_h2d_bytes",
                        json_integer((json_int_t)ft_moe_prefetch_wasted_bytes(c)));
    return o;
}

json_t *srv_metrics_moe_json(const ft_moe_stats *moe) {
    json_t *pools = json_array(), *layers = json_array();
    for (int p = 0; p < moe->n_pools; p++) {
        json_t *o = moe_counts_json(&moe->pools[p]);
        json_object_set_new(o, "pool", json_integer(p));
        json_object_set_new(o, "slots", json_integer(moe->pool_slots[p]));
        json_object_set_new(o, "layers", json_integer(moe->pool_layers[p]));
        json_array_append_new(pools, o);
    }
    for (int i = 0; i < moe->n_layers; i++) {
        json_t *o = moe_counts_json(&moe->layers[i]);
        json_object_set_new(o, "layer", json_integer(moe->layer_block[i]));
        json_object_set_new(o, "pool", json_integer(moe->layer_pool[i]));
        if (moe->layer_slots) json_object_set_new(o, "slots", json_integer(moe->layer_slots[i]));
        json_array_append_new(layers, o);
    }
    return json_pack("{s:i,s:s,s:I,s:o,s:o,s:o}", "slots", moe->n_slots, "layout", moe->uniform ? "uniform" : "exact",
                     "bytes", (json_int_t)moe->cache_bytes, "total", moe_counts_json(&moe->total), "pools", pools,
                     "layers", layers);
}

// The route counters: the MoE blocks, and per block the selections of each expert.
static json_t *routes_json(const srv_routes *r) {
    json_t *blocks = json_array(), *rows = json_array();
    uint64_t total = 0;
    for (int i = 0; i < r->n_moe; i++) {
        json_array_append_new(blocks, json_integer(r->block[i]));
        json_t *row = json_array();
        for (int e = 0; e < r->n_expert; e++) {
            uint64_t c = r->counts[(size_t)i * (size_t)r->n_expert + (size_t)e];
            json_array_append_new(row, json_integer((json_int_t)c));
            total += c;
        }
        json_array_append_new(rows, row);
    }
    return json_pack("{s:i,s:i,s:I,s:o,s:o}", "n_expert", r->n_expert, "n_expert_used", r->n_expert_used,
                     "total", (json_int_t)total, "layers", blocks, "selections", rows);
}

json_t *srv_metrics_json(const srv_metrics *m, const srv_sched_stats *s, const ft_moe_stats *moe,
                         const srv_routes *routes) {
    json_t *fin = json_object();
    for (int i = 1; i < 5; i++)
        json_object_set_new(fin, k_finish[i], json_integer(m->requests[i]));
    json_t *o = json_pack("{s:f,s:i,s:o,s:i,s:i,s:i,s:i,s:o,s:o,s:i,s:i,s:{s:i,s:i,s:b,s:i},s:o}", "uptime_s",
                     ft_time_s() - m->started, "http_requests", (json_int_t)m->http_requests, "requests", fin,
                     "prompt_tokens", (json_int_t)m->prompt_tokens, "prompt_tokens_cached",
                     (json_int_t)m->prompt_cached, "prompt_tokens_computed",
                     (json_int_t)(m->prompt_tokens - m->prompt_cached), "generation_tokens",
                     (json_int_t)m->gen_tokens, "ttft", hist_json(&m->ttft, k_ttft_le),
                     "time_per_output_token", hist_json(&m->tpot, k_tpot_le), "running",
                     (json_int_t)s->running, "queued", (json_int_t)s->queued, "kv_cache", "used_tokens",
                     (json_int_t)s->kv_used, "capacity_tokens", (json_int_t)s->kv_total, "prefix_cache",
                     s->prefix_cache, "prefix_cache_tokens", (json_int_t)s->kv_cached, "moe_cache",
                     moe ? srv_metrics_moe_json(moe) : json_null());
    json_object_set_new(o, "engine",
                        json_pack("{s:s,s:s,s:I,s:I,s:I}", "device", s->device ? s->device : "none", "moe_backend",
                                  s->moe_backend ? s->moe_backend : "none", "steps", (json_int_t)s->steps,
                                  "tokens_generated", (json_int_t)s->tokens_generated, "prompt_tokens_evaluated",
                                  (json_int_t)s->prompt_evaluated));
    json_object_set_new(o, "routing", routes ? routes_json(routes) : json_null());
    return o;
}
