// test_cli_moe.c: the engine flags shared by run, probs, bench and serve (src/cli/engine_args.c):
// what each flag sets in ft_engine_params, the context that --num-tokens leaves, the errors for
// bad values, and through the process boundary the notices (FreeToken's flags, GPU flags on a
// machine that runs on the CPU). No GPU needed.
#include "fixtures.h"
#include "../src/cli/engine_args.h"
#include "../src/moe/cache_plan.h"

#include <sched.h>
#include <string.h>

// Parses a space-separated flag list as a command would; returns false on a usage error
// (a bad value in take, or in apply). *rest counts the arguments that were not engine flags.
static bool parse(const char *cmd, unsigned extra, const char *line, engine_args *a, ft_engine_params *p,
                  int *rest) {
    static char buf[1024];
    snprintf(buf, sizeof(buf), "%s", line);
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)cmd;
    for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " ")) argv[argc++] = t;
    *a = engine_args_init(cmd, extra);
    *p = ft_engine_default_params();
    bool bad = false;
    *rest = 0;
    for (int i = 1; i < argc && !bad; i++)
        if (!engine_args_take(a, argc, argv, &i, &bad)) (*rest)++;
    if (bad) return false;
    // the notices of apply go to stderr: keep the test log quiet
    fixture_stderr_mute();
    bool ok = engine_args_apply(a, p);
    fixture_stderr_restore();
    return ok;
}

TEST(cli_moe_flags_set_the_engine_params) {
    engine_args a;
    ft_engine_params p;
    int rest;
    REQUIRE(parse("serve", 0,
                  "--tp-size 1 --attn triton --kv-cache-dtype q8_0 --num-tokens 8192 --kv-reserve-tokens 8192 "
                  "--cuda-graph-max-bs 0 --memory-ratio 0.95 --moe-backend offload --moe-cache-size 480 "
                  "--disable-moe-prefill-overlap --gpu-memory-limit 16 --moe-pool-layout uniform -t 3 -b 64 "
                  "--moe-cache-policy lru --moe-layer-slots adaptive --device cuda",
                  &a, &p, &rest));
    CHECK(rest == 0);
    CHECK(p.kv_type == FT_TYPE_Q8_0);
    CHECK(p.kv_reserve_tokens == 8192);
    CHECK(p.cuda_graph_max_bs == 0);
    CHECK(fabs(p.memory_ratio - 0.95) < 1e-12);
    CHECK(p.moe_backend == FT_MOE_BACKEND_OFFLOAD);
    CHECK(p.moe_cache_size == 480);
    CHECK(p.moe_prefill_serial);
    CHECK(p.gpu_memory_limit == (size_t)16 << 30);
    CHECK(p.moe_pool_layout == MOE_POOL_LAYOUT_UNIFORM);
    CHECK(p.moe_cache_lru && p.moe_self_sizing);
    CHECK(strstr(a.gpu_flags, "--moe-cache-policy") != NULL && strstr(a.gpu_flags, "--moe-layer-slots") != NULL);
    CHECK(p.n_threads == 3 && p.n_batch == 64);
    CHECK(p.device == FT_PLACEMENT_CUDA);
    CHECK(a.num_tokens == 8192 && a.tp_size_given && a.attn_given);

    // what is not given keeps the documented defaults
    REQUIRE(parse("run", 0, "--device cpu", &a, &p, &rest));
    CHECK(p.moe_backend == FT_MOE_BACKEND_AUTO && p.moe_cache_size == 0 && p.kv_type == FT_TYPE_F16);
    CHECK(p.memory_ratio == 0 && p.gpu_memory_limit == 0 && p.cuda_graph_max_bs == -1 && !p.moe_prefill_serial);
    CHECK(p.moe_pool_layout == MOE_POOL_LAYOUT_EXACT && p.n_batch == 256 && p.moe_route_trace == NULL);
    CHECK(!p.moe_cache_lru && !p.moe_self_sizing, "frecency victims and fixed ranges by default");
    CHECK(a.gpu_flags[0] == 0);
    REQUIRE(parse("run", 0, "--moe-cache-policy frecency --moe-layer-slots fixed", &a, &p, &rest));
    CHECK(!p.moe_cache_lru && !p.moe_self_sizing);
    REQUIRE(parse("bench", ENGINE_ARGS_ROUTE_TRACE, "--moe-route-trace t.ftrt -m x", &a, &p, &rest));
    CHECK(rest == 2, "-m and its value are the command's own");
    CHECK(p.moe_route_trace && !strcmp(p.moe_route_trace, "t.ftrt") && p.n_batch == 512);
    CHECK(strstr(a.gpu_flags, "--moe-route-trace") != NULL);
    // every spelling of the backend
    const char *names[] = {"auto", "fused", "offload", "cpu", "hybrid"};
    enum ft_moe_backend want[] = {FT_MOE_BACKEND_AUTO, FT_MOE_BACKEND_FUSED, FT_MOE_BACKEND_OFFLOAD,
                                  FT_MOE_BACKEND_CPU, FT_MOE_BACKEND_HYBRID};
    for (int i = 0; i < 5; i++) {
        char line[64];
        snprintf(line, sizeof(line), "--device cpu --moe-backend %s", names[i]);
        REQUIRE(parse("probs", 0, line, &a, &p, &rest));
        CHECK(p.moe_backend == want[i], "%s", names[i]);
    }
}

TEST(cli_moe_bad_values_are_usage_errors) {
    const char *bad[] = {
        "--moe-backend gpu", "--moe-backend", "--moe-pool-layout padded", "--moe-cache-policy lfu", "--moe-layer-slots even",
        "--moe-cache-size 0",
        "--moe-cache-size x", "--memory-ratio 0", "--memory-ratio 1.5", "--memory-ratio -0.5",
        "--gpu-memory-limit 0", "--gpu-memory-limit -2", "--num-tokens 0", "--kv-reserve-tokens -1",
        "--cuda-graph-max-bs -1", "--tp-size 2", "--tp-size 0", "--kv-cache-dtype q4_0", "--device tpu",
        "-t 0", "-c 0", "-b 0", "--moe-route-trace t.ftrt",
    };
    engine_args a;
    ft_engine_params p;
    int rest;
    fixture_stderr_mute();
    bool parsed[FT_ARRAY_LEN(bad)];
    for (size_t i = 0; i < FT_ARRAY_LEN(bad); i++) parsed[i] = parse("serve", 0, bad[i], &a, &p, &rest);
    fixture_stderr_restore();
    for (size_t i = 0; i < FT_ARRAY_LEN(bad); i++) CHECK(!parsed[i], "'%s' must be refused", bad[i]);
}

TEST(cli_moe_num_tokens_is_shared_by_the_sequences) {
    engine_args a;
    ft_engine_params p;
    int rest;
    // run: no --num-tokens, the command's default
    REQUIRE(parse("run", 0, "", &a, &p, &rest));
    CHECK(engine_args_n_ctx(&a, 4096, 32768) == 4096 && p.num_tokens == 0);
    // serve: the sequences share N positions; one of them may take them all, up to the
    // model's context when -c is absent
    REQUIRE(parse("serve", 0, "--num-tokens 8192", &a, &p, &rest));
    CHECK(engine_args_n_ctx(&a, 4096, 32768) == 8192 && p.num_tokens == 8192);
    CHECK(engine_args_n_ctx(&a, 4096, 4096) == 4096, "never beyond the cap");
    // -c caps one sequence, --num-tokens all of them
    REQUIRE(parse("serve", 0, "-c 1000 --num-tokens 8192", &a, &p, &rest));
    CHECK(engine_args_n_ctx(&a, 4096, 32768) == 1000);
    REQUIRE(parse("serve", 0, "-c 10000 --num-tokens 8192", &a, &p, &rest));
    CHECK(engine_args_n_ctx(&a, 4096, 32768) == 8192, "a sequence holds at most all the positions");
}

// ---------------------------------------------------------------------------------------------
// Through the process: notices and messages

// The model these tests run (written once per run).
static const char *cli_model(void) {
    return fixture_cli_model("cli_moe.gguf", "--layers 2");
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *s = strstr(hay, needle); s; s = strstr(s + 1, needle)) n++;
    return n;
}

TEST(cli_moe_notices_on_the_cpu) {
    const char *m = cli_model();
    REQUIRE(m);
    char cmd[2048];
    static char out[1 << 16];
    // GPU flags with --device cpu: one notice naming them all, and the CPU runs
    snprintf(cmd, sizeof(cmd),
             "%s run -m '%s' -p hello -n 2 --temp 0 --device cpu --moe-backend offload --moe-cache-size 8 "
             "--memory-ratio 0.5 --tp-size 1 --attn triton 2>&1",
             test_ft_bin(), m);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    CHECK(count(out, "so the CPU runs the whole model") == 1, "%s", out);
    CHECK(strstr(out, "--moe-backend, --moe-cache-size, --memory-ratio") != NULL, "%s", out);
    CHECK(count(out, "--tp-size 1: ") == 1 && count(out, "--attn triton: ignored") == 1, "%s", out);
    CHECK(strstr(out, "decode: ") != NULL, "the run finished: %s", out);
    // the same flags give the same tokens as without them (the CPU ignores them)
    static char with[4096], without[4096];
    snprintf(cmd, sizeof(cmd), "%s run -m '%s' -p hello -n 4 --temp 0 --device cpu --moe-backend cpu 2>/dev/null",
             test_ft_bin(), m);
    REQUIRE(test_run(cmd, with, sizeof(with)) == 0);
    snprintf(cmd, sizeof(cmd), "%s run -m '%s' -p hello -n 4 --temp 0 --device cpu 2>/dev/null", test_ft_bin(), m);
    REQUIRE(test_run(cmd, without, sizeof(without)) == 0);
    CHECK(!strcmp(with, without));
    // no notice without GPU flags
    snprintf(cmd, sizeof(cmd), "%s run -m '%s' -p hello -n 1 --device cpu 2>&1", test_ft_bin(), m);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0);
    CHECK(!strstr(out, "GPU only"), "%s", out);
}

// -t beyond the CPUs ft may run on: a notice (threads sharing a CPU hold each other up), and
// the run goes on; none within them.
TEST(cli_threads_beyond_the_cpus_get_a_notice) {
    const char *m = cli_model();
    REQUIRE(m);
    cpu_set_t allowed;
    REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
    int cpus = CPU_COUNT(&allowed);
    char cmd[2048];
    static char out[1 << 16];
    snprintf(cmd, sizeof(cmd), "%s run -m '%s' -p hello -n 1 --device cpu -t %d 2>&1", test_ft_bin(), m, cpus + 1);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    CHECK(count(out, "more threads than the ") == 1, "%s", out);
    CHECK(strstr(out, "decode: ") != NULL, "the run finished: %s", out);
    snprintf(cmd, sizeof(cmd), "%s run -m '%s' -p hello -n 1 --device cpu -t %d 2>&1", test_ft_bin(), m, cpus);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    CHECK(!strstr(out, "more threads than"), "%s", out);
}

// llama.cpp's placement flags in ft's terms (src/cli/llama_flags.c): what each sets, and the
// values ft cannot honour refused with what to use instead.
TEST(cli_llama_flags_in_ft_terms) {
    engine_args a;
    ft_engine_params p;
    int rest;
    REQUIRE(parse("serve", 0, "-ngl 99 -fa on -ctk q8_0 -ctv q8_0 --cpu-moe --jinja", &a, &p, &rest));
    CHECK(rest == 1, "--jinja is not an engine flag: %d", rest);
    CHECK(p.kv_type == FT_TYPE_Q8_0 && p.moe_backend == FT_MOE_BACKEND_CPU, "q8_0 cache, cpu mode");
    CHECK(strstr(a.gpu_flags, "--cpu-moe") != NULL, "--cpu-moe is a GPU flag: %s", a.gpu_flags);
    REQUIRE(parse("run", 0, "--n-gpu-layers all -ngl 0 -ot .ffn_.*_exps.=CPU --flash-attn auto", &a, &p, &rest));
    CHECK(rest == 0 && p.device == FT_PLACEMENT_CPU && p.moe_backend == FT_MOE_BACKEND_CPU, "-ngl 0: the CPU");
    REQUIRE(parse("bench", 0, "-ngl 99", &a, &p, &rest));
    CHECK(!strcmp(a.gpu_flags, "-ngl"), "bench: -ngl asks for the GPU, as llama-bench's does: %s", a.gpu_flags);
    REQUIRE(parse("bench", 0, "-ngl 0", &a, &p, &rest));
    CHECK(a.gpu_flags[0] == 0 && p.device == FT_PLACEMENT_CPU, "bench -ngl 0: the CPU");
    fixture_stderr_mute(); // (--n-cpu-moe's notice)
    bool ok = parse("run", 0, "-ngl auto --cache-type-k f16 -ncmoe 12", &a, &p, &rest);
    fixture_stderr_restore();
    REQUIRE(ok);
    CHECK(rest == 0 && p.kv_type == FT_TYPE_F16 && p.moe_backend == FT_MOE_BACKEND_AUTO,
          "-ctk f16 alone (-ctv's default is f16); --n-cpu-moe changes nothing (a notice)");
    const char *bad[] = {"-ctk q8_0", "-ctk q8_0 -ctv f16", "-ctk q4_0 -ctv q4_0", "--kv-cache-dtype f16 -ctv q8_0 -ctk q8_0",
                         "-ot blk.0=CUDA0", "-fa maybe", "-ngl x", "-ngl -5", "-ngl -1x"};
    for (size_t i = 0; i < FT_ARRAY_LEN(bad); i++) {
        fixture_stderr_mute();
        bool ok_bad = parse("run", 0, bad[i], &a, &p, &rest);
        fixture_stderr_restore();
        CHECK(!ok_bad, "'%s' accepted", bad[i]);
    }
}

TEST(cli_moe_errors_name_the_flag) {
    const char *m = cli_model();
    REQUIRE(m);
    char cmd[2048];
    static char out[1 << 14];
    struct {
        const char *cmd, *args, *msg;
    } cases[] = {
        {"run", "-p x --moe-backend gpu", "--moe-backend gpu: expected fused, offload, cpu, hybrid or auto"},
        {"probs", "-p x --moe-pool-layout padded", "--moe-pool-layout padded: expected exact or uniform"},
        {"run", "-p x --moe-cache-policy lfu", "--moe-cache-policy lfu: expected lru or frecency"},
        {"run", "-p x --moe-layer-slots even", "--moe-layer-slots even: expected fixed or adaptive"},
        {"serve", "--tp-size 4", "--tp-size 4: ft runs a model on one GPU"},
        {"bench", "--memory-ratio 2", "--memory-ratio 2: expected a share"},
        {"run", "-p x --moe-route-trace t.ftrt", "--moe-route-trace is for benchmarks only"},
        {"run", "-p x --moe-cache-size", "option --moe-cache-size needs a value"},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases); i++) {
        snprintf(cmd, sizeof(cmd), "%s %s -m '%s' %s 2>&1", test_ft_bin(), cases[i].cmd, m, cases[i].args);
        CHECK(test_run(cmd, out, sizeof(out)) == 2, "%s: %s", cases[i].args, out);
        CHECK(strstr(out, cases[i].msg) != NULL, "%s: %s", cases[i].args, out);
    }
    // --num-tokens below what a bench run needs is an input error that says so
    snprintf(cmd, sizeof(cmd), "%s bench -m '%s' -p 8 -n 4 -r 1 --num-tokens 10 2>&1", test_ft_bin(), m);
    CHECK(test_run(cmd, out, sizeof(out)) == 1, "%s", out);
    CHECK(strstr(out, "needs 12 positions; the context is 10") != NULL, "%s", out);
    // each command's help lists the MoE flags
    const char *cmds[] = {"run", "probs", "bench", "serve"};
    for (size_t i = 0; i < FT_ARRAY_LEN(cmds); i++) {
        snprintf(cmd, sizeof(cmd), "%s %s --help", test_ft_bin(), cmds[i]);
        REQUIRE(test_run(cmd, out, sizeof(out)) == 0);
        CHECK(strstr(out, "--moe-backend B") && strstr(out, "--moe-cache-size N") && strstr(out, "--num-tokens N") &&
                  strstr(out, "--cuda-graph-max-bs N") && strstr(out, "--gpu-memory-limit GIB"),
              "%s --help", cmds[i]);
        CHECK((strstr(out, "--moe-route-trace") != NULL) == !strcmp(cmds[i], "bench"), "%s --help", cmds[i]);
    }
}
