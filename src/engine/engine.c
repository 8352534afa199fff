// engine.c: one sequence on a batch engine (see engine.h), and the generation loop.
#include "engine.h"
#include "batch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ft_engine {
    ft_batch *b;
    int seq;          // the batch engine's one sequence
    int n_batch, n_ctx;
};

ft_engine *ft_engine_init(const ft_model *m, const ft_engine_params *params, ft_err *err) {
    ft_engine_params p = *params;
    p.n_seq = 1;
    if (!ft_engine_params_resolve(m, &p, err)) return NULL;
    ft_batch *b = ft_batch_init(m, &p, err);
    if (!b) return NULL;
    ft_engine *e = ft_calloc(1, sizeof(*e));
    e->b = b;
    e->seq = ft_batch_seq_open(b);
    e->n_batch = ft_batch_chunk(b);
    e->n_ctx = ft_batch_n_ctx(b);
    return e;
}

void ft_engine_free(ft_engine *e) {
    if (!e) return;
    ft_batch_free(e->b);
    free(e);
}

void ft_engine_reset(ft_engine *e) {
    ft_batch_seq_close(e->b, e->seq);
    e->seq = ft_batch_seq_open(e->b);
    ft_batch_backend(e->b)->min_route_gap = INFINITY;
}

float ft_engine_route_gap(const ft_engine *e) { return ft_batch_backend(e->b)->min_route_gap; }
int ft_engine_pos(const ft_engine *e) { return ft_batch_seq_pos(e->b, e->seq); }
int ft_engine_n_ctx(const ft_engine *e) { return e->n_ctx; }
int ft_engine_n_batch(const ft_engine *e) { return e->n_batch; }
const ft_weights *ft_engine_weights(const ft_engine *e) { return ft_batch_weights(e->b); }
bool ft_engine_moe_stats(ft_engine *e, ft_moe_stats *out) { return ft_batch_moe_stats(e->b, out); }
bool ft_engine_route_counts(ft_engine *e, uint64_t *out) { return ft_batch_route_counts(e->b, out); }
bool ft_engine_moe_rebuild(ft_engine *e, int n_slots, ft_err *err) { return ft_batch_moe_rebuild(e->b, n_slots, err); }
enum ft_moe_backend ft_engine_moe_backend(const ft_engine *e) { return ft_batch_moe_backend(e->b); }
size_t ft_engine_weights_copied(const ft_engine *e) { return ft_batch_weights_copied(e->b); }
const ft_model *ft_engine_model(const ft_engine *e) { return ft_batch_model(e->b); }

const float *ft_engine_eval(ft_engine *e, const int32_t *tokens, int n, ft_err *err) {
    int pos = ft_engine_pos(e), n_vocab = ft_engine_model(e)->hp.n_vocab;
    if (n < 1) return ft_err_set(err, "no tokens to evaluate"), NULL;
    if (n > e->n_ctx - pos)
        return ft_err_set(err, "%d tokens do not fit in the context: %d of %d positions used", n, pos, e->n_ctx),
               NULL;
    // all ids checked before the first chunk runs, so a bad id leaves the sequence as it was
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return ft_err_set(err, "token id %d at %d is outside the vocabulary of %d", tokens[i], i, n_vocab), NULL;
    for (int i = 0; i < n; i += e->n_batch) {
        int chunk = FT_MIN(e->n_batch, n - i);
        ft_batch_item it = {.seq = e->seq, .tokens = tokens + i, .n_tok = chunk, .logits = i + chunk == n};
        if (!ft_batch_step(e->b, &it, 1, err)) return NULL;
    }
    return ft_batch_logits(e->b, 0);
}

// ---------------------------------------------------------------------------------------------
// Generation

static bool is_eog(int32_t t, const int32_t *eog, int n_eog) {
    for (int i = 0; i < n_eog; i++)
        if (eog[i] == t) return true;
    return false;
}

bool ft_generate(ft_engine *e, ft_sampler *s, const int32_t *prompt, int n_prompt, int n_predict,
                 const int32_t *eog, int n_eog, ft_token_fn on_token, void *ctx,
                 ft_generate_stats *stats, ft_err *err) {
    ft_generate_stats st = {.n_prompt = n_prompt};
    double t0 = ft_time_s();
    const float *logits = ft_engine_eval(e, prompt, n_prompt, err);
    if (!logits) return false;
    for (int i = 0; i < n_prompt; i++) ft_sampler_accept(s, prompt[i]);
    st.prompt_s = ft_time_s() - t0;
    t0 = ft_time_s();
    for (int i = 0; i < n_predict; i++) {
        int32_t t = ft_sampler_sample(s, logits);
        ft_sampler_accept(s, t);
        if (is_eog(t, eog, n_eog)) {
            st.stopped_eog = true;
            break;
        }
        st.n_gen++;
        if (!on_token(ctx, t)) break;
        if (i + 1 == n_predict || ft_engine_pos(e) >= e->n_ctx) break;
        logits = ft_engine_eval(e, &t, 1, err);
        if (!logits) return false;
    }
    st.gen_s = ft_time_s() - t0;
    if (stats) *stats = st;
    return true;
}
