// ft_cuda: the C interface of the CUDA backend's foundation (device, memory, streams, and the
// decode matmul kernels). Named ft_cuda.h so that it never shadows the toolkit's <cuda.h>.
//
// One binary serves machines with and without a GPU: the CUDA runtime is linked statically,
// and ft_cuda_device_count() returns 0 (never aborts, logs why only at debug level) when there
// is no driver or no device, so callers fall back to the CPU. Only src/backend/cuda/ (and the GPU
// tests) include it; without nvcc at build time this folder is replaced by cuda_stub.c, the
// backend's constructor reporting no device.
//
// Memory: pointers returned by ft_cuda_malloc are device memory, owned by the caller and freed
// with ft_cuda_free. Nothing here allocates on the per-token path: the kernels write into
// buffers the caller sized with the *_bytes helpers.
//
// Errors: every CUDA call and kernel launch is checked; a failure there is a programmer or
// device error and aborts with the failing statement (CUDA_CHECK). The exceptions, which
// return a value instead, are device detection and ft_cuda_malloc (NULL when out of memory).
//
// Threads: functions may be called from any one thread at a time per stream; kernels on one
// stream run in order. A NULL stream means the legacy default stream.
#ifndef FT_CUDA_H
#define FT_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../quant/blocks.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Devices

typedef struct ft_cuda_device_info {
    char name[256];
    int cc_major, cc_minor;  // compute capability
    int sm_count;
    size_t total_mem, free_mem; // bytes
    size_t l2_bytes;
    int mem_bus_bits;           // memory bus width (for the datasheet bandwidth)
    size_t process_mem;         // what this process holds on it, the CUDA context included (0: unknown)
} ft_cuda_device_info;

// Number of usable CUDA devices; 0 when the driver is missing, too old, or finds no GPU (the
// reason goes to the debug log). Never aborts. Cached after the first call.
int ft_cuda_device_count(void);

// Facts about device dev (0 <= dev < ft_cuda_device_count()). Returns false if dev is invalid.
bool ft_cuda_device_get_info(int dev, ft_cuda_device_info *out);

// The device memory this process holds on the device at PCI address pci_bus_id, as nvidia-smi
// reads it (NVML's per-process accounting, which counts the CUDA context): false where NVML is
// missing or does not list this process (a container with its own PID namespace).
bool ft_cuda_process_memory(const char *pci_bus_id, size_t *bytes);

// Makes dev the current device of the calling thread. Aborts if dev is invalid.
void ft_cuda_set_device(int dev);

// Waits for all work on the current device.
void ft_cuda_device_sync(void);

// Does CUDA load kernels at their first launch (CUDA_MODULE_LOADING=LAZY in the environment;
// ft asks for eager loading otherwise)? Such a launch may wait for the context's streams.
bool ft_cuda_modules_load_lazily(void);

// ---------------------------------------------------------------------------------------------
// Memory

// n bytes of device memory, or NULL when the device is out of memory (no abort: the caller
// reports it). ft_cuda_free(NULL) is a no-op.
void *ft_cuda_malloc(size_t n);
void ft_cuda_free(void *p);

// Pinned (page-locked) host memory, for asynchronous copies. Aborts when it cannot be had.
void *ft_cuda_host_alloc(size_t n);
void *ft_cuda_host_alloc_or_null(size_t n); // NULL when it cannot be had
void ft_cuda_host_free(void *p);

typedef struct ft_cuda_stream ft_cuda_stream; // opaque; NULL is the default stream

// Copies of n bytes, asynchronous with respect to the host on stream s (host memory that is
// not pinned makes them synchronous). ft_cuda_memset writes the byte value into n bytes.
void ft_cuda_memcpy_h2d(void *dst, const void *src, size_t n, ft_cuda_stream *s);
void ft_cuda_memcpy_d2h(void *dst, const void *src, size_t n, ft_cuda_stream *s);
void ft_cuda_memcpy_d2d(void *dst, const void *src, size_t n, ft_cuda_stream *s);
void ft_cuda_memset(void *dst, int value, size_t n, ft_cuda_stream *s);

// ---------------------------------------------------------------------------------------------
// Streams and events

// A new non-blocking stream; ft_cuda_stream_free(NULL) is a no-op.
ft_cuda_stream *ft_cuda_stream_init(void);
void ft_cuda_stream_free(ft_cuda_stream *s);
void ft_cuda_stream_sync(ft_cuda_stream *s);

typedef struct ft_cuda_event ft_cuda_event;   // opaque, for timing
ft_cuda_event *ft_cuda_event_init(void);
void ft_cuda_event_free(ft_cuda_event *e);    // NULL: no-op
void ft_cuda_event_record(ft_cuda_event *e, ft_cuda_stream *s);
// Waits on the host until the work before the event's last record has run.
void ft_cuda_event_sync(ft_cuda_event *e);
// Milliseconds between two recorded events (waits for the second one).
float ft_cuda_event_elapsed_ms(ft_cuda_event *start, ft_cuda_event *stop);

// ---------------------------------------------------------------------------------------------
// CUDA graphs: the work enqueued on a stream between capture_begin and capture_end is
// recorded instead of run (thread-local capture mode), and the executable graph replays it.
// Copies from pinned host memory in a graph read that memory when the graph runs.

typedef struct ft_cuda_graph ft_cuda_graph;   // opaque: an executable graph
void ft_cuda_capture_begin(ft_cuda_stream *s);
// Ends the capture on s and returns the graph, instantiated. Aborts if capture failed (an
// operation that cannot be captured was enqueued).
ft_cuda_graph *ft_cuda_capture_end(ft_cuda_stream *s);
void ft_cuda_graph_launch(ft_cuda_graph *g, ft_cuda_stream *s);
void ft_cuda_graph_free(ft_cuda_graph *g);    // NULL: no-op

// Launch profiling (launch_profile.cu), on when FT_CUDA_PROFILE is set and not "0"; else these
// return at once. A step's launches on s between step_begin and step_end are timed (capture:
// true when s is being captured; then step_end takes the graph and each replayed() call of that
// graph, after its launch, adds its times); a table per launch site is printed at exit.
void ft_cuda_profile_step_begin(ft_cuda_stream *s, bool capture);
void ft_cuda_profile_step_end(const ft_cuda_graph *captured); // NULL for a direct step
void ft_cuda_profile_replayed(const ft_cuda_graph *g);

// ---------------------------------------------------------------------------------------------
// Activation quantization (quantize_q8_1.cu)

// Most tokens one matvec launch takes; a larger batch belongs to the prefill GEMM (or is
// split by the caller).
#define FT_CUDA_MATVEC_MAX_TOK 8

// Bytes of the q8_1 form of n_tok rows of n_cols floats (n_cols a multiple of 32): each row
// becomes n_cols / 32 consecutive block_q8_1, rows one after another.
size_t ft_cuda_q8_1_bytes(int64_t n_cols, int n_tok);

// y (n_tok rows of n_cols / 32 block_q8_1) = q8_1 quantization of x (n_tok, n_cols) floats,
// both device memory, bit-identical to ft_quantize_row_q8_1_ref. n_cols % 32 == 0 and
// n_tok >= 1 (asserted).
void ft_cuda_quantize_q8_1(const float *x, void *y, int64_t n_cols, int n_tok, ft_cuda_stream *s);

// ---------------------------------------------------------------------------------------------
// Matrix-vector products (matvec_q.cu for quantized weights, matvec_f.cu for float weights)

typedef struct ft_cuda_matvec_params {
    uint32_t type;      // enum ft_type of the weights
    const void *w;      // (n_rows, n_cols) weights in GGUF row-major blocks, device memory,
                        // 16-byte aligned (cudaMalloc gives 256)
    int64_t n_rows;     // output features
    int64_t n_cols;     // input features, a multiple of the type's block size
    const void *x;      // activations, device memory: (n_tok, n_cols) block_q8_1 from
                        // ft_cuda_quantize_q8_1 for the quantized types, (n_tok, n_cols)
                        // floats for f32/f16/bf16 (see ft_cuda_matvec_wants_q8_1)
    float *y;           // (n_tok, n_rows) floats, device memory
    int n_tok;          // 1..FT_CUDA_MATVEC_MAX_TOK
    const float *bias;  // (n_rows) f32 added to each token's row (an f32 add after the product,
                        // as the add_bias op's), or NULL; quantized types only, not ft_cuda_matvec_ids
    float *part;        // ft_cuda_gemm_f only: split scratch as ft_cuda_gemm_params', or NULL
    size_t part_floats;
    float *acc;         // (n_tok, n_rows) floats each output is also added into (acc += y: a
                        // residual add after the product), or NULL; ft_cuda_matvec of quantized
                        // types only
} ft_cuda_matvec_params;

// Does ft_cuda_matvec compute with weights of this type?
bool ft_cuda_matvec_supported(uint32_t type);

// Does it take q8_1 activations (quantized types) rather than floats (f32/f16/bf16)?
bool ft_cuda_matvec_wants_q8_1(uint32_t type);

// y = x · wᵀ for n_tok tokens, one launch on stream s. Quantized types take integer dot
// products (dp4a) of the packed codes with the q8_1 activations; float types take float
// activations. Aborts on an unsupported type or a bad shape (programmer errors).
void ft_cuda_matvec(const ft_cuda_matvec_params *p, ft_cuda_stream *s);

// Several matrices of one input in one launch (q, k and v of a layer; qwen35moe's float alpha
// and beta): y_i = x · w_iᵀ for p[0..n-1], which share type, n_cols, x and n_tok (no bias for
// float types); 1 <= n <= FT_CUDA_MATVEC_MAX_SEG. The kernel geometry is chosen for all their
// rows together (quantized types).
#define FT_CUDA_MATVEC_MAX_SEG 4
void ft_cuda_matvec_multi(const ft_cuda_matvec_params *p, int n, ft_cuda_stream *s);

// The experts' gated activation act(gate, up), in the CPU op's steps (cpu_impl.h's cpu_glu):
// SiLU, gpt-oss's clamped SwiGLU (alpha and limit), or GELU's tanh form with the gate and the
// GELU rounded to f16 (ggml's table). Values as backend.h's enum ft_glu.
enum { FT_CUDA_GLU_SILU, FT_CUDA_GLU_SWIGLU_OAI, FT_CUDA_GLU_GELU };
typedef struct ft_cuda_glu {
    int act;            // FT_CUDA_GLU_*; 0 (SiLU) when zeroed
    float alpha, limit; // FT_CUDA_GLU_SWIGLU_OAI's
} ft_cuda_glu;

// What some models add around their experts' products (gpt-oss: biases and the clamped SwiGLU;
// gemma4: GELU and a scale per expert), indexed by the global expert: the tile's expert in the
// grouped GEMM, bias_ids[pair] in the expert matvecs (whose ids may be cache slots). Zeroed:
// SiLU and nothing added.
typedef struct ft_cuda_expert_extras {
    ft_cuda_glu glu;
    const int32_t *bias_ids;          // matvecs: (n_pairs) global expert of each pair, or NULL: ids
    const float *gate_bias, *up_bias; // (n_expert, n_ff) f32, added to gate and up before act
    const float *down_scale;          // (n_expert) f32: down's output times its expert's entry,
    const float *down_bias;           // then plus its (n_expert, n_embd) row, before the weight
} ft_cuda_expert_extras;

// The expert form (MoE): n_pairs matvecs of one token each in one launch. Pair p multiplies
// matrix ids[p] of a 3-D weight (matrices mat_bytes apart) by activation row p / x_div and
// writes y row p. The ids live in device memory (written by the router on the GPU), so the
// host never learns which experts ran. 1 <= n_pairs <= 65535.
typedef struct ft_cuda_matvec_ids_params {
    uint32_t type;          // enum ft_type of the weights
    const void *w;          // (n_matrices, n_rows, n_cols) device memory
    size_t mat_bytes;       // bytes of one (n_rows, n_cols) matrix
    int64_t n_rows, n_cols;
    const void *x;          // (n_pairs / x_div rows, n_cols): q8_1 or floats as for ft_cuda_matvec
    const int32_t *ids;     // (n_pairs) matrix of each pair, device memory; -1: none (hybrid: the CPU
                            // computes the pair): its y row is 0, and SUM adds nothing for it
    int x_div;              // >= 1
    float *y;               // (n_pairs, n_rows); (n_pairs / k, n_rows) with sum_w
    int n_pairs;
    // Fused forms, quantized types only (ft_cuda_matvec_wants_q8_1); NULL: plain.
    const void *w_up;       // GLU: y row p = silu(W[ids[p]] · x) * (W_up[ids[p]] · x), W_up
                            // shaped and typed as w (the gate and up banks of an MoE layer)
    const float *sum_w;     // weighted sum over each token's k consecutive pairs: y row t =
                            // sum over j in order of sum_w[t k + j] * (W[ids[t k + j]] · x row
                            // (t k + j) / x_div); (n_pairs) weights, device memory
    int k;                  // pairs per token, with sum_w: 1..FT_CUDA_MATVEC_SUM_MAX_K
    void *y_q;              // GLU only: y's q8_1 form as well ((n_pairs, n_rows) as
                            // ft_cuda_quantize_q8_1 writes it), or NULL; n_rows % 32 == 0
    // fused forms: GLU takes ex's activation and gate and up biases (silu above is its
    // default), SUM each product's scale and bias before its weight
    ft_cuda_expert_extras ex;
} ft_cuda_matvec_ids_params;

#define FT_CUDA_MATVEC_SUM_MAX_K 32

void ft_cuda_matvec_ids(const ft_cuda_matvec_ids_params *p, ft_cuda_stream *s);

// For tests and tuning only: forces the quantized kernels' threads per row group (32 or 128;
// 0 restores the automatic choice by shape, see matvec_q.cu). Not thread-safe.
void ft_cuda_matvec_force_tpr(int tpr);

// For tests only: the decode attention's deep form (a stage more a CTA, the default where the
// device's shared memory allows it) on or off; returns whether it is on. Not thread-safe.
bool ft_cuda_attention_force_deep(bool on);

// y = x · wᵀ for float weights (f32, f16, bf16) and any n_tok >= 1 rows of float activations,
// one launch (gemm_f.cu): the prefill form of ft_cuda_matvec for float weights (an MoE router),
// whose weight tiles serve 32 tokens each. p as for ft_cuda_matvec, but n_tok is not limited
// to FT_CUDA_MATVEC_MAX_TOK. Float FMAs in ascending column order per output.
void ft_cuda_gemm_f(const ft_cuda_matvec_params *p, ft_cuda_stream *s);

// ---------------------------------------------------------------------------------------------
// Prefill matmuls on tensor cores (gemm_q.cu) and the MoE FFN grouped by expert (moe_gemm.cu)

typedef struct ft_cuda_gemm_params {
    uint32_t type;      // enum ft_type of the weights (ft_cuda_gemm_supported)
    const void *w;      // (n_out, n_in) weights in GGUF row-major blocks, device memory, 16-byte
                        // aligned
    int64_t n_out;      // output features
    int64_t n_in;       // input features, a multiple of the type's block size
    const void *x;      // (n_tok, n_in) block_q8_1 activations from ft_cuda_quantize_q8_1
    float *y;           // (n_tok, n_out) floats, device memory
    int n_tok;          // >= 1; any count (the last tile of 64 tokens may be partial)
    // Scratch for a launch split over the input where its tiles alone would leave SMs idle
    // (decode-sized batches): partial products, summed in split order by a second launch, so the
    // result is deterministic (not the unsplit launch's bits). NULL: never split.
    float *part;
    size_t part_floats;
} ft_cuda_gemm_params;

// Does ft_cuda_gemm compute with weights of this type? (The quantized types but q2_K; float
// weights are not supported.)
bool ft_cuda_gemm_supported(uint32_t type);

// y = x · wᵀ on the tensor cores (int8 MMA on the weight codes and the q8_1 activations, one
// launch on stream s). For prefill: worth it from a few dozen tokens; fewer belong to
// ft_cuda_matvec. Aborts on an unsupported type or a bad shape (programmer errors).
void ft_cuda_gemm(const ft_cuda_gemm_params *p, ft_cuda_stream *s);

// For tests and tuning only: forces ft_cuda_gemm's tokens per tile (32 or 64; 0 restores the
// choice by shape). Not thread-safe.
void ft_cuda_gemm_force_bn(int bn);

// The MoE FFN of n_tok tokens with k experts each, grouped by expert: the (token, slot) pairs
// are sorted by expert on the device (no host synchronisation), then each expert's gate and
// up weights are read once per tile of up to 32 of its pairs, h = silu(x · gateᵀ) * (x · upᵀ)
// in one fused GEMM, h quantized to q8_1, the down GEMM writes each pair's row of out, and
// y[t] = sum_j w[t][j] * out[t * k + j] (ft_cuda_moe_combine's order).
typedef struct ft_cuda_moe_gemm_params {
    uint32_t gate_type, down_type;  // enum ft_type; up has gate's type
    const void *gate, *up;          // (n_expert, n_ff, n_embd) device memory, 16-byte aligned
    const void *down;               // (n_expert, n_embd, n_ff)
    size_t gate_mat_bytes, down_mat_bytes; // bytes of one expert's matrix (up as gate)
    int64_t n_embd, n_ff;           // multiples of the types' block sizes
    int n_expert, n_tok, k;         // n_tok * k <= 65535 * 32 / 2 (asserted)
    const int32_t *sel;             // (n_tok, k) experts of each token (ft_cuda_moe_route)
    const float *sel_w;             // (n_tok, k) their weights
    const void *xq;                 // (n_tok, n_embd) q8_1 of the FFN input
    void *work;                     // ft_cuda_moe_gemm_work_bytes(n_tok * k, n_expert) bytes
    float *h;                       // (n_tok * k, n_ff) scratch
    void *hq;                       // q8_1 of (n_tok * k, n_ff): scratch; may be xq's buffer
                                    // (xq is no longer read when hq is written)
    float *out;                     // (n_tok * k, n_embd) scratch: each pair's expert output
    float *y;                       // (n_tok, n_embd) the result
    ft_cuda_expert_extras ex;       // activation, biases and scales (bias_ids unused: sel's)
} ft_cuda_moe_gemm_params;

// Can ft_cuda_moe_gemm compute with experts of these types?
bool ft_cuda_moe_gemm_supported(uint32_t gate_type, uint32_t up_type, uint32_t down_type);

// Bytes of the grouping workspace for n_pairs (token, slot) pairs over n_expert experts.
size_t ft_cuda_moe_gemm_work_bytes(int n_pairs, int n_expert);

// Enqueues the whole MoE FFN on stream s. Aborts on unsupported types or bad shapes.
void ft_cuda_moe_gemm(const ft_cuda_moe_gemm_params *p, ft_cuda_stream *s);

// The MoE FFN of a few rows (a decode step of several sequences) with each selected expert's
// weights read once for all the rows that chose it (moe_rows.cu): the (token, slot) pairs
// grouped by expert into tiles of up to 4 pairs, gate/up and the activation in
// one launch (h and its q8_1 form), down in a second (each pair's product, scaled and biased
// per the extras), then the weighted sum in slot order. Every product and sum has the bits of
// ft_cuda_matvec_ids' fused kernels (GLU with y_q, then SUM), so a token's output does not
// depend on the other rows of its step.
typedef struct ft_cuda_moe_rows_params {
    uint32_t gate_type, down_type;  // quantized (ft_cuda_matvec_wants_q8_1); up has gate's type
    const void *gate, *up;          // banks of (n_ff, n_embd) matrices gate_mat_bytes apart,
    const void *down;               // and of (n_embd, n_ff) ones down_mat_bytes apart; 16-byte aligned
    size_t gate_mat_bytes, down_mat_bytes;
    int64_t n_embd, n_ff;           // multiples of the types' block sizes; n_ff % 32 == 0
    int n_expert, n_tok, k;         // n_tok * k <= 65535
    const int32_t *sel;             // (n_tok, k) experts of each token: the grouping, the extras
    const int32_t *ids;             // (n_tok, k) matrix of each pair in the banks (sel, or the
                                    // expert cache's slots); never -1
    const float *sel_w;             // (n_tok, k) their weights
    const void *xq;                 // (n_tok, n_embd) q8_1 of the FFN input
    void *work;                     // ft_cuda_moe_rows_work_bytes(n_tok * k, n_expert) bytes
    float *h;                       // (n_tok * k, n_ff) scratch
    void *hq;                       // q8_1 of (n_tok * k, n_ff): scratch, not xq's buffer
    float *out;                     // (n_tok * k, n_embd) scratch
    float *y;                       // (n_tok, n_embd) the result
    ft_cuda_expert_extras ex;       // activation, biases and scales (bias_ids unused: sel's)
} ft_cuda_moe_rows_params;

// Bytes of the grouping workspace for n_pairs pairs over n_expert experts.
size_t ft_cuda_moe_rows_work_bytes(int n_pairs, int n_expert);

// Enqueues the MoE FFN of p's rows on stream s. Aborts on unsupported types or bad shapes.
void ft_cuda_moe_rows(const ft_cuda_moe_rows_params *p, ft_cuda_stream *s);


#ifdef __cplusplus
}
#endif

#endif
