// batch: the multi-sequence forward step (continuous batching).
//
// A batch engine binds a model to one backend, one set of activation buffers sized for one
// step, and a pool of KV blocks its n_seq sequences share (kv_pool.h), with a prefix cache. Each step runs the tokens of
// several sequences through the model together: a decoding sequence contributes its one new
// token, a sequence in prefill a chunk of its prompt. A step holds up to n_batch + n_seq - 1
// tokens: one whole prefill chunk of n_batch beside the decode tokens of all other sequences. Norms, projections, experts and
// the FFN run once over every row of the step, so each weight is read once per step however
// many sequences run; RoPE, the cache write and attention run per sequence (model.h's
// segments). Logits are computed only for the items that ask for them (the last row of the
// item), gathered and projected in one matmul.
//
// On the CPU every op computes each row on its own, and a row's kernel (the GEMM or the per-row
// kernels) follows the length of its own sequence's chunk in the step, never the step's row
// count (ft_backend.row_gemm), so a sequence's logits are bit-identical whether it runs alone
// or alongside others, as long as its prompt is cut into the same chunks (attention may also
// take another path for a longer chunk): callers that cut prompts at
// multiples of ft_batch_chunk, as ft_engine_eval does, get the same bits batched or alone
// (tests/test_batch.c checks it).
//
// Not thread-safe: one caller per batch engine; several may share a model. Nothing is
// allocated per step.
#ifndef FT_BATCH_H
#define FT_BATCH_H

#include "engine.h"

typedef struct ft_batch ft_batch;

// Returns NULL and sets *err when the parameters do not fit the model (see ft_engine_init) or
// the caches cannot be allocated. p->n_seq sequences hold a cache at once; p->n_batch is the
// prefill chunk.
ft_batch *ft_batch_init(const ft_model *m, const ft_engine_params *p, ft_err *err);
void ft_batch_free(ft_batch *b); // NULL is a no-op

// Opens a sequence at position 0, holding no KV blocks yet: returns its id (0 <= id < n_seq),
// or -1 when all n_seq are open.
int ft_batch_seq_open(ft_batch *b);
// Ends a sequence: its blocks go back to the pool at once (those the prefix cache keeps stay
// there for later prompts).
void ft_batch_seq_close(ft_batch *b, int seq);
// Positions the sequence has evaluated (its next token goes there).
int ft_batch_seq_pos(const ft_batch *b, int seq);
// With a prefix cache (ft_engine_params.prefix_cache), for a sequence just opened that will
// evaluate the n tokens of a prompt: takes the KV rows of the longest cached prefix of them it
// can, always leaving the last token to evaluate: whole blocks by reference, and where the
// prompt parts from the cached tokens inside a block, that block's leading rows copied into a
// block of the sequence's own (when one is free or the cache gives one back; else the whole
// blocks only). Moves the sequence past them and returns how many tokens that is; the caller
// evaluates only tokens[returned..], cut by ft_batch_next_chunk. Without a prefix cache returns 0. A model with recurrent layers resumes only
// at a snapshot of their state (whole blocks, ft_engine_params.ctx_checkpoints).
//   On the CPU a reused prefix gives the logits computing the prompt whole gives (any
// n_batch): blocks are kept only where every row took the kernels of a whole prompt chunk
// (ft_backend.row_gemm, the tiled attention); when the prefix ends inside one of the prompt's
// chunks, the sequence's next step (the rest of that chunk) takes the whole chunk's kernels;
// and rows of the prompt's last chunk are reused only where that chunk takes a whole one's.
int ft_batch_seq_reuse(ft_batch *b, int seq, const int32_t *tokens, int n);
// Makes sure the sequence holds the KV blocks for its next n_tok positions, taking free blocks
// (the prefix cache gives back its least recently used ones when none is free). Returns false,
// taking nothing, when there are not enough or the context would overflow.
bool ft_batch_seq_reserve(ft_batch *b, int seq, int n_tok);

// One sequence's share of a step: n_tok tokens evaluated at its current position. With
// logits, the step returns the next-token logits after its last token.
typedef struct ft_batch_item {
    int seq;
    const int32_t *tokens;
    int n_tok;
    bool logits;
} ft_batch_item;

// Runs one step over n_items items (each an open sequence, at most once per step, n_tok >= 1,
// together at most ft_batch_max_tokens tokens) and advances each sequence by its n_tok.
// Returns false and sets *err, before evaluating anything, when an item does not fit its
// sequence's remaining context, a token id is outside the vocabulary, or the KV blocks for
// the items' rows cannot be had (ft_batch_seq_reserve first tells which item fits).
bool ft_batch_step(ft_batch *b, const ft_batch_item *items, int n_items, ft_err *err);
// The logits (n_vocab floats, host memory) of items[i] of the last step, which asked for them;
// valid until the next step.
const float *ft_batch_logits(const ft_batch *b, int i);

int ft_batch_max_tokens(const ft_batch *b); // tokens per step: chunk + n_seq - 1
int ft_batch_chunk(const ft_batch *b);      // n_batch: the longest prefill chunk
// The length of a prompt's next chunk, where `done` of its tokens are evaluated (a reused
// prefix among them) and `left` remain. On the CPU: up to the next multiple of n_batch from the
// prompt's start, the cuts of the whole prompt, so that a reused prefix gives its bits. On a
// GPU, whose reuse matches the whole prompt within the suite's tolerance whatever the cuts: a
// whole chunk from `done`, so a cached turn's new tokens take as few steps as they can (with
// offloaded experts, each step streams the layers' missing experts once).
int ft_batch_next_chunk(const ft_batch *b, int done, int left);
int ft_batch_n_seq(const ft_batch *b);
int ft_batch_n_ctx(const ft_batch *b);
int ft_batch_n_open(const ft_batch *b);
// Positions in use over all open sequences (what their caches hold).
long ft_batch_positions_used(const ft_batch *b);
// Positions of the KV pool, shared by all sequences.
int64_t ft_batch_kv_positions(const ft_batch *b);
// The pool's blocks (FT_KV_BLOCK positions each): all, free, kept by the prefix cache, and
// of those the ones no sequence lists (the cache would give them back under pressure).
typedef struct ft_batch_kv {
    int64_t blocks, free, cached, evictable;
    bool prefix_cache;
} ft_batch_kv;
void ft_batch_kv_info(const ft_batch *b, ft_batch_kv *out);
// Checks the block accounting (kv_pool.h's reference counts against the sequences' tables and
// the prefix cache; every open sequence holding its positions' blocks). For tests.
bool ft_batch_kv_check(const ft_batch *b, ft_err *err);
const ft_model *ft_batch_model(const ft_batch *b);
// The backend the steps run on (for its statistics, e.g. min_route_gap).
ft_backend *ft_batch_backend(ft_batch *b);
// The model's weights as the batch's backend holds them (where each tensor was placed).
const ft_weights *ft_batch_weights(const ft_batch *b);
// The --moe-backend the batch runs (auto resolved; fused on the CPU device).
enum ft_moe_backend ft_batch_moe_backend(const ft_batch *b);
// Bytes of the weights the CPU streams that were copied into memory in huge pages (0: they are
// read from the file's mapping; place.h).
size_t ft_batch_weights_copied(const ft_batch *b);
// The expert cache's counters (see ft_engine_moe_stats); false without a cache.
bool ft_batch_moe_stats(ft_batch *b, ft_moe_stats *out);
// The router's selections since the engine started, per block and expert (the backend's
// route_counts): out (hp.n_layer rows of hp.n_expert; blocks without experts stay 0) gets how
// many times each expert was selected, one count per (token, selection). Waits for the device.
// Returns false, out untouched, where the model has no experts or the backend does not count.
bool ft_batch_route_counts(ft_batch *b, uint64_t *out);
// Resizes the expert cache to n_slots (same layout), keeping the host banks; every slot starts
// empty. Returns false and sets *err (the old cache stays) when there is no cache or the plan
// fails (below the floor, does not fit). Not while a step runs.
bool ft_batch_moe_rebuild(ft_batch *b, int n_slots, ft_err *err);

#endif
