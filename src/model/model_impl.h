// model_impl.h: helpers the architecture files share (internal to src/model/).
#ifndef FT_MODEL_IMPL_H
#define FT_MODEL_IMPL_H

#include "model.h"

// ---- hyper-parameters: keys are "<arch>.<suffix>"; each check names the key on failure.

// An unsigned integer in [lo, hi]. When absent: an error if required, else *out is kept.
bool model_hp_int(const ft_model *m, const char *suffix, int *out, bool required, int64_t lo,
            int64_t hi, ft_err *err);
bool model_hp_float(const ft_model *m, const char *suffix, float *out, bool required, ft_err *err);
bool model_hp_bool(const ft_model *m, const char *suffix, bool *out, ft_err *err);
// A value per layer: one integer for all layers, or an array of n_layer integers.
bool model_hp_per_layer(const ft_model *m, const char *suffix, int *out, bool required, int64_t lo,
                  int64_t hi, ft_err *err);

// The keys every architecture shares: sizes, heads (per layer into layers[].n_head), norm
// epsilon, RoPE base and dims, expert counts, FFN widths, special tokens. rope.neox is set
// by the caller.
bool model_hp_common(ft_model *m, ft_err *err);

// ---- tensors

enum {
    BIND_OPTIONAL = 1 << 0, // absent is fine (data stays NULL)
    BIND_F32 = 1 << 1,      // must be f32 (norm weights, biases)
};

// Binds the tensor named by fmt into t after checking it exists, has n_dims dims of the
// given sizes (ne2 ignored for 2-D, ne1 and ne2 for 1-D) and a type ft can compute with.
bool model_bind(ft_model *m, ft_tensor *t, unsigned flags, int n_dims, int64_t ne0, int64_t ne1,
          int64_t ne2, ft_err *err, const char *fmt, ...) __attribute__((format(printf, 9, 10)));

// token_embd, output_norm and output (tied to token_embd when absent).
bool model_bind_embd_output(ft_model *m, ft_err *err);

// attn_norm, wq/wk/wv/wo with optional biases and, with qk_norm, attn_q_norm/attn_k_norm.
bool model_bind_attention(ft_model *m, int il, bool qk_norm, ft_err *err);
// ffn_norm, router, the three expert banks of n_ff wide experts; sets is_moe.
bool model_bind_experts(ft_model *m, int il, int n_ff, ft_err *err);

// ---- blocks: the pieces of a layer, written against the backend ops.

typedef struct attn_opts {
    bool qk_norm;     // per-head RMSNorm of Q and K before RoPE (qwen3moe, laguna)
} attn_opts;

// x += attention(norm(x)): Q/K/V (+ biases), optional Q/K norm, RoPE, cache write,
// attention (sliding when the layer is), optional softplus gate, output projection.
void model_block_attention(const ft_model *m, ft_forward *f, int il, attn_opts o);
// x += experts(norm(x)) [+ shared expert, sigmoid-gated when the layer has a gate]
void model_block_moe(const ft_model *m, ft_forward *f, int il);
// x += ffn(norm(x)), a dense SiLU-gated FFN
void model_block_dense_ffn(const ft_model *m, ft_forward *f, int il);

#endif
