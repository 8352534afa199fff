// sampler: picking the next token from logits.
//
// The chain follows llama.cpp's order: repetition/presence/frequency penalties over the last
// penalty_last_n accepted tokens, then top-k, top-p, min-p, temperature and a draw from the
// seeded generator. temp <= 0 means greedy (the arg-max after penalties). All buffers are
// allocated at init; sampling allocates nothing. Not thread-safe: one sampler per sequence.
#ifndef FT_SAMPLER_H
#define FT_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ft_sampler_params {
    float temp;               // <= 0: greedy
    int top_k;                // <= 0: off
    float top_p;              // >= 1: off
    float min_p;              // <= 0: off
    float repeat_penalty;     // 1: off
    float presence_penalty;   // 0: off
    float frequency_penalty;  // 0: off
    int penalty_last_n;       // tokens the penalties look back over
    uint64_t seed;
} ft_sampler_params;

typedef struct ft_sampler ft_sampler;

// llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, no penalties, last 64.
ft_sampler_params ft_sampler_default_params(void);

// Fields of ft_sampler_params, as bits: which of them a set of defaults gives (a server's
// flags, a model's recommendation) over another's (an API's own).
enum {
    FT_SAMPLE_TEMP = 1 << 0,
    FT_SAMPLE_TOP_K = 1 << 1,
    FT_SAMPLE_TOP_P = 1 << 2,
    FT_SAMPLE_MIN_P = 1 << 3,
    FT_SAMPLE_REPEAT_PENALTY = 1 << 4,
    FT_SAMPLE_PRESENCE_PENALTY = 1 << 5,
    FT_SAMPLE_FREQUENCY_PENALTY = 1 << 6,
    FT_SAMPLE_PENALTY_LAST_N = 1 << 7,
    FT_SAMPLE_SEED = 1 << 8,
};

// base with the fields of over named in `fields` (FT_SAMPLE_* bits) taken from over.
ft_sampler_params ft_sampler_overlay(ft_sampler_params base, const ft_sampler_params *over, unsigned fields);

ft_sampler *ft_sampler_init(const ft_sampler_params *p, int n_vocab);
void ft_sampler_free(ft_sampler *s); // NULL is a no-op

// Picks a token from n_vocab logits (not modified).
int32_t ft_sampler_sample(ft_sampler *s, const float *logits);
// The same among the tokens set in allowed (a bitset of n_vocab bits, bit t of word t / 64: a
// grammar's mask, grammar.h; NULL: all): the others' logits count as -infinity before the chain,
// so the penalties, top-k, top-p, min-p and the draw see only allowed tokens. With no token
// allowed it returns the arg-max of the raw logits (the caller checks its mask).
int32_t ft_sampler_sample_masked(ft_sampler *s, const float *logits, const uint64_t *allowed);
// Records a token of the sequence (prompt or generated) for the penalties.
void ft_sampler_accept(ft_sampler *s, int32_t token);
void ft_sampler_reset(ft_sampler *s);

#endif
