// model: hyper-parameters and weight binding per architecture, and the layer code written
// once against the backend ops (backend.h).
//
// ft_model_load opens a GGUF (mmap), picks the architecture from general.architecture, reads
// and validates its hyper-parameters and binds every weight, checking presence, type and shape
// with a message that names the key or tensor that is wrong. Weights point into the mapping;
// the model owns the mapping and its arrays. A loaded model is read-only: several engines
// may share it, each placing the weights on its own backend (ft_weights_place).
//
// Each architecture is one file (qwen3moe.c, qwen2moe.c, llama.c, laguna.c) with three parts:
// its hyper-parameters, its tensors, and `layer`, the forward pass of one block for a batch of
// tokens, made of ops and the shared blocks of blocks.c (attention, routed experts).
#ifndef FT_MODEL_H
#define FT_MODEL_H

#include "../backend/backend.h"
#include "../gguf/gguf.h"
#include "../kv/kv.h"
#include "../util/progress.h"

#define FT_MAX_EXPERTS 1024

typedef struct ft_hparams {
    int n_vocab, n_embd, n_layer, n_ctx_train;
    int n_head_kv, head_dim;       // KV heads (all layers), head size of K, V and Q
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
    bool norm_w;                   // renormalise the top-k weights
    float w_scale;                 // scale of the expert weights (0 or 1: none)
    int32_t bos, eos;              // -1 when absent
    bool add_bos;
} ft_hparams;

// Weights of one block. Absent optional tensors have data == NULL. Shapes in GGUF order.
typedef struct ft_layer {
    int n_head;                    // query heads of this layer
    bool is_swa;                   // sliding-window attention
    bool is_moe;                   // routed experts (else a dense FFN)
    ft_tensor attn_norm;           // (n_embd)
    ft_tensor wq, wk, wv;          // (n_embd, n_head * head_dim), (n_embd, n_head_kv * head_dim) x2
    ft_tensor bq, bk, bv;          // optional biases
    ft_tensor wo;                  // (n_head * head_dim, n_embd)
    ft_tensor q_norm, k_norm;      // (head_dim), optional per architecture
    ft_tensor attn_gate;           // (n_embd, n_head or n_head * head_dim), laguna
    ft_tensor ffn_norm;            // (n_embd)
    ft_tensor router;              // (n_embd, n_expert)
    ft_tensor sel_bias;            // (n_expert), laguna's score-correction bias
    ft_tensor gate_exps, up_exps;  // (n_embd, n_ff_exp, n_expert)
    ft_tensor down_exps;           // (n_ff_exp, n_embd, n_expert)
    ft_tensor gate_shexp, up_shexp;// (n_embd, n_ff_shexp)
    ft_tensor down_shexp;          // (n_ff_shexp, n_embd)
    ft_tensor gate_inp_shexp;      // (n_embd), qwen2moe's shared-expert gate
    ft_tensor ffn_gate, ffn_up;    // (n_embd, n_ff), dense layers
    ft_tensor ffn_down;            // (n_ff, n_embd)
} ft_layer;

// The tensors a forward pass reads, where one backend keeps them: the model's own (in the
// file's mapping) for a CPU backend, else copies in the backend's buffers, the routed experts
// possibly left in the mapping (ft_weights_place). Shapes and names as the model's.
typedef struct ft_weights {
    ft_tensor tok_embd, output_norm, output;
    ft_layer *layers;       // (n_layer)
    int n_layer;
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
    float *x;        // (n_tok, n_embd) the residual stream
    float *xn;       // (n_tok, n_embd) normed input of a block
    float *q, *k, *v;// (n_tok, max q width), (n_tok, kv width) x2
    float *attn;     // (n_tok, max q width)
    float *gate;     // (n_tok, max q width) laguna's output gate
    float *out;      // (n_tok, n_embd) a block's output
    float *out2;     // (n_tok, n_embd) the shared expert's output
} ft_forward;

typedef struct ft_model ft_model;

typedef struct ft_arch {
    const char *name; // general.architecture
    // Reads the hyper-parameters and binds the tensors into m (whose file, arch name and
    // common fields are set). Returns false and sets *err naming the bad key or tensor.
    bool (*load)(ft_model *m, ft_err *err);
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
    ft_layer *layers;      // (n_layer)
};

// Loads a model. Returns NULL and sets *err ("path: what, where") on any problem.
ft_model *ft_model_load(const char *path, ft_err *err);
void ft_model_free(ft_model *m); // NULL is a no-op

// Places the weights on backend be for its forward passes. On a CPU backend nothing is copied
// (the view points into the mapping). On a device, every tensor but the token-embedding table
// (read row by row on the host by get_rows, as llama.cpp keeps it) is copied into be's
// buffers, and with experts_on_host the routed experts (gate_exps, up_exps, down_exps) stay
// in the mapping (placement CPU) for an expert cache or the CPU to serve (--moe-backend
// offload|cpu). progress, when set, is told of the bytes copied. Returns NULL and sets *err
// when a type has no kernel on be or its memory runs out (nothing stays allocated).
// ft_weights_place_bytes is what a device placement allocates (for the memory plan).
ft_weights *ft_weights_place(const ft_model *m, ft_backend *be, bool experts_on_host, ft_progress_fn progress,
                             void *progress_ctx, ft_err *err);
void ft_weights_free(ft_weights *w); // gives the copies back to their backend; NULL is a no-op
size_t ft_weights_place_bytes(const ft_model *m, bool experts_on_host);

// Reads every page of the file's tensor data into memory now (the mapping is lazy: the first
// requests would otherwise wait on the disk), reporting progress when set. Warns when the file
// is larger than the memory available. For weights the CPU computes from the mapping.
void ft_model_prefault(const ft_model *m, ft_progress_fn progress, void *progress_ctx);

// Widest activation row of any layer (for buffer sizes): max of n_embd, q width, FFN widths.
int64_t ft_model_max_width(const ft_model *m);
int ft_model_max_q_width(const ft_model *m);

// Allocates f's activation buffers on be, sized for batches of up to n_batch tokens, and sets
// f->be and f->w (place, the segments or kv and pos0 are the caller's).
void ft_forward_alloc(ft_forward *f, const ft_model *m, const ft_weights *w, ft_backend *be, int n_batch);

// Architectures ft knows, and a comma-separated list of their names for messages.
const ft_arch *ft_arch_find(const char *name);
const char *ft_arch_names(void);

#endif
