// test_sampling_args.c: the sampling flags `ft run` and `ft serve` share (src/cli/sampling_args.c):
// what each sets, the range errors, a model's general.sampling.* filling the flags left out (as
// llama.cpp reads them), and the overlay of one set of defaults on another (sampler.h).
#include "fixtures.h"
#include "../src/cli/sampling_args.h"
#include "../src/gguf/gguf.h"

#include <string.h>

// Parses a space-separated flag list; returns false on a usage error. *rest counts the
// arguments that were not sampling flags.
static bool parse(const char *line, sampling_args *s, int *rest) {
    static char buf[512];
    snprintf(buf, sizeof(buf), "%s", line);
    char *argv[32];
    int argc = 0;
    argv[argc++] = "serve";
    for (char *t = strtok(buf, " "); t && argc < 31; t = strtok(NULL, " ")) argv[argc++] = t;
    *s = sampling_args_init();
    bool bad = false;
    *rest = 0;
    fixture_stderr_mute();
    for (int i = 1; i < argc && !bad; i++)
        if (!sampling_args_take(s, "serve", argc, argv, &i, &bad)) (*rest)++;
    fixture_stderr_restore();
    return !bad;
}

TEST(sampling_flags_set_their_fields) {
    sampling_args s;
    int rest;
    REQUIRE(parse("--temp 0.6 --top-k 20 --top-p 0.9 --min-p 0 --repeat-penalty 1.1 --repeat-last-n 128 "
                  "--presence-penalty 0.5 --frequency-penalty -0.5 --seed 9007199254740993 --other",
                  &s, &rest));
    CHECK(rest == 1, "one argument not a sampling flag, got %d", rest);
    CHECK(s.p.temp == 0.6f && s.p.top_k == 20 && s.p.top_p == 0.9f && s.p.min_p == 0.0f &&
              s.p.repeat_penalty == 1.1f && s.p.penalty_last_n == 128 && s.p.presence_penalty == 0.5f &&
              s.p.frequency_penalty == -0.5f,
          "the values");
    CHECK(s.p.seed == 9007199254740993ull, "a seed above 2^53 kept exactly: %llu", (unsigned long long)s.p.seed);
    CHECK(s.given == 0x1ff && s.from_model == 0, "every field given: %#x", s.given);
    REQUIRE(parse("--temp 0", &s, &rest));
    CHECK(s.given == FT_SAMPLE_TEMP && s.p.top_k == 40, "only temp given; the others llama.cpp's");
    const char *bad[] = {"--temp -1", "--top-p 1.5", "--min-p -0.1", "--top-k -1", "--presence-penalty 3",
                         "--repeat-last-n 2000000", "--temp x", "--seed -2", "--top-k"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) CHECK(!parse(bad[i], &s, &rest), "'%s' accepted", bad[i]);
}

// Writes and opens a GGUF of key/values only: a model's sampling recommendation (NULL after a
// recorded failure).
static gguf_file *sampling_gguf(const char *name, bool bad_values) {
    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", "qwen3moe");
    gguf_writer_set_f32(w, "general.sampling.temp", 0.6f);
    gguf_writer_set_i32(w, "general.sampling.top_k", 20);
    gguf_writer_set_f32(w, "general.sampling.top_p", bad_values ? 1.5f : 0.95f);
    gguf_writer_set_f32(w, "general.sampling.min_p", 0.0f);
    gguf_writer_set_f32(w, "general.sampling.penalty_last_n", bad_values ? 2.5f : 32.0f); // a float an integer
    ft_err err = {{0}};
    const char *path = test_path(name);
    bool ok = gguf_writer_begin(w, path, &err) && gguf_writer_finish(w, &err);
    gguf_writer_free(w);
    gguf_file *f = ok ? gguf_open(path, &err) : NULL;
    if (!f) test_fail(__FILE__, __LINE__, "%s", err.msg);
    return f;
}

TEST(sampling_model_recommendation_fills_what_is_not_given) {
    gguf_file *f = sampling_gguf("sampling.gguf", false);
    REQUIRE(f);
    sampling_args s;
    int rest;
    REQUIRE(parse("--top-k 5", &s, &rest));
    sampling_args_from_model(&s, "serve", f);
    CHECK(s.p.temp == 0.6f && s.p.top_p == 0.95f && s.p.min_p == 0.0f && s.p.penalty_last_n == 32,
          "the model's temp, top-p, min-p and last-n");
    CHECK(s.p.top_k == 5, "the command line's top-k over the model's: %d", s.p.top_k);
    CHECK(s.given == FT_SAMPLE_TOP_K &&
              s.from_model == (FT_SAMPLE_TEMP | FT_SAMPLE_TOP_P | FT_SAMPLE_MIN_P | FT_SAMPLE_PENALTY_LAST_N),
          "bits given %#x, from the model %#x", s.given, s.from_model);
    char d[256];
    sampling_args_describe(&s, d, sizeof(d));
    CHECK(!strcmp(d, "temp 0.6 (the model's), top-k 5 (--top-k), top-p 0.95 (the model's), min-p 0 (the model's), "
                     "repeat-last-n 32 (the model's)"),
          "described as: %s", d);
    gguf_close(f);

    // values out of range (top-p 1.5) or not integers (last-n 2.5) are skipped, with a notice
    f = sampling_gguf("sampling-bad.gguf", true);
    REQUIRE(f);
    s = sampling_args_init();
    fixture_stderr_mute();
    sampling_args_from_model(&s, "serve", f);
    fixture_stderr_restore();
    CHECK(s.from_model == (FT_SAMPLE_TEMP | FT_SAMPLE_TOP_K | FT_SAMPLE_MIN_P) && s.p.top_p == 0.95f &&
              s.p.penalty_last_n == 64,
          "bad values skipped: %#x", s.from_model);
    gguf_close(f);

    s = sampling_args_init();
    sampling_args_describe(&s, d, sizeof(d));
    CHECK(d[0] == 0, "nothing set, nothing described: %s", d);
}

TEST(sampling_overlay_takes_the_named_fields) {
    ft_sampler_params base = ft_sampler_default_params(), over = base;
    over.temp = 0.1f, over.top_k = 3, over.top_p = 0.5f, over.seed = 7;
    ft_sampler_params r = ft_sampler_overlay(base, &over, FT_SAMPLE_TEMP | FT_SAMPLE_SEED);
    CHECK(r.temp == 0.1f && r.seed == 7 && r.top_k == base.top_k && r.top_p == base.top_p, "temp and seed only");
    r = ft_sampler_overlay(base, &over, 0);
    CHECK(!memcmp(&r, &base, sizeof(r)), "no fields: the base");
}
