// bw_measure: measures this machine's bandwidth profile (moe/bw_profile.h) for `ft bench bw`:
// the CPU's expert rates here, the GPU's part (copies, meeting, kernel rates) in
// backend/cuda/bw_measure_cuda.c.
//
// Every figure comes from synthetic experts (random valid blocks of each type, the shape asked
// for), read cold as a decode step's are: each timed run uses experts the runs before it did not.
// An expert's cost is the slope between one token over top_k experts and over one (the
// intercept is the road's fixed cost). One calling thread.
#ifndef FT_BACKEND_BW_MEASURE_H
#define FT_BACKEND_BW_MEASURE_H

#include "backend.h"
#include "../moe/bw_profile.h"

typedef struct ft_bw_request {
    enum ft_placement device;  // FT_PLACEMENT_CPU: the CPU's rates only (gpu "none")
    int n_threads;             // the CPU's threads (the engine's -t)
    const enum ft_type *types; // the expert types to rate (all three banks of that type)
    int n_types;
    int n_embd, n_ff; // the experts' shape
    int top_k;        // experts a token selects, >= 2
} ft_bw_request;

// Experts of type t the measurements need: those the timed runs use, and those written after
// them so that the caches (the CPU's last level, the GPU's L2) hold none of the first when the
// runs start.
int ft_bw_experts_needed(enum ft_type t, int n_embd, int n_ff, int top_k);

// Synthetic banks: gate and up (n_embd, n_ff, n_expert), down (n_ff, n_embd, n_expert) of one
// type in one allocation (mem: host memory from alloc, or ft_malloc'd when alloc is NULL).
typedef struct ft_bw_experts {
    ft_tensor gate, up, down;
    void *mem;
    size_t bytes;
    uint64_t expert_bytes; // gate + up + down of one expert
} ft_bw_experts;

void ft_bw_experts_init(ft_bw_experts *e, enum ft_type t, int n_embd, int n_ff, int n_expert,
                        void *(*alloc)(size_t));
void ft_bw_experts_free(ft_bw_experts *e, void (*release)(void *)); // release NULL: free

// The key of this machine: the CPU's model name (/proc/cpuinfo) and threads; gpu "none".
void ft_bw_profile_key(moe_bw_profile *p, int n_threads);

// A timing (seconds) of one token over the n experts sel.
typedef double (*ft_bw_timed_fn)(void *ctx, const int32_t *sel, int n);
// The slope (s an expert) and intercept (s) of f between 1 and top_k experts, and the best time
// of f over top_k experts: best of 5 runs after a warm-up, each on experts the runs before it did
// not touch (the first of ft_bw_experts_needed).
void ft_bw_slope(ft_bw_timed_fn f, void *ctx, int top_k, double *slope, double *intercept);
double ft_bw_step_time(ft_bw_timed_fn f, void *ctx, int top_k);
// ft_bw_slope measured again, up to `retries` more times after a pause, while its intercept
// exceeds what top_k experts take at its slope: a fixed cost that large is not the op's own (a
// pool's wake and barrier: microseconds) but something else loading the machine while it was
// timed. Before each new attempt `again` (when not NULL) moves ctx to experts the last attempt
// did not read. Keeps the attempt with the smallest intercept; false when even that one exceeds
// what top_k experts take.
bool ft_bw_slope_settled(ft_bw_timed_fn f, void (*again)(void *ctx), void *ctx, int top_k, int retries,
                         double *slope, double *intercept);

// The CPU's rates and fixed costs (intercepts) for req's types into out, and its cpu_fixed_us: the
// largest of them.
bool ft_bw_measure_cpu_rates(const ft_bw_request *req, moe_bw_profile *out, ft_err *err);

// Measures req into out (the key and every figure the device has: the CPU's rates always).
bool ft_backend_measure_bw(const ft_bw_request *req, moe_bw_profile *out, ft_err *err);

#endif
