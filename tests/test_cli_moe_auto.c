// test_cli_moe_auto.c: `--moe-backend auto`'s choice (moe_placement_auto, from the facts
// engine_auto_facts measures on a backend) on described devices, no GPU needed: fused when the
// whole model fits the budget (the fused plan's bytes, asked without allocating), offload when
// it does not (a smaller card, or --gpu-memory-limit), and never a mode whose kernels cannot
// run the expert types (the CPU computes them then).
#include "test.h"
#include "../src/engine/place.h"
#include "../src/model/synth.h"
#include "../src/moe/bw_profile.h"

#include <stdio.h>
#include <string.h>

// A described device: a backend whose memory ops answer from these, and no compute ops.
static size_t g_free, g_held; // free memory, and what the process holds (its CUDA context)
static bool g_takes_bf16;

static void described_info(ft_backend *be, ft_device_info *out) {
    (void)be;
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "described card");
    out->cc_major = 9;
    out->free_mem = out->total_mem = g_free;
    out->process_mem = g_held;
}

static bool described_supports(ft_backend *be, enum ft_type t) {
    (void)be;
    return t != FT_TYPE_BF16 || g_takes_bf16;
}

static size_t described_scratch(ft_backend *be, const ft_backend_limits *lim) {
    (void)be;
    return (size_t)lim->max_tok << 20;
}

static const ft_backend_ops g_described = {
    .name = "described", .device_info = described_info, .supports_type = described_supports,
    .scratch_bytes = described_scratch,
};

// sp's model written to path and loaded, with p the engine's defaults for it on a GPU (256
// positions); NULL (the failure printed) where a step fails.
static ft_model *synth_on_cuda(const ft_synth_params *sp, const char *path, ft_engine_params *p) {
    ft_err err = {{0}};
    ft_model *m = ft_synth_write(sp, path, &err) ? ft_model_load(path, &err) : NULL;
    *p = ft_engine_default_params();
    p->n_ctx = 256;
    p->device = FT_PLACEMENT_CUDA;
    if (m && !ft_engine_params_resolve(m, p, &err)) {
        ft_model_free(m);
        m = NULL;
    }
    if (!m) fprintf(stderr, "%s: %s\n", path, err.msg);
    return m;
}

static enum ft_moe_backend pick(const ft_model *m, const ft_engine_params *p, ft_backend *be, size_t free_bytes) {
    g_free = free_bytes;
    moe_auto_facts f = engine_auto_facts(m, p, be, NULL, 0);
    return moe_placement_auto(&f);
}

TEST(cli_moe_auto_picks_by_budget_and_types) {
    const char *path = test_path("auto_pick.gguf");
    ft_synth_params sp = ft_synth_default_params();
    sp.n_expert_types = 2;
    sp.expert_types[0] = FT_TYPE_Q4_K;
    sp.expert_types[1] = FT_TYPE_BF16;
    ft_engine_params p;
    ft_model *m = synth_on_cuda(&sp, path, &p);
    REQUIRE(m);
    ft_backend dev = {.ops = &g_described, .placement = FT_PLACEMENT_CUDA};

    // what the whole model needs: at least its weights, KV caches and the backend's scratch
    g_takes_bf16 = true;
    g_free = (size_t)64 << 30;
    char why[200] = "";
    moe_auto_facts f = engine_auto_facts(m, &p, &dev, why, sizeof(why));
    ft_backend_limits lim = engine_limits(m, &p);
    size_t need = f.fused_need;
    CHECK(need >= ft_weights_place_bytes(m, false) + engine_kv_bytes(m, &p) + described_scratch(&dev, &lim),
          "need %zu", need);
    CHECK(ft_weights_place_bytes(m, true) < ft_weights_place_bytes(m, false), "experts are most of the weights");
    CHECK(f.budget == (size_t)(0.9 * (double)g_free), "--memory-ratio 0.9 of the free memory");
    CHECK(f.device_takes_types && f.n_expert == sp.n_expert);
    CHECK(pick(m, &p, &dev, g_free) == FT_MOE_BACKEND_FUSED);

    // a card just too small for the whole model, and one just large enough
    CHECK(pick(m, &p, &dev, (size_t)((double)(need - 1) / 0.9)) == FT_MOE_BACKEND_OFFLOAD);
    CHECK(pick(m, &p, &dev, (size_t)((double)need / 0.9) + 4096) == FT_MOE_BACKEND_FUSED);

    // the big card capped below the need (playing a smaller card), or a smaller share of it
    size_t big = (size_t)64 << 30;
    p.gpu_memory_limit = need - 1;
    CHECK(pick(m, &p, &dev, big) == FT_MOE_BACKEND_OFFLOAD);
    p.gpu_memory_limit = need;
    CHECK(pick(m, &p, &dev, big) == FT_MOE_BACKEND_FUSED);
    // the cap counts what the process holds already (the CUDA context), as nvidia-smi does
    g_held = (size_t)500 << 20;
    CHECK(pick(m, &p, &dev, big) == FT_MOE_BACKEND_OFFLOAD);
    p.gpu_memory_limit = need + g_held;
    CHECK(pick(m, &p, &dev, big) == FT_MOE_BACKEND_FUSED);
    g_held = 0;
    p.gpu_memory_limit = 0;
    p.memory_ratio = (double)(need - 4096) / (double)big;
    CHECK(pick(m, &p, &dev, big) == FT_MOE_BACKEND_OFFLOAD);
    p.memory_ratio = 0;

    // a device whose kernels do not take a layer's bf16 experts: the CPU computes them, fits or not
    g_takes_bf16 = false;
    g_free = big;
    f = engine_auto_facts(m, &p, &dev, why, sizeof(why));
    CHECK(!f.device_takes_types && strstr(why, "blk.1.") && strstr(why, "bf16"), "why: %s", why);
    CHECK(pick(m, &p, &dev, big) == FT_MOE_BACKEND_CPU);
    CHECK(pick(m, &p, &dev, need / 2) == FT_MOE_BACKEND_CPU);

    // a model without experts is fused whatever the budget
    moe_auto_facts dense = {.n_expert = 0, .device_takes_types = false, .fused_need = 2, .budget = 1};
    CHECK(moe_placement_auto(&dense) == FT_MOE_BACKEND_FUSED);
    ft_model_free(m);
}

// With a bandwidth profile (--profile), a model that does not fit goes to the mode predicted
// fastest (mode_cost.h, on the cache the budget gives and a generated trace): copies far slower
// than the CPU's experts make it hybrid, copies far faster offload; a profile that cannot be
// read leaves offload.
TEST(cli_moe_auto_weighs_the_modes_by_the_bandwidth_profile) {
    const char *path = test_path("auto_costs.gguf"), *prof_path = test_path("auto_costs_profile.txt");
    ft_synth_params sp = ft_synth_default_params();
    sp.n_expert = 32;
    sp.n_expert_used = 4;
    ft_engine_params p;
    ft_model *m = synth_on_cuda(&sp, path, &p);
    REQUIRE(m);
    p.print_plan = false;
    ft_err err = {{0}};
    ft_backend dev = {.ops = &g_described, .placement = FT_PLACEMENT_CUDA};
    g_takes_bf16 = true;
    g_held = 0;
    g_free = (size_t)64 << 30;
    moe_auto_facts f = engine_auto_facts(m, &p, &dev, NULL, 0);
    size_t experts = ft_weights_place_bytes(m, false) - ft_weights_place_bytes(m, true);
    g_free = (size_t)((double)(f.fused_need - experts / 3) / 0.9); // about half the experts fit in slots
    p.bw_profile = prof_path;
    const struct {
        double copy_gbps, cpu_gbps;
        enum ft_moe_backend want;
    } cases[] = {{0.01, 50, FT_MOE_BACKEND_HYBRID}, {50, 0.01, FT_MOE_BACKEND_OFFLOAD}};
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        moe_bw_profile prof = {.gpu = "described card",
                               .cpu = "described cpu",
                               .threads = p.n_threads,
                               .copy_gbps = cases[i].copy_gbps,
                               .meet_us = 10,
                               .cpu_fixed_us = 10};
        *moe_bw_rate_add(&prof, sp.expert_types[0]) =
            (moe_bw_rate){.type = sp.expert_types[0], .cpu_gbps = cases[i].cpu_gbps, .gpu_gbps = 1000};
        REQUIRE(moe_bw_profile_save(&prof, prof_path, &err), "%s", err.msg);
        engine_placement pl;
        bool ok = engine_plan(m, &dev, &p, &pl, &err);
        CHECK(ok, "%s", err.msg);
        CHECK(!ok || pl.mode == cases[i].want, "case %zu: %s", i, ft_moe_backend_name(pl.mode));
        if (ok) engine_placement_free(&pl);
    }
    p.bw_profile = test_path("no_such_profile.txt");
    engine_placement pl;
    bool ok = engine_plan(m, &dev, &p, &pl, &err);
    CHECK(ok && pl.mode == FT_MOE_BACKEND_OFFLOAD, "%s", ok ? ft_moe_backend_name(pl.mode) : err.msg);
    if (ok) engine_placement_free(&pl);
    ft_model_free(m);
}
