// model: the architectures ft runs, each one const description (ft_arch) that loading, ft
// synth and ft inspect all read, and the layer code written once against the backend ops.
//
// ft_model_load opens a GGUF (mmap), picks the architecture from general.architecture, reads
// and validates the hyper-parameter keys its description lists and binds every tensor it
// lists, checking presence, type and shape with a message that names the key or tensor that
// is wrong. Weights point into the mapping; the model owns the mapping and its arrays. A
// loaded model is read-only: several engines may share it, each placing the weights on its
// own backend (ft_weights_place).
//
// Each architecture is one file (qwen3moe.c, qwen2moe.c, llama.c, laguna.c, glm4moe.c, gptoss.c,
// ..., listed once in model.c) holding its keys, its tensors, a few hooks where a rule does not
// fit a table, and `layer`, the forward pass of one block for a batch of tokens, made of ops and
// the shared blocks of blocks.c (attention, routed experts).
#ifndef FT_MODEL_H
#define FT_MODEL_H

#include "../backend/backend.h"
#include "../gguf/gguf.h"
#include "../kv/kv.h"
#include "../util/progress.h"
#include "../util/rng.h"

#define FT_MAX_EXPERTS 1024

typedef struct ft_hparams {
    int n_vocab, n_embd, n_layer, n_ctx_train; // n_layer: the blocks run (the trunk)
    int n_layer_mtp;               // multi-token-prediction blocks after the trunk in the file
                                   // (nextn_predict_layers): never bound, run or read
    int n_head_kv, head_dim;       // KV heads, head size of K, V and Q: every layer's unless the
                                   // architecture sets ft_layer's own (gemma4's sliding and full layers)
    int n_expert, n_expert_used;   // 0 for a dense model
    int n_ff_exp;                  // width of one routed expert
    int n_ff_shexp;                // width of the shared expert (0: none)
    int n_ff;                      // width of dense FFN layers
    int n_dense_lead;              // leading layers with a dense FFN instead of experts
    float rms_eps;
    ft_rope_params rope;           // full-attention layers
    ft_rope_params rope_swa;       // sliding-window layers
    int n_swa;                     // sliding window (0: none)
    enum ft_gating gating;
    enum ft_glu glu;               // the routed experts' activation (SiLU unless the architecture says)
    bool norm_w;                   // renormalise the top-k weights
    float w_scale;                 // scale of the expert weights (0 or 1: none)
    // gated DeltaNet layers (qwen35moe): d_conv taps of the causal conv; per layer n_k_heads
    // key heads and n_v_heads value heads of ssm_head_dim (K and V alike, the state's size)
    int ssm_d_conv, ssm_n_k_heads, ssm_n_v_heads, ssm_head_dim;
    bool ssm_k_grouped;            // V head h reads K head h / (n_v / n_k) (qwen3next), else h % n_k
    int32_t bos, eos;              // -1 when absent
    bool add_bos;
    float embd_scale;              // the token embeddings are multiplied by it (0: not)
    float logit_softcap;           // the logits are soft-capped: c tanh(logit / c) (0: not)
} ft_hparams;

// Weights of one block. Absent optional tensors have data == NULL. Shapes in GGUF order.
typedef struct ft_layer {
    int n_head;                    // query heads of this layer
    int n_head_kv, head_dim;       // its KV heads and head size (hp's unless the architecture says)
    int kv_from;                   // the layer whose KV cache it attends to: itself, or (gemma4's
                                   // shared KV) an earlier layer of its kind, and then it has no K/V
    bool is_swa;                   // sliding-window attention
    bool is_moe;                   // routed experts (else a dense FFN)
    bool is_recurrent;             // gated DeltaNet linear attention (else softmax attention)
    ft_tensor attn_norm;           // (n_embd)
    ft_tensor wq, wk, wv;          // (n_embd, n_head * head_dim), (n_embd, n_head_kv * head_dim) x2
    ft_tensor bq, bk, bv;          // optional biases
    ft_tensor wo;                  // (n_head * head_dim, n_embd)
    ft_tensor bo;                  // (n_embd) the output projection's bias, gpt-oss
    ft_tensor sinks;               // (n_head) f32 attention sinks' logits, gpt-oss
    ft_tensor q_norm, k_norm;      // (head_dim), optional per architecture
    ft_tensor attn_post_norm;      // (n_embd) gemma4: the attention output's norm before the residual
    ft_tensor attn_gate;           // (n_embd, n_head or n_head * head_dim), laguna
    ft_tensor ffn_norm;            // (n_embd)
    ft_tensor router;              // (n_embd, n_expert)
    ft_tensor router_b;            // (n_expert) f32, the router's bias (gpt-oss)
    ft_tensor sel_bias;            // (n_expert), laguna's score-correction bias
    ft_tensor gate_exps, up_exps;  // (n_embd, n_ff_exp, n_expert); views into gate_up_exps where
                                   // the layer has it (strided: ft_tensor.mat_stride)
    ft_tensor down_exps;           // (n_ff_exp, n_embd, n_expert)
    ft_tensor gate_exps_b, up_exps_b; // (n_ff_exp, n_expert) f32, per-expert biases (gpt-oss)
    ft_tensor down_exps_b;         // (n_embd, n_expert) f32
    ft_tensor gate_up_exps;        // (n_embd, 2 n_ff_exp, n_expert), the file's fused gate and up
                                   // experts (optional): each expert's gate rows, then its up rows.
                                   // Forward passes read gate_exps and up_exps only
    ft_tensor gate_shexp, up_shexp;// (n_embd, n_ff_shexp)
    ft_tensor down_shexp;          // (n_ff_shexp, n_embd)
    ft_tensor gate_inp_shexp;      // (n_embd), qwen2moe's shared-expert gate
    ft_tensor ffn_gate, ffn_up;    // (n_embd, n_ff), dense layers
    ft_tensor ffn_down;            // (n_ff, n_embd)
    // gemma4's MoE layers: norms around the dense FFN (its "shared expert", gate_shexp ...) and the
    // routed experts, the router input's scale, per-expert down scales, the layer's output scale
    ft_tensor ffn_post_norm_1;     // (n_embd) after the dense FFN
    ft_tensor ffn_pre_norm_2;      // (n_embd) the experts' input norm
    ft_tensor ffn_post_norm_2;     // (n_embd) after the experts
    ft_tensor ffn_post_norm;       // (n_embd) after their sum
    ft_tensor router_in_scale;     // (n_embd) f32: ffn_gate_inp.scale
    ft_tensor down_exps_s;         // (n_expert) f32: ffn_down_exps.scale, optional
    ft_tensor out_scale;           // (1) f32: layer_output_scale, optional
    // gated DeltaNet (qwen35moe); with K = n_k_heads * ssm_head_dim, V = n_v_heads * ssm_head_dim
    ft_tensor lin_qkv;             // (n_embd, 2K + V): q, k and v before the conv
    ft_tensor lin_z;               // (n_embd, V): the output gate
    ft_tensor ssm_conv1d;          // (d_conv, 2K + V) f32: the depthwise conv's taps
    ft_tensor ssm_dt;              // (n_v_heads) f32: the decay's bias
    ft_tensor ssm_a;               // (n_v_heads) f32: -exp(A_log), the decay's rate
    ft_tensor ssm_beta, ssm_alpha; // (n_embd, n_v_heads): the write strength, the decay
    ft_tensor ssm_ba;              // (n_embd, 2 n_v_heads): both, per key head's group (qwen3next)
    ft_tensor ssm_norm;            // (ssm_head_dim) f32: the gated RMSNorm
    ft_tensor ssm_out;             // (V, n_embd)
} ft_layer;

// The tensors a forward pass reads, where one backend keeps them: the model's own (in the
// file's mapping) for a CPU backend, else copies in the backend's buffers, the routed experts
// possibly left in the mapping (ft_weights_place). Shapes and names as the model's.
typedef struct ft_weights {
    ft_tensor tok_embd, output_norm, output;
    ft_tensor rope_freqs;   // gemma4: RoPE's frequency factors of the full layers (absent elsewhere)
    ft_layer *layers;       // (n_layer)
    int n_layer;
    const struct ft_model *m; // the model they are of (which outlives them)
    ft_backend *be;         // whose buffers hold the copies (NULL: none were made)
    bool experts_on_host;   // the routed experts stayed in the mapping
} ft_weights;

// One sequence's tokens in a batch: rows row0..row0+n_tok-1 of the activation buffers hold
// its positions pos0..pos0+n_tok-1, whose keys and values go to (and are read from) kv.
typedef struct ft_segment {
    ft_kv_cache *kv;
    int pos0;
    int row0;
    int n_tok;
    // The prompt chunk these rows end, in tokens (>= n_tok), where it began before pos0 (a
    // prefix reused into its middle, batch.h): attention picks its kernel by this length
    // (ft_attn_params.n_chunk). 0: the chunk is these n_tok rows.
    int n_chunk;
} ft_segment;

// The state of one forward pass over a batch: the buffers (backend activations, sized for the
// engine's batch) and where the tokens sit. Filled by the engine, used by the layer code.
//
// A batch holds the tokens of one or more sequences, one segment each, their rows packed one
// after another. Row-wise work (norms, projections, experts) runs once over all n_tok rows;
// RoPE, the cache write and attention run per segment. With n_seg == 0 the batch is the one
// sequence {kv, pos0, row 0, n_tok} (the shorthand single-sequence callers use).
typedef struct ft_forward {
    ft_backend *be;
    const ft_weights *w;      // the weights on be
    moe_placement *place;
    int n_tok;                // rows in the batch, over all segments
    const ft_segment *seg;    // (n_seg) in row order, covering rows 0..n_tok-1
    int n_seg;
    ft_kv_cache *kv;          // n_seg == 0: the sequence's cache
    int pos0;                 // n_seg == 0: the position of row 0
    // Segments seqs_seg0 .. seqs_seg0 + seqs->n - 1, one decode row each (n_tok 1, n_chunk 1),
    // as rows of several sequences (ft_seq_rows: their positions and block tables in the
    // backend's memory): their RoPE, cache writes and attention run in one call each. NULL:
    // segment by segment. Only where the backend has rope_seqs.
    const ft_seq_rows *seqs;
    int seqs_seg0;
    float *x;        // (n_tok, n_embd) the residual stream
    float *xn;       // (n_tok, n_embd) normed input of a block
    float *q, *k, *v;// (n_tok, max q width), (n_tok, kv width) x2
    float *attn;     // (n_tok, max q width)
    float *gate;     // (n_tok, max q width) an attention output gate
    float *out;      // (n_tok, n_embd) a block's output
    float *out2;     // (n_tok, n_embd) the shared expert's output
    float *wide;     // (n_tok, ft_model_wide_width) a doubled Q projection (q and its gate) or a
                     // recurrent layer's q, k and v; NULL when no layer has one
    float *ab;       // (n_tok, 4 x n_v_heads) a recurrent layer's decay and write-strength
                     // projections (alpha, then beta), then room for the two fused (ssm_ba);
                     // NULL without recurrent layers
} ft_forward;

typedef struct ft_model ft_model;
typedef struct ft_synth_params ft_synth_params; // synth.h

// ---------------------------------------------------------------------------------------------
// Architectures as descriptions

enum ft_key_type {
    FT_KEY_TYPE_U32,        // an integer (any integer type in the file; ft synth writes u32)
    FT_KEY_TYPE_U32_LAYERS, // one integer for all layers, or an array of one per layer
    FT_KEY_TYPE_F32,        // a number
    FT_KEY_TYPE_BOOL,
    FT_KEY_TYPE_STR,
    FT_KEY_TYPE_U32_4,      // 4 integers (one given alone fills them) into an int[4] field: RoPE's sections
    FT_KEY_TYPE_BOOL_LAYERS,// one bool for all layers, or an array of one per layer, into a bool ft_layer field
};

enum {
    FT_KEY_REQUIRED = 1 << 0,    // a file without it is refused
    FT_KEY_UNIFORM = 1 << 1,     // a per-layer array whose entries must all agree (one ft_hparams field)
    FT_KEY_HI_LAYERS = 1 << 2,   // at most block_count (instead of hi)
    FT_KEY_HI_HEAD_DIM = 1 << 3, // at most the head size (instead of hi), checked once that is known
    FT_KEY_DERIVED = 1 << 4,     // its default comes from other keys (def is unused)
};

#define FT_KEY_NO_FIELD ((size_t)-1)

// How ft synth writes a key (rows say it with model_impl.h's FT_SYNTH_* macros; a row without
// one is not written). Offsets are into ft_synth_params, 0 (its `arch` string) standing for
// none. The value: fn(p, il) where a formula decides (il: the layer, when per_layer writes an
// entry per layer); else the int field `field` (a float one for an F32 key) or, when that is
// 0, the field `or_field`, or else `value`; str for a string. Not written when `when` says no.
typedef struct ft_key_synth {
    size_t field, or_field;
    double value;
    int64_t (*fn)(const ft_synth_params *p, int il);
    bool per_layer;
    bool (*when)(const ft_synth_params *p);
    const char *str;
    bool write; // ft synth writes the key
} ft_key_synth;

// A hyper-parameter key "<arch>.<suffix>". ft_model_load reads every key of the description
// (a key it does not list is not read), checks its type and range, and stores it into
// `field` (offsetof(ft_hparams, x); for a per-layer key without FT_KEY_UNIFORM,
// offsetof(ft_layer, x)), or def when the file lacks it. Defaults that depend on other keys
// (FT_KEY_DERIVED) and keys with no field are the business of the code that reads them
// (model.c for the keys all architectures share, the architecture's hparams hook).
typedef struct ft_arch_key {
    const char *suffix;
    enum ft_key_type type;
    unsigned flags;
    int64_t lo, hi;      // the range of an integer (each entry of an array)
    size_t field;        // or FT_KEY_NO_FIELD
    double def;
    ft_key_synth synth;  // ft synth writes the keys in table order (FT_KEY_TYPE_U32_4: fn(p, i) for i < 4)
} ft_arch_key;

// A size in a tensor's shape, in terms of the hyper-parameters.
enum ft_dim {
    FT_DIM_NONE,     // past the last dim
    FT_DIM_EMBD,     // n_embd
    FT_DIM_VOCAB,    // n_vocab
    FT_DIM_HEAD,     // head_dim
    FT_DIM_Q,        // the layer's n_head * head_dim
    FT_DIM_KV,       // n_head_kv * head_dim
    FT_DIM_EXPERT,   // n_expert
    FT_DIM_FF,       // n_ff, dense layers
    FT_DIM_FF_EXP,   // n_ff_exp
    FT_DIM_FF_EXP_2, // 2 x n_ff_exp: gate and up experts in one tensor
    FT_DIM_FF_SHEXP, // n_ff_shexp
    FT_DIM_Q_GATED,  // 2 x the layer's n_head * head_dim: q and its output gate (qwen35moe)
    FT_DIM_LIN_QKV,  // (2 x ssm_n_k_heads + ssm_n_v_heads) x ssm_head_dim: a recurrent layer's q, k, v
    FT_DIM_LIN_V,    // ssm_n_v_heads x ssm_head_dim
    FT_DIM_SSM_HEADS,// ssm_n_v_heads
    FT_DIM_SSM_BA,   // 2 x ssm_n_v_heads: beta and alpha in one projection (qwen3next)
    FT_DIM_SSM_HEAD, // ssm_head_dim
    FT_DIM_SSM_CONV, // ssm_d_conv
    FT_DIM_EMBD_2,   // 2 x n_embd: an MTP block's embedding and hidden state side by side
    FT_DIM_HEADS,    // the layer's n_head (one value per query head: attention sinks)
    FT_DIM_ONE,      // 1 (a scalar stored as a one-element tensor)
    FT_DIM_HEAD_HALF,// hp.head_dim / 2 (RoPE's frequency factors, one per rotated pair)
    FT_DIM_ARCH,     // the architecture's dim hook says
};

// Which layers have a tensor.
enum ft_layers {
    FT_LAYERS_NONE,  // a model tensor, outside the layers
    FT_LAYERS_ALL,
    FT_LAYERS_MOE,   // layers with routed experts (from n_dense_lead on)
    FT_LAYERS_DENSE, // the n_dense_lead leading layers with a dense FFN
    FT_LAYERS_ATTN,  // layers with softmax attention (all but the recurrent ones)
    FT_LAYERS_KV,    // attention layers with a KV cache of their own (ft_layer.kv_from is the layer)
    FT_LAYERS_RECURRENT, // gated DeltaNet layers (ft_layer.is_recurrent, set by the hparams hook)
    FT_LAYERS_MTP,   // only the MTP blocks after the trunk (hp.n_layer_mtp): rows ft synth
                     // writes and the loader never binds (their field is FT_TENSOR_NO_FIELD)
};

// The types a tensor may have, and the one ft synth writes it in.
enum ft_wtype {
    FT_WTYPE_F32,         // f32 only (norm weights, biases)
    FT_WTYPE_ANY,         // any weight type ft computes with; ft synth: its dense type
    FT_WTYPE_ANY_F32,     // any weight type; ft synth: f32 (routers and gates, small and touchy)
    FT_WTYPE_EXPERT,      // any weight type; ft synth: the layer's gate/up expert type
    FT_WTYPE_EXPERT_DOWN, // any weight type; ft synth: the layer's down expert type
};

enum {
    FT_TENSOR_OPTIONAL = 1 << 0, // absent is fine (data stays NULL)
    FT_TENSOR_NO_SYNTH = 1 << 1, // ft synth never writes it (an optional tensor some files have)
    // The gate (up) experts of a layer that may fuse them: where the layer has gate_up_exps (an
    // earlier row of the table, bound first), this row is bound as a view of the first (second)
    // half of each expert's matrix there, and the file must not also have this row's tensor.
    FT_TENSOR_FUSED_GATE = 1 << 2,
    FT_TENSOR_FUSED_UP = 1 << 3,
};

// How ft synth writes a tensor: values normal with standard deviation std, divided by the
// square root of the row length (the fan-in) with FT_FAN_IN, so activations keep their scale,
// then mean added (norm weights sit around 1). FT_FAN_IN multiplies by the reciprocal square
// root and FT_FAN_IN_DIV divides by the square root: the same scale rounded two ways, both
// kept because the files (and the conformance models) depend on every bit. An optional
// tensor is written when `when` says so (NULL: always).
enum ft_fan { FT_FAN_NONE, FT_FAN_IN, FT_FAN_IN_DIV };

typedef struct ft_tensor_synth {
    float std, mean;
    enum ft_fan fan;
    bool (*when)(const ft_synth_params *p);
    // Layer il's tensor is written only where when_layer says so (NULL: every layer that has it)
    bool (*when_layer)(const ft_synth_params *p, int il);
    // An f32 tensor's rows of n values each set by fill instead of drawn (NULL: drawn), which
    // may draw from rng (ft synth's, in file order)
    void (*fill)(const ft_synth_params *p, float *v, int64_t n, ft_rng *rng);
} ft_tensor_synth;

// A tensor. In a file (and for ft synth) the tensors come in table order: a model tensor where
// its row stands, each run of layer rows once per layer (the rows a layer does not have left
// out), so "token_embd, the layer rows, output_norm, output" gives llama.cpp's order.
#define FT_TENSOR_NO_FIELD ((size_t)-1) // a row that is never bound (FT_LAYERS_MTP)

typedef struct ft_arch_tensor {
    const char *name;       // the GGUF name; "%d" in a layer tensor's is the layer
    enum ft_layers layers;
    enum ft_dim ne[3];      // the shape in GGUF order; FT_DIM_NONE past the last dim
    enum ft_wtype type;
    unsigned flags;         // FT_TENSOR_*
    size_t field;           // offsetof(ft_layer, x), or offsetof(ft_model, x) for a model tensor,
                            // or FT_TENSOR_NO_FIELD
    ft_tensor_synth synth;
} ft_arch_tensor;

typedef struct ft_arch {
    const char *name;              // general.architecture
    const char *note;              // said after the name in the list of architectures, or NULL
    const ft_arch_key *keys;
    int n_keys;
    const ft_arch_tensor *tensors;
    int n_tensors;
    ft_hparams fixed;              // what the architecture fixes before any key is read (RoPE pairs, gating)
    unsigned op_features;          // FT_OPS_* its layers need whatever the file holds (others follow
                                   // from the file: ft_model_op_features)
    // After the keys: values derived and checks made where a rule does not fit the table
    // (NULL: none). Returns false and sets *err naming the key.
    bool (*hparams)(ft_model *m, ft_err *err);
    // The size of an FT_DIM_ARCH dim of tensor t in layer il: from the file's tensor g when
    // binding (p NULL), from p for ft synth (g NULL). Returns -1 and sets *err when g fits
    // none of the architecture's choices.
    int64_t (*dim)(const ft_model *m, const ft_arch_tensor *t, int il, const gguf_tensor *g,
                   const ft_synth_params *p, ft_err *err);
    // ft synth: parameters the architecture cannot write although the tables accept them
    // (NULL: none). Returns false and sets *err saying which.
    bool (*synth_check)(const ft_synth_params *p, ft_err *err);
    // One block for f->n_tok tokens: reads and updates f->x.
    void (*layer)(const ft_model *m, ft_forward *f, int il);
} ft_arch;

struct ft_model {
    const ft_arch *arch;
    gguf_file *file;
    char *path;
    ft_hparams hp;
    ft_tensor tok_embd;    // (n_embd, n_vocab)
    ft_tensor output_norm; // (n_embd)
    ft_tensor output;      // (n_embd, n_vocab); tok_embd when the file ties them
    ft_tensor rope_freqs;  // (head_dim / 2) f32, gemma4; absent elsewhere
    ft_layer *layers;      // (n_layer)
};

// Loads a model. Returns NULL and sets *err ("path: what, where") on any problem.
ft_model *ft_model_load(const char *path, ft_err *err);
void ft_model_free(ft_model *m); // NULL is a no-op

// Places the weights on backend be for its forward passes. On a CPU backend nothing is copied
// (the view points into the mapping). On a device, every tensor but the token-embedding table
// (read row by row on the host by get_rows, as llama.cpp keeps it) is copied into be's buffers,
// and with experts_on_host the routed experts (gate_exps, up_exps, down_exps) stay in the
// mapping (placement CPU) for an expert cache or the CPU to serve (--moe-backend offload|cpu).
// Fused gate/up experts are copied as their gate and up views, each packed (no stride);
// gate_up_exps itself stays the mapping's. progress, when set, is told of the bytes copied.
// Returns NULL and sets *err when a type has no kernel on be or its memory runs out (nothing
// stays allocated). ft_weights_place_bytes is what a device placement allocates (for the memory
// plan).
ft_weights *ft_weights_place(const ft_model *m, ft_backend *be, bool experts_on_host, ft_progress_fn progress,
                             void *progress_ctx, ft_err *err);
void ft_weights_free(ft_weights *w); // gives the copies back to their backend; NULL is a no-op
size_t ft_weights_place_bytes(const ft_model *m, bool experts_on_host);

// Reads every page of the tensors m binds into memory now (the mapping is lazy: the first
// requests would otherwise wait on the disk), reporting progress when set; tensors of the file
// the model never reads (MTP blocks) stay on disk. Warns when they are larger than the memory
// available. For weights the CPU computes from the mapping.
void ft_model_prefault(const ft_model *m, ft_progress_fn progress, void *progress_ctx);

// The weights the CPU streams, moved out of the file's 4 KiB pages into anonymous memory in
// huge pages at the same addresses (util/mapping.h: a TLB miss per 2 MiB instead of per 4 KiB of
// weights read): every tensor m binds, or with experts_only the routed experts alone (cpu mode,
// where the rest lives on the GPU). ft_model_copy_bytes is what that takes (whole huge pages
// of the tensors' spans; the edges stay mapped); ft_model_copy_into_memory does it with
// n_threads threads, reporting progress when set, and returns the bytes moved (fewer when
// memory ran out: the rest stays mapped, which reads the same). A model read from a buffer (not
// a mapping) moves nothing.
size_t ft_model_copy_bytes(const ft_model *m, bool experts_only);
size_t ft_model_copy_into_memory(const ft_model *m, bool experts_only, int n_threads, ft_progress_fn progress,
                                 void *progress_ctx);

// The FT_OPS_* features (backend.h) m's layers need beyond every backend's ops: what the engine
// checks against its backend's before placing m.
unsigned ft_model_op_features(const ft_model *m);

// Widest activation row of any layer (for buffer sizes): max of n_embd, q width, FFN widths.
int64_t ft_model_max_width(const ft_model *m);
// The largest head size of any layer (softmax attention or recurrent), and the widest K/V row
// (n_head_kv x head_dim) of any attention layer.
int ft_model_max_head_dim(const ft_model *m);
int64_t ft_model_max_kv_width(const ft_model *m);
int ft_model_max_q_width(const ft_model *m); // attention's q, or a recurrent layer's V
// The widest doubled Q projection or recurrent q, k and v (0: none) and a recurrent layer's
// V heads (0: no recurrent layer): the extra buffers ft_forward_alloc makes for them.
int64_t ft_model_wide_width(const ft_model *m);
int ft_model_recurrent_heads(const ft_model *m);

// Allocates f's activation buffers on be, sized for batches of up to n_batch tokens, and sets
// f->be and f->w (place, the segments or kv and pos0 are the caller's).
void ft_forward_alloc(ft_forward *f, const ft_model *m, const ft_weights *w, ft_backend *be, int n_batch);

// Architectures ft knows: by name (NULL when unknown), by index (0 .. ft_arch_count() - 1),
// and a comma-separated list of their names with their notes, for messages.
const ft_arch *ft_arch_find(const char *name);
int ft_arch_count(void);
const ft_arch *ft_arch_at(int i);
const char *ft_arch_names(void);

// Calls fn with each tensor m bound (present ones, the tied output once as the embedding), in
// file order (for ft inspect: which tensors of a file the architecture uses).
void ft_model_for_each_tensor(const ft_model *m, void (*fn)(void *ctx, const ft_tensor *t), void *ctx);

// For ft inspect: loads path as ft_model_load does but goes on past each tensor that is
// missing or wrong, calling problem(ctx, message) for it; those stay unbound, so a model that
// had a problem is for looking at, never for running. Returns NULL and sets *err when the
// file, its architecture or its hyper-parameters cannot be read.
ft_model *ft_model_load_checked(const char *path, void (*problem)(void *ctx, const char *msg), void *ctx,
                                ft_err *err);

#endif
