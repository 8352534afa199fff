// gemma4.c: Google Gemma 4, its MoE variant (Gemma-4-26B-A4B), general.architecture "gemma4".
//
// The token embeddings are scaled by sqrt(n_embd). Layers slide or not as the per-layer
// attention.sliding_window_pattern says, each kind with its own head size (key_length_swa),
// KV heads (head_count_kv per layer) and RoPE: the sliding layers' base rope.freq_base_swa
// (default 10000) over rope.dimension_count_swa dims, the full layers' NeoX RoPE divided by the
// frequency factors of rope_freqs ("proportional" RoPE: factors of 1e30 leave the pairs past the
// rotated fraction unturned). Attention: Q and K RMSNorm with weights, V RMSNorm without one (V
// is K's projection where a layer has no attn_v), scale 1, its output normed (post_attention_norm)
// before the residual. The last attention.shared_kv_layers layers have no K/V: each attends to
// the cache of the last layer of its kind before them (llama.cpp's rule: n_kv - 2 for a sliding
// layer, n_kv - 1 for a full one, which must be of that kind). FFN, every layer: a dense GELU FFN
// (ffn_norm, ffn_gate/up/down, post_ffw_norm_1; ft keeps it as the layer's shared expert) beside
// routed experts (pre_ffw_norm_2 on their input; the router on rms_norm(x) / sqrt(n_embd) *
// ffn_gate_inp.scale, softmax top-k renormalised, GELU experts, per-expert down scales where the
// file has ffn_down_exps.scale, post_ffw_norm_2), their sum normed by post_ffw_norm before the
// residual, the layer's result times layer_output_scale where the file has it. The logits are
// soft-capped by final_logit_softcapping where the file sets it. As llama.cpp's gemma4.cpp and
// llm_build_moe_ffn build it. The dense variants' per-layer token embeddings (E2B, E4B) and
// layers without experts (31B) are refused.
#include "model_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { SWA_PATTERN = 6 }; // ft synth's: 5 sliding layers, then a full one (Gemma-4-26B-A4B's)

// ft synth's frequency factors of the rotated pairs: not all 1, so a factor applied the wrong way
// shows; the unturned pairs' 1e30 is the converter's
#define ROPE_FREQ_UNTURNED 1e30f
// ft synth's Q and K norm weights: with the attention scale 1, normed heads of n values whose
// weights are about w score sum(w^2 z z') apart, a spread of w^2 sqrt(n); weights of
// sqrt(QK_SCORE / sqrt(n)) (0.39 for heads of 64, 0.23 for 512) keep it about QK_SCORE whatever
// the head size (Gemma's trained norms do this), where weights of 1 would make each softmax an
// arg-max and the model chaotic; each weight varies by a relative QK_NORM_SPREAD
#define QK_SCORE 1.2f
#define QK_NORM_SPREAD 0.3f

static int synth_pattern(const ft_synth_params *p) { return p->swa_pattern ? p->swa_pattern : SWA_PATTERN; }
static bool synth_is_swa(const ft_synth_params *p, int il) {
    int pattern = synth_pattern(p);
    return il % pattern < pattern - 1;
}
static int64_t synth_swa_layer(const ft_synth_params *p, int il) { return synth_is_swa(p, il); }
static int synth_head_swa(const ft_synth_params *p) { return p->head_dim_swa ? p->head_dim_swa : p->head_dim; }
static int64_t synth_key_length_swa(const ft_synth_params *p, int il) { return synth_head_swa(p); }
static int64_t synth_rot_swa(const ft_synth_params *p, int il) {
    return p->n_rot_swa ? p->n_rot_swa : synth_head_swa(p);
}
static int64_t synth_kv_heads(const ft_synth_params *p, int il) {
    return synth_is_swa(p, il) && p->n_head_kv_swa ? p->n_head_kv_swa : p->n_head_kv;
}
static int64_t synth_ff(const ft_synth_params *p, int il) { return p->n_ff_shexp ? p->n_ff_shexp : p->n_ff_exp; }
static bool synth_softcap(const ft_synth_params *p) { return p->final_softcap != 0; }
static bool synth_down_scale(const ft_synth_params *p) { return p->expert_down_scale; }
static bool synth_out_scale(const ft_synth_params *p) { return p->layer_out_scale; }

static bool synth_has_full(const ft_synth_params *p) {
    for (int il = 0; il < p->n_layer; il++)
        if (!synth_is_swa(p, il)) return true;
    return false;
}

// attn_v everywhere but on the full layers of a --k-eq-v model
static bool synth_has_v(const ft_synth_params *p, int il) { return !p->k_eq_v || synth_is_swa(p, il); }

static void synth_rope_freqs(const ft_synth_params *p, float *v, int64_t n, ft_rng *rng) {
    int64_t turned = (p->n_rot ? p->n_rot : p->head_dim) / 2;
    for (int64_t i = 0; i < n; i++) v[i] = i < turned ? 1.0f + 0.25f * (float)(i % 3) : ROPE_FREQ_UNTURNED;
}

static void synth_qk_norm_weights(const ft_synth_params *p, float *v, int64_t n, ft_rng *rng) {
    float w = sqrtf(QK_SCORE / sqrtf((float)n));
    ft_quant_random_row(FT_TYPE_F32, rng, QK_NORM_SPREAD, v, n);
    for (int64_t i = 0; i < n; i++) v[i] = w * (1.0f + v[i]);
}

static const ft_arch_key keys[] = {
    MODEL_KEYS_SIZES,
    // the dense FFN's width (ft: the shared expert's)
    {"feed_forward_length", FT_KEY_TYPE_U32_LAYERS, FT_KEY_REQUIRED | FT_KEY_UNIFORM, 1, 1 << 20, HP(n_ff_shexp), 0,
     FT_SYNTH_FN(synth_ff)},
    MODEL_KEY_HEAD_COUNT(FT_SYNTH(n_head)),
    // per layer (the sliding and full layers' differ)
    {"attention.head_count_kv", FT_KEY_TYPE_U32_LAYERS, FT_KEY_DERIVED, 1, 65536, LAYER(n_head_kv), 0,
     FT_SYNTH_FN(synth_kv_heads, .per_layer = true)},
    // the full layers' head size; the sliding layers' in key_length_swa
    MODEL_KEY_KEY_LENGTH,
    MODEL_KEY_VALUE_LENGTH,
    {"attention.key_length_swa", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 2, 4096, FT_KEY_NO_FIELD, 0,
     FT_SYNTH_FN(synth_key_length_swa)},
    {"attention.value_length_swa", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 2, 4096, FT_KEY_NO_FIELD, 0,
     FT_SYNTH_FN(synth_key_length_swa)},
    MODEL_KEY_RMS_EPS,
    MODEL_KEY_ROPE_FREQ_BASE,
    {"rope.freq_base_swa", FT_KEY_TYPE_F32, 0, 0, 0, FT_KEY_NO_FIELD, 10000,
     FT_SYNTH(rope_freq_base_swa, .value = 10000)},
    // the full layers' rotary dims (the converter writes their head size: proportional RoPE
    // turns fewer pairs through rope_freqs)
    {"rope.dimension_count", FT_KEY_TYPE_U32, FT_KEY_HI_HEAD_DIM | FT_KEY_DERIVED, 2, 0, HP(rope.n_rot), 0,
     FT_SYNTH(head_dim)},
    // default: the full layers' (llama.cpp's)
    {"rope.dimension_count_swa", FT_KEY_TYPE_U32, FT_KEY_DERIVED, 2, 4096, FT_KEY_NO_FIELD, 0,
     FT_SYNTH_FN(synth_rot_swa)},
    MODEL_KEY_EXPERT_COUNT,
    MODEL_KEY_EXPERT_USED_COUNT,
    {"expert_feed_forward_length", FT_KEY_TYPE_U32_LAYERS, FT_KEY_REQUIRED | FT_KEY_UNIFORM, 1, 1 << 20,
     HP(n_ff_exp), 0, FT_SYNTH(n_ff_exp)},
    {"attention.sliding_window", FT_KEY_TYPE_U32, FT_KEY_REQUIRED, 1, 1 << 26, HP(n_swa), 0,
     FT_SYNTH(n_swa, .value = 1024)},
    // one bool per layer: true slides
    {"attention.sliding_window_pattern", FT_KEY_TYPE_BOOL_LAYERS, FT_KEY_REQUIRED, 0, 0, LAYER(is_swa), 0,
     FT_SYNTH_FN(synth_swa_layer, .per_layer = true)},
    {"attention.shared_kv_layers", FT_KEY_TYPE_U32, 0, 0, 4096, FT_KEY_NO_FIELD, 0, FT_SYNTH(n_kv_shared)},
    // the dense variants' per-layer token embeddings (E2B, E4B): refused unless 0
    {"embedding_length_per_layer_input", FT_KEY_TYPE_U32, 0, 0, 1 << 20, FT_KEY_NO_FIELD, 0, FT_SYNTH_VALUE(0)},
    {"final_logit_softcapping", FT_KEY_TYPE_F32, 0, 0, 0, HP(logit_softcap), 0,
     FT_SYNTH(final_softcap, .when = synth_softcap)},
    // llama.cpp's gemma4 does not read it (Gemma 4 has none): read to refuse a file that sets one
    {"attn_logit_softcapping", FT_KEY_TYPE_F32, 0, 0, 0, FT_KEY_NO_FIELD, 0, FT_NO_SYNTH},
    MODEL_KEYS_ROPE_SCALING_READ_ONLY,
};

// ft synth's scales: embeddings of about 1 / sqrt(n_embd) (unit scale once multiplied by
// sqrt(n_embd), as Gemma's are); norms around 1 but Q's and K's (synth_qk_norm_weights); router input
// scales and per-expert down scales of a few tenths around 1, layer output scales around 0.8
// (Gemma's layer_scalar).
static const ft_arch_tensor tensors[] = {
    {"token_embd.weight", FT_LAYERS_NONE, {FT_DIM_EMBD, FT_DIM_VOCAB}, FT_WTYPE_ANY, 0, MODEL(tok_embd), FT_FAN(1.0f)},
    {"rope_freqs.weight", FT_LAYERS_NONE, {FT_DIM_HEAD_HALF}, FT_WTYPE_F32, FT_TENSOR_OPTIONAL, MODEL(rope_freqs),
     {.when = synth_has_full, .fill = synth_rope_freqs}},
    {"blk.%d.attn_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(attn_norm), FT_NORM},
    {"blk.%d.attn_q.weight", FT_LAYERS_ALL, {FT_DIM_EMBD, FT_DIM_Q}, FT_WTYPE_ANY, 0, LAYER(wq), FT_FAN(1.0f)},
    {"blk.%d.attn_k.weight", FT_LAYERS_KV, {FT_DIM_EMBD, FT_DIM_KV}, FT_WTYPE_ANY, 0, LAYER(wk), FT_FAN(1.0f)},
    {"blk.%d.attn_v.weight", FT_LAYERS_KV, {FT_DIM_EMBD, FT_DIM_KV}, FT_WTYPE_ANY, FT_TENSOR_OPTIONAL, LAYER(wv),
     FT_FAN(1.0f, .when_layer = synth_has_v)},
    {"blk.%d.attn_output.weight", FT_LAYERS_ALL, {FT_DIM_Q, FT_DIM_EMBD}, FT_WTYPE_ANY, 0, LAYER(wo), FT_FAN(1.0f)},
    {"blk.%d.attn_q_norm.weight", FT_LAYERS_ALL, {FT_DIM_HEAD}, FT_WTYPE_F32, 0, LAYER(q_norm),
     {.fill = synth_qk_norm_weights}},
    {"blk.%d.attn_k_norm.weight", FT_LAYERS_KV, {FT_DIM_HEAD}, FT_WTYPE_F32, 0, LAYER(k_norm),
     {.fill = synth_qk_norm_weights}},
    {"blk.%d.post_attention_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(attn_post_norm),
     FT_NORM},
    // the dense FFN beside the experts
    {"blk.%d.ffn_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(ffn_norm), FT_NORM},
    {"blk.%d.ffn_gate.weight", FT_LAYERS_ALL, {FT_DIM_EMBD, FT_DIM_FF_SHEXP}, FT_WTYPE_ANY, 0, LAYER(gate_shexp),
     FT_FAN(1.0f)},
    {"blk.%d.ffn_up.weight", FT_LAYERS_ALL, {FT_DIM_EMBD, FT_DIM_FF_SHEXP}, FT_WTYPE_ANY, 0, LAYER(up_shexp),
     FT_FAN(1.0f)},
    {"blk.%d.ffn_down.weight", FT_LAYERS_ALL, {FT_DIM_FF_SHEXP, FT_DIM_EMBD}, FT_WTYPE_ANY, 0, LAYER(down_shexp),
     FT_FAN(1.0f)},
    {"blk.%d.post_ffw_norm_1.weight", FT_LAYERS_MOE, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(ffn_post_norm_1), FT_NORM},
    // the routed experts
    {"blk.%d.pre_ffw_norm_2.weight", FT_LAYERS_MOE, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(ffn_pre_norm_2), FT_NORM},
    {"blk.%d.ffn_gate_inp.scale", FT_LAYERS_MOE, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(router_in_scale),
     FT_STD(0.3f, .mean = 1.0f)},
    // (ft synth: the router's input is rms_norm(x) / sqrt(n_embd), so weights of unit scale give
    // logits a few units apart, as MODEL_TENSORS_ROUTED_EXPERTS_GATE_UP's router does on x)
    {"blk.%d.ffn_gate_inp.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_EXPERT}, FT_WTYPE_ANY_F32, 0, LAYER(router),
     FT_STD(1.5f)},
    {"blk.%d.ffn_gate_up_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP_2, FT_DIM_EXPERT}, FT_WTYPE_EXPERT,
     FT_TENSOR_OPTIONAL, LAYER(gate_up_exps), FT_FAN(1.0f, .when = synth_fused_gate_up)},
    {"blk.%d.ffn_gate_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP, FT_DIM_EXPERT}, FT_WTYPE_EXPERT,
     FT_TENSOR_FUSED_GATE, LAYER(gate_exps), FT_FAN(1.0f, .when = synth_split_gate_up)},
    {"blk.%d.ffn_up_exps.weight", FT_LAYERS_MOE, {FT_DIM_EMBD, FT_DIM_FF_EXP, FT_DIM_EXPERT}, FT_WTYPE_EXPERT,
     FT_TENSOR_FUSED_UP, LAYER(up_exps), FT_FAN(1.0f, .when = synth_split_gate_up)},
    {"blk.%d.ffn_down_exps.weight", FT_LAYERS_MOE, {FT_DIM_FF_EXP, FT_DIM_EMBD, FT_DIM_EXPERT}, FT_WTYPE_EXPERT_DOWN,
     0, LAYER(down_exps), FT_FAN(1.0f)},
    {"blk.%d.ffn_down_exps.scale", FT_LAYERS_MOE, {FT_DIM_EXPERT}, FT_WTYPE_F32, FT_TENSOR_OPTIONAL,
     LAYER(down_exps_s), FT_STD(0.3f, .mean = 1.0f, .when = synth_down_scale)},
    {"blk.%d.post_ffw_norm_2.weight", FT_LAYERS_MOE, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(ffn_post_norm_2), FT_NORM},
    {"blk.%d.post_ffw_norm.weight", FT_LAYERS_ALL, {FT_DIM_EMBD}, FT_WTYPE_F32, 0, LAYER(ffn_post_norm), FT_NORM},
    {"blk.%d.layer_output_scale.weight", FT_LAYERS_ALL, {FT_DIM_ONE}, FT_WTYPE_F32, FT_TENSOR_OPTIONAL,
     LAYER(out_scale), FT_STD(0.2f, .mean = 0.8f, .when = synth_out_scale)},
    MODEL_TENSOR_OUTPUT_NORM,
    // (logits spread by 2, not the others' 3: the norms after every block carry a code that a
    // requantized activation flips on a rounding-level difference further than elsewhere)
    MODEL_TENSOR_OUTPUT(FT_FAN_DIV(2.0f)),
};

// Weight scales llama.cpp multiplies a matmul's result by where a file has them and ft does not
// compute (NVFP4 files' per-tensor and per-expert scales): such a file is refused rather than run
// without them. (Their input_scale tensors llama.cpp loads and never applies.)
static const char *const unread_scales[] = {
    "attn_q.scale", "attn_k.scale", "attn_v.scale", "attn_output.scale", "ffn_gate.scale",
    "ffn_up.scale", "ffn_down.scale", "ffn_gate_exps.scale", "ffn_up_exps.scale",
};

static bool refuse_unread(const ft_model *m, ft_err *err) {
    if (gguf_find_tensor(m->file, "per_layer_token_embd.weight"))
        return ft_err_set(err, "tensor per_layer_token_embd.weight: per-layer token embeddings (Gemma 4 E2B/E4B) "
                               "are not supported (ft runs the MoE Gemma-4-26B-A4B)");
    for (int il = 0; il < m->hp.n_layer; il++)
        for (size_t i = 0; i < FT_ARRAY_LEN(unread_scales); i++) {
            char name[128];
            snprintf(name, sizeof(name), "blk.%d.%s", il, unread_scales[i]);
            if (gguf_find_tensor(m->file, name))
                return ft_err_set(err, "tensor %s: weight scales (NVFP4) are not supported", name);
        }
    return true;
}

// Layer il's KV source under attention.shared_kv_layers: llama.cpp's rule, checked.
static bool shared_kv(ft_model *m, ft_err *err) {
    int64_t shared;
    model_key_int(m, "attention.shared_kv_layers", &shared);
    int n = m->hp.n_layer, first = n - (int)shared;
    if (shared == 0) return true;
    if (first < 2)
        return ft_err_set(err, "key gemma4.attention.shared_kv_layers %lld: at least two layers must keep their own KV "
                               "(%d layers)", (long long)shared, n);
    for (int il = first; il < n; il++) {
        ft_layer *L = &m->layers[il];
        int src = first - (L->is_swa ? 2 : 1);
        const ft_layer *S = &m->layers[src];
        if (S->is_swa != L->is_swa)
            return ft_err_set(err, "key gemma4.attention.shared_kv_layers %lld: layer %d (%s) would read the KV of layer "
                                   "%d (%s), as llama.cpp's rule says; the two must be of one kind", (long long)shared,
                              il, L->is_swa ? "sliding" : "full", src, S->is_swa ? "sliding" : "full");
        if (S->n_head_kv != L->n_head_kv)
            return ft_err_set(err, "key gemma4.attention.head_count_kv: layer %d has %d KV heads but reads the KV of "
                                   "layer %d, which has %d", il, L->n_head_kv, src, S->n_head_kv);
        L->kv_from = src;
    }
    return true;
}

// The sliding layers' shapes and RoPE, the full layers' RoPE, shared KV, the scales; what is
// refused.
static bool hparams(ft_model *m, ft_err *err) {
    ft_hparams *hp = &m->hp;
    int64_t per_layer, k_swa, v_swa, rot_swa;
    float cap, base_swa;
    gguf_str scaling = {"linear", 6};
    model_key_int(m, "embedding_length_per_layer_input", &per_layer);
    if (per_layer != 0)
        return ft_err_set(err, "key gemma4.embedding_length_per_layer_input = %lld: per-layer token embeddings "
                               "(Gemma 4 E2B/E4B) are not supported (ft runs the MoE Gemma-4-26B-A4B)",
                          (long long)per_layer);
    if (model_key_float(m, "attn_logit_softcapping", &cap) && cap != 0)
        return ft_err_set(err, "key gemma4.attn_logit_softcapping = %g: llama.cpp's gemma4 applies no attention "
                               "soft-capping and ft will not guess what the file means", (double)cap);
    if (model_key_str(m, "rope.scaling.type", &scaling) && gguf_str_eq(scaling, "yarn"))
        return ft_err_set(err, "key gemma4.rope.scaling.type = yarn: not supported for gemma4");
    if (!(hp->logit_softcap >= 0)) return ft_err_set(err, "key gemma4.final_logit_softcapping: negative");
    model_key_int(m, "attention.key_length_swa", &k_swa);
    model_key_int(m, "attention.value_length_swa", &v_swa);
    if (k_swa != v_swa || k_swa % 2)
        return ft_err_set(err, "key gemma4.attention.value_length_swa %lld: must equal key_length_swa %lld (even)",
                          (long long)v_swa, (long long)k_swa);
    // (absent: the full layers' rotary dims, as llama.cpp defaults it)
    if (!model_key_int(m, "rope.dimension_count_swa", &rot_swa)) rot_swa = hp->rope.n_rot;
    if (rot_swa % 2 || rot_swa > k_swa)
        return ft_err_set(err, "key gemma4.rope.dimension_count_swa %lld: must be even and at most key_length_swa %lld",
                          (long long)rot_swa, (long long)k_swa);
    model_key_float(m, "rope.freq_base_swa", &base_swa);
    if (!(base_swa > 0)) return ft_err_set(err, "key gemma4.rope.freq_base_swa: must be positive");
    for (int il = 0; il < hp->n_layer; il++)
        if (m->layers[il].is_swa) m->layers[il].head_dim = (int)k_swa;
    // the sliding layers: their own base and dims, no context scaling (llama.cpp's freq_scale_swa)
    hp->rope_swa = hp->rope;
    hp->rope_swa.n_rot = (int)rot_swa;
    hp->rope_swa.freq_base = base_swa;
    hp->rope_swa.freq_scale = 1.0f;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    return refuse_unread(m, err) && shared_kv(m, err);
}

static bool synth_check(const ft_synth_params *p, ft_err *err) {
    int hs = synth_head_swa(p);
    if (p->n_head_kv_swa && p->n_head % p->n_head_kv_swa)
        return ft_err_set(err, "--heads %d is not a multiple of the sliding layers' KV heads %d", p->n_head,
                          p->n_head_kv_swa);
    if (hs % 2 || (p->n_rot_swa && (p->n_rot_swa % 2 || p->n_rot_swa > hs)))
        return ft_err_set(err, "the sliding layers' head size %d must be even, their rotary dims even and at most it",
                          hs);
    if (p->n_kv_shared < 0 || p->n_kv_shared > p->n_layer - 2)
        return ft_err_set(err, "--kv-shared %d: at least two of the %d layers must keep their own KV", p->n_kv_shared,
                          p->n_layer);
    return true;
}

// The dense FFN and the routed experts side by side, each normed before and after, their sum
// normed into the residual (buffers: xn and out2 the inputs, out the experts', out2 the FFN's).
static void ffn_block(const ft_model *m, ft_forward *f, int il) {
    const ft_hparams *hp = &m->hp;
    const ft_layer *L = &f->w->layers[il];
    ft_backend *be = f->be;
    const ft_backend_ops *ops = be->ops;
    int n = f->n_tok, E = hp->n_embd;
    size_t ne = (size_t)n * E;
    float eps = hp->rms_eps;

    // the experts: their input normed; the router's input rms_norm(x) * scale / sqrt(n_embd)
    ops->rms_norm(be, f->x, &L->ffn_pre_norm_2, f->xn, n, E, eps);
    ops->rms_norm(be, f->x, &L->router_in_scale, f->out2, n, E, eps);
    ops->scale(be, f->out2, ne, 1.0f / sqrtf((float)E));
    int next = model_next_moe_block(m, f, il); // (the offload's prefetch guesses its experts)
    ft_moe_params mp = {
        .layer = il, .router = &L->router, .gate_exps = &L->gate_exps, .up_exps = &L->up_exps,
        .down_exps = &L->down_exps, .down_scale = &L->down_exps_s, .router_x = f->out2, .act = hp->glu,
        .n_expert = hp->n_expert, .n_expert_used = hp->n_expert_used, .gating = hp->gating, .norm_w = hp->norm_w,
        .w_scale = hp->w_scale, .place = moe_placement_expert, .place_ctx = f->place,
        .next_layer = next, .next_router = next >= 0 ? &f->w->layers[next].router : NULL,
    };
    ops->moe_ffn(be, &mp, f->xn, f->out, n);
    ops->rms_norm(be, f->out, &L->ffn_post_norm_2, f->out, n, E, eps);

    // the dense GELU FFN
    ops->rms_norm(be, f->x, &L->ffn_norm, f->xn, n, E, eps);
    ops->ffn(be, &L->gate_shexp, &L->up_shexp, &L->down_shexp, f->xn, f->out2, n, FT_GLU_GELU);
    ops->rms_norm(be, f->out2, &L->ffn_post_norm_1, f->out2, n, E, eps);

    ops->add(be, f->out, f->out2, ne);
    ops->rms_norm(be, f->out, &L->ffn_post_norm, f->out, n, E, eps);
    ops->add(be, f->x, f->out, ne);
}

static void layer(const ft_model *m, ft_forward *f, int il) {
    model_block_attention(m, f, il, (attn_opts){.qk_norm = true, .v_norm = true, .post_norm = true, .scale = 1.0f});
    ffn_block(m, f, il);
    // the scale is the model's own f32 in host memory (the layer code's constant, wherever the
    // weights were placed)
    const ft_tensor *s = &m->layers[il].out_scale;
    if (ft_tensor_present(s)) f->be->ops->scale(f->be, f->x, (size_t)f->n_tok * m->hp.n_embd, *(const float *)s->data);
}

const ft_arch ft_arch_gemma4 = {
    .name = "gemma4",
    .note = "the MoE Gemma-4-26B-A4B",
    .keys = keys,
    .n_keys = FT_ARRAY_LEN(keys),
    .tensors = tensors,
    .n_tensors = FT_ARRAY_LEN(tensors),
    .fixed = {.rope.neox = true, .gating = FT_GATING_SOFTMAX, .glu = FT_GLU_GELU, .norm_w = true},
    // the embeddings' scale, the V norm and the router's own input, whatever the file holds
    .op_features = FT_OPS_SCALE_SOFTCAP | FT_OPS_NORM_NO_WEIGHT | FT_OPS_MOE_ROUTER_INPUT,
    .hparams = hparams,
    .synth_check = synth_check,
    .layer = layer,
};
