// cuda_cpu_experts: `--moe-backend cpu` inside the CUDA backend. The routed experts of a MoE
// layer are computed on the CPU from host memory (the model's mapping) by the CPU backend's
// moe_ffn (-t threads); everything else, the routing included, stays on the GPU: what
// llama.cpp users do with `-ot exps=CPU`. Per MoE layer the GPU and a host thread meet through
// flags in mapped pinned memory (host_meeting.h): moe_ffn only enqueues the meeting's kernels,
// and the layer's CPU work is done later, at the next MoE layer or a flush, so the host's
// launches overlap the GPU's work. One-token steps are captured in CUDA graphs (the meeting's
// kernels in the graph, the CPU work after the launch). docs/expert-cache.md ("cpu mode")
// describes the meetings, the FT_CPU_EXPERTS_* switches and the prefill overlay
// (cpu_experts_overlay.h).
//
// Deadlock rule: the stream may wait for a layer the host has not computed yet, so before
// anything that waits on the host for the stream the pending layer is computed
// (cuda_cpu_experts_flush: the backend calls it in read, step_end and free; the overlay too).
//
// Ownership: the backend that attached it frees it. One calling thread.
#ifndef FT_CUDA_CPU_EXPERTS_H
#define FT_CUDA_CPU_EXPERTS_H

#include "../backend.h"
#include "cuda_ops.h"
#include "ft_cuda.h"

typedef struct cuda_cpu_experts cuda_cpu_experts;

// The parameters: ft_host_experts_params (backend.h), the descriptors of the experts the CPU
// computes and of the routers it may route with.

// Can a layer with these expert banks (host descriptors) run from the overlay? (Its types are
// the grouped GEMM's, ft_cuda_moe_gemm_supported.)
bool cuda_cpu_experts_overlay_takes(const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down);

// Device bytes of one overlay buffer for the layers described (n_layer each, as in the
// params): per bank the largest layer it takes, 256-byte aligned. 0: it takes none.
size_t cuda_cpu_experts_buffer_bytes(const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down, int n_layer);

// Pinned host bytes of the overlay's staging ring.
size_t cuda_cpu_experts_staging_bytes(void);

// A CPU backend reserved for lim (the CUDA backend's limits), mapped pinned buffers for one
// step's input and output, and the overlay when asked. Copies the descriptors (not the data).
// route_gap is the CUDA backend's min_route_gap: the CPU's routing gaps join it.
cuda_cpu_experts *cuda_cpu_experts_init(const ft_host_experts_params *p, float *route_gap, const ft_backend_limits *lim);
void cuda_cpu_experts_free(cuda_cpu_experts *ce); // NULL: no-op (flushes first)

// Does it compute layer p->layer? (Its experts are in host memory and it has the layer's router.)
bool cuda_cpu_experts_serves(const cuda_cpu_experts *ce, const ft_moe_params *p);

// Does the GPU route (the caller passes its selections to moe_ffn)? Else the CPU runs the router
// on its host copy (FT_CPU_EXPERTS_ROUTE=host, for comparison).
bool cuda_cpu_experts_routes_on_gpu(const cuda_cpu_experts *ce);
// Where the CPU routes (FT_CPU_EXPERTS_ROUTE=host), adds its router's selections so far to out
// (the route counts, backend.h: n_layer rows of n_expert); else nothing. NULL: nothing.
void cuda_cpu_experts_add_route_counts(cuda_cpu_experts *ce, uint64_t *out);

// Sets r's export fields so that the decode router's launch is also the next meeting's export
// (ft_cuda_router_params), where the meeting allows it (the GPU routes, the flag meeting);
// returns whether it did. The caller then passes exported = true to moe_ffn.
bool cuda_cpu_experts_router_export(const cuda_cpu_experts *ce, ft_cuda_router_params *r);

// y (n_tok, n_embd), device memory = the routed experts' output for x (device memory), enqueued
// on s as described at the top; the CPU work itself is left pending until the next call (a
// direct step) or the flush (a graph step: graph_step, with s the capturing stream, or NULL
// when a replay enqueues nothing). sel and sel_w (device, (n_tok, n_expert_used)): the GPU's
// routing, as ft_moe_params.sel describes it, where cuda_cpu_experts_routes_on_gpu, else NULL;
// they travel with x, by an export kernel unless exported (the router's launch before did it:
// cuda_cpu_experts_router_export). p's tensors must stay valid until then; row_gemm (the calling
// backend's, see ft_backend.row_gemm; NULL: by n_tok) is copied.
void cuda_cpu_experts_moe_ffn(cuda_cpu_experts *ce, const ft_moe_params *p, const float *x, const int32_t *sel,
                              const float *sel_w, bool exported, float *y, int n_tok, const bool *row_gemm,
                              bool graph_step, ft_cuda_stream *s);

// May steps with CPU experts be captured in CUDA graphs? (Not with the event meeting.)
bool cuda_cpu_experts_graphable(const cuda_cpu_experts *ce);

// Computes the pending layers, if any (each waits for its input on the stream first). Call
// before waiting on the host for the stream, and after launching a graph step. NULL: no-op.
void cuda_cpu_experts_flush(cuda_cpu_experts *ce);

// Does layer p->layer run from the overlay (when its step is large enough for the grouped GEMM)?
bool cuda_cpu_experts_overlay_serves(const cuda_cpu_experts *ce, const ft_moe_params *p);

// Brings layer p->layer's expert banks into an overlay buffer (unless it holds them) and makes
// s wait for them; views[0], [1], [2] become device descriptors of p's gate, up and down there
// (placement CUDA, native mat_bytes), valid for the work s enqueues until the next call.
// Flushes first. Asserts cuda_cpu_experts_overlay_serves.
void cuda_cpu_experts_overlay_begin(cuda_cpu_experts *ce, const ft_moe_params *p, ft_cuda_stream *s,
                                    ft_tensor views[3]);

// After the layer's work on the views is enqueued: stages the next overlay layer into the other
// buffer (double-buffered only), so its copy overlaps this layer's work on the GPU.
void cuda_cpu_experts_overlay_end(cuda_cpu_experts *ce);

// ---------------------------------------------------------------------------------------------
// --moe-backend hybrid: the offload's cache computes the hits and the copied misses on the GPU,
// the CPU computes the misses the lookup left to it (ft_offload_view.cpu_sel) from the banks in
// the params (gate_exps, up_exps, down_exps: descriptors into the offload's host banks), and
// its sum joins the layer's output on the GPU. The same meeting as cpu mode, with two
// differences: the host answers only a layer with a CPU share (the join reads the count on the
// device and skips the wait otherwise), and the answer is added to y, not copied over it.

// Enqueues the export of x, cpu_sel (n_tok x n_expert_used, -1: not the CPU's) and sel_w on s
// (the lookup wrote them just before; s NULL: a replayed graph step), and leaves the layer's
// CPU work pending as moe_ffn does. Not with the event meeting.
void cuda_cpu_experts_hybrid_begin(cuda_cpu_experts *ce, const ft_moe_params *p, const float *x,
                                   const int32_t *cpu_sel, const float *sel_w, int n_tok, bool graph_step,
                                   ft_cuda_stream *s);
// What the split's costs are measured from (nothing pending; both wait for the device): the
// round trip of a meeting of a row of the layer's input each way with a spinning import
// (microseconds), and the best time of the CPU op on experts 0 .. n_experts-1 of hybrid layer
// `layer` (block index) for one token (seconds).
double cuda_cpu_experts_meeting_us(cuda_cpu_experts *ce, int layer);
double cuda_cpu_experts_time_experts(cuda_cpu_experts *ce, int layer, int n_experts);

// The one-token CPU ops of hybrid layer `layer` (block index) the host ran since the last call:
// how many, their experts in all and their time in all (ns); the counters restart at 0. What
// hybrid_tune.h corrects the split's CPU cost by.
void cuda_cpu_experts_hybrid_take_ops(cuda_cpu_experts *ce, int layer, uint64_t *count, uint64_t *experts,
                                      uint64_t *ns);

// Enqueues the join after the GPU's expert kernels: y (n_tok, n_embd) += the CPU's sum, where
// *n_cpu (device) is not 0. s NULL: nothing (a replay).
void cuda_cpu_experts_hybrid_end(cuda_cpu_experts *ce, float *y, const int32_t *n_cpu, int n_tok, int64_t n_embd,
                                 ft_cuda_stream *s);

#endif
