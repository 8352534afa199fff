// model_impl.h: what the architecture files share (internal to src/model/): the pieces of
// their tables, the keys every architecture reads, key lookups for the hooks, and the blocks.
#ifndef FT_MODEL_IMPL_H
#define FT_MODEL_IMPL_H

#include "model.h"
#include "synth.h"

#include <stddef.h>

// ---- table rows

#define HP(f) offsetof(ft_hparams, f)
#define LAYER(f) offsetof(ft_layer, f)
#define MODEL(f) offsetof(ft_model, f)
#define SP(f) offsetof(ft_synth_params, f)

// ft synth's value of a key (see ft_key_synth); the extra arguments add .when, .per_layer, ...
#define FT_NO_SYNTH {.write = false}
#define FT_SYNTH(f, ...) {.write = true, .field = SP(f), __VA_ARGS__}
#define FT_SYNTH_OR(f, g, ...) {.write = true, .field = SP(f), .or_field = SP(g), __VA_ARGS__}
#define FT_SYNTH_VALUE(v, ...) {.write = true, .value = (v), __VA_ARGS__}
#define FT_SYNTH_FN(fn_, ...) {.write = true, .fn = (fn_), __VA_ARGS__}
#define FT_SYNTH_STR(s, ...) {.write = true, .str = (s), __VA_ARGS__}

// ft synth's values of a tensor (see ft_tensor_synth); the extra arguments add .when
#define FT_STD(s, ...) {.std = (s), .fan = FT_FAN_NONE, __VA_ARGS__}
#define FT_NORM {.std = 0.05f, .mean = 1.0f, .fan = FT_FAN_NONE}
#define FT_FAN(s, ...) {.std = (s), .fan = FT_FAN_IN, __VA_ARGS__}
#define FT_FAN_DIV(s, ...) {.std = (s), .fan = FT_FAN_IN_DIV, __VA_ARGS__}

// The tensors most architectures share, as rows for their tables (ft synth writes a file's
// tensors in the order its table lists them).

// the token embedding table (the output too when output.weight is absent)
#define MODEL_TENSOR_TOKEN_EMBD                                                                     \
    {"token_embd.weight", FT_LAYERS_NONE, {FT_DIM_EMBD, FT_DIM_VOCAB},                              \
     FT_WTYPE_ANY, 0, MODEL(tok_embd), FT_STD(1.0f)}

// the attention block's input norm and the Q, K, V projections
#define MODEL_TENSORS_ATTENTION_QKV                                                                 \
    {"blk.%d.attn_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD},                                       \
     FT_WTYPE_F32, 0, LAYER(attn_norm), FT_NORM},                                                   \
    {"blk.%d.attn_q.weight", FT_LAYERS_ALL, {FT_DIM_EMBD, FT_DIM_Q},                                \
     FT_WTYPE_ANY, 0, LAYER(wq), FT_FAN(1.0f)},                                                     \
    {"blk.%d.attn_k.weight", FT_LAYERS_ALL, {FT_DIM_EMBD, FT_DIM_KV},                               \
     FT_WTYPE_ANY, 0, LAYER(wk), FT_FAN(1.0f)},                                                     \
    {"blk.%d.attn_v.weight", FT_LAYERS_ALL, {FT_DIM_EMBD, FT_DIM_KV},                               \
     FT_WTYPE_ANY, 0, LAYER(wv), FT_FAN(1.0f)}

// Q/K/V biases where the file has them; ft synth writes them when asked (qkv_bias)
#define MODEL_TENSORS_QKV_BIAS                                                                      \
    {"blk.%d.attn_q.bias", FT_LAYERS_ALL, {FT_DIM_Q},                                               \
     FT_WTYPE_F32, FT_TENSOR_OPTIONAL, LAYER(bq), FT_STD(0.1f, .when = synth_qkv_bias)},            \
    {"blk.%d.attn_k.bias", FT_LAYERS_ALL, {FT_DIM_KV},                                              \
     FT_WTYPE_F32, FT_TENSOR_OPTIONAL, LAYER(bk), FT_STD(0.1f, .when = synth_qkv_bias)},            \
    {"blk.%d.attn_v.bias", FT_LAYERS_ALL, {FT_DIM_KV},                                              \
     FT_WTYPE_F32, FT_TENSOR_OPTIONAL, LAYER(bv), FT_STD(0.1f, .when = synth_qkv_bias)}

// Q/K/V biases where the file has them (ft synth writes none)
#define MODEL_TENSORS_QKV_BIAS_OPTIONAL                                                             \
    {"blk.%d.attn_q.bias", FT_LAYERS_ALL, {FT_DIM_Q},                                               \
     FT_WTYPE_F32, FT_TENSOR_OPTIONAL | FT_TENSOR_NO_SYNTH, LAYER(bq), FT_STD(0.1f)},               \
    {"blk.%d.attn_k.bias", FT_LAYERS_ALL, {FT_DIM_KV},                                              \
     FT_WTYPE_F32, FT_TENSOR_OPTIONAL | FT_TENSOR_NO_SYNTH, LAYER(bk), FT_STD(0.1f)},               \
    {"blk.%d.attn_v.bias", FT_LAYERS_ALL, {FT_DIM_KV},                                              \
     FT_WTYPE_F32, FT_TENSOR_OPTIONAL | FT_TENSOR_NO_SYNTH, LAYER(bv), FT_STD(0.1f)}

// the attention output projection
#define MODEL_TENSOR_ATTN_OUTPUT                                                                    \
    {"blk.%d.attn_output.weight", FT_LAYERS_ALL, {FT_DIM_Q, FT_DIM_EMBD},                           \
     FT_WTYPE_ANY, 0, LAYER(wo), FT_FAN(1.0f)}

// per-head RMSNorm weights of Q and K
#define MODEL_TENSORS_QK_NORM                                                                       \
    {"blk.%d.attn_q_norm.weight", FT_LAYERS_ALL, {FT_DIM_HEAD},                                     \
     FT_WTYPE_F32, 0, LAYER(q_norm), FT_NORM},                                                      \
    {"blk.%d.attn_k_norm.weight", FT_LAYERS_ALL, {FT_DIM_HEAD},                                     \
     FT_WTYPE_F32, 0, LAYER(k_norm), FT_NORM}

// per-head RMSNorm weights of Q and K where the file has them; ft synth writes them when asked
// (qk_norm)
#define MODEL_TENSORS_QK_NORM_OPTIONAL                                                              \
    {"blk.%d.attn_q_norm.weight", FT_LAYERS_ALL, {FT_DIM_HEAD},                                     \
     FT_WTYPE_F32, FT_TENSOR_OPTIONAL, LAYER(q_norm), FT_STD(0.3f, .mean = 1.0f, .when = synth_qk_norm)}, \
    {"blk.%d.attn_k_norm.weight", FT_LAYERS_ALL, {FT_DIM_HEAD},                                     \
     FT_WTYPE_F32, FT_TENSOR_OPTIONAL, LAYER(k_norm), FT_STD(0.3f, .mean = 1.0f, .when = synth_qk_norm)}

// the FFN block's input norm
#define MODEL_TENSOR_FFN_NORM                                                                       \
    {"blk.%d.ffn_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD},                                        \
     FT_WTYPE_F32, 0, LAYER(ffn_norm), FT_NORM}

// the SiLU-gated FFN of the leading dense layers
#define MODEL_TENSORS_DENSE_FFN                                                                     \
    {"blk.%d.ffn_gate.weight", FT_LAYERS_DENSE, {FT_DIM_EMBD, FT_DIM_FF},                           \
     FT_WTYPE_ANY, 0, LAYER(ffn_gate), FT_FAN(1.0f)},                                               \
    {"blk.%d.ffn_up.weight", FT_LAYERS_DENSE, {FT_DIM_EMBD, FT_DIM_FF},                             \
     FT_WTYPE_ANY, 0, LAYER(ffn_up), FT_FAN(1.0f)},                                                 \
    {"blk.%d.ffn_down.weight", FT_LAYERS_DENSE, {FT_DIM_FF, FT_DIM_EMBD},                           \
     FT_WTYPE_ANY, 0, LAYER(ffn_down), FT_FAN(1.0f)}

// the sigmoid router's score-correction bias, added to the scores only to select the experts
// (laguna, glm4moe)
#define MODEL_TENSOR_SELECTION_BIAS                                                                 \
    {"blk.%d.exp_probs_b.bias", FT_LAYERS_MOE, {FT_DIM_EXPERT},                                     \
     FT_WTYPE_F32, 0, LAYER(sel_bias), FT_STD(0.2f)}

// the router (ft synth: logits of a few units, some experts clearly preferred, not one always)
// and the three expert banks of MoE layers
#define MODEL_TENSORS_ROUTED_EXPERTS                                                                \
    {"blk.%d.ffn_gate_inp.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_EXPERT},                     \
     FT_WTYPE_ANY_F32, 0, LAYER(router), FT_FAN(1.5f)},                                             \
    {"blk.%d.ffn_gate_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP, FT_DIM_EXPERT},     \
     FT_WTYPE_EXPERT, 0, LAYER(gate_exps), FT_FAN(1.0f)},                                           \
    {"blk.%d.ffn_up_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP, FT_DIM_EXPERT},       \
     FT_WTYPE_EXPERT, 0, LAYER(up_exps), FT_FAN(1.0f)},                                             \
    {"blk.%d.ffn_down_exps.weight", FT_LAYERS_MOE, {FT_DIM_FF_EXP, FT_DIM_EMBD, FT_DIM_EXPERT},     \
     FT_WTYPE_EXPERT_DOWN, 0, LAYER(down_exps), FT_FAN(1.0f)}

// The same, where a layer may hold gate and up fused in one tensor (llama.cpp's converter with
// --fuse-gate-up-exps; the architectures whose llama.cpp code loads it): gate_up_exps, then gate
// and up bound as its halves where the layer has it (FT_TENSOR_FUSED_*), else read as above.
// ft synth writes one layout, as synth.h's fused_gate_up says.
#define MODEL_TENSORS_ROUTED_EXPERTS_GATE_UP                                                               \
    {"blk.%d.ffn_gate_inp.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_EXPERT},                            \
     FT_WTYPE_ANY_F32, 0, LAYER(router), FT_FAN(1.5f)},                                                    \
    {"blk.%d.ffn_gate_up_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP_2, FT_DIM_EXPERT},       \
     FT_WTYPE_EXPERT, FT_TENSOR_OPTIONAL, LAYER(gate_up_exps), FT_FAN(1.0f, .when = synth_fused_gate_up)}, \
    {"blk.%d.ffn_gate_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP, FT_DIM_EXPERT},            \
     FT_WTYPE_EXPERT, FT_TENSOR_FUSED_GATE, LAYER(gate_exps), FT_FAN(1.0f, .when = synth_split_gate_up)},  \
    {"blk.%d.ffn_up_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP, FT_DIM_EXPERT},              \
     FT_WTYPE_EXPERT, FT_TENSOR_FUSED_UP, LAYER(up_exps), FT_FAN(1.0f, .when = synth_split_gate_up)},      \
    {"blk.%d.ffn_down_exps.weight", FT_LAYERS_MOE, {FT_DIM_FF_EXP, FT_DIM_EMBD, FT_DIM_EXPERT},            \
     FT_WTYPE_EXPERT_DOWN, 0, LAYER(down_exps), FT_FAN(1.0f)}

// the shared expert of MoE layers
#define MODEL_TENSORS_SHARED_EXPERT                                                                 \
    {"blk.%d.ffn_gate_shexp.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_SHEXP},                 \
     FT_WTYPE_ANY, 0, LAYER(gate_shexp), FT_FAN(1.0f)},                                             \
    {"blk.%d.ffn_up_shexp.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_SHEXP},                   \
     FT_WTYPE_ANY, 0, LAYER(up_shexp), FT_FAN(1.0f)},                                               \
    {"blk.%d.ffn_down_shexp.weight", FT_LAYERS_MOE, {FT_DIM_FF_SHEXP, FT_DIM_EMBD},                 \
     FT_WTYPE_ANY, 0, LAYER(down_shexp), FT_FAN(1.0f)}

// the shared expert's sigmoid gate (qwen2moe, qwen35moe, qwen3next)
#define MODEL_TENSOR_SHARED_EXPERT_GATE                                                             \
    {"blk.%d.ffn_gate_inp_shexp.weight", FT_LAYERS_MOE, {FT_DIM_EMBD}, FT_WTYPE_ANY_F32, 0,         \
     LAYER(gate_inp_shexp), FT_FAN(1.0f)}

// softmax attention of the hybrid Qwen models: a doubled Q projection (q and its output gate
// per head), Q/K RMSNorm
#define MODEL_TENSORS_GATED_ATTENTION                                                               \
    {"blk.%d.attn_q.weight", FT_LAYERS_ATTN, {FT_DIM_EMBD, FT_DIM_Q_GATED}, FT_WTYPE_ANY, 0,         \
     LAYER(wq), FT_FAN(1.0f)},                                                                      \
    {"blk.%d.attn_k.weight", FT_LAYERS_ATTN, {FT_DIM_EMBD, FT_DIM_KV}, FT_WTYPE_ANY, 0, LAYER(wk),  \
     FT_FAN(1.0f)},                                                                                 \
    {"blk.%d.attn_v.weight", FT_LAYERS_ATTN, {FT_DIM_EMBD, FT_DIM_KV}, FT_WTYPE_ANY, 0, LAYER(wv),  \
     FT_FAN(1.0f)},                                                                                 \
    {"blk.%d.attn_output.weight", FT_LAYERS_ATTN, {FT_DIM_Q, FT_DIM_EMBD}, FT_WTYPE_ANY, 0,         \
     LAYER(wo), FT_FAN(1.0f)},                                                                      \
    {"blk.%d.attn_q_norm.weight", FT_LAYERS_ATTN, {FT_DIM_HEAD}, FT_WTYPE_F32, 0, LAYER(q_norm),    \
     FT_NORM},                                                                                      \
    {"blk.%d.attn_k_norm.weight", FT_LAYERS_ATTN, {FT_DIM_HEAD}, FT_WTYPE_F32, 0, LAYER(k_norm),    \
     FT_NORM}

// a gated DeltaNet layer's q, k, v and z projections, its conv taps (a few tenths: each output
// mixes its inputs, keeping their scale), the decay's bias and rate (-exp(A_log): negative, so
// the state decays)
#define MODEL_TENSORS_DELTA_NET_IN                                                                  \
    {"blk.%d.attn_qkv.weight", FT_LAYERS_RECURRENT, {FT_DIM_EMBD, FT_DIM_LIN_QKV}, FT_WTYPE_ANY, 0, \
     LAYER(lin_qkv), FT_FAN(1.0f)},                                                                 \
    {"blk.%d.attn_gate.weight", FT_LAYERS_RECURRENT, {FT_DIM_EMBD, FT_DIM_LIN_V}, FT_WTYPE_ANY, 0,  \
     LAYER(lin_z), FT_FAN(1.0f)},                                                                   \
    {"blk.%d.ssm_conv1d.weight", FT_LAYERS_RECURRENT, {FT_DIM_SSM_CONV, FT_DIM_LIN_QKV},            \
     FT_WTYPE_F32, 0, LAYER(ssm_conv1d), FT_STD(0.3f, .mean = 0.25f)},                              \
    {"blk.%d.ssm_dt.bias", FT_LAYERS_RECURRENT, {FT_DIM_SSM_HEADS}, FT_WTYPE_F32, 0, LAYER(ssm_dt), \
     FT_STD(0.5f)},                                                                                 \
    {"blk.%d.ssm_a", FT_LAYERS_RECURRENT, {FT_DIM_SSM_HEADS}, FT_WTYPE_F32, 0, LAYER(ssm_a),        \
     FT_STD(0.1f, .mean = -0.5f)}

// its gated RMSNorm and output projection
#define MODEL_TENSORS_DELTA_NET_OUT                                                                 \
    {"blk.%d.ssm_norm.weight", FT_LAYERS_RECURRENT, {FT_DIM_SSM_HEAD}, FT_WTYPE_F32, 0,             \
     LAYER(ssm_norm), FT_NORM},                                                                     \
    {"blk.%d.ssm_out.weight", FT_LAYERS_RECURRENT, {FT_DIM_LIN_V, FT_DIM_EMBD}, FT_WTYPE_ANY, 0,    \
     LAYER(ssm_out), FT_FAN(1.0f)}

// the final norm
#define MODEL_TENSOR_OUTPUT_NORM                                                                    \
    {"output_norm.weight", FT_LAYERS_NONE, {FT_DIM_EMBD},                                           \
     FT_WTYPE_F32, 0, MODEL(output_norm), FT_NORM}

// the output projection, absent where the file ties it to token_embd; the argument is ft synth's
// value scale (logits with a spread of a few units over the vocabulary)
#define MODEL_TENSOR_OUTPUT(...)                                                                    \
    {"output.weight", FT_LAYERS_NONE, {FT_DIM_EMBD, FT_DIM_VOCAB},                                  \
     FT_WTYPE_ANY, FT_TENSOR_OPTIONAL, MODEL(output), __VA_ARGS__}

// The keys every architecture reads, as rows for its table (ft synth writes them in the
// order the table lists them). The ones taking arguments are written differently (or not at
// all) by the architectures: the argument is the row's ft synth value (FT_NO_SYNTH: none).
#define MODEL_KEY_CONTEXT_LENGTH                                                                            \
    {"context_length", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 1 << 26, HP(n_ctx_train), 0,                    \
     FT_SYNTH(n_ctx_train)}
#define MODEL_KEY_EMBEDDING_LENGTH                                                                          \
    {"embedding_length", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 1 << 20, HP(n_embd), 0, FT_SYNTH(n_embd)}
// (ft synth: the trunk and the MTP blocks after it)
#define MODEL_KEY_BLOCK_COUNT                                                                               \
    {"block_count", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 4096, HP(n_layer), 0, FT_SYNTH_FN(synth_block_count)}
#define MODEL_KEY_FEED_FORWARD_LENGTH(...)                                                                  \
    {"feed_forward_length", FT_KEY_TYPE_U32, 0, 0, 1 << 20, HP(n_ff), 0, __VA_ARGS__}
// heads per layer into ft_layer.n_head
#define MODEL_KEY_HEAD_COUNT(...)                                                                           \
    {"attention.head_count", FT_KEY_TYPE_U32_LAYERS, FT_KEY_REQUIRED, 1, 65536, LAYER(n_head), 0, __VA_ARGS__}
// default: the first layer's head count
#define MODEL_KEY_HEAD_COUNT_KV                                                                             \
    {"attention.head_count_kv", FT_KEY_TYPE_U32_LAYERS, FT_KEY_UNIFORM | FT_KEY_DERIVED, 1, 65536,          \
     HP(n_head_kv), 0, FT_SYNTH(n_head_kv)}
// default: embedding_length / the first layer's head count
#define MODEL_KEY_KEY_LENGTH                                                                                \
    {"attention.key_length", FT_KEY_TYPE_U32, FT_KEY_DERIVED, 2, 4096, HP(head_dim), 0, FT_SYNTH(head_dim)}
// must equal key_length
#define MODEL_KEY_VALUE_LENGTH                                                                              \
    {"attention.value_length", FT_KEY_TYPE_U32, FT_KEY_DERIVED, 2, 4096, FT_KEY_NO_FIELD, 0,                \
     FT_SYNTH(head_dim)}
#define MODEL_KEY_RMS_EPS                                                                                   \
    {"attention.layer_norm_rms_epsilon", FT_KEY_TYPE_F32, FT_KEY_REQUIRED, 0, 0, HP(rms_eps), 0,            \
     FT_SYNTH(rms_eps)}
#define MODEL_KEY_ROPE_FREQ_BASE                                                                            \
    {"rope.freq_base", FT_KEY_TYPE_F32, 0, 0, 0, HP(rope.freq_base), 10000, FT_SYNTH(rope_freq_base)}
// default: the head size
#define MODEL_KEY_ROPE_DIMENSION_COUNT                                                                      \
    {"rope.dimension_count", FT_KEY_TYPE_U32, FT_KEY_HI_HEAD_DIM | FT_KEY_DERIVED, 2, 0, HP(rope.n_rot), 0, \
     FT_SYNTH(n_rot, .when = synth_has_n_rot)}
#define MODEL_KEY_EXPERT_COUNT                                                                              \
    {"expert_count", FT_KEY_TYPE_U32, 0, 0, FT_MAX_EXPERTS, HP(n_expert), 0, FT_SYNTH(n_expert)}
#define MODEL_KEY_EXPERT_USED_COUNT                                                                         \
    {"expert_used_count", FT_KEY_TYPE_U32, 0, 0, FT_MAX_EXPERTS, HP(n_expert_used), 0,                      \
     FT_SYNTH(n_expert_used)}
// default: the architecture's hook derives one from feed_forward_length
#define MODEL_KEY_EXPERT_FEED_FORWARD_LENGTH                                                                \
    {"expert_feed_forward_length", FT_KEY_TYPE_U32, FT_KEY_DERIVED, 0, 1 << 20, HP(n_ff_exp), 0,            \
     FT_SYNTH(n_ff_exp)}
// default: the architecture's hook derives one
#define MODEL_KEY_EXPERT_SHARED_FEED_FORWARD_LENGTH                                                         \
    {"expert_shared_feed_forward_length", FT_KEY_TYPE_U32, FT_KEY_DERIVED, 0, 1 << 20, HP(n_ff_shexp), 0,   \
     FT_SYNTH_OR(n_ff_shexp, n_ff_exp)}
#define MODEL_KEY_EXPERT_WEIGHTS_SCALE(...)                                                                 \
    {"expert_weights_scale", FT_KEY_TYPE_F32, 0, 0, 0, HP(w_scale), 0, __VA_ARGS__}
// context extension: none, linear (the default) or yarn
#define MODEL_KEY_ROPE_SCALING_TYPE(...)                                                                    \
    {"rope.scaling.type", FT_KEY_TYPE_STR, 0, 0, 0, FT_KEY_NO_FIELD, 0, __VA_ARGS__}
#define MODEL_KEY_ROPE_SCALING_FACTOR(...)                                                                  \
    {"rope.scaling.factor", FT_KEY_TYPE_F32, 0, 0, 0, FT_KEY_NO_FIELD, 0, __VA_ARGS__}
#define MODEL_KEY_ROPE_SCALING_ATTN_FACTOR                                                                  \
    {"rope.scaling.attn_factor", FT_KEY_TYPE_F32, 0, 0, 0, FT_KEY_NO_FIELD, 1, FT_NO_SYNTH}
// the older spelling of rope.scaling.factor
#define MODEL_KEY_ROPE_SCALE_LINEAR                                                                         \
    {"rope.scale_linear", FT_KEY_TYPE_F32, 0, 0, 0, FT_KEY_NO_FIELD, 0, FT_NO_SYNTH}
// default: context_length
#define MODEL_KEY_ROPE_SCALING_ORIG_CTX(...)                                                                \
    {"rope.scaling.original_context_length", FT_KEY_TYPE_U32, FT_KEY_DERIVED, 1, 1 << 26,                   \
     HP(rope.n_ctx_orig), 0,                                                                                \
     __VA_ARGS__}

// ft synth writes rope.dimension_count only when asked for partial rotary
bool synth_has_n_rot(const ft_synth_params *p);
// ft synth writes Q/K/V biases, per-head Q/K norms, MTP blocks (nextn_predict_layers) only
// when asked
bool synth_qkv_bias(const ft_synth_params *p);
bool synth_qk_norm(const ft_synth_params *p);
bool synth_has_mtp(const ft_synth_params *p);
// rope.dimension_sections from rope_sections, written when one is set
bool synth_has_rope_sections(const ft_synth_params *p);
int64_t synth_rope_sections(const ft_synth_params *p, int i);
// block_count: the layers and the MTP blocks after them
int64_t synth_block_count(const ft_synth_params *p, int il);
// feed_forward_length of the leading dense layers: n_ff_dense, else twice the expert width
int64_t synth_dense_ff(const ft_synth_params *p, int il);
// ft synth writes gate and up experts fused (ffn_gate_up_exps), or split
bool synth_fused_gate_up(const ft_synth_params *p);
bool synth_split_gate_up(const ft_synth_params *p);
// feed_forward_length as all the experts a token uses (Qwen's files say it so)
int64_t synth_ff_used_experts(const ft_synth_params *p, int il);
// ssm.state_size and ssm.inner_size of linear-attention layers: ssm_head_dim (else head_dim),
// ssm_n_v_heads (else 4) of them
int64_t synth_ssm_head_dim(const ft_synth_params *p, int il);
int64_t synth_ssm_inner(const ft_synth_params *p, int il);


// Runs of the rows above that every architecture lists together, in this order.
#define MODEL_KEYS_SIZES MODEL_KEY_CONTEXT_LENGTH, MODEL_KEY_EMBEDDING_LENGTH, MODEL_KEY_BLOCK_COUNT
// after feed_forward_length: the attention's shape, the norm, RoPE's base and the expert counts
#define MODEL_KEYS_ATTENTION_EXPERTS                                                                        \
    MODEL_KEY_HEAD_COUNT_KV, MODEL_KEY_KEY_LENGTH, MODEL_KEY_VALUE_LENGTH, MODEL_KEY_RMS_EPS,               \
    MODEL_KEY_ROPE_FREQ_BASE, MODEL_KEY_EXPERT_COUNT, MODEL_KEY_EXPERT_USED_COUNT, MODEL_KEY_ROPE_DIMENSION_COUNT
// the gated DeltaNet layers' shapes and where they sit (qwen35moe, qwen3next); checked by
// model_linear_attention_hparams
#define MODEL_KEYS_LINEAR_ATTENTION                                                                         \
    {"ssm.conv_kernel", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 64, HP(ssm_d_conv), 0,                         \
     FT_SYNTH(ssm_d_conv, .value = 4)},                                                                     \
    {"ssm.state_size", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 2, 4096, HP(ssm_head_dim), 0,                      \
     FT_SYNTH_FN(synth_ssm_head_dim)},                                                                      \
    {"ssm.group_count", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 4096, HP(ssm_n_k_heads), 0,                    \
     FT_SYNTH(ssm_n_k_heads, .value = 2)},                                                                  \
    {"ssm.time_step_rank", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 4096, HP(ssm_n_v_heads), 0,                 \
     FT_SYNTH(ssm_n_v_heads, .value = 4)},                                                                  \
    {"ssm.inner_size", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 1 << 24, FT_KEY_NO_FIELD, 0,                    \
     FT_SYNTH_FN(synth_ssm_inner)},                                                                         \
    {"full_attention_interval", FT_KEY_TYPE_U32, 0, 1, 4096, FT_KEY_NO_FIELD, 4,                            \
     FT_SYNTH(full_attn_interval, .value = 4)},                                                             \
    {"nextn_predict_layers", FT_KEY_TYPE_U32, 0, 0, 64, FT_KEY_NO_FIELD, 0, FT_NO_SYNTH}
// The hybrid Qwen models' (qwen35moe, qwen3next) rows before and after their own: keys up to
// the RoPE and linear-attention ones; tensors up to and after the decay's projections.
#define MODEL_KEYS_HYBRID_QWEN                                                                              \
    MODEL_KEYS_SIZES, MODEL_KEY_FEED_FORWARD_LENGTH(FT_SYNTH_FN(synth_ff_used_experts)),                   \
    MODEL_KEYS_ATTENTION_EXPERTS, MODEL_KEY_HEAD_COUNT(FT_SYNTH(n_head)),                                  \
    MODEL_KEY_EXPERT_FEED_FORWARD_LENGTH, MODEL_KEY_EXPERT_SHARED_FEED_FORWARD_LENGTH,                     \
    MODEL_KEY_EXPERT_WEIGHTS_SCALE(FT_NO_SYNTH)
// (post_attention_norm is the FFN block's input norm)
#define MODEL_TENSORS_HYBRID_QWEN_LEAD                                                                      \
    MODEL_TENSOR_TOKEN_EMBD,                                                                                \
    {"blk.%d.attn_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(attn_norm), FT_NORM},  \
    {"blk.%d.post_attention_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(ffn_norm),   \
     FT_NORM},                                                                                              \
    MODEL_TENSORS_GATED_ATTENTION, MODEL_TENSORS_DELTA_NET_IN
#define MODEL_TENSORS_HYBRID_QWEN_TAIL                                                                      \
    MODEL_TENSORS_DELTA_NET_OUT, MODEL_TENSORS_ROUTED_EXPERTS_GATE_UP, MODEL_TENSOR_SHARED_EXPERT_GATE,    \
    MODEL_TENSORS_SHARED_EXPERT, MODEL_TENSOR_OUTPUT_NORM, MODEL_TENSOR_OUTPUT(FT_FAN_DIV(3.0f))
// context extension as the file says; ft synth writes none of it
#define MODEL_KEYS_ROPE_SCALING_READ_ONLY                                                                   \
    MODEL_KEY_ROPE_SCALING_TYPE(FT_NO_SYNTH), MODEL_KEY_ROPE_SCALING_FACTOR(FT_NO_SYNTH),                   \
    MODEL_KEY_ROPE_SCALING_ATTN_FACTOR, MODEL_KEY_ROPE_SCALE_LINEAR, MODEL_KEY_ROPE_SCALING_ORIG_CTX(FT_NO_SYNTH)

// ---- hyper-parameters

// The value of the key "<arch>.suffix" that m's description lists: the file's (already checked
// against its row when the keys were read), or the row's default when the file lacks it, and
// then returns false. Asking for a key the description does not list, or as another type, is
// a programmer error (FT_ASSERT).
bool model_key_int(const ft_model *m, const char *suffix, int64_t *out);
bool model_key_float(const ft_model *m, const char *suffix, float *out);
bool model_key_str(const ft_model *m, const char *suffix, gguf_str *out);

// Reads the keys of m->file that m->arch lists into m->hp and m->layers (allocating them),
// derives what every architecture derives, then runs the architecture's hparams hook: all of
// ft_model_load but the vocabulary and the tensors (m->arch and m->file set). ft synth reads
// the keys it wrote with it, so its tensors have the shapes the loader will expect.
bool model_read_hparams(ft_model *m, ft_err *err);

// ---- tensors

// Whether layer il of m has tensor t (il -1: a model tensor), and the size of its dim d.
bool model_layer_has(const ft_model *m, const ft_arch_tensor *t, int il);
int64_t model_dim(const ft_model *m, int il, enum ft_dim d);

// Calls fn for each tensor row of m's description and layer (-1 for a model tensor) in file
// order, the layers that do not have a row left out, until fn returns false: the trunk's
// layers (what is bound and run), or with model_for_each_file_row the MTP blocks after it too
// (what ft synth writes).
bool model_for_each_row(const ft_model *m, bool (*fn)(void *ctx, const ft_arch_tensor *t, int il), void *ctx);
bool model_for_each_file_row(const ft_model *m, bool (*fn)(void *ctx, const ft_arch_tensor *t, int il), void *ctx);

// The name of row t in layer il.
void model_tensor_name(const ft_arch_tensor *t, int il, char *buf, size_t cap);

// The MTP blocks (nextn_predict_layers: the last blocks of the file, which predict tokens further
// ahead) left out of n_layer and counted in n_layer_mtp: they are not run and their tensors stay
// unbound, so they cost no memory. The architecture lists the key. Returns false and sets *err
// when no block would be left.
bool model_mtp_layers(ft_model *m, ft_err *err);

// The checks and derived values of MODEL_KEYS_LINEAR_ATTENTION and of the experts of a hybrid
// Qwen model: the MTP blocks (model_mtp_layers) left out of n_layer, the
// experts' widths, the heads' and inner size's agreement, is_recurrent for every layer but
// each full_attention_interval-th.
bool model_linear_attention_hparams(ft_model *m, ft_err *err);

// ---- blocks: the pieces of a layer, written against the backend ops.

typedef struct attn_opts {
    bool qk_norm;     // per-head RMSNorm of Q and K before RoPE (qwen3moe, laguna)
    bool qk_norm_if_present; // each of those norms where the layer has its weights (glm4moe:
                             // GLM-4.5 has them, GLM-4.5-Air not)
    bool q_gated;     // wq doubles each head: q, then an output gate the attention is
                      // multiplied by through a sigmoid (qwen35moe)
    bool v_norm;      // per-head RMSNorm of V without a weight (gemma4); V is K's projection
                      // (before K's norm) where the layer has no attn_v
    bool post_norm;   // the attention's output normed by attn_post_norm before the residual (gemma4)
    float scale;      // applied to q.k (0: 1 / sqrt(head size))
} attn_opts;

// x += attention(norm(x)): Q/K/V (+ biases), optional Q/K (and V) norms, RoPE (the full layers'
// with the model's frequency factors where it has them), cache write, attention (sliding when
// the layer is; with the layer's sinks where it has them), optional softplus gate, output
// projection (+ its bias where the layer has one), optional post-norm. A layer that reads an
// earlier layer's cache (ft_layer.kv_from) projects, writes and rotates no K and V of its own.
void model_block_attention(const ft_model *m, ft_forward *f, int il, attn_opts o);
// x += gated DeltaNet(norm(x)) (qwen35moe's recurrent layers): the q, k, v and gate
// projections, the decay and write strength, the conv and delta rule on the sequence's state
// (ft_delta_params), a per-head RMSNorm gated by SiLU(z), the output projection.
void model_block_delta_net(const ft_model *m, ft_forward *f, int il);
// The layer of the hybrid Qwen models (qwen35moe, qwen3next): gated DeltaNet or gated
// softmax attention (Q/K norms), then the routed and shared experts.
void model_layer_hybrid_qwen(const ft_model *m, ft_forward *f, int il);
// x += experts(norm(x)) [+ shared expert, sigmoid-gated when the layer has a gate]; the router's
// and experts' biases where the layer has them, the activation hp.glu
void model_block_moe(const ft_model *m, ft_forward *f, int il);
// The next block after il with routed experts (ft_moe_params.next_layer), or -1.
int model_next_moe_block(const ft_model *m, const ft_forward *f, int il);
// x += ffn(norm(x)), a dense SiLU-gated FFN
void model_block_dense_ffn(const ft_model *m, ft_forward *f, int il);

#endif
