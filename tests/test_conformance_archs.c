// test_conformance_archs.c: qwen2moe and llama (Mixtral) against llama.cpp.
#include "test_conformance.h"
#include "test.h"

TEST(conformance_qwen2moe_bias_shared_expert) {
    ft_synth_params p = conf_small_params("qwen2moe");
    p.qkv_bias = true;
    p.n_ff_shexp = 512;
    p.n_expert_types = 2;
    p.expert_types[0] = FT_TYPE_Q4_K;
    p.expert_types[1] = FT_TYPE_Q5_0;
    conf_opts o = conf_default_opts();
    conf_check("qwen2moe_bias", &p, &o);
}

TEST(conformance_qwen2moe_kv_q8_0) {
    ft_synth_params p = conf_small_params("qwen2moe");
    p.expert_types[0] = FT_TYPE_Q6_K;
    conf_opts o = conf_default_opts();
    o.kv_type = FT_TYPE_Q8_0;
    conf_check("qwen2moe_kv_q8_0", &p, &o);
}

TEST(conformance_llama_mixtral) {
    ft_synth_params p = conf_small_params("llama");
    p.rope_freq_base = 1000000.0f;
    p.n_expert_types = 2;
    p.expert_types[0] = FT_TYPE_Q4_0;
    p.expert_types[1] = FT_TYPE_Q3_K;
    conf_opts o = conf_default_opts();
    conf_check("llama_mixtral", &p, &o);
}

TEST(conformance_llama_mixtral_kv_q8_0) {
    ft_synth_params p = conf_small_params("llama");
    p.expert_types[0] = FT_TYPE_IQ4_XS;
    conf_opts o = conf_default_opts();
    o.kv_type = FT_TYPE_Q8_0;
    conf_check("llama_mixtral_kv_q8_0", &p, &o);
}

// laguna, XS.2-like: one leading dense layer, sliding window of 16 on 3 of 4 layers with their
// own head count, base and rotary dims, YaRN and partial rotary on full layers, per-head gate.
// Prompts of 40 tokens and 32 generated ones run well past the window.
static ft_synth_params laguna_params(void) {
    ft_synth_params p = conf_small_params("laguna");
    p.n_layer = 4;
    p.n_dense_lead = 1;
    p.n_swa = 16;
    p.n_head_swa = 8;
    p.n_rot = 32;
    p.n_rot_swa = 64;
    p.rope_freq_base = 500000.0f;
    p.rope_freq_base_swa = 10000.0f;
    p.yarn_factor = 4.0f;
    p.n_ff_shexp = 128;
    return p;
}

// With an f16 cache, two layers: a full dense one (YaRN, partial rotary, 4 heads) and a
// sliding-window MoE one (8 heads). llama.cpp's f16 attention keeps its running sums in f16
// (and on CPUs with AVX512-FP16 multiplies in f16 too), so f16 runs drift from it with depth
// and length; the 4-layer model is checked with the q8_0 cache, where the two agree exactly.
TEST(conformance_laguna_swa_yarn) {
    ft_synth_params p = laguna_params();
    p.n_layer = 2;
    p.n_expert_types = 2;
    p.expert_types[0] = FT_TYPE_Q4_K; // (layer 0 is dense)
    p.expert_types[1] = FT_TYPE_BF16;
    conf_opts o = conf_default_opts();
    conf_check("laguna_swa_yarn", &p, &o);
}

TEST(conformance_laguna_gate_per_element_kv_q8_0) {
    ft_synth_params p = laguna_params();
    p.gate_per_element = true;
    p.expert_types[0] = FT_TYPE_Q5_K;
    conf_opts o = conf_default_opts();
    o.kv_type = FT_TYPE_Q8_0;
    conf_check("laguna_gate_elem_kv_q8_0", &p, &o);
}
