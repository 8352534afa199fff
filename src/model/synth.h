// synth: synthetic models with random weights, written as GGUF files ft and llama.cpp load.
//
// The tests, the benchmarks and the demo model are all synthetic: the shape of a real model
// (an architecture's tensor names, hyper-parameter keys and tokenizer) with random weights of
// any type per tensor group, expert types chosen per layer and per bank. Weight scales are set
// so activations keep unit scale through the layers and next-token distributions are neither
// flat nor degenerate. The same parameters and seed always give the same bytes.
#ifndef FT_MODEL_SYNTH_H
#define FT_MODEL_SYNTH_H

#include "../quant/quant.h"
#include "../util/util.h"

#define FT_SYNTH_MAX_LAYERS 256
#define FT_SYNTH_MAX_MTP 4

typedef struct ft_synth_params {
    const char *arch;         // an architecture ft runs (ft_arch_names); first: offset 0 is "no field"
    const char *name;         // general.name
    int n_layer;
    int n_embd;
    int n_head;
    int n_head_kv;
    int head_dim;
    int n_expert;
    int n_expert_used;
    int n_ff_exp;             // width of one expert's FFN
    int n_ctx_train;
    float rope_freq_base;
    float rms_eps;
    enum ft_type dense_type;  // embedding, attention and output matrices
    // Expert types per layer: entry L is layer L's; a shorter list repeats its last entry.
    int n_expert_types;
    enum ft_type expert_types[FT_SYNTH_MAX_LAYERS];      // gate and up banks
    int n_expert_down_types;                             // 0: down banks as gate/up
    enum ft_type expert_down_types[FT_SYNTH_MAX_LAYERS];
    // Options of the other architectures (0: the architecture's default or "none")
    int n_ff_shexp;           // shared-expert width (qwen2moe, laguna; default n_ff_exp; glm4moe:
                              // a multiple of n_ff_exp, written as expert_shared_count)
    bool qkv_bias;            // qwen2moe, glm4moe, gpt-oss: Q/K/V biases
    bool qk_norm;             // glm4moe: per-head Q/K RMSNorm (GLM-4.5 has them, GLM-4.5-Air not)
    int n_dense_lead;         // laguna, glm4moe: leading layers with a dense FFN
    int n_ff_dense;           // laguna, glm4moe: dense FFN width (default 2 * n_ff_exp)
    int n_swa;                // laguna: sliding window (0: all layers full attention); gpt-oss:
                              // its sliding window (0: 128); gemma4 (0: 1024)
    int swa_pattern;          // gpt-oss, gemma4: every this many layers the last one has full
                              // attention, the others slide (gpt-oss: attention.sliding_window_pattern,
                              // 0: not written, llama.cpp's 2; gemma4: written per layer, 0: 6)
    int n_head_swa;           // laguna: query heads of sliding-window layers (default n_head)
    int n_rot;                // rotary dims of full layers (default head_dim; gemma4: the pairs past
                              // n_rot / 2 get frequency factor 1e30 in rope_freqs, unturned)
    int n_rot_swa;            // laguna, gemma4: rotary dims of sliding-window layers (default their
                              // head size)
    float rope_freq_base_swa; // laguna, gemma4: RoPE base of sliding-window layers (default 10000);
                              // gpt-oss: (0: not written, the full layers' base)
    float yarn_factor;        // laguna: YaRN context-extension factor on full layers, gpt-oss: on
                              // all layers (0: none)
    bool gate_per_element;    // laguna: output gate per element (else per head)
    float expert_weights_scale; // laguna, glm4moe: routed weights scale (default 2.5)
    // glm4moe: multi-token-prediction blocks after the n_layer trunk (nextn_predict_layers), with
    // every tensor llama.cpp's loader expects of them; ft neither binds nor runs them
    int n_mtp;
    // glm4moe: rope.dimension_sections (M-RoPE of GLM-4.6V), in rotary pairs; all 0: none written
    int rope_sections[4];
    // qwen35moe's gated DeltaNet layers (0: the defaults in brackets)
    int ssm_d_conv;           // the conv's taps [4]
    int ssm_n_k_heads;        // key heads [2]
    int ssm_n_v_heads;        // value heads, a multiple of the key heads [4]
    int ssm_head_dim;         // their size, the state's [head_dim]
    int full_attn_interval;   // every this many layers one has softmax attention [4]
    // qwen35moe, qwen3next, gemma4: each layer's gate and up experts in one ffn_gate_up_exps
    // tensor (llama.cpp's converter with --fuse-gate-up-exps) instead of ffn_gate_exps and
    // ffn_up_exps
    bool fused_gate_up;
    // gemma4 (0: the defaults in brackets; n_ff_shexp is the width of its dense FFN beside the
    // experts, feed_forward_length [n_ff_exp])
    int head_dim_swa;         // head size of the sliding-window layers [head_dim]
    int n_head_kv_swa;        // their KV heads [n_head_kv]
    int n_kv_shared;          // the last this many layers attend to an earlier layer's KV [0]
    float final_softcap;      // final_logit_softcapping [none]
    bool k_eq_v;              // full layers without attn_v: V is K's projection
    bool expert_down_scale;   // per-expert down scales (ffn_down_exps.scale)
    bool layer_out_scale;     // each layer's output scale (layer_output_scale)
    const char *vocab_from;   // GGUF whose tokenizer.* keys are copied, or NULL: built-in vocab
    uint64_t seed;
} ft_synth_params;

// The demo model's shape: a small qwen3moe with the built-in vocabulary. The other
// architectures' options are 0 (their defaults).
ft_synth_params ft_synth_default_params(void);

// Writes the model to path. Returns false and sets *err on an invalid combination (a row
// length not divisible by a type's block size, an unknown architecture, a vocabulary file
// without a tokenizer) or an I/O error. Progress goes to the log.
bool ft_synth_write(const ft_synth_params *p, const char *path, ft_err *err);

// Whether the architecture has leading dense layers (n_dense_lead, n_ff_dense apply); false
// for an unknown one.
bool ft_synth_has_dense_layers(const char *arch);

// Whether the architecture has linear-attention layers (full_attn_interval and ssm_* apply);
// false for an unknown one.
bool ft_synth_has_linear_attention(const char *arch);

// Whether the architecture can hold gate and up experts fused (fused_gate_up applies); false
// for an unknown one.
bool ft_synth_has_fused_gate_up(const char *arch);

// Whether the architecture's files may hold MTP blocks ft synth writes (n_mtp applies); false
// for an unknown one.
bool ft_synth_has_mtp(const char *arch);

// Parses a comma-separated type list ("q4_K,q4_K,bf16") into types (at most max). Returns the
// count, or -1 and sets *err naming the bad entry.
int ft_synth_parse_types(const char *list, enum ft_type *types, int max, ft_err *err);

#endif
