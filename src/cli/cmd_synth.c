// cmd_synth.c: `ft synth OUT.gguf --arch ARCH [...]`, a model with random weights.
#include "cli.h"
#include "args.h"
#include "../model/model.h"
#include "../model/synth.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void synth_usage(FILE *out) {
    ft_synth_params d = ft_synth_default_params();
    fprintf(out,
            "usage: ft synth OUT.gguf [options]\n"
            "Writes a model with random weights (for tests, benchmarks and the demo).\n\n"
            "  --arch ARCH                architecture (default %s)\n"
            "                             known: %s\n"
            "  --layers N                 layers (default %d)\n"
            "  --embd N                   embedding width (default %d)\n"
            "  --heads N                  query heads (default %d)\n"
            "  --kv-heads N               key/value heads (default %d)\n"
            "  --head-dim N               head dimension (default %d)\n"
            "  --experts N                experts per layer (default %d)\n"
            "  --top-k N                  experts used per token (default %d)\n"
            "  --ff N                     expert FFN width (default %d)\n"
            "  --shared-ff N              shared-expert FFN width, for the architectures that have\n"
            "                             one (default --ff; glm4moe: a multiple of --ff; gemma4: its\n"
            "                             dense FFN beside the experts)\n"
            "  --rot N                    rotary dims of each attention head (default --head-dim;\n"
            "                             gemma4: of the full layers, through rope_freqs)\n"
            "  --ctx N                    training context length (default %d)\n"
            "  --qkv-bias                 Q/K/V biases (qwen2moe, glm4moe, gpt-oss)\n"
            "  --qk-norm                  per-head Q/K RMSNorm (glm4moe: GLM-4.5 has them, Air not)\n"
            "  --mtp N                    N multi-token-prediction blocks after the layers\n"
            "                             (nextn_predict_layers), which ft does not run (glm4moe)\n"
            "  --rope-sections A,B,C,D    M-RoPE sections in rotary pairs (glm4moe, as GLM-4.6V)\n"
            "  --dense-lead N             leading layers with a dense FFN (default 0), for the\n"
            "                             architectures that have them (laguna, glm4moe)\n"
            "  --dense-ff N               their FFN width (default 2 x --ff)\n"
            "  --full-attn-interval N     every N-th layer has softmax attention, the others linear\n"
            "                             attention (default 4), for qwen35moe; with its\n"
            "  --ssm-k-heads N            key heads of the linear attention (default 2)\n"
            "  --ssm-v-heads N            value heads, a multiple of the key heads (default 4)\n"
            "  --ssm-head-dim N           their size (default --head-dim)\n"
            "  --ssm-conv N               taps of its convolution (default 4)\n"
            "  --fused-gate-up            each layer's gate and up experts in one tensor,\n"
            "                             ffn_gate_up_exps (as llama.cpp's converter writes with\n"
            "                             --fuse-gate-up-exps), for qwen35moe, qwen3next and gemma4\n"
            "  --rope-base F              RoPE base (default %g)\n"
            "  --swa N                    sliding window of the sliding layers, for laguna (default:\n"
            "                             none), gpt-oss (default 128) and gemma4 (default 1024)\n"
            "  --swa-pattern N            gpt-oss, gemma4: of every N layers all but the last slide\n"
            "                             (gpt-oss: default not written, llama.cpp's 2; gemma4: 6)\n"
            "  --swa-rope-base F          RoPE base of the sliding layers (laguna, gemma4: default\n"
            "                             10000; gpt-oss: default not written, --rope-base)\n"
            "  --swa-rot N                rotary dims of the sliding layers (laguna, gemma4; default\n"
            "                             their head size)\n"
            "  --swa-head-dim N           gemma4: head size of the sliding layers (default --head-dim)\n"
            "  --swa-kv-heads N           gemma4: their KV heads (default --kv-heads)\n"
            "  --kv-shared N              gemma4: the last N layers attend to an earlier layer's KV\n"
            "                             (attention.shared_kv_layers; default 0)\n"
            "  --final-softcap F          gemma4: final_logit_softcapping (default: none)\n"
            "  --k-eq-v                   gemma4: the full layers have no attn_v (V is K's projection)\n"
            "  --expert-down-scale        gemma4: per-expert down scales (ffn_down_exps.scale)\n"
            "  --layer-out-scale          gemma4: each layer's output scale (layer_output_scale)\n"
            "  --yarn F                   YaRN context extension by F (laguna: full layers; gpt-oss:\n"
            "                             every layer) from a training context of --ctx / F (default:\n"
            "                             none)\n"
            "  --expert-weights-scale F   routed weights scaled by F (laguna, glm4moe; default 2.5)\n"
            "  --dense-type T             embedding/attention/output type (default %s)\n"
            "  --expert-types T[,T...]    gate/up expert type per layer; the last repeats (default %s)\n"
            "  --expert-down-types T[,...] down expert type per layer (default: as gate/up)\n"
            "  --vocab-from FILE.gguf     copy the tokenizer of FILE (default: built-in vocabulary)\n"
            "  --name NAME                general.name\n"
            "  --seed S                   random seed (default %llu)\n",
            d.arch, ft_arch_names(), d.n_layer, d.n_embd, d.n_head, d.n_head_kv, d.head_dim, d.n_expert,
            d.n_expert_used, d.n_ff_exp, d.n_ctx_train, d.rope_freq_base, ft_type_name(d.dense_type),
            ft_type_name(d.expert_types[0]), (unsigned long long)d.seed);
}

int cmd_synth(int argc, char **argv) {
    ft_synth_params p = ft_synth_default_params();
    const char *out = NULL, *types = NULL, *down_types = NULL, *dense = NULL, *sections = NULL;
    bool bad = false;
    int64_t v;
    double f;
    ft_err err = {{0}};
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i];
        if (args_flag(argv, i, "-h|--help")) {
            synth_usage(stdout);
            return FT_EXIT_OK;
        }
#define INT_OPT(flag, field, lo, hi)                                      \
    if (args_int(argc, argv, &i, flag, lo, hi, &v, &bad)) {               \
        p.field = (int)v;                                                 \
        continue;                                                         \
    }
        INT_OPT("--layers", n_layer, 1, FT_SYNTH_MAX_LAYERS)
        INT_OPT("--embd", n_embd, 1, 1 << 20)
        INT_OPT("--heads", n_head, 1, 4096)
        INT_OPT("--kv-heads", n_head_kv, 1, 4096)
        INT_OPT("--head-dim", head_dim, 1, 4096)
        INT_OPT("--experts", n_expert, 1, 1 << 16)
        INT_OPT("--top-k", n_expert_used, 1, 1 << 16)
        INT_OPT("--ff", n_ff_exp, 1, 1 << 20)
        INT_OPT("--shared-ff", n_ff_shexp, 1, 1 << 20)
        INT_OPT("--rot", n_rot, 2, 4096)
        INT_OPT("--ctx", n_ctx_train, 1, 1 << 24)
        INT_OPT("--dense-lead", n_dense_lead, 0, FT_SYNTH_MAX_LAYERS)
        INT_OPT("--dense-ff", n_ff_dense, 1, 1 << 20)
        INT_OPT("--full-attn-interval", full_attn_interval, 1, FT_SYNTH_MAX_LAYERS)
        INT_OPT("--ssm-k-heads", ssm_n_k_heads, 1, 4096)
        INT_OPT("--ssm-v-heads", ssm_n_v_heads, 1, 4096)
        INT_OPT("--ssm-head-dim", ssm_head_dim, 2, 4096)
        INT_OPT("--ssm-conv", ssm_d_conv, 1, 64)
        INT_OPT("--mtp", n_mtp, 0, FT_SYNTH_MAX_MTP)
        INT_OPT("--swa", n_swa, 1, 1 << 24)
        INT_OPT("--swa-pattern", swa_pattern, 1, FT_SYNTH_MAX_LAYERS)
        INT_OPT("--swa-rot", n_rot_swa, 2, 4096)
        INT_OPT("--swa-head-dim", head_dim_swa, 2, 4096)
        INT_OPT("--swa-kv-heads", n_head_kv_swa, 1, 4096)
        INT_OPT("--kv-shared", n_kv_shared, 0, FT_SYNTH_MAX_LAYERS)
#undef INT_OPT
#define FLOAT_OPT(flag, field, lo)                                                  \
    if (args_float(argc, argv, &i, flag, &f, &bad)) {                                \
        if (bad) continue;                                                          \
        if (!(f > lo) || !isfinite(f)) {                                            \
            fprintf(stderr, "ft synth: %s must be a finite number above %g\n", flag, (double)lo); \
            return FT_EXIT_USAGE;                                                   \
        }                                                                           \
        p.field = (float)f;                                                         \
        continue;                                                                   \
    }
        FLOAT_OPT("--rope-base", rope_freq_base, 0)
        FLOAT_OPT("--swa-rope-base", rope_freq_base_swa, 0)
        FLOAT_OPT("--yarn", yarn_factor, 1)
        FLOAT_OPT("--expert-weights-scale", expert_weights_scale, 0)
        FLOAT_OPT("--final-softcap", final_softcap, 0)
#undef FLOAT_OPT
        if (args_flag(argv, i, "--fused-gate-up")) {
            p.fused_gate_up = true;
            continue;
        }
        if (args_flag(argv, i, "--qkv-bias")) {
            p.qkv_bias = true;
            continue;
        }
        if (args_flag(argv, i, "--qk-norm")) {
            p.qk_norm = true;
            continue;
        }
        if (args_flag(argv, i, "--k-eq-v")) {
            p.k_eq_v = true;
            continue;
        }
        if (args_flag(argv, i, "--expert-down-scale")) {
            p.expert_down_scale = true;
            continue;
        }
        if (args_flag(argv, i, "--layer-out-scale")) {
            p.layer_out_scale = true;
            continue;
        }
        if (args_int(argc, argv, &i, "--seed", 0, INT64_MAX, &v, &bad)) {
            p.seed = (uint64_t)v;
            continue;
        }
        if (args_str(argc, argv, &i, "--arch", &p.arch, &bad) ||
            args_str(argc, argv, &i, "--name", &p.name, &bad) ||
            args_str(argc, argv, &i, "--dense-type", &dense, &bad) ||
            args_str(argc, argv, &i, "--expert-types", &types, &bad) ||
            args_str(argc, argv, &i, "--expert-down-types", &down_types, &bad) ||
            args_str(argc, argv, &i, "--vocab-from", &p.vocab_from, &bad) ||
            args_str(argc, argv, &i, "--rope-sections", &sections, &bad))
            continue;
        if (a[0] == '-' || out) {
            fprintf(stderr, "ft synth: unexpected argument '%s' (see ft synth --help)\n", a);
            return FT_EXIT_USAGE;
        }
        out = a;
    }
    if (bad) return FT_EXIT_USAGE;
    if (!out) {
        synth_usage(stderr);
        return FT_EXIT_USAGE;
    }
    if ((p.n_dense_lead || p.n_ff_dense) && !ft_synth_has_dense_layers(p.arch)) {
        fprintf(stderr, "ft synth: --dense-lead and --dense-ff are for architectures with dense layers (%s has none)\n",
                p.arch);
        return FT_EXIT_USAGE;
    }
    bool gptoss = !strcmp(p.arch, "gpt-oss"), laguna = !strcmp(p.arch, "laguna"), gemma4 = !strcmp(p.arch, "gemma4");
    if (p.swa_pattern && !gptoss && !gemma4) {
        fprintf(stderr, "ft synth: --swa-pattern is for gpt-oss and gemma4\n");
        return FT_EXIT_USAGE;
    }
    if ((p.n_swa || p.rope_freq_base_swa) && !gptoss && !laguna && !gemma4) {
        fprintf(stderr, "ft synth: --swa and --swa-rope-base are for laguna, gpt-oss and gemma4\n");
        return FT_EXIT_USAGE;
    }
    if (p.yarn_factor && !gptoss && !laguna) {
        fprintf(stderr, "ft synth: --yarn is for laguna and gpt-oss\n");
        return FT_EXIT_USAGE;
    }
    if (p.n_rot_swa && !laguna && !gemma4) {
        fprintf(stderr, "ft synth: --swa-rot is for laguna and gemma4\n");
        return FT_EXIT_USAGE;
    }
    if ((p.head_dim_swa || p.n_head_kv_swa || p.n_kv_shared || p.final_softcap || p.k_eq_v || p.expert_down_scale ||
         p.layer_out_scale) && !gemma4) {
        fprintf(stderr, "ft synth: --swa-head-dim, --swa-kv-heads, --kv-shared, --final-softcap, --k-eq-v, "
                        "--expert-down-scale and --layer-out-scale are for gemma4\n");
        return FT_EXIT_USAGE;
    }
    if (p.expert_weights_scale && !laguna && strcmp(p.arch, "glm4moe") != 0) {
        fprintf(stderr, "ft synth: --expert-weights-scale is for laguna and glm4moe\n");
        return FT_EXIT_USAGE;
    }
    if (p.qkv_bias && !gptoss && strcmp(p.arch, "qwen2moe") != 0 && strcmp(p.arch, "glm4moe") != 0) {
        fprintf(stderr, "ft synth: --qkv-bias is for qwen2moe, glm4moe and gpt-oss\n");
        return FT_EXIT_USAGE;
    }
    if (p.fused_gate_up && !ft_synth_has_fused_gate_up(p.arch)) {
        fprintf(stderr, "ft synth: --fused-gate-up is for architectures whose experts may fuse gate and up "
                        "(%s's do not)\n", p.arch);
        return FT_EXIT_USAGE;
    }
    if (sections) {
        int *r = p.rope_sections, n = 0;
        if (sscanf(sections, "%d,%d,%d,%d%n", &r[0], &r[1], &r[2], &r[3], &n) != 4 || sections[n] || r[0] < 0 ||
            r[1] < 0 || r[2] < 0 || r[3] < 0) {
            fprintf(stderr, "ft synth: --rope-sections takes 4 counts of pairs, e.g. 8,12,12,0 (not '%s')\n", sections);
            return FT_EXIT_USAGE;
        }
    }
    if (dense && !ft_type_from_name(dense, &p.dense_type)) {
        fprintf(stderr, "ft synth: --dense-type: unknown type '%s'\n", dense);
        return FT_EXIT_USAGE;
    }
    if (types && (p.n_expert_types = ft_synth_parse_types(types, p.expert_types, FT_SYNTH_MAX_LAYERS, &err)) < 0) {
        fprintf(stderr, "ft synth: --expert-types: %s\n", err.msg);
        return FT_EXIT_USAGE;
    }
    if (down_types && (p.n_expert_down_types = ft_synth_parse_types(down_types, p.expert_down_types,
                                                                    FT_SYNTH_MAX_LAYERS, &err)) < 0) {
        fprintf(stderr, "ft synth: --expert-down-types: %s\n", err.msg);
        return FT_EXIT_USAGE;
    }
    if (!ft_synth_write(&p, out, &err)) {
        fprintf(stderr, "ft synth: %s\n", err.msg);
        return FT_EXIT_INPUT;
    }
    return FT_EXIT_OK;
}
