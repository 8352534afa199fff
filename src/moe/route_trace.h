// route_trace: recorded or generated expert selections, replayed by benchmarks
// (--moe-route-trace FILE) in place of the model's own routing.
//
// File format (version 1), all integers little-endian:
//   1. magic "FTRT" (4 bytes)
//   2. u32 version = 1
//   3. u32 n_layers: MoE layers traced, 1 .. MOE_TRACE_MAX_LAYERS
//   4. u32 n_expert: experts per layer, 1 .. 65535
//   5. u32 top_k: experts each sequence selects per layer, 1 .. n_expert
//   6. u32 n_seq: sequences decoded together in one step, 1 .. MOE_TRACE_MAX_SEQ
//   7. u64 n_steps: decode steps, >= 1
//   8. n_layers x u32: the block index of each traced layer, strictly ascending
//   9. n_steps x n_layers x n_seq x top_k u16: expert ids, step-major; for one (step, layer,
//      sequence) the top_k ids are distinct and < n_expert.
// Nothing follows: the file size is exactly 32 + 4 n_layers + 2 n_steps n_layers n_seq top_k
// and at most MOE_TRACE_MAX_BYTES.
//
// The generator draws traces with the two properties real routers show and random weights do
// not: skewed popularity (each layer has its own Zipf ranking of experts) and temporal reuse
// (a sequence keeps some of its previous step's experts). Its default parameters are calibrated
// so that an LRU holding 12.5% of a layer's experts hits about 65% of selections and one
// holding 25% about 80% (figures published for real MoE models).
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
} moe_route_trace;

// The n_seq x top_k selections of layer index li (into layers) at a step.
static inline const uint16_t *moe_route_trace_at(const moe_route_trace *t, int64_t step, int li) {
    return t->experts + ((uint64_t)step * (uint64_t)t->n_layers + (uint64_t)li) * (uint64_t)t->n_seq * (uint64_t)t->top_k;
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
    double reuse;         // chance that a pick repeats an expert the sequence chose in one of
    int reuse_window;     // the last reuse_window steps (the step uniformly, then the expert)
    uint64_t seed;
} moe_trace_gen_params;

// The calibrated defaults (zipf_s, reuse) with a Laguna-like shape: 40 layers, 256 experts,
// top-10, one sequence, 1000 steps, seed 1.
moe_trace_gen_params moe_trace_gen_default_params(void);

// Sets p->reuse_window, p->zipf_s and p->reuse so that, for p's n_expert and top_k (one sequence), an LRU
// holding 12.5% of a layer's experts hits MOE_TRACE_TARGET_HIT_8TH of the selections and one
// holding 25% MOE_TRACE_TARGET_HIT_4TH: for a few reuse windows (multiples of the steps whose
// selections fill 12.5% of the experts), nested bisection (reuse for the first target at a
// given skew, skew for the second) on short traces with a fixed seed; the window that comes
// closest wins. Deterministic; about a second. Returns false and sets *err
// when 12.5% of the experts is fewer than top_k (no LRU of that size can serve a step).
bool moe_trace_gen_calibrate(moe_trace_gen_params *p, ft_err *err);

// Generates a trace. Returns false and sets *err on out-of-range parameters.
bool moe_trace_generate(const moe_trace_gen_params *p, moe_route_trace *out, ft_err *err);

// Hit rate of the expert cache's LRU (src/moe/expert_cache.h) replaying t with slots_per_layer
// slots for each layer on its own (each layer its own pool). Steps before warmup are replayed
// but not counted.
double moe_route_trace_lru_hit_rate(const moe_route_trace *t, int slots_per_layer, int64_t warmup);

#endif
