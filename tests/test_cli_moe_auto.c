// test_cli_moe_auto.c: `--moe-backend auto`'s choice (engine_auto_pick in src/engine/place.c)
// on described devices, no GPU needed: fused when the whole model fits the budget (the fused
// plan's bytes, asked without uploading), offload when it does not (a smaller card, or
// --gpu-memory-limit), and never a mode whose kernels cannot run the expert types (the CPU
// computes them then; in a build without CUDA kernels every type is such a type).
#include "fixtures.h"
#include "../src/backend/cuda/ft_cuda.h"
#include "../src/engine/place.h"
#include "../src/model/synth.h"

#include <stdio.h>
#include <string.h>

static ft_cuda_device_info card(size_t free_bytes) {
    ft_cuda_device_info info;
    memset(&info, 0, sizeof(info));
    snprintf(info.name, sizeof(info.name), "described card");
    info.cc_major = 9;
    info.free_mem = info.total_mem = free_bytes;
    return info;
}

static enum ft_moe_backend pick_quietly(const ft_model *m, const ft_engine_params *p, const ft_cuda_device_info *info) {
    fixture_stderr_mute();
    enum ft_moe_backend b = engine_auto_pick(m, p, info);
    fixture_stderr_restore();
    return b;
}

TEST(cli_moe_auto_picks_by_budget_and_types) {
    ft_synth_params sp = ft_synth_default_params();
    fixture_expert_types(&sp, "q4_K,bf16", NULL);
    ft_model *m = fixture_model(&sp, "auto_pick.gguf");
    REQUIRE(m);
    ft_err err = {{0}};
    ft_engine_params p = ft_engine_default_params();
    p.n_ctx = 256;
    p.device = FT_PLACEMENT_CUDA;
    REQUIRE(ft_engine_params_resolve(m, &p, &err), "%s", err.msg);

    // what the whole model needs: at least its weights and KV caches
    ft_cuda_device_info big = card((size_t)64 << 30);
    size_t need = 0, budget = 0;
    CHECK(engine_fused_fits(m, &p, &big, &need, &budget));
    CHECK(need >= ft_model_upload_bytes(m, false) + engine_kv_bytes(m, &p), "need %zu", need);
    CHECK(budget == (size_t)(0.9 * (double)big.free_mem), "--memory-ratio 0.9 of the free memory");
    bool kernels = ft_cuda_matvec_supported(FT_TYPE_Q4_K) && ft_cuda_matvec_supported(FT_TYPE_BF16);
    char why[200] = "";
    CHECK(engine_experts_run_on_cuda(m, why, sizeof(why)) == kernels, "%s", why);
    enum ft_moe_backend fits = kernels ? FT_MOE_BACKEND_FUSED : FT_MOE_BACKEND_CPU;
    enum ft_moe_backend short_of = kernels ? FT_MOE_BACKEND_OFFLOAD : FT_MOE_BACKEND_CPU;
    CHECK(pick_quietly(m, &p, &big) == fits);

    // a card just too small for the whole model, and one just large enough
    ft_cuda_device_info tight = card((size_t)((double)(need - 1) / 0.9));
    CHECK(!engine_fused_fits(m, &p, &tight, NULL, NULL));
    CHECK(pick_quietly(m, &p, &tight) == short_of);
    ft_cuda_device_info enough = card((size_t)((double)need / 0.9) + 4096);
    CHECK(engine_fused_fits(m, &p, &enough, NULL, NULL));
    CHECK(pick_quietly(m, &p, &enough) == fits);

    // the big card capped below the need (playing a smaller card), or a smaller share of it
    p.gpu_memory_limit = need - 1;
    CHECK(pick_quietly(m, &p, &big) == short_of);
    p.gpu_memory_limit = need;
    CHECK(pick_quietly(m, &p, &big) == fits);
    p.gpu_memory_limit = 0;
    p.memory_ratio = (double)(need - 4096) / (double)big.free_mem;
    CHECK(pick_quietly(m, &p, &big) == short_of);
    ft_model_free(m);
}
