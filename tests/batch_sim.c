// batch_sim.c: see batch_sim.h.
#include "batch_sim.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

int32_t batch_sim_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

void batch_sim_req_init(batch_sim_req *q, const int32_t *prompt, int n_prompt, int join_step, float *logits) {
    FT_ASSERT(n_prompt >= 1 && n_prompt <= BATCH_SIM_MAX_PROMPT);
    memset(q, 0, sizeof(*q));
    memcpy(q->prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
    q->n_prompt = n_prompt;
    q->join_step = join_step;
    q->seq = -1;
    q->logits = logits;
}

bool batch_sim_run(ft_batch *b, batch_sim_req *rq, int n_req, int chunk, int n_gen, int n_vocab, ft_err *err) {
    FT_ASSERT(n_gen >= 1 && n_gen <= BATCH_SIM_MAX_GEN);
    ft_batch_item *items = ft_malloc((size_t)n_req * sizeof(*items));
    batch_sim_req **owner = ft_malloc((size_t)n_req * sizeof(*owner));
    bool ok = true;
    int n_done = 0;
    for (int step = 0; ok && n_done < n_req; step++) {
        for (int r = 0; r < n_req; r++)
            if (rq[r].n_out < n_gen && rq[r].seq < 0 && rq[r].join_step <= step) {
                int seq = ft_batch_seq_open(b);
                if (seq < 0) break;
                CHECK(ft_batch_seq_pos(b, seq) == 0);
                rq[r].seq = seq;
            }
        int n_items = 0, left = ft_batch_max_tokens(b);
        for (int r = 0; r < n_req; r++)
            if (rq[r].seq >= 0 && rq[r].decoding) {
                items[n_items] = (ft_batch_item){rq[r].seq, &rq[r].next, 1, true};
                owner[n_items++] = &rq[r];
                left--;
            }
        for (int r = 0; r < n_req; r++)
            if (rq[r].seq >= 0 && !rq[r].decoding) {
                int n = FT_MIN(chunk, rq[r].n_prompt - rq[r].n_prefilled);
                if (n > left) continue;
                bool last = rq[r].n_prefilled + n == rq[r].n_prompt;
                items[n_items] = (ft_batch_item){rq[r].seq, rq[r].prompt + rq[r].n_prefilled, n, last};
                owner[n_items++] = &rq[r];
                left -= n;
            }
        if (n_items == 0) continue; // waiting for a request's join step
        if (!ft_batch_step(b, items, n_items, err)) {
            ok = false;
            break;
        }
        for (int k = 0; k < n_items; k++) {
            batch_sim_req *q = owner[k];
            if (!q->decoding) {
                FT_ASSERT(q->n_chunks < BATCH_SIM_MAX_CHUNKS);
                q->chunks[q->n_chunks++] = items[k].n_tok;
                q->n_prefilled += items[k].n_tok;
            }
            if (!items[k].logits) continue;
            const float *lg = ft_batch_logits(b, k);
            memcpy(q->logits + (size_t)q->n_out * n_vocab, lg, (size_t)n_vocab * sizeof(float));
            q->next = q->out[q->n_out++] = batch_sim_argmax(lg, n_vocab);
            q->decoding = true;
            if (q->n_out == n_gen) {
                ft_batch_seq_close(b, q->seq);
                q->seq = -1;
                n_done++;
            }
        }
    }
    if (ok) CHECK(ft_batch_n_open(b) == 0 && ft_batch_positions_used(b) == 0, "every sequence closed: nothing in use");
    free(items);
    free(owner);
    return ok;
}
