// test_cuda_cpu_experts.c: `--moe-backend cpu` (src/backend/cuda/cuda_cpu_experts.c): the routed
// experts computed on the CPU from host memory, everything else on the GPU.
//
// Whole models through ft_engine, on two schedules of steps: a 40-token prompt in steps of 16
// (every MoE layer on the CPU), and steps of 64 and 40 tokens (from the grouped GEMM's 32 on,
// the layers whose expert types it takes run on the GPU from the prefill overlay, BF16 layers
// on the CPU), then 6 (CPU again); each followed by 4 decoded tokens (one-token steps, through
// CUDA graphs, see cuda_cpu_experts.h). The next-token distribution after each step is
// compared with
//   - the CPU engine (--device cpu) and the fused GPU engine (--moe-backend fused), under the
//     whole-model tolerances of test_cuda_backend.c: strict (q8_0 weights and KV) 3e-2,
//     realistic (K-quant experts, f16 KV) 0.05 on the top-10 probabilities, the same arg-max
//     unless the reference's two best are that close, judged only on steps where the CPU
//     reference is stable under tiny perturbations (probs_compare.h: random-weight models are
//     chaotic), and at least half of each test's steps must be.
// and, where every MoE layer of every step so far ran on the overlay (qwen3moe, the 64- and
// 40-token steps), bit-identical to the fused engine's (the same kernels on the same bytes),
// with the overlay double-buffered and copy-then-compute (--disable-moe-prefill-overlap).
// Three more engines in cpu mode: the event meeting (FT_CPU_EXPERTS_MEETING=event: a copy, an
// event the host waits on, the CPU op, a copy back, nothing deferred, never graphed), the flag
// meeting without CUDA graphs (FT_CUDA_GRAPHS=0: decode steps direct, the stream waiting with
// cuStreamWaitValue32 where the driver has it), and the flag meeting with a spinning import
// kernel, without graphs (=spin). The default engine decodes through CUDA graphs (a captured
// step, then replays, each layer's CPU work done after the graph's launch). Every step's logits
// must equal the default's bit for bit (the same CPU op on the same rows; graphs replay the
// direct kernels), which checks that the meeting's kernels move every row (prompt steps take
// several CTAs), that the deferred and queued CPU work runs before each read, and the graphed
// meeting's sequence numbers (the default and the spinning import take the routing and x from
// the decode router's own export, the event meeting from copies). A last engine routes on the
// CPU (FT_CPU_EXPERTS_ROUTE=host), judged against the CPU reference like the default. At the
// end every engine's route counters hold k selections per evaluated token in each MoE layer,
// and the GPU-routed cpu-mode engines' are equal expert by expert.
// Models: qwen3moe (softmax gating) and a mixed-type laguna and glm4moe (a dense lead layer,
// sigmoid gating with a selection bias, Q4_K experts then a BF16 tail). A qwen35moe with fused gate/up
// experts equals its split twin bit for bit (the overlay's strided staging, the CPU's views).
#include "gpu_test.h"
#include "../tests/fixtures.h"
#include "probs_compare.h"
#include "../src/engine/engine.h"
#include "../src/model/synth.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct arm {
    const char *name;
    ft_model *m;
    ft_engine *e;
    float *lg;      // the last step's logits
} arm;

static bool arm_init(arm *a, const char *name, const char *path, const ft_engine_params *ep) {
    ft_err err = {{0}};
    a->name = name;
    a->m = ft_model_load(path, &err);
    if (a->m) a->e = ft_engine_init(a->m, ep, &err);
    if (!a->e) test_fail(__FILE__, __LINE__, "%s: %s", name, err.msg);
    else a->lg = ft_malloc((size_t)a->m->hp.n_vocab * sizeof(float));
    return a->e != NULL;
}

static void arm_free(arm *a) {
    ft_engine_free(a->e);
    ft_model_free(a->m);
    free(a->lg);
}

static bool arm_eval(arm *a, const int32_t *t, int n) {
    ft_err err = {{0}};
    const float *lg = ft_engine_eval(a->e, t, n, &err);
    if (!lg) {
        test_fail(__FILE__, __LINE__, "%s: %s", a->name, err.msg);
        return false;
    }
    memcpy(a->lg, lg, (size_t)a->m->hp.n_vocab * sizeof(float));
    return true;
}

// Steps of a schedule: prompt chunks (one ft_engine_eval each, at most n_batch tokens), then
// decoded tokens.
typedef struct schedule {
    const char *name;
    int n_batch;
    int chunks[4], n_chunks;
    int exact_chunks;     // the first ones whose logits must equal fused's bit for bit (0: none)
    bool serial;          // --disable-moe-prefill-overlap: one overlay buffer
} schedule;

// Steps judged and steps with a stable reference, over the cases of one test (see the top).
static int g_steps, g_stable;

static void check_stable_share(const char *test) {
    CHECK(2 * g_stable >= g_steps, "%s: only %d of %d steps had a stable reference", test, g_stable, g_steps);
    g_steps = g_stable = 0;
}

// A routing gap (ft_engine_route_gap) below this is a near tie.
#define ROUTE_TIE_GAP 1e-4f

static void model_case(const char *arch, bool strict, const schedule *sc) {
    double tol = strict ? 3e-2 : 0.05;
    ft_synth_params sp = fixture_compare_params(arch, 128, strict);
    // laguna and glm4moe mixed: a dense lead layer, then Q4_K (or q8_0) experts and a BF16 tail
    if (!strcmp(arch, "laguna") || !strcmp(arch, "glm4moe")) fixture_bf16_tail(&sp, strict);
    if (!strcmp(arch, "qwen35moe") || !strcmp(arch, "qwen3next"))
        sp.n_layer = 4; // three DeltaNet layers, then softmax attention
    const char *path = fixture_write(&sp, arch);
    if (!path) return;
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 128;
    ep.n_batch = sc->n_batch;
    ep.kv_type = strict ? FT_TYPE_Q8_0 : FT_TYPE_F16;
    ep.n_threads = 4;
    arm fused = {0}, cpumode = {0}, event = {0}, spin = {0}, direct = {0}, hostroute = {0};
    probs_reference cpu;
    bool ok = probs_reference_init(&cpu, path, &ep, strict ? 1e-5f : 1e-2f, &err);
    if (!ok) test_fail(__FILE__, __LINE__, "cpu reference: %s", err.msg);
    ep.device = FT_PLACEMENT_CUDA;
    ep.moe_backend = FT_MOE_BACKEND_FUSED;
    ok = ok && arm_init(&fused, "fused", path, &ep);
    ep.moe_backend = FT_MOE_BACKEND_CPU;
    ep.moe_prefill_serial = sc->serial;
    ok = ok && arm_init(&cpumode, "moe-backend cpu", path, &ep);
    setenv("FT_CPU_EXPERTS_MEETING", "event", 1); // read once, at the engine's init
    ok = ok && arm_init(&event, "moe-backend cpu, event meeting", path, &ep);
    setenv("FT_CUDA_GRAPHS", "0", 1);
    setenv("FT_CPU_EXPERTS_MEETING", "spin", 1);
    ok = ok && arm_init(&spin, "moe-backend cpu, spinning import, no graphs", path, &ep);
    unsetenv("FT_CPU_EXPERTS_MEETING");
    ok = ok && arm_init(&direct, "moe-backend cpu, no graphs", path, &ep);
    unsetenv("FT_CUDA_GRAPHS");
    // (gemma4's routers read an input of their own, which only the GPU routes from: that arm
    // routes on the GPU like the default)
    bool own_router_input = !strcmp(arch, "gemma4");
    if (!own_router_input) setenv("FT_CPU_EXPERTS_ROUTE", "host", 1);
    ok = ok && arm_init(&hostroute, own_router_input ? "moe-backend cpu (gemma4: routing on the GPU)"
                                                     : "moe-backend cpu, routing on the CPU", path, &ep);
    unsetenv("FT_CPU_EXPERTS_ROUTE");
    if (ok) {
        // where the weights went: experts in host memory, the rest (the router too) on the GPU
        // (the engines' copies: the model itself stays in the mapping, on the host)
        const ft_layer *l = &ft_engine_weights(cpumode.e)->layers[sp.n_dense_lead];
        CHECK(l->is_moe && l->gate_exps.placement == FT_PLACEMENT_CPU && l->down_exps.placement == FT_PLACEMENT_CPU);
        CHECK(l->router.placement == FT_PLACEMENT_CUDA && l->attn_norm.placement == FT_PLACEMENT_CUDA);
        CHECK(ft_engine_weights(fused.e)->layers[sp.n_dense_lead].gate_exps.placement == FT_PLACEMENT_CUDA);
        CHECK(cpumode.m->layers[sp.n_dense_lead].attn_norm.placement == FT_PLACEMENT_CPU,
              "the model is never changed");
        CHECK(ft_engine_moe_backend(cpumode.e) == FT_MOE_BACKEND_CPU && ft_engine_moe_backend(fused.e) == FT_MOE_BACKEND_FUSED);

        int n_vocab = cpu.n_vocab;
        int32_t prompt[120];
        ft_rng r = ft_rng_init(11);
        for (int i = 0; i < 120; i++) prompt[i] = (int32_t)(ft_rng_next(&r) % (uint64_t)n_vocab);
        double worst_cpu = 0, worst_fused = 0;
        int at = 0;
        bool near_tie = false;
        for (int step = 0; step < sc->n_chunks + 4 && !test_failed(); step++) {
            bool prefill = step < sc->n_chunks;
            int n = prefill ? sc->chunks[step] : 1;
            FT_ASSERT(n <= sc->n_batch && at + n <= 120);
            const int32_t *t = &prompt[at];
            at += n;
            bool stable = false;
            const float *ref = probs_reference_eval(&cpu, t, n, tol, &stable, &err);
            if (!ref) {
                test_fail(__FILE__, __LINE__, "cpu reference: %s", err.msg);
                break;
            }
            if (!arm_eval(&fused, t, n) || !arm_eval(&cpumode, t, n) || !arm_eval(&event, t, n) ||
                !arm_eval(&spin, t, n) || !arm_eval(&direct, t, n) || !arm_eval(&hostroute, t, n))
                break;
            char what[160];
            snprintf(what, sizeof(what), "%s %s %s: %s %d tokens", arch, strict ? "strict" : "realistic", sc->name,
                     prefill ? "prefill" : "decode", n);
            CHECK(!memcmp(event.lg, cpumode.lg, (size_t)n_vocab * sizeof(float)),
                  "%s: the flag meeting's logits differ from the event meeting's", what);
            CHECK(!memcmp(spin.lg, cpumode.lg, (size_t)n_vocab * sizeof(float)),
                  "%s: the spinning import's logits (no graphs) differ from the default's", what);
            CHECK(!memcmp(direct.lg, cpumode.lg, (size_t)n_vocab * sizeof(float)),
                  "%s: the logits without graphs differ from the default's", what);
            if (step < sc->exact_chunks)
                CHECK(!memcmp(fused.lg, cpumode.lg, (size_t)n_vocab * sizeof(float)),
                      "%s: the overlay's logits differ from fused's", what);
            char w[200];
            const double step_tol = probs_step_tol(&cpu, tol);
            snprintf(w, sizeof(w), "%s vs cpu", what);
            double d = probs_compare(w, ref, cpumode.lg, n_vocab, step_tol, stable);
            // past a routing decision within a hair of a tie (either engine's, since the reset), a
            // last-bit difference of the CPU's experts may have picked another expert: the two GPU
            // engines' paths may part there, and only the comparisons with the CPU engine hold
            // (the threshold test_cuda_backend.c's layer cases use)
            near_tie |= ft_engine_route_gap(cpumode.e) < ROUTE_TIE_GAP || ft_engine_route_gap(fused.e) < ROUTE_TIE_GAP;
            snprintf(w, sizeof(w), "%s vs fused", what);
            double df = near_tie ? 0 : probs_compare(w, fused.lg, cpumode.lg, n_vocab, step_tol, stable);
            snprintf(w, sizeof(w), "%s, routing on the CPU, vs cpu", what);
            d = fmax(d, probs_compare(w, ref, hostroute.lg, n_vocab, step_tol, stable));
            if (stable) {
                worst_cpu = fmax(worst_cpu, d);
                worst_fused = fmax(worst_fused, df);
            }
        }
        // the route counters: every engine's MoE layers counted k selections per token evaluated
        // (the CPU's router's where it routes); the GPU-routed cpu-mode engines, which route the
        // same logits, alike expert by expert (graphed steps and direct ones)
        arm *arms[6] = {&cpumode, &event, &spin, &direct, &hostroute, &fused};
        const ft_hparams *hp = &cpumode.m->hp;
        size_t nc = (size_t)hp->n_layer * (size_t)hp->n_expert;
        uint64_t *rc[6];
        for (int i = 0; i < 6; i++) {
            rc[i] = ft_calloc(nc, sizeof(uint64_t));
            CHECK(test_failed() || ft_engine_route_counts(arms[i]->e, rc[i]), "%s: no route counters", arms[i]->name);
        }
        for (int b = 0; b < hp->n_layer && !test_failed(); b++) {
            if (!cpumode.m->layers[b].is_moe) continue;
            for (int i = 0; i < 6; i++) {
                uint64_t sum = 0;
                for (int x = 0; x < hp->n_expert; x++) sum += rc[i][(size_t)b * hp->n_expert + x];
                CHECK(sum == (uint64_t)at * (uint64_t)hp->n_expert_used, "%s %s: block %d counted %llu selections for %d tokens",
                      arch, arms[i]->name, b, (unsigned long long)sum, at);
            }
        }
        for (int i = 1; i < 4 && !test_failed(); i++)
            CHECK(!memcmp(rc[i], rc[0], nc * sizeof(uint64_t)), "%s %s: route counts differ from the default's", arch,
                  arms[i]->name);
        for (int i = 0; i < 6; i++) free(rc[i]);
        printf("    %s %-10s %-22s worst top-10 prob diff over %d stable steps of %d: vs cpu %.3g, vs fused %.3g%s "
               "(tol %.3g); routing gap cpu %.3g, cpu mode %.3g\n", arch, strict ? "strict" : "realistic", sc->name,
               cpu.n_stable, cpu.n_steps, worst_cpu, worst_fused, near_tie ? " (up to a near tie)" : "", tol,
               ft_engine_route_gap(cpu.e[0]), ft_engine_route_gap(cpumode.e));
        fflush(stdout);
        g_steps += cpu.n_steps;
        g_stable += cpu.n_stable;
    }
    probs_reference_free(&cpu);
    arm_free(&fused);
    arm_free(&cpumode);
    arm_free(&event);
    arm_free(&spin);
    arm_free(&direct);
    arm_free(&hostroute);
}

// Every MoE layer on the CPU: steps below the grouped GEMM's 32 tokens.
static const schedule small_steps = {"steps of 16", 16, {16, 16, 8}, 3, 0, false};
// The overlay: 64 then 40 tokens (the 40-token step finds its first layer prefetched at the end
// of the 64-token one), then 6 on the CPU.
static const schedule overlay_steps = {"steps of 64, 40, 6", 64, {64, 40, 6}, 3, 2, false};
static const schedule overlay_serial = {"steps of 64, 40, serial", 64, {64, 40, 6}, 3, 2, true};

TEST(cuda_cpu_experts_qwen3moe) {
    GPU_TEST_REQUIRE_DEVICE();
    model_case("qwen3moe", true, &small_steps);
    model_case("qwen3moe", false, &small_steps);
    check_stable_share("cuda_cpu_experts_qwen3moe");
}

TEST(cuda_cpu_experts_qwen3moe_prefill_overlay) {
    GPU_TEST_REQUIRE_DEVICE();
    model_case("qwen3moe", true, &overlay_steps);
    model_case("qwen3moe", false, &overlay_steps);
    model_case("qwen3moe", true, &overlay_serial);
    check_stable_share("cuda_cpu_experts_qwen3moe_prefill_overlay");
}

// Gated DeltaNet layers (three of four) with every MoE layer's experts on the CPU.
TEST(cuda_cpu_experts_qwen35moe) {
    GPU_TEST_REQUIRE_DEVICE();
    model_case("qwen35moe", true, &small_steps);
    model_case("qwen35moe", false, &small_steps);
    check_stable_share("cuda_cpu_experts_qwen35moe");
}

TEST(cuda_cpu_experts_qwen3next) {
    GPU_TEST_REQUIRE_DEVICE();
    model_case("qwen3next", true, &small_steps);
    model_case("qwen3next", false, &small_steps);
    check_stable_share("cuda_cpu_experts_qwen3next");
}

TEST(cuda_cpu_experts_laguna_mixed) {
    GPU_TEST_REQUIRE_DEVICE();
    model_case("laguna", true, &small_steps);
    model_case("laguna", false, &small_steps);
    check_stable_share("cuda_cpu_experts_laguna_mixed");
}

// glm4moe mixed (fixture_glm4moe: biases, Q/K norms, half-head rotary, an MTP block the host
// experts leave out), its MoE layers' experts on the CPU.
TEST(cuda_cpu_experts_glm4moe_mixed) {
    GPU_TEST_REQUIRE_DEVICE();
    model_case("glm4moe", true, &small_steps);
    model_case("glm4moe", false, &small_steps);
    check_stable_share("cuda_cpu_experts_glm4moe_mixed");
}

// The Q4_K / q8_0 layers from the overlay, the BF16 tail on the CPU (not bit-identical to fused).
TEST(cuda_cpu_experts_laguna_mixed_prefill_overlay) {
    GPU_TEST_REQUIRE_DEVICE();
    schedule sc = overlay_steps;
    sc.exact_chunks = 0;
    model_case("laguna", true, &sc);
    model_case("laguna", false, &sc);
    check_stable_share("cuda_cpu_experts_laguna_mixed_prefill_overlay");
}

// A model with fused gate/up experts (ffn_gate_up_exps) and its split twin (the same weights:
// fixtures.h) in cpu mode: logits equal bit for bit on the overlay schedule, whose 64- and
// 40-token steps run the q4_K layers on the GPU from the overlay (the staging gathers each
// expert's gate and up halves) and the bf16 ones on the CPU (from strided views of the mapping),
// then 6-token and decode steps on the CPU; double-buffered and serial.
TEST(cuda_cpu_experts_fused_gate_up_equals_split_twin) {
    GPU_TEST_REQUIRE_DEVICE();
    ft_synth_params sp = fixture_compare_params("qwen35moe", 128, false);
    sp.n_layer = 4;
    sp.fused_gate_up = true;
    fixture_expert_types(&sp, "q4_K,bf16,q4_K,q4_K", NULL);
    const char *fused = fixture_write(&sp, "cpu_experts_fused_gate_up.gguf");
    REQUIRE(fused);
    const char *split = fixture_split_gate_up(fused, "cpu_experts_fused_gate_up_split.gguf");
    REQUIRE(split);
    for (int serial = 0; serial < 2 && !test_failed(); serial++) {
        ft_engine_params ep = ft_engine_default_params();
        ep.n_ctx = 128;
        ep.n_batch = 64;
        ep.n_threads = 4;
        ep.device = FT_PLACEMENT_CUDA;
        ep.moe_backend = FT_MOE_BACKEND_CPU;
        ep.moe_prefill_serial = serial;
        arm af = {0}, as = {0};
        if (arm_init(&af, "fused gate/up", fused, &ep) && arm_init(&as, "split twin", split, &ep)) {
            const ft_layer *l = &ft_engine_weights(af.e)->layers[0];
            CHECK(l->gate_exps.placement == FT_PLACEMENT_CPU && !ft_tensor_packed(&l->gate_exps),
                  "cpu mode reads the fused tensor's halves in place");
            int32_t prompt[120];
            ft_rng r = ft_rng_init(13);
            for (int i = 0; i < 120; i++) prompt[i] = (int32_t)(ft_rng_next(&r) % (uint64_t)af.m->hp.n_vocab);
            const int steps[] = {64, 40, 6, 1, 1, 1, 1};
            int at = 0;
            for (size_t i = 0; i < FT_ARRAY_LEN(steps) && !test_failed(); i++) {
                if (!arm_eval(&af, prompt + at, steps[i]) || !arm_eval(&as, prompt + at, steps[i])) break;
                at += steps[i];
                CHECK(!memcmp(af.lg, as.lg, (size_t)af.m->hp.n_vocab * sizeof(float)),
                      "%s: a step of %d tokens differs from the split twin's", serial ? "serial" : "double-buffered",
                      steps[i]);
            }
        }
        arm_free(&af);
        arm_free(&as);
    }
}

// auto on a model that fits: fused, every expert on the device.
TEST(cuda_moe_backend_auto_picks_fused_when_it_fits) {
    GPU_TEST_REQUIRE_DEVICE();
    ft_synth_params sp = ft_synth_default_params();
    sp.n_layer = 2;
    ft_model *m = fixture_model(&sp, "auto_fits.gguf");
    REQUIRE(m);
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 64;
    ep.device = FT_PLACEMENT_CUDA;
    ep.moe_backend = FT_MOE_BACKEND_AUTO;
    ft_engine *e = ft_engine_init(m, &ep, &err);
    CHECK(e, "%s", err.msg);
    CHECK(e && ft_engine_moe_backend(e) == FT_MOE_BACKEND_FUSED);
    ft_engine_free(e);
    ft_model_free(m);
}

// gpt-oss (its router's and experts' biases, softmax-weighted routing, the clamped SwiGLU) and
// gemma4 (GELU experts, down scales, the router on its own input) in cpu mode: the host experts
// get the extras' host copies, the overlay's GEMM their device ones.
TEST(cuda_cpu_experts_gptoss) {
    GPU_TEST_REQUIRE_DEVICE();
    model_case("gpt-oss", true, &small_steps);
    model_case("gpt-oss", false, &small_steps);
    model_case("gpt-oss", true, &overlay_steps);
    check_stable_share("cuda_cpu_experts_gptoss");
}

TEST(cuda_cpu_experts_gemma4) {
    GPU_TEST_REQUIRE_DEVICE();
    model_case("gemma4", true, &small_steps);
    model_case("gemma4", false, &small_steps);
    model_case("gemma4", true, &overlay_steps);
    check_stable_share("cuda_cpu_experts_gemma4");
}

TEST(cuda_cpu_experts_direct_steps_in_a_fresh_process) {
    GPU_TEST_REQUIRE_DEVICE();
    const char *bin = test_ft_bin();
    REQUIRE(access(bin, X_OK) == 0, "no ft binary at %s (make test-gpu sets FT_BIN)", bin);
    ft_synth_params sp = ft_synth_default_params();
    sp.arch = "qwen3moe";
    sp.n_layer = 3;
    const char *path = fixture_write(&sp, "cpu_experts_fresh.gguf");
    REQUIRE(path);
    char cmd[2048], with_graphs[4096], without[4096], lazy[4096];
    const char *run = "run -m '%s' --device cuda --moe-backend cpu -p 'hello there' -n 8 --temp 0 2>/dev/null";
    char args[1024];
    snprintf(args, sizeof(args), run, path);
    snprintf(cmd, sizeof(cmd), "timeout 120 %s %s", bin, args);
    CHECK(test_run(cmd, with_graphs, sizeof(with_graphs)) == 0, "with graphs: %s", cmd);
    snprintf(cmd, sizeof(cmd), "FT_CUDA_GRAPHS=0 timeout 120 %s %s", bin, args);
    CHECK(test_run(cmd, without, sizeof(without)) == 0, "without graphs (exit 124: it ran out of time): %s", cmd);
    snprintf(cmd, sizeof(cmd), "CUDA_MODULE_LOADING=LAZY timeout 120 %s %s", bin, args);
    CHECK(test_run(cmd, lazy, sizeof(lazy)) == 0, "lazy loading (exit 124: it ran out of time): %s", cmd);
    CHECK(with_graphs[0] != 0 && !strcmp(with_graphs, without), "greedy text with graphs '%s', without '%s'",
          with_graphs, without);
    CHECK(!strcmp(with_graphs, lazy), "greedy text with graphs '%s', with lazy loading '%s'", with_graphs, lazy);
}

// ---------------------------------------------------------------------------------------------
// --moe-backend hybrid: offload's cache with each cache step's misses split between copies and
// the CPU (src/moe/hybrid.h). A small cache (so that every step misses), the split forced by
// FT_HYBRID_COSTS: copies only ("0,0,0": the logits of offload bit for bit: the same lookups,
// copies and kernels), the CPU only ("1000,0,0": no copies at all after the prefill overlay),
// and a mix; the mix also without CUDA graphs (bit for bit the graphed one's: the same CPU op on
// the same rows), and an engine on the costs it measures itself. Each judged against the CPU
// engine and fused under the tolerances above, on steps of 4, 3 and 2 tokens (cache steps: the
// split applies to every token of a step), a 64-token step (the overlay), then decode; the
// CPU-computed counters say the CPU did work where the split sends it any.
static void hybrid_case(const char *arch, bool strict) {
    double tol = strict ? 3e-2 : 0.05;
    ft_synth_params sp = fixture_compare_params(arch, 128, strict);
    if (!strcmp(arch, "qwen35moe")) sp.n_layer = 4;
    const char *path = fixture_write(&sp, arch);
    if (!path) return;
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 160;
    ep.n_batch = 64;
    ep.kv_type = strict ? FT_TYPE_Q8_0 : FT_TYPE_F16;
    ep.n_threads = 4;
    probs_reference cpu;
    bool ok = probs_reference_init(&cpu, path, &ep, strict ? 1e-5f : 1e-2f, &err);
    if (!ok) test_fail(__FILE__, __LINE__, "cpu reference: %s", err.msg);
    ep.device = FT_PLACEMENT_CUDA;
    arm fused = {0}, offload = {0}, copies = {0}, cpuonly = {0}, mix = {0}, mix_direct = {0}, measured = {0};
    ep.moe_backend = FT_MOE_BACKEND_FUSED;
    ok = ok && arm_init(&fused, "fused", path, &ep);
    ep.moe_cache_size = 4 * sp.n_expert_used * sp.n_layer; // four tokens' selections a layer
    ep.moe_backend = FT_MOE_BACKEND_OFFLOAD;
    // no prefill fills: the 64-token overlay step would fill every slot, and the decode steps
    // after it would miss nothing to split (gpt-oss's cache holds all its experts)
    setenv("FT_MOE_PREFILL_FILL", "0", 1);
    ok = ok && arm_init(&offload, "offload", path, &ep);
    ep.moe_backend = FT_MOE_BACKEND_HYBRID;
    setenv("FT_HYBRID_COSTS", "0,0,0", 1);
    ok = ok && arm_init(&copies, "hybrid, copies only", path, &ep);
    setenv("FT_HYBRID_COSTS", "1000,0,0", 1);
    ok = ok && arm_init(&cpuonly, "hybrid, the CPU only", path, &ep);
    setenv("FT_HYBRID_COSTS", "40,30,25", 1); // 1 miss: copy; 2: one each; 4: two copies, two on the CPU
    ok = ok && arm_init(&mix, "hybrid, mixed", path, &ep);
    setenv("FT_CUDA_GRAPHS", "0", 1);
    ok = ok && arm_init(&mix_direct, "hybrid, mixed, no graphs", path, &ep);
    unsetenv("FT_CUDA_GRAPHS");
    unsetenv("FT_HYBRID_COSTS");
    ok = ok && arm_init(&measured, "hybrid, measured costs", path, &ep);
    unsetenv("FT_MOE_PREFILL_FILL");
    if (ok) {
        CHECK(ft_engine_moe_backend(mix.e) == FT_MOE_BACKEND_HYBRID);
        int n_vocab = cpu.n_vocab;
        int32_t prompt[120];
        ft_rng r = ft_rng_init(23);
        for (int i = 0; i < 120; i++) prompt[i] = (int32_t)(ft_rng_next(&r) % (uint64_t)n_vocab);
        static const int chunks[] = {4, 3, 2, 64}; // cache steps (at most the layer's slots), then the overlay
        double worst_cpu = 0, worst_fused = 0;
        int at = 0;
        arm *hy[] = {&cpuonly, &mix, &measured};
        for (int step = 0; step < 4 + 8 && !test_failed(); step++) {
            int n = step < 4 ? chunks[step] : 1;
            const int32_t *t = &prompt[at];
            at += n;
            bool stable = false;
            const float *ref = probs_reference_eval(&cpu, t, n, tol, &stable, &err);
            if (!ref) {
                test_fail(__FILE__, __LINE__, "cpu reference: %s", err.msg);
                break;
            }
            if (!arm_eval(&fused, t, n) || !arm_eval(&offload, t, n) || !arm_eval(&copies, t, n) ||
                !arm_eval(&cpuonly, t, n) || !arm_eval(&mix, t, n) || !arm_eval(&mix_direct, t, n) ||
                !arm_eval(&measured, t, n))
                break;
            char what[160];
            snprintf(what, sizeof(what), "%s %s hybrid: %s %d tokens", arch, strict ? "strict" : "realistic",
                     step < 4 ? "prefill" : "decode", n);
            CHECK(!memcmp(copies.lg, offload.lg, (size_t)n_vocab * sizeof(float)),
                  "%s: copies only differs from offload", what);
            CHECK(!memcmp(mix_direct.lg, mix.lg, (size_t)n_vocab * sizeof(float)),
                  "%s: without graphs differs from graphed", what);
            const double step_tol = probs_step_tol(&cpu, tol);
            for (size_t i = 0; i < FT_ARRAY_LEN(hy); i++) {
                char w[200];
                snprintf(w, sizeof(w), "%s, %s vs cpu", what, hy[i]->name);
                double d = probs_compare(w, ref, hy[i]->lg, n_vocab, step_tol, stable);
                snprintf(w, sizeof(w), "%s, %s vs fused", what, hy[i]->name);
                double df = probs_compare(w, fused.lg, hy[i]->lg, n_vocab, step_tol, stable);
                if (stable) {
                    worst_cpu = fmax(worst_cpu, d);
                    worst_fused = fmax(worst_fused, df);
                }
            }
        }
        ft_moe_stats st[4];
        arm *counted[4] = {&copies, &cpuonly, &mix, &offload};
        for (int i = 0; i < 4; i++) REQUIRE(ft_engine_moe_stats(counted[i]->e, &st[i]), "%s: no stats", counted[i]->name);
        CHECK(st[0].total.cpu_computed == 0 && st[3].total.cpu_computed == 0);
        // (the overlay's steps count no selections: every miss counted went to the CPU)
        CHECK(st[1].total.cpu_computed > 0 && st[1].total.cpu_computed == st[1].total.misses,
              "the CPU only: %llu misses, %llu on the CPU", (unsigned long long)st[1].total.misses,
              (unsigned long long)st[1].total.cpu_computed);
        CHECK(st[2].total.cpu_computed > 0 && st[2].total.cpu_computed < st[2].total.misses,
              "mixed: %llu misses, %llu on the CPU", (unsigned long long)st[2].total.misses,
              (unsigned long long)st[2].total.cpu_computed);
        printf("    %s %-10s hybrid: worst top-10 prob diff over %d stable steps of %d: vs cpu %.3g, vs fused %.3g "
               "(tol %.3g); misses / on the CPU: copies only %llu / %llu, the CPU only %llu / %llu, mixed %llu / %llu\n",
               arch, strict ? "strict" : "realistic", cpu.n_stable, cpu.n_steps, worst_cpu, worst_fused, tol,
               (unsigned long long)st[0].total.misses, (unsigned long long)st[0].total.cpu_computed,
               (unsigned long long)st[1].total.misses, (unsigned long long)st[1].total.cpu_computed,
               (unsigned long long)st[2].total.misses, (unsigned long long)st[2].total.cpu_computed);
        fflush(stdout);
        for (int i = 0; i < 4; i++) ft_moe_stats_free(&st[i]);
        g_steps += cpu.n_steps;
        g_stable += cpu.n_stable;
    }
    probs_reference_free(&cpu);
    arm *all[] = {&fused, &offload, &copies, &cpuonly, &mix, &mix_direct, &measured};
    for (size_t i = 0; i < FT_ARRAY_LEN(all); i++) arm_free(all[i]);
}

TEST(cuda_hybrid_qwen3moe) {
    GPU_TEST_REQUIRE_DEVICE();
    hybrid_case("qwen3moe", true);
    hybrid_case("qwen3moe", false);
    check_stable_share("cuda_hybrid_qwen3moe");
}

// gpt-oss's and gemma4's extras on both roads of a hybrid step (the CPU's share from their host
// copies, the GPU's from the device's).
TEST(cuda_hybrid_gptoss_gemma4) {
    GPU_TEST_REQUIRE_DEVICE();
    hybrid_case("gpt-oss", true);
    hybrid_case("gemma4", true);
    check_stable_share("cuda_hybrid_gptoss_gemma4");
}

TEST(cuda_hybrid_qwen35moe) {
    GPU_TEST_REQUIRE_DEVICE();
    hybrid_case("qwen35moe", true);
    hybrid_case("qwen35moe", false);
    check_stable_share("cuda_hybrid_qwen35moe");
}
