// test_engine.c: the forward-pass driver: prefill and decode agree, FT_REFERENCE's scalar path
// agrees with the fast one, the KV cache limits, and model loading names what is wrong.
#include "fixtures.h"
#include "../src/backend/cpu/cpu.h"
#include "../src/engine/engine.h"
#include "../src/engine/place.h"
#include "../src/model/synth.h"
#include "../src/quant/fp16.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

// The tests' model: 2 layers of arch, a context of 256 (NULL after a recorded failure).
static ft_model *small_model(const char *name, const char *arch) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = arch;
    p.n_layer = 2;
    p.n_ctx_train = 256;
    return fixture_model(&p, name);
}

static double max_prob_diff(const float *a, const float *b, int n) {
    float ma = a[0], mb = b[0];
    for (int i = 1; i < n; i++) {
        ma = a[i] > ma ? a[i] : ma;
        mb = b[i] > mb ? b[i] : mb;
    }
    double sa = 0, sb = 0, worst = 0;
    for (int i = 0; i < n; i++) {
        sa += exp((double)a[i] - ma);
        sb += exp((double)b[i] - mb);
    }
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(exp((double)a[i] - ma) / sa - exp((double)b[i] - mb) / sb));
    return worst;
}

// Prefill in one batch, in batches of 3 and token by token give the same distribution (the
// batched and single-token paths of every op agree), on every architecture.
TEST(engine_prefill_equals_decode) {
    const char *archs[] = {"qwen3moe", "qwen2moe", "llama"};
    int32_t toks[11] = {5, 17, 99, 3, 250, 31, 7, 400, 12, 64, 128};
    for (size_t a = 0; a < FT_ARRAY_LEN(archs); a++) {
        ft_model *m = small_model("engine.gguf", archs[a]);
        REQUIRE(m);
        ft_err err = {{0}};
        int n = m->hp.n_vocab;
        float *full = ft_malloc((size_t)n * sizeof(float));
        ft_engine_params ep = ft_engine_default_params();
        ep.n_threads = 2;
        ep.kv_type = FT_TYPE_Q8_0; // bit-stable: differences here are bugs, not rounding
        ft_engine *e = ft_engine_init(m, &ep, &err);
        REQUIRE(e, "%s", err.msg);
        memcpy(full, ft_engine_eval(e, toks, 11, &err), (size_t)n * sizeof(float));
        ft_engine_reset(e);
        const float *lg = NULL;
        for (int i = 0; i < 11; i++) lg = ft_engine_eval(e, toks + i, 1, &err);
        REQUIRE(lg, "%s", err.msg);
        CHECK(ft_engine_pos(e) == 11);
        double d = max_prob_diff(full, lg, n);
        CHECK(d < 2e-3, "%s: batch vs token-by-token differ by %g", archs[a], d);
        ft_engine_free(e);
        ep.n_batch = 3;
        e = ft_engine_init(m, &ep, &err);
        lg = ft_engine_eval(e, toks, 11, &err);
        d = max_prob_diff(full, lg, n);
        CHECK(d < 2e-3, "%s: batches of 3 differ by %g", archs[a], d);
        ft_engine_free(e);
        free(full);
        ft_model_free(m);
    }
}

// FT_REFERENCE's path (scalar dot products, one thread) against the fast path.
TEST(engine_reference_path_agrees) {
    ft_model *m = small_model("engine_ref.gguf", "qwen3moe");
    REQUIRE(m);
    ft_err err = {{0}};
    int n = m->hp.n_vocab;
    int32_t toks[6] = {1, 2, 3, 200, 300, 400};
    for (int kv = 0; kv < 2; kv++) {
        ft_engine_params ep = ft_engine_default_params();
        ep.n_threads = 2;
        ep.kv_type = kv ? FT_TYPE_Q8_0 : FT_TYPE_F16;
        ft_engine *fast = ft_engine_init(m, &ep, &err);
        ep.reference = true;
        ft_engine *ref = ft_engine_init(m, &ep, &err);
        REQUIRE(fast && ref, "%s", err.msg);
        float *a = ft_malloc((size_t)n * sizeof(float));
        memcpy(a, ft_engine_eval(fast, toks, 6, &err), (size_t)n * sizeof(float));
        const float *b = ft_engine_eval(ref, toks, 6, &err);
        REQUIRE(b, "%s", err.msg);
        double d = max_prob_diff(a, b, n);
        // the paths differ only in summation order: far below the conformance bound
        CHECK(d < 5e-3, "kv %s: reference and fast paths differ by %g", kv ? "q8_0" : "f16", d);
        free(a);
        ft_engine_free(fast);
        ft_engine_free(ref);
    }
    ft_model_free(m);
}

// The model p describes: a prompt in one batch equals it token by token with a q8_0 cache, and
// FT_REFERENCE's path agrees with the fast one with both caches.
static void prefill_decode_reference_case(const ft_synth_params *p, const char *file) {
    ft_model *m = fixture_model(p, file);
    REQUIRE(m);
    ft_err err = {{0}};
    int n = m->hp.n_vocab;
    int32_t toks[11] = {5, 17, 99, 3, 250, 31, 7, 400, 12, 64, 128};
    float *full = ft_malloc((size_t)n * sizeof(float));
    for (int kv = 0; kv < 2; kv++) {
        ft_engine_params ep = ft_engine_default_params();
        ep.n_threads = 2;
        ep.kv_type = kv ? FT_TYPE_Q8_0 : FT_TYPE_F16;
        ft_engine *e = ft_engine_init(m, &ep, &err), *ref = NULL;
        REQUIRE(e, "%s", err.msg);
        memcpy(full, ft_engine_eval(e, toks, 11, &err), (size_t)n * sizeof(float));
        const float *lg = NULL;
        double d;
        if (kv) {
            ft_engine_reset(e);
            for (int i = 0; i < 11; i++) lg = ft_engine_eval(e, toks + i, 1, &err);
            REQUIRE(lg, "%s", err.msg);
            d = max_prob_diff(full, lg, n);
            CHECK(d < 2e-3, "batch vs token-by-token differ by %g", d);
        }
        ep.reference = true;
        ref = ft_engine_init(m, &ep, &err);
        REQUIRE(ref, "%s", err.msg);
        lg = ft_engine_eval(ref, toks, 11, &err);
        REQUIRE(lg, "%s", err.msg);
        d = max_prob_diff(full, lg, n);
        CHECK(d < 5e-3, "kv %s: reference and fast paths differ by %g", kv ? "q8_0" : "f16", d);
        ft_engine_free(e);
        ft_engine_free(ref);
    }
    free(full);
    ft_model_free(m);
}

// gpt-oss (sinks, biases, windows of 4 over 11 tokens, mxfp4 experts): a prompt in one batch
// equals it token by token with a q8_0 cache (bit-stable, as engine_prefill_equals_decode), and
// FT_REFERENCE's path agrees with the fast one with both caches.
TEST(engine_gptoss_prefill_decode_and_reference) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = "gpt-oss";
    p.n_layer = 3;
    p.n_ctx_train = 256;
    p.n_expert_used = 4;
    p.n_swa = 4;
    p.qkv_bias = true;
    fixture_expert_types(&p, "mxfp4", NULL);
    prefill_decode_reference_case(&p, "engine_gptoss.gguf");
}

// gemma4 (sliding and full layers of two head sizes, shared KV, V from K's projection on the full
// layers, GELU experts with down scales, soft-capped logits): a prompt in one batch equals it
// token by token with a q8_0 cache, and FT_REFERENCE's path agrees with the fast one with both
// caches.
TEST(engine_gemma4_prefill_decode_and_reference) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = "gemma4";
    p.n_layer = 4;
    p.n_ctx_train = 256;
    p.head_dim = 128;
    p.head_dim_swa = 64;
    p.n_swa = 4;
    p.swa_pattern = 2;
    p.n_kv_shared = 2;
    p.k_eq_v = true;
    p.expert_down_scale = true;
    p.final_softcap = 10.0f;
    fixture_expert_types(&p, "q4_K", NULL);
    prefill_decode_reference_case(&p, "engine_gemma4.gguf");
}

// A backend without gpt-oss's op features is refused at the placement decision, naming what it
// lacks and the way out, before anything is placed; one with them (the CPU's) is not. The
// CPU's ops with the features cleared stand in for such a backend (CUDA has gpt-oss's since
// its kernels came, and its constructor needs a device).
TEST(engine_plan_refuses_gptoss_without_its_op_features) {
    CHECK(ft_backend_features(FT_PLACEMENT_CPU) == FT_OPS_ALL);
    ft_model *g = small_model("plan_gptoss.gguf", "gpt-oss"), *q = small_model("plan_qwen.gguf", "qwen3moe");
    REQUIRE(g && q);
    CHECK(ft_model_op_features(g) == (FT_OPS_ATTN_SINKS | FT_OPS_MOE_BIASES | FT_OPS_MOE_SOFTMAX_WEIGHT | FT_OPS_SWIGLU_OAI),
          "gpt-oss needs %#x", ft_model_op_features(g));
    CHECK(ft_model_op_features(q) == 0, "qwen3moe needs %#x", ft_model_op_features(q));
    ft_backend *be = ft_backend_cpu_init(1, false);
    ft_engine_params ep = ft_engine_default_params();
    ep.n_threads = 1;
    ep.n_ctx = 64;
    ft_err err = {{0}};
    engine_placement pl;
    CHECK(engine_plan(g, be, &ep, &pl, &err), "the CPU computes gpt-oss: %s", err.msg);
    engine_placement_free(&pl);
    const ft_backend_ops *cpu_ops = be->ops;
    ft_backend_ops lacking = *cpu_ops;
    lacking.name = "cuda";
    lacking.features = 0;
    be->ops = &lacking;
    CHECK(!engine_plan(g, be, &ep, &pl, &err), "planned gpt-oss on a backend without its ops");
    CHECK(strstr(err.msg, "--device cuda: gpt-oss runs on the CPU in this version") && strstr(err.msg, "attention sinks") &&
              strstr(err.msg, "expert and router biases") && strstr(err.msg, "use --device cpu"),
          "message: %s", err.msg);
    CHECK(engine_plan(q, be, &ep, &pl, &err), "qwen3moe needs none of them: %s", err.msg);
    engine_placement_free(&pl);
    be->ops = cpu_ops;
    be->ops->free(be);
    ft_model_free(g);
    ft_model_free(q);
}

// gemma4 on a backend without its op features (the CPU's ops with the features cleared, as for
// gpt-oss: CUDA has them since its kernels came): refused at the placement decision naming each;
// its file-dependent ones (frequency factors, down scales) counted only where the file has them.
TEST(engine_plan_refuses_gemma4_without_its_op_features) {
    ft_synth_params p = ft_synth_default_params();
    p.arch = "gemma4";
    p.n_layer = 2;
    p.n_ctx_train = 256;
    p.swa_pattern = 2;
    p.expert_down_scale = true;
    p.final_softcap = 30.0f;
    ft_model *g = fixture_model(&p, "plan_gemma4.gguf");
    p.swa_pattern = 6; // every layer slides: no rope_freqs
    p.expert_down_scale = false;
    p.final_softcap = 0;
    ft_model *plain = fixture_model(&p, "plan_gemma4_plain.gguf");
    REQUIRE(g && plain);
    unsigned all = FT_OPS_GELU | FT_OPS_SCALE_SOFTCAP | FT_OPS_NORM_NO_WEIGHT | FT_OPS_ROPE_FREQ_FACTORS |
                   FT_OPS_MOE_DOWN_SCALE | FT_OPS_MOE_ROUTER_INPUT;
    CHECK(ft_model_op_features(g) == all, "gemma4 needs %#x", ft_model_op_features(g));
    CHECK(ft_model_op_features(plain) == (all & ~(FT_OPS_ROPE_FREQ_FACTORS | FT_OPS_MOE_DOWN_SCALE)),
          "gemma4 without rope_freqs and down scales needs %#x", ft_model_op_features(plain));
    ft_backend *be = ft_backend_cpu_init(1, false);
    ft_engine_params ep = ft_engine_default_params();
    ep.n_threads = 1;
    ep.n_ctx = 64;
    ft_err err = {{0}};
    engine_placement pl;
    CHECK(engine_plan(g, be, &ep, &pl, &err), "the CPU computes gemma4: %s", err.msg);
    engine_placement_free(&pl);
    const ft_backend_ops *cpu_ops = be->ops;
    ft_backend_ops lacking = *cpu_ops;
    lacking.name = "cuda";
    lacking.features = 0;
    lacking.scale = lacking.softcap = NULL;
    be->ops = &lacking;
    CHECK(!engine_plan(g, be, &ep, &pl, &err), "planned gemma4 on a backend without its ops");
    CHECK(strstr(err.msg, "--device cuda: gemma4 runs on the CPU in this version") && strstr(err.msg, "GELU-gated FFNs") &&
              strstr(err.msg, "scaling and soft-capping") && strstr(err.msg, "RMSNorm without a weight") &&
              strstr(err.msg, "RoPE frequency factors") && strstr(err.msg, "per-expert down scales") &&
              strstr(err.msg, "a router input of its own") && strstr(err.msg, "use --device cpu"),
          "message: %s", err.msg);
    CHECK(!engine_plan(plain, be, &ep, &pl, &err) && !strstr(err.msg, "RoPE frequency factors") &&
              strstr(err.msg, "GELU-gated FFNs"), "message: %s", err.msg);
    be->ops = cpu_ops;
    be->ops->free(be);
    ft_model_free(g);
    ft_model_free(plain);
}

TEST(engine_context_limits) {
    ft_model *m = small_model("engine_ctx.gguf", "qwen3moe");
    REQUIRE(m);
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_threads = 1;
    ep.n_ctx = 512; // beyond the model's 256
    CHECK(!ft_engine_init(m, &ep, &err));
    CHECK(strstr(err.msg, "256"), "message: %s", err.msg);
    ep.n_ctx = 8;
    ft_engine *e = ft_engine_init(m, &ep, &err);
    REQUIRE(e, "%s", err.msg);
    int32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK(!ft_engine_eval(e, toks, 9, &err), "9 tokens in a context of 8");
    CHECK(strstr(err.msg, "context"), "message: %s", err.msg);
    CHECK(ft_engine_eval(e, toks, 8, &err));
    CHECK(!ft_engine_eval(e, toks, 1, &err), "the context is full");
    int32_t bad = m->hp.n_vocab;
    ft_engine_reset(e);
    CHECK(!ft_engine_eval(e, &bad, 1, &err));
    CHECK(strstr(err.msg, "vocabulary"), "message: %s", err.msg);
    ft_engine_free(e);
    ft_model_free(m);
}

// The command's default prefill chunk rises to 1024 on the CPU (never past the context); a chunk
// the user gave stands.
TEST(engine_prefill_chunk_default_cpu) {
    ft_synth_params sp = ft_synth_default_params();
    sp.arch = "qwen3moe";
    sp.n_layer = 1;
    sp.n_ctx_train = 4096;
    ft_model *m = fixture_model(&sp, "engine_chunk.gguf");
    REQUIRE(m);
    const struct {
        bool auto_batch;
        int n_ctx, want;
    } cases[] = {{true, 4096, 1024}, {true, 600, 600}, {false, 4096, 256}};
    for (size_t c = 0; c < FT_ARRAY_LEN(cases); c++) {
        ft_err err = {{0}};
        ft_engine_params ep = ft_engine_default_params();
        ep.n_threads = 1;
        ep.n_ctx = cases[c].n_ctx;
        ep.n_batch = 256;
        ep.n_batch_auto = cases[c].auto_batch;
        ft_engine *e = ft_engine_init(m, &ep, &err);
        REQUIRE(e, "case %zu: %s", c, err.msg);
        CHECK(ft_engine_n_batch(e) == cases[c].want, "case %zu: chunk %d, want %d", c, ft_engine_n_batch(e),
              cases[c].want);
        ft_engine_free(e);
    }
    ft_model_free(m);
}

// The default context (serve's) halves until the KV pool takes at most a quarter of the memory,
// never below 4096; a context the user set that does not fit the CPU's memory is an error.
TEST(engine_context_fits_memory) {
    ft_synth_params sp = ft_synth_default_params();
    sp.n_layer = 2;
    sp.n_ctx_train = 1 << 20;
    ft_model *m = fixture_model(&sp, "engine_fit.gguf");
    REQUIRE(m);
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 1 << 20;
    ep.n_seq = 4;
    ep.n_ctx_default = true;
    // 2 layers x 2 KV heads x 64 x (K, V) x f16: 1 KiB a position
    size_t mem = (size_t)128 << 20;
    fixture_stderr_mute();
    bool ok = engine_fit_context_to(m, &ep, mem, true, &err);
    fixture_stderr_restore();
    CHECK(ok, "%s", err.msg);
    CHECK(ep.n_ctx == 16384, "128 MiB: a quarter holds 32768 positions, 16384 + 3 x 4096 of them: %d", ep.n_ctx);
    CHECK(engine_kv_bytes(m, &ep) <= mem / 4);
    ep.n_ctx = 1 << 20;
    fixture_stderr_mute();
    ok = engine_fit_context_to(m, &ep, (size_t)4 << 20, false, &err);
    fixture_stderr_restore();
    CHECK(ok && ep.n_ctx == 4096, "never below 4096: %d", ep.n_ctx);
    ep.n_ctx = 1 << 16;
    CHECK(engine_fit_context_to(m, &ep, (size_t)1 << 40, true, &err) && ep.n_ctx == 1 << 16, "what fits stays");
    ep.n_ctx_default = false;
    ep.n_ctx = 1 << 20;
    CHECK(!engine_fit_context_to(m, &ep, mem, true, &err) && strstr(err.msg, "does not fit") && strstr(err.msg, "-c"),
          "-c too large for the CPU's memory: %s", err.msg);
    CHECK(engine_fit_context_to(m, &ep, mem, false, &err), "a GPU's plan checks its own budget");
    ft_model_free(m);

    // Qwen3-30B-A3B's attention (48 layers, 4 KV heads of 128, 40960 positions; experts
    // shrunk: they do not count) on a 24 GiB budget keeps its whole context
    sp = ft_synth_default_params();
    sp.n_layer = 48;
    sp.n_embd = 512;
    sp.n_head = 32;
    sp.n_head_kv = 4;
    sp.head_dim = 128;
    sp.n_expert = 2;
    sp.n_expert_used = 1;
    sp.n_ff_exp = 256;
    sp.n_ctx_train = 40960;
    m = fixture_model(&sp, "engine_fit_30b.gguf");
    REQUIRE(m);
    ep = ft_engine_default_params();
    ep.n_ctx = 40960;
    ep.n_seq = 4;
    ep.n_ctx_default = true;
    CHECK(engine_fit_context_to(m, &ep, (size_t)24 << 30, false, &err) && ep.n_ctx == 40960, "24 GiB: %d", ep.n_ctx);
    printf("    Qwen3-30B-A3B's KV shape on a 24 GiB budget: context %d, pool %lld positions, %.0f MiB\n", ep.n_ctx,
           (long long)engine_kv_blocks(&ep) * FT_KV_BLOCK, engine_kv_bytes(m, &ep) / 1048576.0);
    ft_model_free(m);
}

// Threads when none are asked for: the physical cores on the CPU, one fewer (at least one) on a
// CUDA engine, whose threads compute cpu mode's experts beside the thread driving the GPU; a
// count asked for stays.
TEST(engine_default_threads_leave_a_core_beside_the_gpu) {
    ft_model *m = small_model("engine_threads.gguf", "qwen3moe");
    REQUIRE(m);
    ft_err err = {{0}};
    int cores = ft_cpu_physical_cores();
    ft_engine_params ep = ft_engine_default_params();
    ep.device = FT_PLACEMENT_CPU;
    REQUIRE(ft_engine_params_resolve(m, &ep, &err), "%s", err.msg);
    CHECK(ep.n_threads == cores, "cpu: %d threads, %d cores", ep.n_threads, cores);
    ep = ft_engine_default_params();
    ep.device = FT_PLACEMENT_CUDA;
    REQUIRE(ft_engine_params_resolve(m, &ep, &err), "%s", err.msg);
    CHECK(ep.n_threads == (cores > 1 ? cores - 1 : 1), "cuda: %d threads, %d cores", ep.n_threads, cores);
    ep = ft_engine_default_params();
    ep.device = FT_PLACEMENT_CUDA;
    ep.n_threads = cores + 3;
    REQUIRE(ft_engine_params_resolve(m, &ep, &err), "%s", err.msg);
    CHECK(ep.n_threads == cores + 3);
    ft_model_free(m);
}

// The cores counted are those the thread may run on: pinned to one CPU (as taskset or a
// container's cpuset would), one core, so the default threads do not crowd it.
TEST(engine_default_threads_follow_the_affinity_mask) {
    cpu_set_t saved, one;
    REQUIRE(sched_getaffinity(0, sizeof(saved), &saved) == 0);
    int first = 0;
    while (first < CPU_SETSIZE && !CPU_ISSET(first, &saved)) first++;
    REQUIRE(first < CPU_SETSIZE);
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
    int cores = ft_cpu_physical_cores(), cuda = ft_engine_default_threads(FT_PLACEMENT_CUDA);
    REQUIRE(sched_setaffinity(0, sizeof(saved), &saved) == 0);
    CHECK(cores == 1, "pinned to CPU %d: %d cores", first, cores);
    CHECK(cuda == 1, "pinned to CPU %d: %d threads on cuda", first, cuda);
    CHECK(ft_cpu_physical_cores() <= CPU_COUNT(&saved), "%d cores, %d CPUs allowed", ft_cpu_physical_cores(),
          CPU_COUNT(&saved));
}

// Loading a file whose tensor or key is wrong fails with a message naming it.
TEST(engine_load_names_bad_tensor) {
    ft_synth_params p = ft_synth_default_params();
    p.n_layer = 2;
    ft_err err = {{0}};
    // wrong architecture name
    p.arch = "qwen3moe";
    const char *path = fixture_write(&p, "bad.gguf");
    REQUIRE(path);
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f);
    // rewrite the file with one tensor missing and one key out of range
    gguf_writer *w = gguf_writer_init();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) gguf_writer_copy_kv(w, f, i);
    gguf_writer_set_u32(w, "qwen3moe.expert_used_count", 9); // more than the 8 experts
    const char *out = test_path("bad2.gguf");
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
        gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne);
    }
    REQUIRE(gguf_writer_begin(w, out, &err), "%s", err.msg);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++)
        REQUIRE(gguf_writer_tensor_data(w, gguf_tensor_at(f, i)->data, gguf_tensor_at(f, i)->bytes, &err));
    REQUIRE(gguf_writer_finish(w, &err));
    gguf_writer_free(w);
    ft_model *m = ft_model_load(out, &err);
    CHECK(!m);
    CHECK(strstr(err.msg, "qwen3moe.expert_used_count"), "message: %s", err.msg);
    ft_model_free(m);

    // a tensor with the wrong shape: attn_q of layer 1 one row short
    w = gguf_writer_init();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) gguf_writer_copy_kv(w, f, i);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (!strcmp(name, "blk.1.attn_q.weight")) ne[1] -= 1;
        gguf_writer_add_tensor(w, name, t->type, t->n_dims, ne);
    }
    REQUIRE(gguf_writer_begin(w, out, &err), "%s", err.msg);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        uint64_t bytes = t->bytes;
        if (gguf_str_eq(t->name, "blk.1.attn_q.weight")) bytes -= ft_row_bytes(t->type, t->ne[0]);
        REQUIRE(gguf_writer_tensor_data(w, t->data, bytes, &err), "%s", err.msg);
    }
    REQUIRE(gguf_writer_finish(w, &err));
    gguf_writer_free(w);
    m = ft_model_load(out, &err);
    CHECK(!m);
    CHECK(strstr(err.msg, "blk.1.attn_q.weight") && strstr(err.msg, "shape"), "message: %s", err.msg);
    ft_model_free(m);
    gguf_close(f);
}

// `ft run` without -m writes the demo model into the cache folder, says it has random
// weights, generates and ends with the figures line.
TEST(engine_cli_run_demo) {
    char cmd[1024], out[8192];
    const char *cache = test_path("xdg");
    snprintf(cmd, sizeof(cmd), "XDG_CACHE_HOME='%s' %s run -p 'hello' -n 5 --temp 0 -t 1 2>'%s/err.txt'", cache,
             test_ft_bin(), test_tmpdir());
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", cmd);
    snprintf(cmd, sizeof(cmd), "cat '%s/err.txt'", test_tmpdir());
    char err_text[8192];
    test_run(cmd, err_text, sizeof(err_text));
    CHECK(strstr(err_text, "RANDOM weights"), "stderr: %s", err_text);
    CHECK(strstr(err_text, "decode: 5 tokens"), "stderr: %s", err_text);
    // a prompt longer than the context is a clear error
    snprintf(cmd, sizeof(cmd), "XDG_CACHE_HOME='%s' %s run -p 'hello world hello world' -c 2 -t 1 2>&1", cache,
             test_ft_bin());
    CHECK(test_run(cmd, out, sizeof(out)) == 1);
    CHECK(strstr(out, "more than the context"), "output: %s", out);
}
