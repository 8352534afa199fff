// batch_sim.h: a test's stand-in for the server's scheduler over a batch engine (batch.h), shared
// by the CPU (tests/test_batch.c) and CUDA (tests_gpu/test_cuda_batch.c) batch tests.
//
// Requests join at given steps when a sequence is free; each step takes the decoders' tokens,
// then whole prompt chunks in request order while they fit (the server's scheduler does the
// same, in turns); every request decodes greedily until it has n_gen tokens, then closes.
#ifndef FT_TEST_BATCH_SIM_H
#define FT_TEST_BATCH_SIM_H

#include "../src/engine/batch.h"

enum { BATCH_SIM_MAX_PROMPT = 80, BATCH_SIM_MAX_GEN = 16, BATCH_SIM_MAX_CHUNKS = 64 };

// One request of a schedule and what happened to it in the batch. The caller fills prompt,
// n_prompt, join_step and logits, and zeroes the rest but seq (-1) (batch_sim_req_init).
typedef struct batch_sim_req {
    int32_t prompt[BATCH_SIM_MAX_PROMPT];
    int n_prompt;
    int join_step;                       // opened at the first step >= this with a free sequence
    int seq;                             // -1: not open (waiting or done)
    int n_prefilled;
    bool decoding;
    int32_t next;
    int chunks[BATCH_SIM_MAX_CHUNKS];    // the prefill chunk sizes it got
    int n_chunks;
    int32_t out[BATCH_SIM_MAX_GEN];      // greedy tokens
    int n_out;
    float *logits;                       // (n_gen, n_vocab): the logits each token was picked from
} batch_sim_req;

// A request waiting to join at join_step with n_prompt tokens (copied) and a logits buffer.
void batch_sim_req_init(batch_sim_req *q, const int32_t *prompt, int n_prompt, int join_step, float *logits);

// Runs the n_req requests through b (prefill chunks of up to chunk tokens) until each has n_gen
// tokens. Fails the running test if a joining sequence does not start at position 0 or if
// anything is left open or in use at the end. Returns false and sets *err when a step fails.
bool batch_sim_run(ft_batch *b, batch_sim_req *rq, int n_req, int chunk, int n_gen, int n_vocab, ft_err *err);

// The index of the largest of n floats (the first on ties).
int32_t batch_sim_argmax(const float *x, int n);

#endif
