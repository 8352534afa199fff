// backend: the ops interface every architecture is written against, the memory it computes
// from, and the constructor of each backend.
//
// A backend is a struct of function pointers (ft_backend_ops) plus its private state. Model
// code calls only these ops; it never loops over activations itself, so the same
// architecture file runs on every backend (src/backend/cpu/, src/backend/cuda/). Each tensor
// carries a placement (where its bytes live); an op runs on the backend that holds its
// operands.
//
// Activations are float arrays the backend allocated (ops.alloc), row-major: a "(n_tok, n)"
// buffer holds n_tok rows of n floats; callers touch them only through ops (and `read`).
// Memory: the backend owns its activations and scratch (freed with it) and the buffers it
// hands out (buffer_alloc, until buffer_free): the weights placed on it (model.h,
// ft_weights_place), KV caches, and the expert cache it keeps. Ops are called from one thread
// at a time; the CPU backend spreads each op over its own thread pool.
#ifndef FT_BACKEND_H
#define FT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../moe/bw_profile.h"
#include "../moe/cache_plan.h"
#include "../moe/cache_stats.h"
#include "../moe/expert_banks.h"
#include "../moe/expert_cache.h"
#include "../moe/placement.h"
#include "../moe/route_trace.h"
#include "../quant/quant.h"
#include "../util/util.h"
#include "kv_block.h"

// A weight (or cache) tensor: up to 3 dims in GGUF order, ne[0] the row length.
typedef struct ft_tensor {
    char name[128];                // for messages
    enum ft_type type;
    int64_t ne[3];                 // (row length, rows, matrices)
    size_t row_bytes;              // bytes of one row
    size_t mat_bytes;              // bytes of one [ne0, ne1] matrix (one expert)
    // Bytes from one matrix to the next, where they are not packed (0: mat_bytes): the gate or up
    // half of a fused ffn_gate_up_exps tensor, a view with the other half between its experts.
    // Only host tensors are strided; every copy to a device packs the matrices (the kernels
    // read them mat_bytes apart).
    size_t mat_stride;
    void *data;                    // NULL: the tensor is absent
    enum ft_placement placement;
} ft_tensor;

static inline bool ft_tensor_present(const ft_tensor *t) { return t && t->data; }

// The distance between t's consecutive matrices, and where matrix e (an expert) starts.
static inline size_t ft_tensor_mat_stride(const ft_tensor *t) {
    return t->mat_stride ? t->mat_stride : t->mat_bytes;
}
static inline uint8_t *ft_tensor_mat(const ft_tensor *t, int64_t e) {
    return (uint8_t *)t->data + (size_t)e * ft_tensor_mat_stride(t);
}
// Are t's matrices packed, mat_bytes apart (as every device kernel reads them)?
static inline bool ft_tensor_packed(const ft_tensor *t) { return ft_tensor_mat_stride(t) == t->mat_bytes; }

// Rotary position embedding, with ggml's parameters (YaRN included).
typedef struct ft_rope_params {
    int n_rot;           // leading dims of each head that rotate; the rest pass through
    bool neox;           // NeoX pairs (i, i + n_rot/2); else adjacent pairs (2i, 2i+1)
    float freq_base;
    float freq_scale;    // 1 / context-extension factor
    float ext_factor;    // YaRN extrapolation mix (0: plain RoPE)
    float attn_factor;   // magnitude scale
    float beta_fast, beta_slow;
    int n_ctx_orig;      // training context, for YaRN's correction dims
    // Interleaved multi-axis RoPE (imrope, qwen35moe) for text: with every axis at the token's
    // position, pair i keeps its angle when i % (sections summed) falls in a t/h/w section's
    // interleaved slots, and turns by 0 otherwise (the fourth axis is at position 0).
    bool imrope;
    int sections[4];
    // Frequency factors (llama.cpp's rope_freqs: Gemma 4's "proportional" RoPE on its full layers),
    // or NULL / absent: (n_rot / 2) f32 where the backend reads them, pair i's angle divided by
    // entry i before YaRN's mix (as ggml's rope_ext); a factor of 1e30 leaves its pair unturned.
    const ft_tensor *freq_factors;
} ft_rope_params;

// The CPU's attention takes a tiled path (f32 scores and sums) for chunks of this many queries
// over an f16 cache, as llama.cpp's does: it changes the bits (batch.c keeps it in mind).
#define FT_ATTN_TILED_MIN_TOK 64

// The decode rows of several sequences in one call (a server's step, one token of each): row i
// is position pos[i] of the sequence whose block table (kv_block.h) is blocks[i]. Both arrays
// live in memory the backend reads (device memory on a GPU, written with buffer_write_ordered
// before the step), so that a recorded step replays at other positions and tables.
typedef struct ft_seq_rows {
    int n;
    const int32_t *pos;
    const int32_t *const *blocks;
} ft_seq_rows;

// Causal attention of n_tok new queries (positions pos0..pos0+n_tok-1) over the cached keys
// 0..pos0+n_tok-1 of one sequence; or, with seqs, of seqs->n sequences' one query each.
typedef struct ft_attn_params {
    const float *q;            // (n_tok, n_head * head_dim), already roped
    float *out;                // (n_tok, n_head * head_dim)
    const ft_tensor *k_cache;  // rows of n_head_kv * head_dim, f16 or q8_0
    const ft_tensor *v_cache;  // same shape and type family as k_cache
    const int32_t *blocks;     // the sequence's block table (kv_block.h) in memory the backend
                               // reads (device memory on a GPU), or NULL: row p is position p
    int n_tok, pos0;
    // The prompt chunk the queries end, in tokens (>= n_tok), where it began before pos0 (its
    // first rows came from a prefix cache): the CPU takes its tiled path by this length, so
    // the rows get the bits of the whole chunk (a row's result does not depend on the call
    // otherwise). 0: the chunk is these n_tok queries. The CUDA backend goes by n_tok.
    int n_chunk;
    int n_head, n_head_kv, head_dim;
    int window;                // sliding window: key visible when q_pos - k_pos < window; 0: all
    float scale;               // applied to q.k
    // Attention sinks (gpt-oss), or NULL / absent: (n_head) f32, one logit per query head that
    // joins each of that head's softmax denominators and adds nothing to its numerator:
    //   out = sum_k e^(s_k - M) v_k / (sum_k e^(s_k - M) + e^(sink - M)), M = max(max_k s_k, sink).
    // As llama.cpp's flash attention applies it: after the keys' online softmax, where the
    // sink exceeds the running maximum the sum of values is rescaled by e^(M_keys - sink).
    const ft_tensor *sinks;
    // Not NULL: the n_tok (= seqs->n) queries are these rows' (blocks, pos0 and n_chunk unused).
    // Only on a backend with rope_seqs.
    const ft_seq_rows *seqs;
} ft_attn_params;

// How moe_ffn turns the router's logits into a selection and weights:
//   SOFTMAX: probs = softmax(logits over all experts); select and weigh by probs.
//   SIGMOID: probs = sigmoid(logits); select and weigh by probs.
//   SOFTMAX_WEIGHT (gpt-oss): select the top k of the logits themselves; the weights are the
//     softmax of the k selected logits (llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT).
// Enum order is not on disk (each architecture maps its file's key to it).
enum ft_gating { FT_GATING_SOFTMAX, FT_GATING_SIGMOID, FT_GATING_SOFTMAX_WEIGHT };

// The gated activation of an FFN (routed experts, dense), h = act(gate, up):
//   SILU: silu(gate) * up.
//   SWIGLU_OAI (gpt-oss): with g = min(gate, 7) and u = clamp(up, -7, 7),
//     h = g / (1 + e^(-1.702 g)) * (u + 1), as llama.cpp's swiglu_oai (alpha 1.702, limit 7).
//   GELU (gemma4): gelu(gate) * up with GELU's tanh form, 0.5 g (1 + tanh(sqrt(2/pi) g (1 +
//     0.044715 g^2))), as ggml's CPU computes it: g rounded to f16 and its GELU rounded to f16
//     (ggml's table), 0 at g <= -10 and g itself at g >= 10.
enum ft_glu { FT_GLU_SILU, FT_GLU_SWIGLU_OAI, FT_GLU_GELU };
#define FT_SWIGLU_OAI_ALPHA 1.702f
#define FT_SWIGLU_OAI_LIMIT 7.0f

// The activation of a multiplicative gate (gate_mul).
enum ft_act { FT_ACT_SOFTPLUS, FT_ACT_SIGMOID, FT_ACT_SILU };

// Gated DeltaNet, the linear attention of qwen35moe, for one sequence's n_tok tokens, as
// llama.cpp's CPU runs it. With K = n_k_heads x head_dim and V = n_v_heads x head_dim:
//   1. per channel of qkv (2K + V: q, k, v), a causal conv over its d_conv last inputs (the
//      conv state's d_conv - 1, then the new ones), then SiLU;
//   2. q and k L2-normalised per head: x / max(|x|, eps);
//   3. per V head h, which reads K head h % n_k_heads, per token in order, on the head's state
//      matrix S (head_dim x head_dim): S *= exp(g) with g = softplus(alpha + dt) * a;
//      d = (v - Sᵀk) * sigmoid(beta); S += k dᵀ; out = Sᵀq / sqrt(head_dim).
// Both states are updated in place to follow the last token.
typedef struct ft_delta_params {
    float *qkv;                // (n_tok, 2K + V) the projection before the conv; the op may overwrite it
    const float *alpha, *beta; // (n_tok, n_v_heads) each: the raw decay and write-strength projections
    const ft_tensor *conv_w;   // (d_conv, 2K + V) f32: each channel's taps, oldest input first
    const ft_tensor *dt, *a;   // (n_v_heads) f32
    ft_tensor *conv_state;     // f32, (d_conv - 1) rows of 2K + V: the last inputs, oldest first
    ft_tensor *state;          // f32, n_v_heads matrices; row j of a head's holds column j of S
    float *out;                // (n_tok, V)
    int n_tok;
    int pos0;                  // the first token's position: at 0 both states read as zeros
    int n_k_heads, n_v_heads, head_dim, d_conv;
    bool k_grouped;            // V head h reads K head h / (n_v / n_k); else h % n_k
    float eps;                 // the L2 norm's
} ft_delta_params;

// Where an expert's computation runs: asked by moe_ffn for every selected (layer, expert).
// Supplied by src/moe/ (the backend does not include it: this callback breaks the loop).
typedef enum ft_placement (*ft_expert_place_fn)(void *ctx, int layer, int expert);

// The routed-expert FFN of one MoE layer for n_tok tokens:
//   logits = router · x + router_bias
//   probs = gating(logits);  selected = top-k(probs + sel_bias);  w = probs[selected]
//     (SOFTMAX_WEIGHT: selected = top-k(logits), w = softmax(logits[selected]))
//   w /= sum(w) if norm_w;  w *= scale
//   out = Σ_k w_k · (down_scale[e_k] · down_k(act(gate_k(x) + gate_bias_k, up_k(x) + up_bias_k)) + down_bias_k)
// The router reads router_x where it is given (gemma4 routes from another input than its experts
// read), else x. Every bias and the down scales may be absent (NULL or no data); the defaults of a
// zeroed struct are SiLU, no bias, no scale, the router on x.
typedef struct ft_moe_params {
    int layer;
    const ft_tensor *router;        // (n_embd, n_expert)
    const ft_tensor *router_bias;   // (n_expert) f32, added to the logits before gating; may be absent
    const ft_tensor *sel_bias;      // (n_expert) f32, added for selection only; may be absent
    const ft_tensor *gate_exps;     // (n_embd, n_ff, n_expert)
    const ft_tensor *up_exps;       // (n_embd, n_ff, n_expert)
    const ft_tensor *down_exps;     // (n_ff, n_embd, n_expert)
    const ft_tensor *gate_bias;     // (n_ff, n_expert) f32: row e added to expert e's gate output; may be absent
    const ft_tensor *up_bias;       // (n_ff, n_expert) f32: the same for up; may be absent
    const ft_tensor *down_bias;     // (n_embd, n_expert) f32: row e added to expert e's down output
                                    // before it is weighted; may be absent
    const ft_tensor *down_scale;    // (n_expert) f32: expert e's down output times entry e, before its
                                    // bias and weight (gemma4's per-expert scale); may be absent
    const float *router_x;          // (n_tok, n_embd) the router's input, or NULL: x
    enum ft_glu act;
    int n_expert, n_expert_used;
    enum ft_gating gating;
    bool norm_w;
    float w_scale;                  // 0 or 1: no scaling
    ft_expert_place_fn place;       // NULL: everything on this backend
    void *place_ctx;
    // The routing, where another device computed it (--moe-backend cpu: the GPU routes, the
    // CPU computes the experts): host memory, (n_tok, n_expert_used) experts best first and
    // their final weights; the backend then neither runs the router nor routes. NULL: it does.
    const int32_t *sel;
    const float *sel_w;
    // The next MoE layer of the step (block index, its router and selection bias), for a
    // backend that predicts that layer's experts from this layer's input and fetches them
    // ahead (--moe-backend offload); next_router NULL: no MoE layer follows in this step.
    int next_layer;
    const ft_tensor *next_router, *next_sel_bias;
} ft_moe_params;

typedef struct ft_backend ft_backend;

// The largest shapes the ops will see, from the model and the engine's batch size.
typedef struct ft_backend_limits {
    int max_tok;         // tokens per batch
    int64_t max_width;   // longest activation row (floats): max of n_embd, q width, n_ff, ...
    int max_ctx;         // cached positions per sequence
    int max_head_dim;
    int n_expert, n_expert_used;
    int ssm_n_v_heads;   // V heads of recurrent layers (0: the model has none)
    int n_layer;         // blocks of the model: the rows of route_counts (0: nothing counted)
} ft_backend_limits;

// The device a backend's buffers live on, for the memory plan.
typedef struct ft_device_info {
    char name[256];
    int cc_major, cc_minor;  // CUDA compute capability (0 on the CPU)
    size_t free_mem;         // bytes free now (the CPU: memory available)
    size_t total_mem;
    size_t process_mem;      // bytes this process holds there now, the CUDA context included (0: unknown)
} ft_device_info;

// --moe-backend offload: the GPU expert cache in front of host banks.
typedef struct ft_expert_cache_params {
    const moe_geometry *geometry; // the model's experts (moe_geometry_read)
    moe_cache_plan_params plan;   // --moe-cache-size, --moe-pool-layout, top-k, running, budget
    bool prefill_serial;          // --disable-moe-prefill-overlap: one overlay buffer, no overlap
    const moe_route_trace *trace; // replay these selections (copied), or NULL: the router's
    enum moe_victims victims;     // --moe-cache-policy: which of a layer's slots a miss takes
    bool self_sizing;             // --moe-layer-slots adaptive: slots move between a pool's layers
} ft_expert_cache_params;

// --moe-backend cpu: MoE layers whose routed experts stay in host memory compute them on the
// CPU; the descriptors are copied, the data must outlive the backend.
typedef struct ft_host_experts_params {
    int n_layer;                 // blocks of the model
    const ft_tensor *routers;    // (n_layer) host copies of each block's router (absent: not MoE)
    const ft_tensor *sel_bias;   // (n_layer) host copies of the selection biases, or NULL
    const ft_tensor *gate_exps, *up_exps, *down_exps; // (n_layer) the banks in host memory
    // (n_layer) host copies of the layers' extras, absent where a layer has none, or NULL: none
    // at all (gpt-oss: the router's and experts' biases; gemma4: the down scales)
    const ft_tensor *router_bias, *gate_bias, *up_bias, *down_bias, *down_scale;
    int n_threads;               // CPU threads for the experts
    bool reference;              // the CPU's scalar reference path
    int overlay_buffers;         // prefill on the device: 0 none, 1 copy then compute, 2 double-buffered
    // --moe-backend hybrid: the split's costs from this profile (read from profile_path) where it
    // rates every layer's types; NULL, or a type it lacks: measured at start-up
    const moe_bw_profile *profile;
    const char *profile_path;
} ft_host_experts_params;

// Parameters of the ops that not every backend computes yet (a bit set). A backend lists those
// its ops take in ft_backend_ops.features and asserts the others are absent; the engine refuses
// to place a model that needs one its backend lacks (ft_model_op_features), before any weight
// moves, rather than let the backend compute something else.
enum {
    FT_OPS_ATTN_SINKS = 1 << 0,        // ft_attn_params.sinks
    FT_OPS_MOE_BIASES = 1 << 1,        // ft_moe_params' router_bias, gate_bias, up_bias, down_bias
    FT_OPS_MOE_SOFTMAX_WEIGHT = 1 << 2, // FT_GATING_SOFTMAX_WEIGHT
    FT_OPS_SWIGLU_OAI = 1 << 3,        // FT_GLU_SWIGLU_OAI
    FT_OPS_GELU = 1 << 4,              // FT_GLU_GELU, in moe_ffn and ffn
    FT_OPS_SCALE_SOFTCAP = 1 << 5,     // the ops scale and softcap
    FT_OPS_NORM_NO_WEIGHT = 1 << 6,    // rms_norm without a weight
    FT_OPS_ROPE_FREQ_FACTORS = 1 << 7, // ft_rope_params.freq_factors
    FT_OPS_MOE_DOWN_SCALE = 1 << 8,    // ft_moe_params.down_scale
    FT_OPS_MOE_ROUTER_INPUT = 1 << 9,  // ft_moe_params.router_x
    FT_OPS_ALL = (1 << 10) - 1,
};

// The names of the features in the set f, comma-separated, into buf (for messages).
const char *ft_ops_features_name(unsigned f, char *buf, size_t cap);

typedef struct ft_backend_ops {
    const char *name;
    unsigned features;             // FT_OPS_* its ops compute
    void (*free)(ft_backend *be);

    // ---- Memory: each backend places the weights and caches it computes from

    // The device its buffers live on (the CPU: the host).
    void (*device_info)(ft_backend *be, ft_device_info *out);
    // Do the ops compute with weights of this type here?
    bool (*supports_type)(ft_backend *be, enum ft_type type);
    // Device bytes reserve(lim) will allocate (scratch), for the memory plan.
    size_t (*scratch_bytes)(ft_backend *be, const ft_backend_limits *lim);
    // A zeroed buffer of n bytes where the backend computes (device memory on a GPU), or NULL
    // when there is not enough memory. It lives until buffer_free, which the caller must call
    // before freeing the backend.
    void *(*buffer_alloc)(ft_backend *be, size_t n);
    void (*buffer_free)(ft_backend *be, void *p); // NULL: no-op
    // Host memory for what read copies out every step (a step's logits): page-locked on a GPU,
    // so that the copy runs at the link's speed, not through the driver's staging. Optional:
    // NULL, or a NULL return, means ft_malloc (and free). host_free before freeing the backend.
    void *(*host_alloc)(ft_backend *be, size_t n);
    void (*host_free)(ft_backend *be, void *p);
    // Copies n bytes of host memory into a buffer (dst points into one); done on return.
    void (*buffer_write)(ft_backend *be, void *dst, const void *src, size_t n);
    // The same, in order with the ops: the ops called after it see the bytes, those before it
    // do not; src may be reused on return. For small, frequent writes between steps (block
    // tables), which must not wait for the device. Optional: NULL, buffer_write serves.
    void (*buffer_write_ordered)(ft_backend *be, void *dst, const void *src, size_t n);

    // Sizes the scratch every op needs (see ft_backend_limits). Called once, before any op;
    // ops never allocate afterwards.
    void (*reserve)(ft_backend *be, const ft_backend_limits *lim);
    // A zeroed activation buffer of n floats, owned by the backend (freed with it).
    float *(*alloc)(ft_backend *be, size_t n);
    // Copies n floats from an activation buffer to host memory.
    void (*read)(ft_backend *be, const float *src, float *dst, size_t n);

    // y (n_tok, ne1) = x (n_tok, ne0) · wᵀ for a 2-D weight w (ne0, ne1). Activations are
    // quantized once to the weight type's vec_dot_type, as llama.cpp does.
    void (*matmul)(ft_backend *be, const ft_tensor *w, const float *x, float *y, int n_tok);
    // y (n_tok, n) = rows of the table t (n, n_rows) selected by ids, dequantized.
    void (*get_rows)(ft_backend *be, const ft_tensor *t, const int32_t *ids, float *y, int n_tok);
    // y = x / rms(x) * w per row of n floats (n_rows rows; w has n entries; y may be x). w NULL
    // or absent: y = x / rms(x) (FT_OPS_NORM_NO_WEIGHT).
    void (*rms_norm)(ft_backend *be, const float *x, const ft_tensor *w, float *y, int n_rows,
                     int n, float eps);
    // y[i] += x[i] for n floats.
    void (*add)(ft_backend *be, float *y, const float *x, size_t n);
    // y[r][i] += b[i]: a bias of n floats on each of n_rows rows.
    void (*add_bias)(ft_backend *be, float *y, const ft_tensor *b, int n_rows, int n);
    // x[i] *= s for n floats. Optional (FT_OPS_SCALE_SOFTCAP).
    void (*scale)(ft_backend *be, float *x, size_t n, float s);
    // x[i] = cap * tanh(x[i] * (1 / cap)) for n floats: soft-capping as ggml's scale, tanh, scale.
    // Optional (FT_OPS_SCALE_SOFTCAP).
    void (*softcap)(ft_backend *be, float *x, size_t n, float cap);
    // Rotates each head of x (n_tok, n_head * head_dim) in place; token t is at pos0 + t.
    void (*rope)(ft_backend *be, float *x, int n_tok, int n_head, int head_dim, int pos0,
                 const ft_rope_params *p);
    // Rotates each consecutive chunk of n floats of x (n_rows rows of row_len) by the
    // orthonormal Walsh-Hadamard matrix of size n (a power of two). Applied twice it is the
    // identity. Used around quantized KV caches (see kv.h).
    void (*hadamard)(ft_backend *be, float *x, int n_rows, int row_len, int n);
    // Writes the rows of positions pos0..pos0+n_rows-1 of a cache tensor from x (n_rows,
    // cache->ne[0]), converting types; blocks: the sequence's block table (as ft_attn_params).
    void (*set_rows)(ft_backend *be, ft_tensor *cache, const int32_t *blocks, int pos0, const float *x,
                     int n_rows);
    // Copies rows src..src+n_rows-1 of a cache tensor to rows dst..dst+n_rows-1 of it (the two
    // ranges apart), as bytes: a row of any cache type is whole blocks (a reused prefix's rows
    // into a sequence's own block, kv.h). In order with the ops; between steps, never inside a
    // step bracket (a recorded step would not repeat it).
    void (*copy_rows)(ft_backend *be, ft_tensor *cache, int64_t dst, int64_t src, int64_t n_rows);
    void (*attention)(ft_backend *be, const ft_attn_params *p);
    // rope and set_rows over the rows of several sequences (rows->n tokens in x, token i at its
    // own position and block table), and attention with ft_attn_params.seqs: a step of many
    // decoding sequences in a few launches. Optional, together: NULL where the layer code goes
    // sequence by sequence.
    void (*rope_seqs)(ft_backend *be, float *x, int n_head, int head_dim, const ft_seq_rows *rows,
                      const ft_rope_params *p);
    void (*set_rows_seqs)(ft_backend *be, ft_tensor *cache, const ft_seq_rows *rows, const float *x);
    // x (n_tok, n_head*head_dim) *= act(g): g is (n_tok, n_head) per head, or
    // (n_tok, n_head*head_dim) per element (g_width says which).
    void (*gate_mul)(ft_backend *be, float *x, const float *g, int n_tok, int n_head, int head_dim,
                     int g_width, enum ft_act act);
    // Splits each row of x (n_rows, n_head * 2 * head_dim) head by head: head h's first head_dim
    // values go to a, its next head_dim to b ((n_rows, n_head * head_dim) each). Optional.
    void (*split_heads)(ft_backend *be, const float *x, float *a, float *b, int n_rows, int n_head,
                        int head_dim);
    // Gated DeltaNet linear attention (see ft_delta_params). Optional.
    void (*delta_net)(ft_backend *be, const ft_delta_params *p);
    // Dense gated FFN: y = down(act(gate(x), up(x))), x (n_tok, n_embd); act SiLU, or GELU
    // (FT_OPS_GELU).
    void (*ffn)(ft_backend *be, const ft_tensor *gate, const ft_tensor *up,
                const ft_tensor *down, const float *x, float *y, int n_tok, enum ft_glu act);
    // y (n_tok, n_embd) = the routed experts' output (see ft_moe_params).
    void (*moe_ffn)(ft_backend *be, const ft_moe_params *p, const float *x, float *y, int n_tok);
    // y[t] += sigmoid(gate_inp · x[t]) * s[t]: the gated shared expert of qwen2moe; gate_inp
    // is (n_embd, 1).
    void (*sigmoid_gate_add)(ft_backend *be, const ft_tensor *gate_inp, const float *x,
                             const float *s, float *y, int n_tok, int n_embd);
    // The routing moe_ffn computed so far, counted per block and expert: out (lim.n_layer rows
    // of lim.n_expert, row l block l's experts; blocks without experts stay 0) gets how many
    // times each expert was selected, one count per (token, selection), cumulative since
    // reserve. Only the selections this backend's router made: a routing handed in
    // (ft_moe_params.sel) was counted where it was computed (and where offload replays a route
    // trace, these are the router's choices, not the trace's). Waits for the device. Optional:
    // NULL where the backend does not count (out is then left alone).
    void (*route_counts)(ft_backend *be, uint64_t *out);

    // Optional (NULL on a backend with no use for them): the engine brackets each forward
    // step, every op from the embedding to the logits, with these (read comes after step_end).
    // pos0 is the step's first position; key names what else the ops depend on (the
    // sequence's KV cache). seqs: the step is the decode rows of several sequences and key
    // their ft_seq_rows (whose arrays the ops read; pos0 unused). A backend may record a decode
    // step's ops (one token of one sequence, or seqs) once and replay the record on later steps
    // of the same n_tok and key at other positions (CUDA graphs): ops between the two calls may
    // then only be noted, and run at step_end.
    void (*step_begin)(ft_backend *be, int n_tok, int pos0, const void *key, bool seqs);
    void (*step_end)(ft_backend *be);

    // ---- Routed experts kept in host memory. Optional: NULL on a backend that computes every
    // expert from its own memory (the CPU). Each is set up once, after reserve.

    // Memory for host expert banks that the device reads directly (page-locked, mapped).
    moe_host_allocator (*expert_host_allocator)(ft_backend *be);
    // --moe-backend offload: a cache of expert slots on the device in front of the banks hb
    // (taken over; freed on failure), which moe_ffn then serves the host-placed experts from.
    // Prints its plan and memory on stderr. Returns false and sets *err when the plan fails
    // (below the floor, no budget) or the arenas do not fit.
    bool (*expert_cache_init)(ft_backend *be, moe_expert_banks *hb, const ft_expert_cache_params *p, ft_err *err);
    // The cache's cumulative counters into *out (allocated; ft_moe_stats_free). Waits for the
    // device. Returns false, *out zeroed, when there is no cache.
    bool (*expert_cache_stats)(ft_backend *be, ft_moe_stats *out);
    // Resizes the cache to n_slots (same layout), keeping the host banks; every slot starts
    // empty. Not while a step runs. Returns false and sets *err (the old cache stays) when
    // there is no cache or the plan fails.
    bool (*expert_cache_rebuild)(ft_backend *be, int n_slots, ft_err *err);
    // --moe-backend cpu: the host-placed experts of moe_ffn are computed on the CPU.
    void (*host_experts_init)(ft_backend *be, const ft_host_experts_params *p);
    // Device bytes host_experts_init(p) will allocate (the prefill overlay); *staging gets the
    // pinned host bytes of its copies.
    size_t (*host_experts_device_bytes)(ft_backend *be, const ft_host_experts_params *p, size_t *staging);
} ft_backend_ops;

struct ft_backend {
    const ft_backend_ops *ops;
    enum ft_placement placement; // where this backend's buffers live
    bool reference;              // scalar reference path for every op (FT_REFERENCE=1)
    // Statistics the ops keep for their caller: the smallest gap seen between the score of
    // the last selected expert and the best unselected one, over every token and MoE layer
    // since the caller last set it to INFINITY. A gap near 0 means the routing could go either
    // way under rounding: a diagnostic for comparisons with another implementation.
    float min_route_gap;
    // Which kernel each row of the row-wise ops takes (matmul, ffn, moe_ffn, sigmoid_gate_add:
    // row r of their n_tok rows), set by the caller before the ops it concerns (the batch
    // engine: once per step, then again for the logits) and valid until it changes it.
    // row_gemm[r] true: the row may take a GEMM kernel (the CPU's AMX tiles), false: it takes the
    // per-row kernels (the CPU's vec_dot tile and matrix-vector kernels). NULL: every row of a
    // call is classed by the call's own row count, n_tok >= FT_GEMM_MIN_COLS.
    //   The rule callers follow: a row takes the GEMM exactly when it belongs to a sequence's
    // chunk of FT_GEMM_MIN_COLS tokens or more in this step (a prefill chunk); a decode row,
    // and a logits row (a sequence's last), never does. Why: a GEMM may sum in another order
    // than the per-row kernels (AMX in the scalar reference's, the AVX kernels per lane), so a
    // row's result must depend only on its own sequence's chunk, never on how many rows the
    // call holds or which other rows share an expert; prompts cut at the same chunk boundaries
    // then give the same bits alone or batched (batch.h). For one sequence's step, NULL is the
    // same rule. The CUDA backend's kernels choose by the call's shape or chunk_tok (batch.h
    // promises bit-identity on the CPU only), except that a call of decode rows only keeps the
    // per-pair expert kernels for longer; the CPU backend it keeps for --moe-backend cpu experts
    // is not handed the field.
    const bool *row_gemm;
    // For a backend whose kernels choose by the call's shape (CUDA): the rows of the prompt
    // chunk a one-sequence step's rows belong to, so that a step resuming a reused prefix's
    // chunk takes the kernels that whole chunk took (0: the call's own row count). Set and
    // cleared with row_gemm; 0 for the logits.
    int chunk_tok;
};

// ---------------------------------------------------------------------------------------------
// Constructors

typedef struct ft_backend_params {
    enum ft_placement device;  // FT_PLACEMENT_CPU or FT_PLACEMENT_CUDA (device 0)
    int n_threads;             // CPU threads: the CPU backend's pool (>= 1)
    bool reference;            // every op on its scalar reference path
    int graph_max_tok;         // CUDA: largest step (tokens) captured in a graph; 0: none; -1: all
} ft_backend_params;

// A backend for p->device. Returns NULL and sets *err when there is no such device or this ft
// was built without its backend. Free with be->ops->free(be), after the buffers it handed out.
ft_backend *ft_backend_init(const ft_backend_params *p, ft_err *err);

// Devices of this kind on the machine (the CPU: 1; CUDA: 0 when there is none or the build
// has no CUDA).
int ft_backend_device_count(enum ft_placement device);

// The FT_OPS_* features a backend for device computes (its ops table's features), known
// without making one.
unsigned ft_backend_features(enum ft_placement device);

// Does row r of a row-wise op over n_tok rows take a GEMM kernel, given a backend's row_gemm
// (see ft_backend.row_gemm; NULL: by the call's row count)?
static inline bool ft_row_gemm(const bool *row_gemm, int r, int n_tok) {
    return row_gemm ? row_gemm[r] : n_tok >= FT_GEMM_MIN_COLS;
}

#endif
