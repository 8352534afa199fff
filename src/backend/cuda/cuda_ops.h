// cuda_ops.h: the kernels of the CUDA backend's ops, as plain C launchers (internal to
// src/backend/cuda/; cuda_backend.c is the only caller). One op per .cu file.
//
// Every pointer is device memory unless said otherwise; every launcher enqueues on stream s
// and returns at once (no host synchronisation); shapes are programmer errors and abort.
#ifndef FT_CUDA_OPS_H
#define FT_CUDA_OPS_H

#include "ft_cuda.h"
#include "../kv_block.h"

#ifdef __cplusplus
extern "C" {
#endif

// rms_norm.cu: y = x / rms(x) * w per row of n floats (y may be x; w NULL: no weight, as 1s); when yq is not NULL, also
// its q8_1 form (n_rows rows of n / 32 blocks, n % 32 == 0), equal to ft_cuda_quantize_q8_1(y).
// When d is not NULL, first x += d (as ft_cuda_add), written back; else x is only read.
void ft_cuda_rms_norm(float *x, const float *d, const float *w, float *y, void *yq, int n_rows,
                      int n, float eps, ft_cuda_stream *s);
// The same, then y times act(g) before its q8_1 form (ft_cuda_gate_mul's arithmetic): rows are
// (token, head) pairs of n_head heads of n floats, g (tokens, g_width) with g_width n_head (a
// value per head) or n_head * n. gate NULL or gate->g NULL: no gate.
typedef struct ft_cuda_norm_gate {
    const float *g;
    int g_width, n_head;
    int act; // an enum ft_act (backend.h)
} ft_cuda_norm_gate;
void ft_cuda_rms_norm_gate(float *x, const float *d, const float *w, const ft_cuda_norm_gate *gate, float *y,
                           void *yq, int n_rows, int n, float eps, ft_cuda_stream *s);

// elementwise.cu
void ft_cuda_add(float *y, const float *x, size_t n, ft_cuda_stream *s);          // y += x
void ft_cuda_add_bias(float *y, const float *b, int n_rows, int n, ft_cuda_stream *s);
// y[i] = sum over z of part[z * n + i], z ascending (a GEMM's splits over its input, gemm_q.cu
// and gemm_f.cu).
void ft_cuda_sum_splits(const float *part, float *y, int64_t n, int splits, ft_cuda_stream *s);
// x (n_tok, n_head*head_dim) *= act(g); g (n_tok, g_width), g_width n_head or the width; act
// an enum ft_act (backend.h). xq not NULL: x's q8_1 form too (the width a multiple of 32).
void ft_cuda_gate_mul(float *x, const float *g, void *xq, int n_tok, int n_head, int head_dim, int g_width, int act,
                      ft_cuda_stream *s);
// g = silu(g) * u over n floats; ft_cuda_glu_act: g = act(g, u) (ft_cuda.h's activations)
void ft_cuda_swiglu(float *g, const float *u, size_t n, ft_cuda_stream *s);
void ft_cuda_glu_act(float *g, const float *u, size_t n, const ft_cuda_glu *act, ft_cuda_stream *s);
// The same, and g's q8_1 form into gq (rows whose width is a multiple of 32, n % 32 == 0)
void ft_cuda_glu_act_q(float *g, const float *u, void *gq, size_t n, const ft_cuda_glu *act, ft_cuda_stream *s);
// x *= scale; x = cap * tanh(x * (1 / cap)) (soft-capping, the CPU op's steps), over n floats
void ft_cuda_scale(float *x, size_t n, float scale, ft_cuda_stream *s);
void ft_cuda_softcap(float *x, size_t n, float cap, ft_cuda_stream *s);
// y[t] += s[t] * sigmoid(logit[t]) (sigmoid as silu(l) / l, as the CPU op)
void ft_cuda_sigmoid_scale_add(float *y, const float *src, const float *logit, int n_tok,
                               int n_embd, ft_cuda_stream *s);
// x (n_rows, n_head * 2 * head_dim) split head by head: the first head_dim values of each head
// to a, the next to b ((n_rows, n_head * head_dim) each)
void ft_cuda_split_heads(const float *x, float *a, float *b, int n_rows, int n_head, int head_dim,
                         ft_cuda_stream *s);

// delta_net.cu: gated DeltaNet linear attention as backend.h's ft_delta_params says, for one
// sequence; qkv is overwritten (the conv's output), or left as it is when the conv writes to
// scratch (n_tok x (2K + V) floats; NULL: none), which lets it run over the tokens in parallel.
// head_dim 32, 64, 128 or 256. A batch of 64 tokens or more (head_dim 64 or 128) runs the delta
// rule in chunks (delta_rule_chunked.cu) when chunk_ws holds what it needs, else token by token.
#define FT_CUDA_DELTA_MAX_CONV 8
typedef struct ft_cuda_delta_params {
    float *qkv;                  // (n_tok, 2K + V)
    float *scratch;              // (n_tok, 2K + V) or NULL
    float *chunk_ws;             // the chunked rule's workspace, chunk_ws_floats floats, or NULL
    size_t chunk_ws_floats;
    const float *alpha, *beta;   // (n_tok, n_v_heads)
    const float *conv_w;         // (2K + V) channels of d_conv taps
    const float *dt, *a;         // (n_v_heads)
    float *conv_state, *state;   // as ft_delta_params
    float *out;                  // (n_tok, V)
    int n_tok, pos0;             // pos0 + *pos_dev (when not NULL) == 0: both states start at 0
    const int32_t *pos_dev;
    int n_k_heads, n_v_heads, head_dim, d_conv;
    int k_grouped;               // V head h reads K head h / (n_v / n_k); else h % n_k
    float eps;
} ft_cuda_delta_params;
void ft_cuda_delta_net(const ft_cuda_delta_params *p, ft_cuda_stream *s);
// Called once by the backend before any capture (the chunked rule's shared memory).
void ft_cuda_delta_net_init(void);

// Tokens of several sequences in one launch, one each (the decode rows of a server step): token
// t is position pos[t] of the sequence whose block table (kv_block.h) is blocks[t]. pos NULL:
// the launch's tokens are one sequence's, at consecutive positions (pos0, pos_dev).
typedef struct ft_cuda_seq_rows {
    const int32_t *pos;
    const int32_t *const *blocks;
} ft_cuda_seq_rows;

// rope.cu: the angles' host-side constants come precomputed so device and CPU agree.
typedef struct ft_cuda_rope_params {
    int n_rot;
    int neox;
    float theta_scale;     // freq_base^(-2/n_rot), computed on the host as the CPU op does
    float freq_scale, ext_factor, attn_factor;
    float corr0, corr1;    // YaRN correction dims
    const int32_t *pos_dev; // device memory: added to pos0, or NULL
    int sect_dims;          // imrope for text (backend.h): the sections summed, 0 for none
    int sections[3];        // the t, h and w sections
    const float *freq_factors; // device memory: pair i's angle divided by entry i (gemma4), or NULL
    ft_cuda_seq_rows rows;  // each token's position (over pos0 and pos_dev), and its block table for
                            // the cache rows of ft_cuda_norm_rope_kv; rows.pos NULL: none
} ft_cuda_rope_params;
void ft_cuda_rope(float *x, int n_tok, int n_head, int head_dim, int pos0,
                  const ft_cuda_rope_params *p, ft_cuda_stream *s);

// norm_rope.cu: for n_buf (1 or 2: q and k in one launch) buffers x (n_tok, n_head * head_dim)
// in place: each head RMS-normalised with its buffer's w (head_dim floats, or NULL), then rotated as
// ft_cuda_rope; head_dim <= 256. Same bits as the two ops.
#define FT_CUDA_NORM_ROPE_MAX_HD 256
typedef struct ft_cuda_norm_rope_buf {
    float *x;
    const float *w;
    int n_head;
} ft_cuda_norm_rope_buf;
void ft_cuda_norm_rope(const ft_cuda_norm_rope_buf *b, int n_buf, int n_tok, int head_dim, float eps, int pos0,
                       const ft_cuda_rope_params *p, ft_cuda_stream *s);
// The same, the norm only where norm is true (else the ropes alone: rope.cu's bits).
void ft_cuda_norm_rope_opt(const ft_cuda_norm_rope_buf *b, int n_buf, int n_tok, int head_dim, float eps, bool norm,
                           int pos0, const ft_cuda_rope_params *p, ft_cuda_stream *s);

// hadamard.cu: each of n_chunks consecutive chunks of n floats (n a power of two <= 1024).
void ft_cuda_hadamard(float *x, int64_t n_chunks, int n, ft_cuda_stream *s);

// set_rows.cu: for each of n_dst destinations (1..FT_CUDA_SET_ROWS_MAX_DST, one launch: the k
// and v rows of a layer), n_rows rows of n floats at x -> the cache rows (FT_TYPE_F16 or
// FT_TYPE_Q8_0, row_bytes apart from dst) of positions pos.. of a sequence, pos moved *pos_dev
// further when pos_dev (device memory) is not NULL; blocks: the sequence's block table (device
// memory, kv_block.h), or NULL: row p is position p. rows (or NULL): each row's own position and
// block table instead (rows of several sequences).
#define FT_CUDA_SET_ROWS_MAX_DST 2
typedef struct ft_cuda_set_rows_dst {
    void *dst;
    size_t row_bytes;
    const float *x; // (n_rows, n)
} ft_cuda_set_rows_dst;
void ft_cuda_set_rows(uint32_t type, const ft_cuda_set_rows_dst *d, int n_dst, const int32_t *blocks,
                      const ft_cuda_seq_rows *rows, const int32_t *pos_dev, int pos, int n_rows, int64_t n,
                      ft_cuda_stream *s);

// norm_rope.cu with the cache rows of a layer in the same launch (decode steps): buffer 1 (k,
// n_buf 2) after its norm and rope into k's cache rows, and v's heads (v.x: n_tok rows of as
// many heads as k's; NULL: none) into v's, with ft_cuda_set_rows' bits, at the rope's positions
// (pos0 and p->pos_dev, or p->rows) through the block table blocks (or p->rows'). type:
// FT_TYPE_F16, or FT_TYPE_Q8_0 with head_dim % 32 == 0; k.x must be buffer 1's x.
typedef struct ft_cuda_kv_rows {
    uint32_t type;
    ft_cuda_set_rows_dst k, v;
    const int32_t *blocks;
} ft_cuda_kv_rows;
void ft_cuda_norm_rope_kv(const ft_cuda_norm_rope_buf *b, int n_buf, int n_tok, int head_dim, float eps, bool norm,
                          int pos0, const ft_cuda_rope_params *p, const ft_cuda_kv_rows *kv, ft_cuda_stream *s);

// attention.cu. Small batches split the keys over CTAs when part is given: part holds
// ft_cuda_attention_part_floats(n_tok, rows, n_head, n_head_kv, head_dim) floats.
#define FT_CUDA_ATTN_SPLIT_MAX_TOK 8
#define FT_CUDA_ATTN_MAX_SPLIT 32
typedef struct ft_cuda_attn_params {
    const float *q;        // (n_tok, n_head * head_dim)
    float *out;            // (n_tok, n_head * head_dim)
    const void *k, *v;     // caches: rows of KV heads one after another
    const int32_t *blocks; // the sequence's block table (kv_block.h), or NULL: row p = position p
    uint32_t k_type, v_type;   // FT_TYPE_F16 or FT_TYPE_Q8_0
    size_t k_row_bytes, v_row_bytes;
    int n_tok, pos0, n_head, n_head_kv, head_dim, window;
    float scale;
    const int32_t *pos_dev; // device memory: added to pos0 (a CUDA graph replayed at any
                           // position), or NULL
    float *part;           // scratch for split partial results, or NULL: no split
    void *out_q;           // the q8_1 form of out as well (n_tok rows of n_head * head_dim / 32
                           // blocks), or NULL; only where ft_cuda_attention_quantizes says so
    const float *sinks;    // (n_head) attention sinks: a logit per head joining each softmax's
                           // denominator (gpt-oss), or NULL
    ft_cuda_seq_rows rows; // rows.pos not NULL: the n_tok queries are n_tok sequences' one each
                           // (pos0, pos_dev and blocks unused); their keys are split as one
                           // launch's, over all of them
    int n_seq;             // set by the launcher: sequences the split spreads over (1, or n_tok
                           // with rows)
    int dec_ctas;          // set by the launcher: the CTAs a decode launch aims at (see
                           // attention_split.cuh)
} ft_cuda_attn_params;
void ft_cuda_attention(const ft_cuda_attn_params *p, ft_cuda_stream *s);
// Once per process before the first attention (and before any graph capture): the kernels'
// shared-memory limits.
void ft_cuda_attention_init(void);
// Can the launch for these shapes (n_tok: each sequence's tokens, 1 with rows) also write out_q
// (the decode kernels: n_tok <= FT_CUDA_ATTN_SPLIT_MAX_TOK, head_dim 64, 128 or 256)?
bool ft_cuda_attention_quantizes(int n_tok, int head_dim);
// The floats of split partials a launch of these shapes needs, and the most any launch needs
// within a backend's limits (the longest activation row, the largest head).
size_t ft_cuda_attention_part_floats(int n_tok, bool rows, int n_head, int n_head_kv, int head_dim);
size_t ft_cuda_attention_part_bound(int64_t max_width, int max_head_dim);

// moe_route.cu: routing of n_tok tokens and the weighted sum of their experts' outputs.
typedef struct ft_cuda_route_params {
    const float *logits;   // (n_tok, n_expert)
    const float *bias;     // (n_expert) selection bias, or NULL
    int32_t *sel;          // (n_tok, k) selected experts, best first
    float *w;              // (n_tok, k) their weights
    float *gap;            // one float: atomically lowered to the smallest routing gap
    int n_tok, n_expert, k;
    int softmax;           // else sigmoid
    int norm_w;
    float w_scale;         // 0 or 1: none
    // gpt-oss: the router's bias, added to the logits before anything else (or NULL), and
    // softmax_weight: the top k of the logits themselves, weighted by the softmax of the k
    // (softmax is then 0). Only moe_route_kernel takes either; ft_cuda_moe_router_fits refuses.
    const float *logit_bias;
    int softmax_weight;
    // (n_expert) the layer's selection counters, or NULL: each selection adds 1 to its expert's
    // (an atomic add per (token, slot)), cumulative over launches
    unsigned long long *counts;
} ft_cuda_route_params;
void ft_cuda_moe_route(const ft_cuda_route_params *p, ft_cuda_stream *s);
// The router's logits (p->logits = W x) and the routing above in one launch, where
// ft_cuda_moe_router_fits (one token, float weights, n_expert <= 256, k <= 32).
typedef struct ft_cuda_router_params {
    uint32_t w_type;       // FT_TYPE_F32, F16 or BF16
    const void *w;         // (n_expert, n_embd)
    const float *x;        // (n_embd)
    int64_t n_embd;
    int *count;            // one int, 0 before the launch and after it (the kernel resets it)
    // Where export_x is set (--moe-backend cpu, host_meeting.h): the launch is also the host
    // meeting's export: x (n_embd floats) and the routing (k entries each) into these mapped
    // host buffers (device addresses), then the meeting count *export_seq advanced and
    // published to *export_flag. Saves the export kernel's launch.
    float *export_x;
    int32_t *export_sel;
    float *export_w;
    uint32_t *export_flag, *export_seq;
    // With norm (ft_cuda_moe_router_norm_fits): x is the un-normalised row, and the launch is
    // also the rms_norm before the router, with rms_norm.cu's bits: norm_y = x / rms(x) *
    // norm_w (NULL: times 1), and its q8_1 form into norm_yq (or NULL).
    bool norm;
    const float *norm_w;
    float norm_eps;
    float *norm_y;
    void *norm_yq;
} ft_cuda_router_params;
#define FT_CUDA_ROUTER_NORM_MAX 8192 // the widest row the router normalises itself (shared memory)
bool ft_cuda_moe_router_fits(uint32_t w_type, int n_tok, int n_expert, int k);
// Can this router launch (fitting ft_cuda_moe_router_fits) take the norm before it?
bool ft_cuda_moe_router_norm_fits(const ft_cuda_router_params *r);
void ft_cuda_moe_router(const ft_cuda_router_params *r, const ft_cuda_route_params *p, ft_cuda_stream *s);
// The experts' extras on expert rows where no fused kernel takes them (float experts, after
// separate gate and up matvecs; ex.bias_ids: the global expert of each pair): h_gate[i][c] =
// act(h_gate[i][c] + gate_bias, h_up[i][c] + up_bias) for n_pairs rows of n_ff.
void ft_cuda_moe_glu_extras(float *h_gate, const float *h_up, const ft_cuda_expert_extras *ex, int64_t n_pairs,
                            int n_ff, ft_cuda_stream *s);
// h[i][c] = h[i][c] * down_scale[e] + down_bias[e][c] (e = ex.bias_ids[i]) for n_pairs rows of n,
// but rows whose weights' id ids[i] is -1 (hybrid: the CPU computes the pair, extras and all).
void ft_cuda_moe_down_extras(float *h, const int32_t *ids, const ft_cuda_expert_extras *ex, int64_t n_pairs, int n,
                             ft_cuda_stream *s);
// y[t] = sum_j w[t][j] * h[t * k + j] over j in order; h (n_tok * k, n_embd)
void ft_cuda_moe_combine(const float *h, const float *w, float *y, int n_tok, int k, int n_embd,
                         ft_cuda_stream *s);

// flash_attn.cu: prefill attention on tensor cores (tiled flash attention), for the launches
// ft_cuda_flash_attention_fits accepts: n_tok >= FT_CUDA_FLASH_MIN_TOK, head_dim 64, 128 or 256,
// at most 64 query heads per KV head, no out_q. Same inputs and outputs as ft_cuda_attention
// (part unused). Scores as the CPU op's (an f16 query over f16 keys, q8_0 integer sums over
// q8_0 keys); values and softmax weights enter the MMAs as f16, sums are f32.
#define FT_CUDA_FLASH_MIN_TOK 16
bool ft_cuda_flash_attention_fits(const ft_cuda_attn_params *p);
// Aborts unless fits, but for the query count (any from 1: a step resuming a chunk that took it).
void ft_cuda_flash_attention(const ft_cuda_attn_params *p, ft_cuda_stream *s);

#ifdef __cplusplus
}
#endif

#endif
