// test_moe_route_trace.c: route traces (src/moe/route_trace.c): the file format round trip,
// the reader's validation of every field, and the generator's calibration measured with the
// expert cache's LRU (a fixed seed, independent of the seed the calibration used).
#include "fixtures.h"
#include "../src/model/synth.h"
#include "../src/moe/route_trace.h"

#include <stdlib.h>
#include <string.h>

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

// A valid trace image built by hand from the format description: 2 layers (blocks 3 and 7),
// 6 experts, top-2, 2 sequences, 3 steps.
static size_t hand_trace(uint8_t *buf) {
    memcpy(buf, "FTRT", 4);
    put32(buf + 4, 1);
    put32(buf + 8, 2);
    put32(buf + 12, 6);
    put32(buf + 16, 2);
    put32(buf + 20, 2);
    put32(buf + 24, 3);
    put32(buf + 28, 0);
    put32(buf + 32, 3);
    put32(buf + 36, 7);
    uint8_t *ids = buf + 40;
    for (int i = 0; i < 3 * 2 * 2 * 2; i++) {
        // pairs (i % 6, (i + 1) % 6) are distinct within each sequence
        int pair = i / 2, e = (pair + (i % 2)) % 6;
        ids[2 * i] = (uint8_t)e;
        ids[2 * i + 1] = 0;
    }
    return 40 + 2 * 24;
}

TEST(moe_trace_reads_a_hand_made_file_and_round_trips) {
    uint8_t buf[256];
    size_t n = hand_trace(buf);
    moe_route_trace t;
    ft_err err = {{0}};
    REQUIRE(moe_route_trace_parse(buf, n, &t, &err), "%s", err.msg);
    CHECK(t.n_layers == 2 && t.layers[0] == 3 && t.layers[1] == 7 && t.n_expert == 6 && t.top_k == 2 &&
          t.n_seq == 2 && t.n_steps == 3);
    // step 1, layer index 1, sequence 0 is pair number (1 x 2 + 1) x 2 + 0 = 6: experts 0 and 1
    const uint16_t *sel = moe_route_trace_at(&t, 1, 1);
    CHECK(sel[0] == 0 && sel[1] == 1 && sel[2] == 1 && sel[3] == 2, "%d %d %d %d", sel[0], sel[1], sel[2], sel[3]);
    const char *path = test_path("hand.ftrt");
    REQUIRE(moe_route_trace_write(&t, path, &err), "%s", err.msg);
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    uint8_t back[256];
    size_t m = fread(back, 1, sizeof(back), f);
    fclose(f);
    CHECK(m == n && !memcmp(back, buf, n), "written file differs from the hand-made one");
    moe_route_trace r;
    REQUIRE(moe_route_trace_read(path, &r, &err), "%s", err.msg);
    CHECK(r.n_steps == 3 && !memcmp(r.experts, t.experts, 24 * sizeof(uint16_t)));
    moe_route_trace_free(&r);
    moe_route_trace_free(&t);
    moe_route_trace_free(NULL);
}

// Writes a fuzz seed when FT_TRACE_SEED_DIR is set.
TEST(moe_trace_rejects_every_malformed_field) {
    uint8_t good[256], buf[256];
    size_t n = hand_trace(good);
    const char *seed_dir = getenv("FT_TRACE_SEED_DIR");
    if (seed_dir) {
        char p[512];
        snprintf(p, sizeof(p), "%s/hand.ftrt", seed_dir);
        FILE *f = fopen(p, "wb");
        if (f) fwrite(good, 1, n, f), fclose(f);
    }
    struct {
        size_t at;     // byte offset to patch (u32), or SIZE_MAX to change the length
        uint32_t value;
        size_t len;    // the length to parse
        const char *msg;
    } cases[] = {
        {0, 0x54525446 ^ 1, 0, "bad magic"},
        {4, 3, 0, "version 3"},
        {4, 2, 0, "the header describes"},           // version 2 needs the predictions after the ids
        {8, 0, 0, "n_layers 0"},
        {8, MOE_TRACE_MAX_LAYERS + 1, 0, "n_layers"},
        {12, 0, 0, "n_expert 0"},
        {12, 70000, 0, "n_expert 70000"},
        {16, 0, 0, "top_k 0"},
        {16, 7, 0, "top_k 7"},
        {20, 0, 0, "n_seq 0"},
        {24, 0, 0, "n_steps 0"},
        {28, 0x40000000, 0, "larger than"},          // n_steps beyond the size limit
        {28, 0xffffffff, 0, "larger than"},          // overflow of the id count
        {24, 4, 0, "the header describes"},          // one step more than the bytes hold
        {36, 3, 0, "must ascend"},                   // layers 3, 3
        {40, 6, 0, "out of range"},                  // expert id 6 of 6
        {40, 0x00010001, 0, "selected twice"},       // ids 1, 1 in one sequence
        {SIZE_MAX, 0, 0, "shorter than"},            // empty
        {SIZE_MAX, 0, 31, "shorter than"},           // header cut
        {SIZE_MAX, 0, 39, "the header describes"},   // layer list cut
        {SIZE_MAX, 0, 87, "the header describes"},   // one byte short
        {SIZE_MAX, 0, 89, "the header describes"},   // one byte too many
    };
    for (size_t c = 0; c < FT_ARRAY_LEN(cases); c++) {
        memcpy(buf, good, n);
        buf[n] = 0;
        size_t len = n;
        if (cases[c].at == SIZE_MAX) len = cases[c].len;
        else put32(buf + cases[c].at, cases[c].value);
        moe_route_trace t;
        ft_err err = {{0}};
        CHECK(!moe_route_trace_parse(buf, len, &t, &err), "case %zu (%s) accepted", c, cases[c].msg);
        CHECK(strstr(err.msg, cases[c].msg), "case %zu: '%s' lacks '%s'", c, err.msg, cases[c].msg);
    }
    // every truncation of a valid file is refused
    for (size_t len = 0; len < n; len++) {
        moe_route_trace t;
        CHECK(!moe_route_trace_parse(good, len, &t, NULL), "accepted %zu of %zu bytes", len, n);
    }
    moe_route_trace t;
    ft_err err = {{0}};
    CHECK(!moe_route_trace_read(test_path("no-such.ftrt"), &t, &err) && strstr(err.msg, "cannot open"));
}

static void check_calibration(const moe_trace_gen_params *p, const char *what) {
    moe_route_trace t;
    ft_err err = {{0}};
    REQUIRE(moe_trace_generate(p, &t, &err), "%s", err.msg);
    double h8 = moe_route_trace_lru_hit_rate(&t, p->n_expert / 8, 100);
    double h4 = moe_route_trace_lru_hit_rate(&t, p->n_expert / 4, 100);
    // Tolerance: 3 points of hit rate, the spread seen between seeds is under 1.5.
    CHECK(fabs(h8 - MOE_TRACE_TARGET_HIT_8TH) < 0.03 && fabs(h4 - MOE_TRACE_TARGET_HIT_4TH) < 0.03,
          "%s: LRU at 12.5%% hits %.3f, at 25%% %.3f", what, h8, h4);
    // and routing without the generator's structure would hit near the cached fraction
    CHECK(h8 > 0.125 + 0.3 && h4 > h8 + 0.08, "%s: %.3f %.3f", what, h8, h4);
    // each (step, layer, sequence) selects distinct experts: the trace writes and reads back
    const char *path = test_path("gen.ftrt");
    REQUIRE(moe_route_trace_write(&t, path, &err), "%s", err.msg);
    moe_route_trace r;
    CHECK(moe_route_trace_read(path, &r, &err), "%s", err.msg);
    moe_route_trace_free(&r);
    moe_route_trace_free(&t);
}

TEST(moe_trace_generator_defaults_hit_the_published_rates) {
    moe_trace_gen_params p = moe_trace_gen_default_params(); // Laguna-like: 256 experts, top-10
    p.seed = 2024;
    p.n_layers = 12;
    p.n_steps = 1500;
    check_calibration(&p, "defaults (256 experts, top-10)");
    // the generator is deterministic in its seed
    moe_route_trace a, b;
    p.n_steps = 50;
    REQUIRE(moe_trace_generate(&p, &a, NULL) && moe_trace_generate(&p, &b, NULL));
    CHECK(!memcmp(a.experts, b.experts, 50ull * 12 * 10 * sizeof(uint16_t)));
    moe_route_trace_free(&a);
    moe_route_trace_free(&b);
}

TEST(moe_trace_calibration_for_another_shape) {
    moe_trace_gen_params p = moe_trace_gen_default_params();
    p.n_expert = 128; // Qwen3-30B-A3B's shape
    p.top_k = 8;
    ft_err err = {{0}};
    REQUIRE(moe_trace_gen_calibrate(&p, &err), "%s", err.msg);
    p.seed = 77;
    p.n_layers = 12;
    p.n_steps = 1500;
    check_calibration(&p, "calibrated (128 experts, top-8)");
    moe_trace_gen_params bad = moe_trace_gen_default_params();
    bad.n_expert = 64;
    bad.top_k = 9;
    CHECK(!moe_trace_gen_calibrate(&bad, &err) && strstr(err.msg, "fewer than top-k"));
    bad = moe_trace_gen_default_params();
    bad.reuse = 1.0;
    moe_route_trace t;
    CHECK(!moe_trace_generate(&bad, &t, &err) && strstr(err.msg, "reuse"));
}

// `ft trace-gen --model` takes the routing shape from the file and writes a trace that reads back.
TEST(moe_trace_gen_cli_takes_the_shape_from_a_model) {
    ft_synth_params sp = fixture_moe_params(3, 16);
    const char *model = fixture_write(&sp, "trace_model.gguf");
    REQUIRE(model);
    ft_err err = {{0}};
    const char *trace = test_path("cli.ftrt");
    char cmd[1024], out[2048];
    snprintf(cmd, sizeof(cmd), "%s trace-gen --model %s -o %s --steps 200 --seed 3", test_ft_bin(), model, trace);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    CHECK(strstr(out, "3 layers, 16 experts, top-2") && strstr(out, "25.0"), "%s", out);
    moe_route_trace t;
    REQUIRE(moe_route_trace_read(trace, &t, &err), "%s", err.msg);
    CHECK(t.n_layers == 3 && t.layers[2] == 2 && t.n_expert == 16 && t.top_k == 2 && t.n_steps == 200);
    moe_route_trace_free(&t);
    snprintf(cmd, sizeof(cmd), "%s trace-gen -o %s --experts 16 --top-k 3 2>&1", test_ft_bin(), trace);
    CHECK(test_run(cmd, out, sizeof(out)) == 1 && strstr(out, "fewer than top-k"), "%s", out);
}

// A version-2 image: the hand-made trace followed by predictions (each group the next pair).
static size_t hand_trace_v2(uint8_t *buf) {
    size_t n = hand_trace(buf);
    put32(buf + 4, 2);
    for (int i = 0; i < 24; i++) {
        int pair = i / 2, e = (pair + 1 + (i % 2)) % 6;
        buf[n + 2 * i] = (uint8_t)e;
        buf[n + 2 * i + 1] = 0;
    }
    return n + 48;
}

TEST(moe_trace_version_2_carries_predictions) {
    uint8_t buf[256], back[256];
    size_t n = hand_trace_v2(buf);
    moe_route_trace t;
    ft_err err = {{0}};
    REQUIRE(moe_route_trace_parse(buf, n, &t, &err), "%s", err.msg);
    REQUIRE(t.predicted);
    // step 1, layer index 1, sequence 0 predicted pair 6 + 1: experts 1 and 2
    const uint16_t *pr = moe_route_trace_predicted_at(&t, 1, 1);
    CHECK(pr[0] == 1 && pr[1] == 2, "%d %d", pr[0], pr[1]);
    // of each group of 2 the guess (p+1, p+2) shares exactly one expert with (p, p+1)
    CHECK(fabs(moe_route_trace_predict_accuracy(&t, -1) - 0.5) < 1e-12 &&
          fabs(moe_route_trace_predict_accuracy(&t, 1) - 0.5) < 1e-12);
    const char *path = test_path("hand2.ftrt");
    REQUIRE(moe_route_trace_write(&t, path, &err), "%s", err.msg);
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    size_t m = fread(back, 1, sizeof(back), f);
    fclose(f);
    CHECK(m == n && !memcmp(back, buf, n), "written version 2 file differs from the hand-made one");
    // without predictions the same trace is written as version 1, byte for byte as before
    free(t.predicted);
    t.predicted = NULL;
    REQUIRE(moe_route_trace_write(&t, path, &err), "%s", err.msg);
    f = fopen(path, "rb");
    REQUIRE(f);
    m = fread(back, 1, sizeof(back), f);
    fclose(f);
    uint8_t v1[256];
    size_t n1 = hand_trace(v1);
    CHECK(m == n1 && !memcmp(back, v1, n1), "a trace without predictions is not the version 1 file");
    moe_route_trace_free(&t);
    // the predictions are validated as the ids are
    struct {
        size_t at;
        uint8_t value;
        const char *msg;
    } cases[] = {
        {88, 6, "predicted expert 6 is out of range"},
        {88, 2, "predicted expert 2 is selected twice"}, // group (1, 2) -> (2, 2)
        {n - 2, 9, "step 2, layer entry 1, sequence 1: predicted expert 9"},
    };
    for (size_t c = 0; c < FT_ARRAY_LEN(cases); c++) {
        memcpy(back, buf, n);
        back[cases[c].at] = cases[c].value;
        CHECK(!moe_route_trace_parse(back, n, &t, &err) && strstr(err.msg, cases[c].msg), "case %zu: %s", c, err.msg);
    }
    for (size_t len = 0; len < n; len++) CHECK(!moe_route_trace_parse(buf, len, &t, NULL), "accepted %zu bytes", len);
}

// The generator's realistic mode: per-layer skews, reuse calibrated to stated levels, a
// predictor at a stated accuracy; every figure measured on the written trace (another seed
// than the calibration's) against what was asked.
static void check_reuse_levels(int n_expert, int top_k, double zlo, double zhi, double r1, double r8, double acc) {
    moe_trace_gen_params p = moe_trace_gen_default_params();
    p.n_layers = 24;
    p.n_expert = n_expert;
    p.top_k = top_k;
    p.zipf_s = zlo;
    p.zipf_max = zhi;
    p.predict_accuracy = acc;
    ft_err err = {{0}};
    REQUIRE(moe_trace_gen_calibrate_reuse(&p, r1, r8, 8, &err), "%s", err.msg);
    p.seed = 99;
    p.n_steps = 1200;
    moe_route_trace t;
    REQUIRE(moe_trace_generate(&p, &t, &err), "%s", err.msg);
    double next, recent;
    moe_route_trace_reuse(&t, -1, 8, &next, &recent);
    // Tolerance 2 points: the calibration's bisection lands within 0.3 and a seed moves them by
    // under 0.5 at this size.
    CHECK(fabs(next - r1) < 0.02 && fabs(recent - r8) < 0.02, "%d experts top-%d: asked %.2f / %.2f, measured %.3f / %.3f",
          n_expert, top_k, r1, r8, next, recent);
    double a = moe_route_trace_predict_accuracy(&t, -1);
    CHECK(fabs(a - acc) < 0.01, "predictions asked %.2f, measured %.3f", acc, a);
    for (int li = 0; li < t.n_layers; li += 7) {
        double al = moe_route_trace_predict_accuracy(&t, li);
        CHECK(fabs(al - acc) < 0.03, "layer %d: predictions %.3f", li, al);
    }
    // heterogeneity: at 12.5% of the experts the most skewed layer hits far more than the least
    double skew[24];
    moe_trace_gen_layer_skews(&p, skew);
    int hot = 0, flat = 0;
    for (int li = 1; li < 24; li++) {
        if (skew[li] > skew[hot]) hot = li;
        if (skew[li] < skew[flat]) flat = li;
    }
    CHECK(fabs(skew[hot] - zhi) < 1e-12 && fabs(skew[flat] - zlo) < 1e-12);
    double h[2];
    int pick[2] = {hot, flat};
    for (int i = 0; i < 2; i++) {
        moe_route_trace one = t;
        uint16_t *ids = malloc((size_t)t.n_steps * top_k * sizeof(uint16_t));
        for (int64_t st = 0; st < t.n_steps; st++)
            memcpy(ids + st * top_k, moe_route_trace_at(&t, st, pick[i]), top_k * sizeof(uint16_t));
        one.n_layers = 1;
        one.layers = &t.layers[pick[i]];
        one.experts = ids;
        one.predicted = NULL;
        h[i] = moe_route_trace_lru_hit_rate(&one, n_expert / 8, 100);
        free(ids);
    }
    CHECK(h[0] > h[1] + 0.05, "skew %.2f layer hits %.3f, skew %.2f layer %.3f", zhi, h[0], zlo, h[1]);
    // the routing is the same without the predictions
    moe_trace_gen_params q = p;
    q.predict_accuracy = 0;
    moe_route_trace u;
    REQUIRE(moe_trace_generate(&q, &u, &err), "%s", err.msg);
    CHECK(!u.predicted && !memcmp(u.experts, t.experts, (size_t)t.n_steps * 24 * top_k * sizeof(uint16_t)));
    // and it writes and reads back as version 2
    const char *path = test_path("gen2.ftrt");
    REQUIRE(moe_route_trace_write(&t, path, &err), "%s", err.msg);
    moe_route_trace r;
    REQUIRE(moe_route_trace_read(path, &r, &err), "%s", err.msg);
    CHECK(r.predicted && !memcmp(r.predicted, t.predicted, (size_t)t.n_steps * 24 * top_k * sizeof(uint16_t)));
    moe_route_trace_free(&r);
    moe_route_trace_free(&u);
    moe_route_trace_free(&t);
}

TEST(moe_trace_generator_meets_stated_reuse_and_prediction_levels) {
    check_reuse_levels(128, 8, 0.2, 1.6, 0.45, 0.80, 0.85); // Qwen3-30B-A3B's published levels
    check_reuse_levels(256, 10, 0.0, 1.2, 0.30, 0.60, 0.70);
    check_reuse_levels(64, 4, 0.4, 1.0, 0.55, 0.90, 0.95);
    moe_trace_gen_params p = moe_trace_gen_default_params();
    ft_err err = {{0}};
    CHECK(!moe_trace_gen_calibrate_reuse(&p, 0.8, 0.5, 8, &err) && strstr(err.msg, "levels"), "%s", err.msg);
    p.zipf_s = 1.0;
    p.zipf_max = 0.5;
    moe_route_trace t;
    CHECK(!moe_trace_generate(&p, &t, &err) && strstr(err.msg, "largest skew"), "%s", err.msg);
    p = moe_trace_gen_default_params();
    p.reuse_next = 0.5;
    p.reuse = 0.5;
    CHECK(!moe_trace_generate(&p, &t, &err) && strstr(err.msg, "reuse_next"), "%s", err.msg);
}

// `ft trace-gen --like qwen3-30b-a3b` prints the levels it measures on the written trace.
TEST(moe_trace_gen_cli_realistic_preset) {
    const char *trace = test_path("like.ftrt");
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof(cmd), "%s trace-gen --like qwen3-30b-a3b --layers 16 --steps 400 -o %s", test_ft_bin(), trace);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    CHECK(strstr(out, "16 layers, 128 experts, top-8") && strstr(out, "zipf 0.200 to 1.600") &&
          strstr(out, "predictions: accuracy 0.8"), "%s", out);
    double next = 0, recent = 0;
    const char *r = strstr(out, "reuse: ");
    int got = r ? sscanf(r, "reuse: %lf of the selections repeat the step before", &next) : 0;
    r = r ? strstr(r, "), ") : NULL;
    got += r ? sscanf(r, "), %lf within 8", &recent) : 0;
    REQUIRE(got == 2, "%s", out);
    CHECK(fabs(next - 0.45) < 0.03 && fabs(recent - 0.80) < 0.03, "%s", out);
    moe_route_trace t;
    ft_err err = {{0}};
    REQUIRE(moe_route_trace_read(trace, &t, &err), "%s", err.msg);
    CHECK(t.n_layers == 16 && t.predicted);
    moe_route_trace_free(&t);
    snprintf(cmd, sizeof(cmd), "%s trace-gen -o %s --repeat-next 0.4 --reuse 0.3 2>&1", test_ft_bin(), trace);
    CHECK(test_run(cmd, out, sizeof(out)) == 2 && strstr(out, "go together"), "%s", out);
    snprintf(cmd, sizeof(cmd), "%s trace-gen -o %s --like mixtral 2>&1", test_ft_bin(), trace);
    CHECK(test_run(cmd, out, sizeof(out)) == 2 && strstr(out, "--like"), "%s", out);
}
