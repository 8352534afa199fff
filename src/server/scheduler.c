// scheduler.c: the inference thread and its continuous batching. Jobs wait in a bounded FIFO;
// up to max_running of them hold a slot (a sequence of the batch engine with its KV cache, a
// sampler, a streaming detokenizer and a stop-string matcher). Each step of the loop:
//
//   1. admits waiting jobs into free slots (new requests join between steps); a prompt that
//      starts like an earlier one takes the KV blocks the prefix cache kept of it (batch.h);
//   2. drops cancelled jobs (client gone): their sequence closes and its KV is free at once;
//   3. builds one batch: every decoding slot's last sampled token first, then prefill chunks
//      (--batch-size tokens at most) of the slots still reading their prompt, in turn, while
//      they fit in the step, so a long prompt never stalls the decoders. All sequences draw
//      KV blocks from one pool: a chunk that finds none waits; a decoder that finds none sends
//      the youngest prompt still in prefill back to the queue (it has sent nothing yet, and
//      its finished blocks stay cached), and ends with "length" only when there is none;
//   4. runs it (ft_batch_step: weights read once for all sequences);
//   5. samples each slot that got logits with its own sampler, streams the text, and ends the
//      job on an end-of-generation token, a stop string, max_tokens or a full context. A job
//      with an output constraint (structured output) has a grammar matcher in its slot: the
//      sampler draws among the tokens its mask allows (end-of-generation ones only where the
//      grammar may end), and the job ends as soon as nothing but the end may follow.

#include "srv_impl.h"
#include "tool_call.h"

#include "../engine/batch.h"
#include "../engine/stop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    srv_job *job;   // NULL: free
    int seq;        // the batch engine's sequence while job is set
    ft_sampler *smp;
    ft_stop *stop;
    ft_grammar_matcher *gm; // the job's constraint (NULL: none)
    tok_stream ts;
    int n_prefilled;
    bool fresh;     // the prompt is not checked yet (prompt_problem)
    int32_t next;   // the sampled token the next step evaluates
    bool decoding;  // the prompt is in; next is set
    ft_moe_counts moe_start; // the expert cache's totals when the job started (offload)
    bool moe_pending;        // started, moe_start not read yet
} slot;

struct srv_sched {
    const ft_model *m;
    const tok_vocab *v;
    srv_params p;
    srv_notify_fn notify;
    void *notify_ctx;
    ft_batch *b;
    slot *slots;
    int n_slots, n_ctx;
    int prefill_turn;        // the slot whose prompt goes first in the next step's budget
    bool starved;            // the last step left a sequence without KV blocks: admit no one
    ft_batch_item *items;    // (n_slots) the step being built
    int *item_slot;          // (n_slots) the slot of each item
    int32_t *eog;
    int n_eog;
    float *masked;           // (n_vocab) logits with the end-of-generation ids at -inf (ignore_eos)
    uint64_t *allowed;       // (n_vocab bits) a grammar's mask without the end-of-generation ids

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job **queue; // ring of q_cap
    int q_head, q_len, q_cap;
    bool quit;
    int running;
    atomic_long kv_used, kv_cached;
    srv_job *rebuild;        // a cache resize waiting for the next gap between steps (under mu)

    pthread_mutex_t info_mu; // guards info
    srv_slot_info *info;     // (n_slots) as published after each step

    // the expert cache's counters and the route counters as last read on the inference
    // thread (under moe_mu)
    bool has_moe, has_routes;
    pthread_mutex_t moe_mu;
    ft_moe_stats moe;
    srv_routes routes;
    uint64_t *route_buf;     // (n_layer, n_expert) what ft_batch_route_counts writes
    double counters_read_at;
    // counted as the steps run (srv_sched_stats)
    atomic_long steps, tokens_generated, prompt_evaluated;
};

// ---------------------------------------------------------------------------------------------
// Jobs

srv_job *srv_job_new(void) {
    srv_job *j = ft_calloc(1, sizeof(*j));
    atomic_init(&j->refs, 1);
    atomic_init(&j->cancel, false);
    pthread_mutex_init(&j->mu, NULL);
    j->n_logprobs = -1;
    return j;
}

void srv_job_ref(srv_job *j) {
    atomic_fetch_add(&j->refs, 1);
}

void srv_job_unref(srv_job *j) {
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1) return;
    tok_ids_free(&j->prompt);
    srv_grammar_unref(j->grammar);
    for (int i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    free(j->stop_matched);
    srv_buf_free(&j->out);
    srv_buf_free(&j->content);
    srv_buf_free(&j->reasoning);
    free(j->toks);
    json_decref(j->logprobs);
    srv_tools_free(j->tools);
    for (int i = 0; i < j->n_calls; i++)
        srv_buf_free(&j->calls[i].args);
    free(j->calls);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

// ---------------------------------------------------------------------------------------------
// Output of a slot

static void emit_text(void *ctx, const char *text, size_t len) {
    srv_job *j = ctx;
    if (len) srv_buf_add(&j->out, text, len); // caller holds j->mu
}

static void notify(srv_sched *s, srv_job *j) {
    s->notify(s->notify_ctx, j);
}

// Reads the expert cache's counters and the route counters into the snapshots the HTTP side
// copies (inference thread, between steps: the reads wait for the device). force: now; else at
// most every 200 ms.
static void refresh_counters(srv_sched *s, bool force) {
    if (!s->has_moe && !s->has_routes) return;
    double now = ft_time_s();
    if (!force && now - s->counters_read_at < 0.2) return;
    s->counters_read_at = now;
    if (s->has_routes && ft_batch_route_counts(s->b, s->route_buf)) {
        srv_routes *r = &s->routes;
        size_t ne = (size_t)r->n_expert;
        pthread_mutex_lock(&s->moe_mu);
        for (int i = 0; i < r->n_moe; i++)
            memcpy(r->counts + (size_t)i * ne, s->route_buf + (size_t)r->block[i] * ne, ne * sizeof(uint64_t));
        pthread_mutex_unlock(&s->moe_mu);
    }
    ft_moe_stats fresh;
    if (!s->has_moe || !ft_batch_moe_stats(s->b, &fresh)) return;
    pthread_mutex_lock(&s->moe_mu);
    ft_moe_stats old = s->moe;
    s->moe = fresh;
    pthread_mutex_unlock(&s->moe_mu);
    ft_moe_stats_free(&old);
}

// The KV figures the HTTP side reads: positions held by sequences and kept by the cache.
static void kv_stats_update(srv_sched *s) {
    ft_batch_kv kv;
    ft_batch_kv_info(s->b, &kv);
    atomic_store(&s->kv_used, (long)(kv.blocks - kv.free - kv.evictable) * FT_KV_BLOCK);
    atomic_store(&s->kv_cached, (long)kv.cached * FT_KV_BLOCK);
}

// What GET /slots shows of a slot (its job's figures; busy while the job runs).
static srv_slot_info slot_info_of(const slot *sl, bool busy) {
    const srv_job *j = sl->job;
    return (srv_slot_info){.busy = busy,
                           .id = j->id,
                           .n_prompt = (int)j->prompt.n,
                           .n_cached = j->n_cached,
                           .n_prefilled = sl->n_prefilled,
                           .n_decoded = j->n_gen,
                           .n_predict = j->n_predict,
                           .sp = j->sp};
}

// Copies each running slot's state where GET /slots reads it (finish publishes a job's end).
static void publish_slots(srv_sched *s) {
    pthread_mutex_lock(&s->info_mu);
    for (int i = 0; i < s->n_slots; i++) {
        if (s->slots[i].job)
            s->info[i] = slot_info_of(&s->slots[i], true);
        else
            s->info[i].busy = false; // sent back to the queue
    }
    pthread_mutex_unlock(&s->info_mu);
}

static void finish(srv_sched *s, slot *sl, enum srv_finish why, const char *msg) {
    srv_job *j = sl->job;
    refresh_counters(s, true); // a client that sees its request end sees it in /v1/stats too
    ft_moe_counts moe = {0};
    if (s->has_moe) {
        pthread_mutex_lock(&s->moe_mu);
        moe = s->moe.total;
        pthread_mutex_unlock(&s->moe_mu);
    }
    pthread_mutex_lock(&j->mu);
    if (s->has_moe) {
        j->has_moe = true;
        j->moe = (ft_moe_counts){.selections = moe.selections - sl->moe_start.selections,
                                 .hits = moe.hits - sl->moe_start.hits, .misses = moe.misses - sl->moe_start.misses,
                                 .cpu_computed = moe.cpu_computed - sl->moe_start.cpu_computed,
                                 .bytes_copied = moe.bytes_copied - sl->moe_start.bytes_copied,
                                 .copy_ns = moe.copy_ns - sl->moe_start.copy_ns};
    }
    if (why == SRV_FINISH_STOP || why == SRV_FINISH_LENGTH) {
        // what the detokenizer and the stop matcher hold back comes out now
        size_t len;
        const char *tail = tok_stream_flush(&sl->ts, &len);
        if (!ft_stop_feed(sl->stop, tail, len, emit_text, j)) ft_stop_flush(sl->stop, emit_text, j);
    }
    j->done = true;
    j->finish = why;
    if (msg) snprintf(j->errmsg, sizeof(j->errmsg), "%s", msg);
    j->t_end = ft_time_s();
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&s->info_mu);
    s->info[sl - s->slots] = slot_info_of(sl, false);
    pthread_mutex_unlock(&s->info_mu);
    notify(s, j);
    tok_stream_free(&sl->ts);
    ft_stop_free(sl->stop);
    ft_sampler_free(sl->smp);
    ft_grammar_matcher_free(sl->gm);
    sl->stop = NULL;
    sl->smp = NULL;
    sl->gm = NULL;
    ft_batch_seq_close(s->b, sl->seq); // the sequence's KV cache is free again
    sl->job = NULL;
    sl->decoding = false;
    kv_stats_update(s);
    srv_job_unref(j);
    pthread_mutex_lock(&s->mu);
    s->running--;
    pthread_mutex_unlock(&s->mu);
}

// Why a job's prompt cannot run (NULL: it can). The HTTP side checks all of this before it
// submits; checking again here keeps one bad job from failing a whole step of others.
static const char *prompt_problem(const srv_sched *s, const srv_job *j) {
    if (j->prompt.n == 0) return "empty prompt";
    if (j->prompt.n > (size_t)s->n_ctx) return "prompt longer than the context";
    for (size_t i = 0; i < j->prompt.n; i++)
        if (j->prompt.ids[i] < 0 || j->prompt.ids[i] >= s->m->hp.n_vocab) return "token id outside the vocabulary";
    return NULL;
}

// Admits j into the free slot sl (a free slot always finds a free sequence: both number
// max_running), on the cached blocks of its prompt's longest cached prefix.
static void start(srv_sched *s, slot *sl, srv_job *j) {
    sl->job = j;
    sl->seq = ft_batch_seq_open(s->b);
    FT_ASSERT(sl->seq >= 0);
    sl->decoding = false;
    sl->fresh = true;
    sl->smp = ft_sampler_init(&j->sp, s->m->hp.n_vocab);
    sl->moe_pending = s->has_moe; // (s->mu is held here: the counters are read after it)
    sl->stop = ft_stop_init((const char *const *)j->stops, j->n_stops);
    sl->gm = j->grammar ? ft_grammar_matcher_init(srv_grammar_get(j->grammar), j->gvocab, NULL) : NULL;
    tok_stream_init(&sl->ts, s->v, false);
    int reused = prompt_problem(s, j) ? 0 : ft_batch_seq_reuse(s->b, sl->seq, j->prompt.ids, (int)j->prompt.n);
    for (int i = 0; i < reused; i++) ft_sampler_accept(sl->smp, j->prompt.ids[i]);
    sl->n_prefilled = reused;
    pthread_mutex_lock(&j->mu);
    j->n_cached = reused;
    pthread_mutex_unlock(&j->mu);
    j->t_start = ft_time_s();
}

// Takes sl's job back to the head of the queue (it is still in prefill: nothing was sent),
// freeing its sequence; it starts again when a slot and blocks are free.
static void requeue(srv_sched *s, slot *sl) {
    srv_job *j = sl->job;
    FT_ASSERT(j && !sl->decoding);
    tok_stream_free(&sl->ts);
    ft_stop_free(sl->stop);
    ft_sampler_free(sl->smp);
    ft_grammar_matcher_free(sl->gm);
    sl->stop = NULL;
    sl->smp = NULL;
    sl->gm = NULL;
    ft_batch_seq_close(s->b, sl->seq);
    sl->job = NULL;
    pthread_mutex_lock(&s->mu);
    s->q_head = (s->q_head + s->q_cap - 1) % s->q_cap;
    s->queue[s->q_head] = j;
    s->q_len++;
    s->running--;
    pthread_mutex_unlock(&s->mu);
}

// The slot in prefill that started last, other than keep (-1: none), or NULL.
static slot *youngest_prefill(srv_sched *s, int keep) {
    slot *best = NULL;
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (i == keep || !sl->job || sl->decoding) continue;
        if (!best || sl->job->t_start > best->job->t_start) best = sl;
    }
    return best;
}

static bool is_eog(const srv_sched *s, int32_t t) {
    for (int i = 0; i < s->n_eog; i++)
        if (s->eog[i] == t) return true;
    return false;
}

static void logprobs_of(srv_sched *s, const float *logits, int32_t tok, int n_top, srv_tokinfo *ti) {
    int n = s->m->hp.n_vocab;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)(logits[i] - mx));
    float lse = mx + (float)log(sum);
    ti->id = tok;
    ti->logprob = logits[tok] - lse;
    ti->n_top = 0;
    // top-n by insertion (n_top <= 20)
    for (int i = 0; i < n && n_top > 0; i++) {
        float lp = logits[i] - lse;
        int k = ti->n_top;
        if (k == n_top && lp <= ti->top_lp[k - 1]) continue;
        if (k < n_top)
            ti->n_top++;
        else
            k--;
        while (k > 0 && ti->top_lp[k - 1] < lp) {
            ti->top_lp[k] = ti->top_lp[k - 1];
            ti->top_id[k] = ti->top_id[k - 1];
            k--;
        }
        ti->top_lp[k] = lp;
        ti->top_id[k] = i;
    }
}

// After a step that gave sl logits: samples its next token with its own sampler, streams it,
// and either ends the job or keeps the token for the next step.
static void sample_slot(srv_sched *s, slot *sl, const float *logits) {
    srv_job *j = sl->job;
    if (j->n_predict <= 0) {
        finish(s, sl, SRV_FINISH_LENGTH, NULL);
        return;
    }
    const uint64_t *allowed = NULL;
    ft_err gerr = {{0}};
    if (sl->gm && !(allowed = ft_grammar_matcher_mask(sl->gm))) {
        ft_grammar_matcher_failed(sl->gm, &gerr);
        finish(s, sl, SRV_FINISH_ERROR, gerr.msg);
        return;
    }
    if (j->ignore_eos && allowed) { // the grammar's mask without the ends
        memcpy(s->allowed, allowed, ((size_t)s->m->hp.n_vocab + 63) / 64 * sizeof(uint64_t));
        for (int i = 0; i < s->n_eog; i++) s->allowed[s->eog[i] >> 6] &= ~(1ull << (s->eog[i] & 63));
        allowed = s->allowed;
    } else if (j->ignore_eos) {
        size_t n_vocab = (size_t)s->m->hp.n_vocab;
        memcpy(s->masked, logits, n_vocab * sizeof(float));
        for (int i = 0; i < s->n_eog; i++) s->masked[s->eog[i]] = -INFINITY;
        logits = s->masked;
    }
    int32_t t = ft_sampler_sample_masked(sl->smp, logits, allowed);
    if (allowed && !(allowed[t >> 6] >> (t & 63) & 1)) { // an empty mask
        finish(s, sl, SRV_FINISH_ERROR, "structured output: no token of the vocabulary continues the grammar here");
        return;
    }
    ft_sampler_accept(sl->smp, t);
    srv_tokinfo ti;
    bool want_lp = j->n_logprobs >= 0;
    if (want_lp) logprobs_of(s, logits, t, j->n_logprobs, &ti);
    if (is_eog(s, t)) {
        finish(s, sl, SRV_FINISH_STOP, NULL);
        return;
    }
    if (sl->gm && !ft_grammar_matcher_accept(sl->gm, t)) { // cannot happen: t is in the mask
        finish(s, sl, SRV_FINISH_ERROR, "structured output: the grammar refused the sampled token");
        return;
    }
    size_t len;
    const char *text = tok_stream_push(&sl->ts, t, &len);
    pthread_mutex_lock(&j->mu);
    if (j->n_gen == 0) j->t_first = ft_time_s();
    j->n_gen++;
    atomic_fetch_add(&s->tokens_generated, 1);
    bool stopped = ft_stop_feed(sl->stop, text, len, emit_text, j);
    if (want_lp) {
        if (j->n_toks == j->cap_toks) {
            j->cap_toks = j->cap_toks ? 2 * j->cap_toks : 16;
            j->toks = ft_realloc(j->toks, (size_t)j->cap_toks * sizeof(*j->toks));
        }
        j->toks[j->n_toks++] = ti;
    }
    int n_gen = j->n_gen;
    pthread_mutex_unlock(&j->mu);
    if (stopped) {
        j->stop_matched = ft_strdup(ft_stop_matched(sl->stop)); // read by the HTTP side only after done
        finish(s, sl, SRV_FINISH_STOP, NULL);
        return;
    }
    if (sl->gm && ft_grammar_matcher_done(sl->gm)) { // the constrained output is complete
        finish(s, sl, SRV_FINISH_STOP, NULL);
        return;
    }
    if (n_gen >= j->n_predict || ft_batch_seq_pos(s->b, sl->seq) >= s->n_ctx) {
        finish(s, sl, SRV_FINISH_LENGTH, NULL);
        return;
    }
    notify(s, j);
    sl->next = t;
    sl->decoding = true;
}

// Builds the next batch into s->items: each decoding slot's token, then prompt chunks from
// the slots in prefill, starting at prefill_turn, while they fit in the step. A prompt is cut
// by ft_batch_next_chunk whatever else runs, so its arithmetic is the same as alone (or in `ft
// run`); a chunk that does not fit waits for the next step. The step has room for one chunk
// beside every other sequence's decode token, so the first prefill in turn always advances
// unless the KV blocks run out (see the file comment). Returns the number of items.
static int build_step(srv_sched *s) {
    int n_items = 0, room = ft_batch_max_tokens(s->b);
    s->starved = false;
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->job || !sl->decoding) continue;
        bool fits = ft_batch_seq_reserve(s->b, sl->seq, 1);
        for (slot *v; !fits && (v = youngest_prefill(s, -1));) {
            requeue(s, v);
            s->starved = true;
            fits = ft_batch_seq_reserve(s->b, sl->seq, 1);
        }
        if (!fits) {
            fprintf(stderr, "ft serve: KV cache full (%lld positions): request %llu ends at %d tokens\n",
                    (long long)ft_batch_kv_positions(s->b), (unsigned long long)sl->job->id, sl->job->n_gen);
            finish(s, sl, SRV_FINISH_LENGTH, NULL);
            continue;
        }
        s->items[n_items] = (ft_batch_item){.seq = sl->seq, .tokens = &sl->next, .n_tok = 1, .logits = true};
        s->item_slot[n_items++] = i;
        room--;
    }
    int first_prefill = -1, n_starved = 0;
    bool preempted = s->starved;
    for (int k = 0; k < s->n_slots; k++) {
        int i = (s->prefill_turn + k) % s->n_slots;
        slot *sl = &s->slots[i];
        if (!sl->job || sl->decoding) continue;
        const srv_job *j = sl->job;
        int n = ft_batch_next_chunk(s->b, sl->n_prefilled, (int)j->prompt.n - sl->n_prefilled);
        if (n > room) continue;
        if (!ft_batch_seq_reserve(s->b, sl->seq, n)) {
            n_starved++;
            continue;
        }
        bool last = sl->n_prefilled + n == (int)j->prompt.n;
        s->items[n_items] =
            (ft_batch_item){.seq = sl->seq, .tokens = j->prompt.ids + sl->n_prefilled, .n_tok = n, .logits = last};
        s->item_slot[n_items++] = i;
        room -= n;
        if (first_prefill < 0) first_prefill = i;
    }
    // prompts that hold blocks the others wait for: the youngest goes back to the queue, and
    // the oldest goes on in the next step; while some wait, no one new is admitted (a job sent
    // back would take its cached blocks again at once)
    s->starved = preempted || n_starved > 0;
    if (n_items == 0 && n_starved > 1) requeue(s, youngest_prefill(s, -1));
    else if (n_items == 0 && n_starved == 1) {
        slot *lone = youngest_prefill(s, -1); // nothing else holds a block: cannot happen
        finish(s, lone, SRV_FINISH_ERROR, "the KV cache cannot hold this prompt");
    }
    // the next step's first prefill is the one after this step's: turns rotate
    if (first_prefill >= 0) s->prefill_turn = (first_prefill + 1) % s->n_slots;
    return n_items;
}

// One step of the loop (points 2 to 5 of the file comment).
static void step(srv_sched *s) {
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->job) continue;
        const char *problem = NULL;
        if (atomic_load(&sl->job->cancel))
            finish(s, sl, SRV_FINISH_CANCEL, NULL);
        else if (sl->fresh && (problem = prompt_problem(s, sl->job)))
            finish(s, sl, SRV_FINISH_ERROR, problem);
        else
            sl->fresh = false;
    }
    int n_items = build_step(s);
    if (n_items == 0) return;
    ft_err err = {{0}};
    if (!ft_batch_step(s->b, s->items, n_items, &err)) {
        // unreachable after prompt_problem (a step fails only on ids and context); should it
        // happen, no sequence of the step can be trusted to have advanced
        for (int k = 0; k < n_items; k++) finish(s, &s->slots[s->item_slot[k]], SRV_FINISH_ERROR, err.msg);
        return;
    }
    atomic_fetch_add(&s->steps, 1);
    for (int k = 0; k < n_items; k++) {
        slot *sl = &s->slots[s->item_slot[k]];
        const ft_batch_item *it = &s->items[k];
        if (!sl->decoding) {
            for (int i = 0; i < it->n_tok; i++) ft_sampler_accept(sl->smp, it->tokens[i]);
            sl->n_prefilled += it->n_tok;
            atomic_fetch_add(&s->prompt_evaluated, it->n_tok);
        }
        if (it->logits) sample_slot(s, sl, ft_batch_logits(s->b, k));
    }
    kv_stats_update(s);
}

// The expert cache's totals at the start of the jobs just admitted (outside s->mu: the read
// waits for the device).
static void mark_moe_start(srv_sched *s) {
    bool any = false;
    for (int i = 0; i < s->n_slots; i++) any |= s->slots[i].job && s->slots[i].moe_pending;
    if (!any) return;
    refresh_counters(s, true);
    pthread_mutex_lock(&s->moe_mu);
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->job || !sl->moe_pending) continue;
        sl->moe_start = s->moe.total;
        sl->moe_pending = false;
    }
    pthread_mutex_unlock(&s->moe_mu);
}

// Ends a resize job: resized (STOP), refused (ERROR, with why) or cancelled.
static void end_rebuild(srv_sched *s, srv_job *j, enum srv_finish why, const char *msg) {
    pthread_mutex_lock(&j->mu);
    j->done = true;
    j->finish = why;
    if (msg) snprintf(j->errmsg, sizeof(j->errmsg), "%s", msg);
    j->t_end = ft_time_s();
    pthread_mutex_unlock(&j->mu);
    notify(s, j);
    srv_job_unref(j);
}

// Resizes the expert cache between two steps: the running sequences go on with an empty cache.
static void run_rebuild(srv_sched *s, srv_job *j) {
    ft_err err = {{0}};
    bool ok = ft_batch_moe_rebuild(s->b, j->rebuild_slots, &err);
    refresh_counters(s, true);
    end_rebuild(s, j, ok ? SRV_FINISH_STOP : SRV_FINISH_ERROR, ok ? NULL : err.msg);
}

static void *thread_main(void *arg) {
    srv_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (!s->quit && s->running == 0 && s->q_len == 0 && !s->rebuild) {
            pthread_mutex_unlock(&s->mu);
            refresh_counters(s, true); // going idle: the snapshot shows everything done so far
            pthread_mutex_lock(&s->mu);
        }
        while (!s->quit && s->running == 0 && s->q_len == 0 && !s->rebuild)
            pthread_cond_wait(&s->cv, &s->mu);
        bool quit = s->quit;
        srv_job *rebuild = quit ? NULL : s->rebuild;
        if (rebuild) s->rebuild = NULL;
        // admit waiting jobs into free slots
        for (int i = 0; i < s->n_slots && s->q_len > 0 && !quit && !s->starved; i++) {
            if (s->slots[i].job) continue;
            srv_job *j = s->queue[s->q_head];
            s->q_head = (s->q_head + 1) % s->q_cap;
            s->q_len--;
            s->running++;
            start(s, &s->slots[i], j);
        }
        pthread_mutex_unlock(&s->mu);
        if (quit) break;
        mark_moe_start(s);
        if (rebuild) run_rebuild(s, rebuild);
        step(s);
        publish_slots(s);
        refresh_counters(s, false);
    }
    // shutting down: cancel what runs and what waits
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].job) finish(s, &s->slots[i], SRV_FINISH_CANCEL, NULL);
    pthread_mutex_lock(&s->mu);
    if (s->rebuild) {
        end_rebuild(s, s->rebuild, SRV_FINISH_CANCEL, NULL);
        s->rebuild = NULL;
    }
    while (s->q_len > 0) {
        srv_job *j = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->q_cap;
        s->q_len--;
        pthread_mutex_lock(&j->mu);
        j->done = true;
        j->finish = SRV_FINISH_CANCEL;
        j->t_end = ft_time_s();
        pthread_mutex_unlock(&j->mu);
        notify(s, j);
        srv_job_unref(j);
    }
    pthread_mutex_unlock(&s->mu);
    atomic_store(&s->kv_used, 0);
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Interface

srv_sched *srv_sched_init(const ft_model *m, const tok_vocab *v, const srv_params *p, srv_notify_fn fn,
                          void *ctx, ft_err *err) {
    srv_sched *s = ft_calloc(1, sizeof(*s));
    pthread_mutex_init(&s->moe_mu, NULL);
    pthread_mutex_init(&s->info_mu, NULL);
    s->m = m;
    s->v = v;
    s->p = *p;
    s->notify = fn;
    s->notify_ctx = ctx;
    s->n_slots = p->max_running;
    ft_engine_params ep = p->engine;
    ep.n_seq = p->max_running;
    if (!(s->b = ft_batch_init(m, &ep, err))) {
        srv_sched_free(s);
        return NULL;
    }
    s->slots = ft_calloc((size_t)s->n_slots, sizeof(slot));
    s->info = ft_calloc((size_t)s->n_slots, sizeof(srv_slot_info));
    s->items = ft_calloc((size_t)s->n_slots, sizeof(ft_batch_item));
    s->item_slot = ft_calloc((size_t)s->n_slots, sizeof(int));
    s->n_ctx = ft_batch_n_ctx(s->b);
    s->eog = ft_malloc((size_t)m->hp.n_vocab * sizeof(int32_t));
    for (int32_t t = 0; t < m->hp.n_vocab && t < tok_n_tokens(v); t++)
        if (tok_is_eog(v, t)) s->eog[s->n_eog++] = t;
    s->masked = ft_malloc((size_t)m->hp.n_vocab * sizeof(float));
    s->allowed = ft_malloc(((size_t)m->hp.n_vocab + 63) / 64 * sizeof(uint64_t));
    s->q_cap = p->max_queue + p->max_running; // a job waits here until the thread admits it
    s->queue = ft_calloc((size_t)s->q_cap, sizeof(srv_job *));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    atomic_init(&s->kv_used, 0);
    atomic_init(&s->kv_cached, 0);
    enum ft_moe_backend mb = ft_batch_moe_backend(s->b);
    s->has_moe = mb == FT_MOE_BACKEND_OFFLOAD || mb == FT_MOE_BACKEND_HYBRID;
    atomic_init(&s->steps, 0);
    atomic_init(&s->tokens_generated, 0);
    atomic_init(&s->prompt_evaluated, 0);
    if (m->hp.n_expert > 0) {
        s->route_buf = ft_calloc((size_t)m->hp.n_layer * (size_t)m->hp.n_expert, sizeof(uint64_t));
        s->has_routes = ft_batch_route_counts(s->b, s->route_buf);
    }
    if (s->has_routes) {
        srv_routes *r = &s->routes;
        r->n_expert = m->hp.n_expert;
        r->n_expert_used = m->hp.n_expert_used;
        r->block = ft_malloc((size_t)m->hp.n_layer * sizeof(int));
        for (int l = 0; l < m->hp.n_layer; l++)
            if (m->layers[l].is_moe) r->block[r->n_moe++] = l;
        r->counts = ft_calloc((size_t)FT_MAX(r->n_moe, 1) * (size_t)r->n_expert, sizeof(uint64_t));
    }
    refresh_counters(s, true);
    if (pthread_create(&s->thread, NULL, thread_main, s) != 0) {
        ft_err_set(err, "cannot start the inference thread");
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s->queue);
        s->queue = NULL;
        srv_sched_free(s);
        return NULL;
    }
    return s;
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    if (s->queue) {
        pthread_mutex_lock(&s->mu);
        s->quit = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
    ft_batch_free(s->b);
    free(s->slots);
    free(s->items);
    free(s->item_slot);
    free(s->eog);
    free(s->masked);
    free(s->allowed);
    free(s->queue);
    ft_moe_stats_free(&s->moe);
    srv_routes_free(&s->routes);
    free(s->route_buf);
    pthread_mutex_destroy(&s->moe_mu);
    pthread_mutex_destroy(&s->info_mu);
    free(s->info);
    free(s);
}

bool srv_sched_submit(srv_sched *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    // room: free slots not yet claimed by waiting jobs, plus the queue itself
    bool ok = !s->quit && s->running + s->q_len < s->n_slots + s->p.max_queue;
    if (ok) {
        srv_job_ref(j);
        j->t_submit = ft_time_s();
        s->queue[(s->q_head + s->q_len) % s->q_cap] = j;
        s->q_len++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void srv_sched_stats_get(srv_sched *s, srv_sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    out->running = s->running;
    out->queued = s->q_len;
    pthread_mutex_unlock(&s->mu);
    out->kv_used = atomic_load(&s->kv_used);
    out->kv_cached = atomic_load(&s->kv_cached);
    out->kv_total = (long)ft_batch_kv_positions(s->b);
    out->prefix_cache = s->p.engine.prefix_cache;
    out->steps = atomic_load(&s->steps);
    out->tokens_generated = atomic_load(&s->tokens_generated);
    out->prompt_evaluated = atomic_load(&s->prompt_evaluated);
    out->device = ft_batch_backend(s->b)->placement == FT_PLACEMENT_CPU ? "cpu" : "cuda";
    out->moe_backend = ft_moe_backend_name(ft_batch_moe_backend(s->b));
}

int srv_sched_n_slots(const srv_sched *s) {
    return s->n_slots;
}

void srv_sched_slots_get(srv_sched *s, srv_slot_info *out) {
    pthread_mutex_lock(&s->info_mu);
    memcpy(out, s->info, (size_t)s->n_slots * sizeof(*out));
    pthread_mutex_unlock(&s->info_mu);
}

int srv_sched_n_ctx(const srv_sched *s) {
    return s->n_ctx;
}

bool srv_sched_has_moe_cache(const srv_sched *s) {
    return s->has_moe;
}

bool srv_sched_moe_stats(srv_sched *s, ft_moe_stats *out) {
    memset(out, 0, sizeof(*out));
    if (!s->has_moe) return false;
    pthread_mutex_lock(&s->moe_mu);
    ft_moe_stats_copy(out, &s->moe);
    pthread_mutex_unlock(&s->moe_mu);
    return true;
}

void srv_routes_free(srv_routes *r) {
    free(r->block);
    free(r->counts);
    memset(r, 0, sizeof(*r));
}

bool srv_sched_routes(srv_sched *s, srv_routes *out) {
    memset(out, 0, sizeof(*out));
    if (!s->has_routes) return false;
    const srv_routes *r = &s->routes;
    *out = (srv_routes){.n_moe = r->n_moe, .n_expert = r->n_expert, .n_expert_used = r->n_expert_used};
    out->block = ft_malloc((size_t)FT_MAX(r->n_moe, 1) * sizeof(int));
    memcpy(out->block, r->block, (size_t)r->n_moe * sizeof(int));
    size_t n = (size_t)FT_MAX(r->n_moe, 1) * (size_t)r->n_expert;
    out->counts = ft_malloc(n * sizeof(uint64_t));
    pthread_mutex_lock(&s->moe_mu);
    memcpy(out->counts, r->counts, n * sizeof(uint64_t));
    pthread_mutex_unlock(&s->moe_mu);
    return true;
}

bool srv_sched_rebuild(srv_sched *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    bool ok = !s->quit && !s->rebuild;
    if (ok) {
        srv_job_ref(j);
        j->t_submit = ft_time_s();
        s->rebuild = j;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}
