// route_trace: recorded or generated expert selections, replayed by benchmarks
// (--moe-route-trace FILE) in place of the model's own routing.
//
// File format (version 1, or 2 with predictions), all integers little-endian:
//   1. magic "FTRT" (4 bytes)
//   2. u32 version: 1, or 2 when item 10 follows
//   3. u32 n_layers: MoE layers traced, 1 .. MOE_TRACE_MAX_LAYERS
//   4. u32 n_expert: experts per layer, 1 .. 65535
//   5. u32 top_k: experts each sequence selects per layer, 1 .. n_expert
//   6. u32 n_seq: sequences decoded together in one step, 1 .. MOE_TRACE_MAX_SEQ
//   7. u64 n_steps: decode steps, >= 1
//   8. n_layers x u32: the block index of each traced layer, strictly ascending
//   9. n_steps x n_layers x n_seq x top_k u16: expert ids, step-major; for one (step, layer,
//      sequence) the top_k ids are distinct and < n_expert.
//  10. version 2 only: n_steps x n_layers x n_seq x top_k u16: what a next-layer predictor
//      guessed for each (step, layer, sequence) before that layer routed, in the layout of 9
//      and under the same rules. A prefetcher reads layer li's guess while layer li - 1 computes
//      (layer index 0's while the step before's last layer computes).
// Nothing follows: the file size is exactly 32 + 4 n_layers + 2 v n_steps n_layers n_seq top_k
// (v the version) and the ids (9 and 10) take at most MOE_TRACE_MAX_BYTES. Version 1 files are
// written and read as before: a trace without predictions is written as version 1.
//
// The generator draws traces with the properties real routers show and random weights do not:
// skewed popularity (each layer has its own Zipf ranking of experts, and optionally its own
// skew: heterogeneous layers, a few hot experts in some and a spread over many in others),
// temporal reuse (a sequence keeps some of its previous steps' experts) and, optionally, a
// next-layer predictor's guesses at a stated accuracy. Its default parameters are calibrated so
// that an LRU holding 12.5% of a layer's experts hits about 65% of selections and one holding 25%
// about 80% (figures published for real MoE models); moe_trace_gen_calibrate_reuse calibrates
// instead for measured reuse levels (Qwen3-30B-A3B: about 45% of a layer's selections repeat at
// the next token and 80% within 8 tokens).
//
// A trace is plain data owned by its creator (moe_route_trace_free). Reading validates every
// field: a bad file is an error with a message, never a crash.
#ifndef FT_MOE_ROUTE_TRACE_H
#define FT_MOE_ROUTE_TRACE_H

#include "../util/util.h"

#define MOE_TRACE_MAX_LAYERS 4096
#define MOE_TRACE_MAX_SEQ 4096
#define MOE_TRACE_MAX_BYTES (1ull << 30)
#define MOE_TRACE_HEADER_BYTES 32

// The generator's calibrated defaults (see moe_trace_gen_default_params).
#define MOE_TRACE_DEFAULT_ZIPF_S 0.50
#define MOE_TRACE_DEFAULT_REUSE 0.72
#define MOE_TRACE_DEFAULT_REUSE_WINDOW 8
#define MOE_TRACE_TARGET_HIT_8TH 0.65
#define MOE_TRACE_TARGET_HIT_4TH 0.80

typedef struct moe_route_trace {
    int n_layers;
    int *layers;          // (n_layers) block indices, ascending
    int n_expert, top_k, n_seq;
    int64_t n_steps;
    uint16_t *experts;    // (n_steps, n_layers, n_seq, top_k)
    uint16_t *predicted;  // (n_steps, n_layers, n_seq, top_k) a predictor's guesses, or NULL
} moe_route_trace;

// The n_seq x top_k selections of layer index li (into layers) at a step.
static inline const uint16_t *moe_route_trace_at(const moe_route_trace *t, int64_t step, int li) {
    return t->experts + ((uint64_t)step * (uint64_t)t->n_layers + (uint64_t)li) * (uint64_t)t->n_seq * (uint64_t)t->top_k;
}

// The predicted selections of layer index li at a step (t->predicted must be set).
static inline const uint16_t *moe_route_trace_predicted_at(const moe_route_trace *t, int64_t step, int li) {
    return t->predicted +
           ((uint64_t)step * (uint64_t)t->n_layers + (uint64_t)li) * (uint64_t)t->n_seq * (uint64_t)t->top_k;
}

// Parses a trace from memory / reads one from a file. Returns false and sets *err ("what,
// where") on anything that does not follow the format. Free with moe_route_trace_free.
bool moe_route_trace_parse(const void *data, size_t size, moe_route_trace *out, ft_err *err);
bool moe_route_trace_read(const char *path, moe_route_trace *out, ft_err *err);
// Writes t (which must be valid: FT_ASSERT). Returns false and sets *err on an I/O error.
bool moe_route_trace_write(const moe_route_trace *t, const char *path, ft_err *err);
void moe_route_trace_free(moe_route_trace *t); // NULL is a no-op

typedef struct moe_trace_gen_params {
    int n_layers;
    const int *layers;    // (n_layers) block indices, ascending; NULL: 0 .. n_layers-1
    int n_expert, top_k, n_seq;
    int64_t n_steps;
    double zipf_s;        // popularity of the expert of rank r is proportional to 1/(r+1)^zipf_s
    double zipf_max;      // < 0: every layer has skew zipf_s; else the layers' skews are spread
                          // evenly over [zipf_s, zipf_max], dealt to the layers in a seeded order
    double reuse_next;    // chance that a pick repeats an expert the sequence chose at the step before
    double reuse;         // else the chance that it repeats one the sequence chose in one of
    int reuse_window;     // the last reuse_window steps (the step uniformly, then the expert)
    double predict_accuracy; // 0: no predictions; else each predicted id is one of the step's own
                          // selections with this chance, else a distractor drawn by popularity
    uint64_t seed;
} moe_trace_gen_params;

// The calibrated defaults (zipf_s, reuse) with a Laguna-like shape: 40 layers, 256 experts,
// top-10, one sequence, 1000 steps, seed 1; one skew for all layers, no reuse_next, no
// predictions.
moe_trace_gen_params moe_trace_gen_default_params(void);

// Sets p->reuse_window, p->zipf_s and p->reuse so that, for p's n_expert and top_k (one sequence), an LRU
// holding 12.5% of a layer's experts hits MOE_TRACE_TARGET_HIT_8TH of the selections and one
// holding 25% MOE_TRACE_TARGET_HIT_4TH: for a few reuse windows (multiples of the steps whose
// selections fill 12.5% of the experts), nested bisection (reuse for the first target at a
// given skew, skew for the second) on short traces with a fixed seed; the window that comes
// closest wins. Deterministic; about a second. Returns false and sets *err
// when 12.5% of the experts is fewer than top_k (no LRU of that size can serve a step).
bool moe_trace_gen_calibrate(moe_trace_gen_params *p, ft_err *err);

// Sets p->reuse_next and p->reuse (p->reuse_window = window) so that, for p's shape and skews,
// a share repeat_next of the selections repeats an expert the same sequence selected in the
// same layer at the step before, and a share repeat_recent one it selected within the last
// `window` steps (moe_route_trace_reuse measures both): nested bisection (reuse_next for the
// first level at a given reuse, reuse for the second) on a short trace with a fixed seed.
// Deterministic. Returns false and sets *err when the levels are out of order or out of [0, 1);
// levels the skews alone overshoot (or the mechanism cannot reach) are approached as closely as
// the parameters allow: check with moe_route_trace_reuse.
bool moe_trace_gen_calibrate_reuse(moe_trace_gen_params *p, double repeat_next, double repeat_recent, int window,
                                   ft_err *err);

// Generates a trace. Returns false and sets *err on out-of-range parameters. The routing does not
// depend on predict_accuracy (the guesses come from a random stream of their own).
bool moe_trace_generate(const moe_trace_gen_params *p, moe_route_trace *out, ft_err *err);

// The skew (Zipf exponent) of each traced layer under p, into skew[0 .. n_layers).
void moe_trace_gen_layer_skews(const moe_trace_gen_params *p, double *skew);

// Measured reuse of a trace, over the steps from `window` on: the share of selections that
// repeat an expert the same sequence selected in the same layer at the step before (*next) and
// within the last `window` steps (*recent). With layer >= 0, of that layer index only.
void moe_route_trace_reuse(const moe_route_trace *t, int layer, int window, double *next, double *recent);

// Accuracy of the trace's predictions (t->predicted): the share of predicted ids that the same
// (step, layer, sequence) selected; of layer index `layer` only when >= 0.
double moe_route_trace_predict_accuracy(const moe_route_trace *t, int layer);

// Hit rate of the expert cache's LRU (src/moe/expert_cache.h) replaying t with slots_per_layer
// slots for each layer on its own (each layer its own pool). Steps before warmup are replayed
// but not counted.
double moe_route_trace_lru_hit_rate(const moe_route_trace *t, int slots_per_layer, int64_t warmup);

#endif
