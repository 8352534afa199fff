// test_moe_bw_profile.c: the bandwidth profile (src/moe/bw_profile.c): its text form's round
// trip and the parser's refusals, the per-machine file name, and the costs it gives hybrid's
// split.
#include "test.h"
#include "../src/moe/bw_profile.h"

#include <stdlib.h>
#include <string.h>

static moe_bw_profile sample(void) {
    moe_bw_profile p = {.gpu = "NVIDIA H100 80GB HBM3",
                        .cpu = "Intel(R) Xeon(R) Processor",
                        .threads = 16,
                        .copy_fixed_us = 6.5,
                        .copy_gbps = 52.25,
                        .meet_us = 12.5,
                        .cpu_fixed_us = 18};
    *moe_bw_rate_add(&p, FT_TYPE_Q4_K) = (moe_bw_rate){FT_TYPE_Q4_K, 61.5, 1400, 7.25};
    *moe_bw_rate_add(&p, FT_TYPE_Q6_K) = (moe_bw_rate){FT_TYPE_Q6_K, 48, 1250.125, 11.5};
    return p;
}

static bool parses(const char *text, moe_bw_profile *out) {
    return moe_bw_profile_parse(text, strlen(text), out, NULL);
}

TEST(moe_bw_profile_round_trips_through_text_and_file) {
    moe_bw_profile p = sample(), q;
    char *s = moe_bw_profile_format(&p);
    ft_err err = {{0}};
    REQUIRE(moe_bw_profile_parse(s, strlen(s), &q, &err), "%s\n%s", err.msg, s);
    free(s);
    CHECK(moe_bw_same_key(&p, &q) && q.n_rates == 2);
    CHECK(q.copy_fixed_us == 6.5 && q.copy_gbps == 52.25 && q.meet_us == 12.5 && q.cpu_fixed_us == 18);
    const moe_bw_rate *r = moe_bw_rate_of(&q, FT_TYPE_Q6_K);
    REQUIRE(r);
    CHECK(r->cpu_gbps == 48 && r->gpu_gbps == 1250.125 && r->cpu_fixed_us == 11.5);
    CHECK(!moe_bw_rate_of(&q, FT_TYPE_Q8_0));
    CHECK(strstr(s = moe_bw_profile_format(&p), "version 2\n") != NULL, "%s", s);
    free(s);

    char path[1200];
    moe_bw_profile_path(&p, test_path("bwdir"), path, sizeof(path));
    CHECK(strstr(path, "/bwdir/bw-") && strstr(path, ".txt"), "%s", path);
    REQUIRE(moe_bw_profile_save(&p, path, &err), "%s", err.msg);
    moe_bw_profile f;
    REQUIRE(moe_bw_profile_load(path, &f, &err), "%s", err.msg);
    CHECK(moe_bw_same_key(&p, &f) && f.n_rates == 2 && f.copy_gbps == 52.25);
}

TEST(moe_bw_profile_path_follows_the_key) {
    moe_bw_profile a = sample(), b = sample(), c = sample(), d = sample();
    b.threads = 8;
    snprintf(c.gpu, sizeof(c.gpu), "NVIDIA GeForce RTX 4090");
    d.copy_gbps = 10; // a figure, not the key
    char pa[256], pb[256], pc[256], pd[256];
    moe_bw_profile_path(&a, "/x", pa, sizeof(pa));
    moe_bw_profile_path(&b, "/x", pb, sizeof(pb));
    moe_bw_profile_path(&c, "/x", pc, sizeof(pc));
    moe_bw_profile_path(&d, "/x", pd, sizeof(pd));
    CHECK(strcmp(pa, pb) != 0 && strcmp(pa, pc) != 0 && strcmp(pb, pc) != 0);
    CHECK(strcmp(pa, pd) == 0);
}

TEST(moe_bw_profile_parser_refuses_what_it_does_not_know) {
    moe_bw_profile p;
    const char *head = "version 1\ngpu g\ncpu c\nthreads 4\n";
    char buf[1024];
    CHECK(parses(head, &p) && p.threads == 4 && p.n_rates == 0);
    // a version 1 file's rates have no fixed cost of their own; version 2's each have one
    CHECK(parses("version 1\ngpu g\ncpu c\nthreads 4\ntype q4_K cpu_gbps 1 gpu_gbps 2\n", &p) && p.n_rates == 1 &&
          p.rates[0].cpu_gbps == 1 && p.rates[0].gpu_gbps == 2 && p.rates[0].cpu_fixed_us == 0);
    CHECK(parses("version 2\ngpu g\ncpu c\nthreads 4\ntype q4_K cpu_gbps 1 gpu_gbps 2 cpu_fixed_us 3.5\n", &p) &&
          p.n_rates == 1 && p.rates[0].cpu_fixed_us == 3.5);
    CHECK(parses("# comment\n\nversion 1\ngpu a b c\ncpu x\nthreads 1", &p) && strcmp(p.gpu, "a b c") == 0);
    const char *bad[] = {
        "",                                            // nothing
        "version 3\ngpu g\ncpu c\nthreads 4\n",        // another version
        "version 1\nversion 2\ngpu g\ncpu c\nthreads 4\n", // twice
        "gpu g\ncpu c\nthreads 4\ntype q4_K cpu_gbps 1 gpu_gbps 2\nversion 1\n", // a rate before it
        "version 1\ngpu g\ncpu c\n",                   // no threads
        "version 1\ngpu g\ncpu c\nthreads 0\n",        // threads out of range
        "version 1\ngpu g\ncpu c\nthreads 2.5\n",      // not whole
        "version 1\ngpu g\ngpu h\ncpu c\nthreads 4\n", // twice
        "version 1\ngpu\ncpu c\nthreads 4\n",          // no value
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(!parses(bad[i], &p), "case %zu", i);
    const char *bad_tail[] = {
        "copy_gbps -1\n",
        "copy_gbps nan\n",
        "copy_gbps inf\n",
        "copy_gbps 1e300\n",
        "copy_gbps 5x\n",
        "meet_us\n",
        "colour blue\n",
        "type q4_K cpu_gbps 1\n",
        "type q9_K cpu_gbps 1 gpu_gbps 2\n",
        "type q4_K gpu_gbps 1 cpu_gbps 2\n",
        "type q4_K cpu_gbps 1 gpu_gbps 2 extra\n",
        "type q4_K cpu_gbps 1 gpu_gbps 2 cpu_fixed_us 3\n", // version 1 ends at gpu_gbps
        "type q4_K cpu_gbps 1 gpu_gbps 2\ntype q4_K cpu_gbps 1 gpu_gbps 2\n",
        "gpu \x01\n",
    };
    for (size_t i = 0; i < sizeof(bad_tail) / sizeof(bad_tail[0]); i++) {
        snprintf(buf, sizeof(buf), "%s%s", head, bad_tail[i]);
        ft_err err = {{0}};
        CHECK(!moe_bw_profile_parse(buf, strlen(buf), &p, &err), "case %zu", i);
        CHECK(err.msg[0], "case %zu has a message", i);
    }
    // a line longer than the format writes, and a NUL inside the text
    char longl[400];
    memset(longl, 'a', sizeof(longl));
    memcpy(longl, "gpu ", 4);
    longl[sizeof(longl) - 1] = 0;
    snprintf(buf, sizeof(buf), "version 1\n%s\ncpu c\nthreads 4\n", longl);
    CHECK(!parses(buf, &p));
    const char nul[] = "version 1\ngpu g\0h\ncpu c\nthreads 4\n";
    CHECK(!moe_bw_profile_parse(nul, sizeof(nul) - 1, &p, NULL));
    CHECK(!moe_bw_profile_load(test_path("no-such-profile.txt"), &p, NULL));
}

TEST(moe_bw_profile_costs_of_an_expert) {
    moe_bw_profile p = sample();
    enum ft_type t[3] = {FT_TYPE_Q4_K, FT_TYPE_Q4_K, FT_TYPE_Q6_K};
    uint64_t b[3] = {1230000, 1230000, 2460000};
    // copy: 6.5 us + 4.92 MB at 52.25 GB/s
    CHECK(fabs(moe_bw_copy_us(&p, b) - (6.5 + 4920000 / 52250.0)) < 1e-9);
    CHECK(fabs(moe_bw_cpu_us(&p, t, b) - (2460000 / 61500.0 + 2460000 / 48000.0)) < 1e-9);
    CHECK(fabs(moe_bw_gpu_us(&p, t, b) - (2460000 / 1400e3 + 2460000 / 1250.125e3)) < 1e-9);
    moe_hybrid_costs c;
    REQUIRE(moe_bw_hybrid_costs(&p, t, b, &c));
    // the layer's fixed cost: the meeting and the larger of its types' own (q6_K's 11.5 us)
    CHECK(moe_bw_cpu_fixed_us(&p, t, b) == 11.5);
    CHECK(c.copy_ns == (uint32_t)(moe_bw_copy_us(&p, b) * 1e3) &&
              c.cpu_ns == (uint32_t)(moe_bw_cpu_us(&p, t, b) * 1e3) && c.meet_ns == 24000,
          "%u %u %u", c.copy_ns, c.cpu_ns, c.meet_ns);
    enum ft_type t4[3] = {FT_TYPE_Q4_K, FT_TYPE_Q4_K, FT_TYPE_Q4_K};
    CHECK(moe_bw_cpu_fixed_us(&p, t4, b) == 7.25);
    uint64_t no_down[3] = {1230000, 1230000, 0}; // an absent bank's type does not count
    CHECK(moe_bw_cpu_fixed_us(&p, t, no_down) == 7.25);
    // a rate without its own (a version 1 file's) takes the profile's
    moe_bw_profile old = sample();
    old.rates[1].cpu_fixed_us = 0;
    CHECK(moe_bw_cpu_fixed_us(&old, t, b) == 18 && moe_bw_cpu_fixed_us(&old, t4, b) == 7.25);
    // a type the profile lacks, and a profile without copies: no costs
    enum ft_type t8[3] = {FT_TYPE_Q8_0, FT_TYPE_Q8_0, FT_TYPE_Q8_0};
    CHECK(moe_bw_cpu_us(&p, t8, b) < 0 && !moe_bw_hybrid_costs(&p, t8, b, &c) && moe_bw_gpu_us(&p, t8, b) == 0);
    moe_bw_profile q = sample();
    q.copy_gbps = 0;
    CHECK(moe_bw_copy_us(&q, b) < 0 && !moe_bw_hybrid_costs(&q, t, b, &c));
    // the table fills up
    moe_bw_profile full = {0};
    for (int i = 0; i < MOE_BW_MAX_TYPES; i++)
        CHECK(moe_bw_rate_add(&full, (enum ft_type)(100 + i)));
    CHECK(!moe_bw_rate_add(&full, (enum ft_type)200) && moe_bw_rate_add(&full, (enum ft_type)100));
}
