// test_cmd_bench.c: `ft bench` through the process boundary: its usage errors, and that --json
// reports the run it was asked for (lengths, batch, repetitions, per-run figures, bytes per
// token of the model). Speeds are only checked to be positive: timings belong in benchmarks.
#include "fixtures.h"
#include "../src/util/mapping.h"
#include "../src/moe/bw_profile.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static int ft_bench(const char *args, char *out, size_t cap) {
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s bench %s", test_ft_bin(), args);
    return test_run(cmd, out, cap);
}

// ft bench's --json line for the small MoE fixture with -p 9 -n 3 -b 4 -t 2 -r 2 and extra
// flags, parsed; NULL after a recorded failure.
static json_t *bench_json(const char *extra) {
    const char *path = fixture_cli_model("bench_moe.gguf", "--arch qwen3moe --layers 2 --experts 4 --top-k 2");
    if (!path) return NULL;
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof(cmd), "-m '%s' -p 9 -n 3 -b 4 -t 2 -r 2 %s --json 2>/dev/null", path, extra);
    if (ft_bench(cmd, out, sizeof(out)) != 0) return test_fail(__FILE__, __LINE__, "ft bench %s: %s", extra, out), NULL;
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    if (!j) test_fail(__FILE__, __LINE__, "not JSON (%s): %s", jerr.text, out);
    return j;
}

TEST(cmd_bench_usage_errors) {
    CHECK(ft_bench("-p 0 -n 0 2>/dev/null", NULL, 0) == 2);
    CHECK(ft_bench("-b 0 2>/dev/null", NULL, 0) == 2);
    CHECK(ft_bench("--bogus 2>/dev/null", NULL, 0) == 2);
    CHECK(ft_bench("-m /nonexistent/model.gguf -p 4 -n 1 2>/dev/null", NULL, 0) == 1);
    CHECK(ft_bench("-d -1 2>/dev/null", NULL, 0) == 2);
    CHECK(ft_bench("-d 4 --parallel 2 2>/dev/null", NULL, 0) == 2);
}

TEST(cmd_bench_json_reports_the_run) {
    json_t *j = bench_json("");
    if (!j) return;
    CHECK(json_integer_value(json_object_get(j, "n_prompt")) == 9);
    CHECK(json_integer_value(json_object_get(j, "n_gen")) == 3);
    CHECK(json_integer_value(json_object_get(j, "n_batch")) == 4);
    CHECK(json_integer_value(json_object_get(j, "reps")) == 2);
    CHECK(json_integer_value(json_object_get(j, "threads")) == 2);
    CHECK(json_number_value(json_object_get(j, "prompt_tok_s")) > 0);
    CHECK(json_number_value(json_object_get(j, "decode_tok_s")) > 0);
    CHECK(json_integer_value(json_object_get(j, "bytes_per_token")) > 0);
    CHECK(json_array_size(json_object_get(j, "prompt_tok_s_runs")) == 2);
    CHECK(json_array_size(json_object_get(j, "decode_tok_s_runs")) == 2);
    CHECK(json_integer_value(json_object_get(j, "n_depth")) == 0);
    const char *simd = json_string_value(json_object_get(j, "simd"));
    CHECK(simd && (!strcmp(simd, "avx512") || !strcmp(simd, "avx2") || !strcmp(simd, "scalar")), "simd %s",
          simd ? simd : "(missing)");
    json_decref(j);
}

// -d: the prompt is timed after that many tokens, which count against the context.
TEST(cmd_bench_depth_prefills_first) {
    json_t *j = bench_json("-d 7");
    if (!j) return;
    CHECK(json_integer_value(json_object_get(j, "n_depth")) == 7);
    CHECK(json_integer_value(json_object_get(j, "n_prompt")) == 9);
    CHECK(json_number_value(json_object_get(j, "prompt_tok_s")) > 0 && json_number_value(json_object_get(j, "decode_tok_s")) > 0);
    json_decref(j);
    const char *path = fixture_cli_model("bench_moe.gguf", "--arch qwen3moe --layers 2 --experts 4 --top-k 2");
    REQUIRE(path);
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof(cmd), "-m '%s' -d 20 -p 9 -n 3 -c 31 2>&1", path);
    CHECK(ft_bench(cmd, out, sizeof(out)) == 1 && strstr(out, "-d 20 + -p 9 + -n 3 needs 32 positions"), "%s", out);
}

// The weights are copied into memory by default where they span huge pages (and the kernel
// gives huge pages), with --no-mmap always, kept mapped with --mmap; the JSON says how many bytes
// were copied.
TEST(cmd_bench_weights_copied_or_mapped) {
    const char *path = fixture_cli_model("bench_copy.gguf", "--arch qwen3moe --layers 2 --experts 16 --ff 512 "
                                                            "--expert-types f16");
    REQUIRE(path);
    const char *flags[] = {"", "--no-mmap", "--mmap"};
    for (int i = 0; i < 3; i++) {
        char cmd[2048], out[8192];
        snprintf(cmd, sizeof(cmd), "-m '%s' -p 4 -n 2 -t 2 -r 1 --json %s 2>/dev/null", path, flags[i]);
        REQUIRE(ft_bench(cmd, out, sizeof(out)) == 0, "%s: %s", flags[i], out);
        json_error_t jerr;
        json_t *j = json_loads(out, 0, &jerr);
        REQUIRE(j != NULL, "not JSON (%s): %s", jerr.text, out);
        json_t *v = json_object_get(j, "weights_copied_bytes");
        CHECK(json_is_integer(v), "%s: no weights_copied_bytes", flags[i]);
        long long got = json_integer_value(v);
        if (i == 1 || (i == 0 && ft_huge_pages_available())) CHECK(got >= (2 << 20), "%s: %lld bytes copied", flags[i], got);
        else CHECK(got == 0, "%s: %lld bytes copied", flags[i], got);
        json_decref(j);
    }
}

// --parallel: a figure pair per sequence count, as many runs as asked; a prompt longer than the
// chunk goes in several steps beside the other sequences' prompts. Bad counts are usage errors.
TEST(cmd_bench_parallel_reports_each_count) {
    CHECK(ft_bench("--parallel 0 2>/dev/null", NULL, 0) == 2);
    CHECK(ft_bench("--parallel 2,x 2>/dev/null", NULL, 0) == 2);
    CHECK(ft_bench("--parallel 2, 2>/dev/null", NULL, 0) == 2);
    json_t *j = bench_json("--parallel 1,3");
    if (!j) return;
    CHECK(json_integer_value(json_object_get(j, "n_prompt")) == 9 && json_integer_value(json_object_get(j, "n_gen")) == 3);
    json_t *par = json_object_get(j, "parallel");
    CHECK(json_array_size(par) == 2, "%zu counts", json_array_size(par));
    for (size_t i = 0; i < json_array_size(par) && i < 2; i++) {
        json_t *e = json_array_get(par, i);
        CHECK(json_integer_value(json_object_get(e, "n_seq")) == (i ? 3 : 1));
        CHECK(json_number_value(json_object_get(e, "prompt_tok_s")) > 0 &&
              json_number_value(json_object_get(e, "decode_tok_s")) > 0);
        CHECK(json_array_size(json_object_get(e, "decode_tok_s_runs")) == 2);
    }
    json_decref(j);
}

// `ft bench bw` on the CPU: the profile it writes and prints (the CPU's rates of the types asked
// for), a second run that keeps the first run's other types, and its usage errors.
TEST(cmd_bench_bw_writes_the_cpu_profile) {
    const char *path = test_path("bw-profile.txt");
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof(cmd), "bw --device cpu -t 1 --shape 256,256 -k 2 --types q4_K,q8_0 --profile '%s' --json 2>/dev/null",
             path);
    REQUIRE(ft_bench(cmd, out, sizeof(out)) == 0, "%s", out);
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    REQUIRE(j, "not JSON (%s): %s", jerr.text, out);
    CHECK(strcmp(json_string_value(json_object_get(j, "gpu")), "none") == 0);
    CHECK(json_integer_value(json_object_get(j, "threads")) == 1);
    json_t *rates = json_object_get(j, "rates");
    CHECK(json_array_size(rates) == 2);
    for (size_t i = 0; i < json_array_size(rates); i++) {
        json_t *r = json_array_get(rates, i);
        CHECK(json_real_value(json_object_get(r, "cpu_gbps")) > 0 && json_real_value(json_object_get(r, "gpu_gbps")) == 0);
    }
    json_decref(j);
    moe_bw_profile p;
    ft_err err = {{0}};
    REQUIRE(moe_bw_profile_load(path, &p, &err), "%s", err.msg);
    CHECK(p.threads == 1 && p.n_rates == 2 && moe_bw_rate_of(&p, FT_TYPE_Q8_0));

    snprintf(cmd, sizeof(cmd), "bw --device cpu -t 1 --shape 256,256 -k 2 --types q6_K --profile '%s' 2>/dev/null", path);
    REQUIRE(ft_bench(cmd, out, sizeof(out)) == 0, "%s", out);
    CHECK(strstr(out, "q6_K") && strstr(out, "q4_K") && strstr(out, "q8_0"), "%s", out);
    REQUIRE(moe_bw_profile_load(path, &p, &err), "%s", err.msg);
    CHECK(p.n_rates == 3 && moe_bw_rate_of(&p, FT_TYPE_Q4_K)->cpu_gbps > 0 && moe_bw_rate_of(&p, FT_TYPE_Q6_K)->cpu_gbps > 0);

    CHECK(ft_bench("bw --types q9_K 2>/dev/null", NULL, 0) == 2);
    CHECK(ft_bench("bw --shape 100 2>/dev/null", NULL, 0) == 2);
    CHECK(ft_bench("bw -k 1 2>/dev/null", NULL, 0) == 2);
    CHECK(ft_bench("bw --device tpu 2>/dev/null", NULL, 0) == 2);
    CHECK(ft_bench("bw --bogus 2>/dev/null", NULL, 0) == 2);
}

// FT_CPU_PROFILE: a table at exit with a row per op kind; the MoE op's rows count the tokens
// the runs gave it (a warm-up and one timed run of -p 9 and -n 3, two MoE layers) and its
// pool jobs' busy share lies in (0, 1].
TEST(cmd_bench_cpu_profile_table) {
    const char *path = fixture_cli_model("bench_moe.gguf", "--arch qwen3moe --layers 2 --experts 4 --top-k 2");
    REQUIRE(path);
    char cmd[2048], out[16384];
    snprintf(cmd, sizeof(cmd), "env FT_CPU_PROFILE=1 %s bench -m '%s' -p 9 -n 3 -b 16 -t 2 -r 1 2>&1 >/dev/null",
             test_ft_bin(), path);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    CHECK(strstr(out, "cpu profile (FT_CPU_PROFILE)"), "%s", out);
    bool prefill = false, decode = false;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char op[32], type[16], phase[16], busy[16];
        unsigned long long calls, tokens, jobs;
        double ms, us, share;
        if (sscanf(line, "%31s %15s %15s %llu %llu %lf %lf %lf%% %llu %15s", op, type, phase, &calls, &tokens, &ms, &us,
                   &share, &jobs, busy) != 10 || strcmp(op, "moe_ffn") != 0)
            continue;
        double b = atof(busy);
        CHECK(jobs > 0 && b > 0 && b <= 1.0, "%s", line);
        if (!strcmp(phase, "prefill")) {
            prefill = true;
            CHECK(tokens == 36 && calls == 4, "%s", line);
        }
        if (!strcmp(phase, "decode")) {
            decode = true;
            CHECK(tokens == 12 && calls == 12, "%s", line);
        }
    }
    CHECK(prefill && decode, "no moe_ffn rows");
}
