// test_moe_cache_plan.c: the GPU expert cache's plan (src/moe/cache_plan.c): the Laguna-S
// figures (docs/expert-cache.md) recomputed from its geometry alone, and the plan's invariants (disjoint
// views inside their arenas, floors, maximal fair share) on random mixed geometries.
#include "fixtures.h"
#include "../src/model/synth.h"
#include "../src/moe/cache_plan.h"
#include "../src/moe/cache_replay.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>

static const double MiB = 1048576.0, GiB = 1073741824.0;

// Bytes of one [3072, 1024] matrix: Q4_K packs 256 weights in 144 bytes, BF16 is 2 bytes each.
static const uint64_t Q4K_MAT = 3072ull * 1024 / 256 * 144, BF16_MAT = 3072ull * 1024 * 2;

// Laguna-S Q4_K_M: a leading dense layer, 39 MoE layers of Q4_K experts, 8 of BF16; 256 experts.
static void laguna_s(moe_geometry *g) {
    moe_layer_geometry ls[47];
    for (int i = 0; i < 47; i++) {
        bool bf16 = i >= 39;
        ls[i] = (moe_layer_geometry){.layer = 1 + i, .n_expert = 256};
        for (int b = 0; b < MOE_BANK_COUNT; b++) {
            ls[i].type[b] = bf16 ? FT_TYPE_BF16 : FT_TYPE_Q4_K;
            ls[i].bytes[b] = bf16 ? BF16_MAT : Q4K_MAT;
        }
    }
    moe_geometry_from_layers(ls, 47, g);
}

static moe_cache_plan_params laguna_params(int n_slots, enum moe_pool_layout layout) {
    moe_cache_plan_params p = moe_cache_plan_default_params();
    p.n_slots = n_slots;
    p.layout = layout;
    p.top_k = 10;
    p.n_running = 1;
    return p;
}

TEST(moe_plan_laguna_s_figures_from_geometry) {
    moe_geometry g;
    laguna_s(&g);
    // the per-expert sizes, and the host copy native against padded
    CHECK(fabs(3 * Q4K_MAT / MiB - 5.06) < 0.005 && 3 * BF16_MAT / MiB == 18.0);
    CHECK(g.n_groups == 2 && g.groups[0].n_layers == 39 && g.groups[1].n_layers == 8);
    CHECK(fabs(g.bytes_native / GiB - 85.4) < 0.05, "native %.2f GiB", g.bytes_native / GiB);
    CHECK(fabs(g.bytes_padded / GiB - 211.5) < 0.05, "padded %.2f GiB", g.bytes_padded / GiB);

    // 480 slots cost 480 x 18 MiB in both layouts
    moe_cache_plan ex, un;
    ft_err err = {{0}};
    moe_cache_plan_params pe = laguna_params(480, MOE_POOL_LAYOUT_EXACT), pu = laguna_params(480, MOE_POOL_LAYOUT_UNIFORM);
    REQUIRE(moe_cache_plan_make(&g, &pe, &ex, &err), "%s", err.msg);
    REQUIRE(moe_cache_plan_make(&g, &pu, &un, &err), "%s", err.msg);
    CHECK(ex.bytes == un.bytes && ex.bytes == 480ull * 3 * BF16_MAT);
    CHECK(un.n_pools == 1 && un.pools[0].n_slots == 480 && un.pools[0].n_layers == 47);
    REQUIRE(ex.n_pools == 2);
    // exact: one token's selections (10 per layer) cost 39 x 10 x 5.06 + 8 x 10 x 18 MiB, so
    // the same bytes hold 8640 / 341.4 = 25.3 slots per layer
    int s0 = ex.pools[0].n_slots / 39, s1 = ex.pools[1].n_slots / 8;
    CHECK(s0 == 25 && s1 == 25, "slots per layer %d and %d", s0, s1);
    CHECK(ex.pools[0].n_slots + ex.pools[1].n_slots >= 25 * 47);
    CHECK(ex.bytes_used <= ex.bytes && ex.bytes - ex.bytes_used < 3 * BF16_MAT,
          "%.1f MiB unused", (ex.bytes - ex.bytes_used) / MiB);

    // One token's selections (10 per layer) take 39 x 10 x 5.06 + 8 x 10 x 18 MiB = 3414 MiB in
    // exact pools; there the uniform layout holds 189 slots, fewer than the 470 selections,
    // so it fails the floor where the exact layout meets it.
    uint64_t one_token = 390ull * 3 * Q4K_MAT + 80ull * 3 * BF16_MAT;
    int uniform_slots = (int)(one_token / (3 * BF16_MAT));
    CHECK(uniform_slots == 189, "uniform holds %d", uniform_slots);
    moe_cache_plan_params pm = laguna_params(0, MOE_POOL_LAYOUT_EXACT);
    int n_min = moe_cache_plan_min_slots(&g, &pm);
    CHECK(n_min == 190, "the exact floor needs %d slots", n_min); // ceil(3414 / 18) with view alignment
    moe_cache_plan_params pmu = laguna_params(0, MOE_POOL_LAYOUT_UNIFORM);
    CHECK(moe_cache_plan_min_slots(&g, &pmu) == 470);
    moe_cache_plan small;
    pm.n_slots = n_min;
    CHECK(moe_cache_plan_make(&g, &pm, &small, &err), "%s", err.msg);
    moe_cache_plan_free(&small);
    pm.n_slots = n_min - 1;
    CHECK(!moe_cache_plan_make(&g, &pm, &small, &err));
    CHECK(strstr(err.msg, "the smallest cache that meets the floor is 190 slots"), "%s", err.msg);
    moe_cache_plan_params pb = laguna_params(n_min, MOE_POOL_LAYOUT_UNIFORM);
    CHECK(!moe_cache_plan_make(&g, &pb, &small, &err));
    CHECK(strstr(err.msg, "below its floor of 470") && strstr(err.msg, "is 470 slots"), "%s", err.msg);
    char text[4096] = {0};
    FILE *mf = fmemopen(text, sizeof(text) - 1, "w");
    moe_cache_plan_print(&ex, mf);
    fclose(mf);
    CHECK(strstr(text, "pool 0: layers 1-39 (39)") && strstr(text, "pool 1: layers 40-47 (8)") &&
              strstr(text, "25.3 per layer"), "%s", text);
    moe_cache_plan_free(&ex);
    moe_cache_plan_free(&un);
    moe_geometry_free(&g);
}

// Random geometries with mixed types per layer and bank, random N, top-k and alignment.
static void random_geometry(ft_rng *rng, moe_geometry *g) {
    static const uint64_t sizes[] = {1769472, 2580480, 6291456, 3342336, 884736};
    moe_layer_geometry ls[24];
    int n = 1 + (int)(ft_rng_next(rng) % 24);
    int n_expert = 8 + (int)(ft_rng_next(rng) % 120);
    for (int i = 0; i < n; i++) {
        ls[i] = (moe_layer_geometry){.layer = 2 * i + (int)(ft_rng_next(rng) % 2), .n_expert = n_expert};
        // few distinct geometries, so groups have several layers
        int kind = (int)(ft_rng_next(rng) % 3);
        for (int b = 0; b < MOE_BANK_COUNT; b++) ls[i].bytes[b] = sizes[(kind + (b == 2 ? kind : 0)) % 5];
    }
    moe_geometry_from_layers(ls, n, g);
}

static bool ranges_overlap(uint64_t a, uint64_t an, uint64_t b, uint64_t bn) {
    return an && bn && a < b + bn && b < a + an;
}

TEST(moe_plan_pools_are_disjoint_inside_arenas_and_fair) {
    ft_rng rng = ft_rng_init(8);
    int n_ok = 0, n_floor = 0;
    for (int iter = 0; iter < 400; iter++) {
        moe_geometry g;
        random_geometry(&rng, &g);
        moe_cache_plan_params p = moe_cache_plan_default_params();
        p.layout = ft_rng_next(&rng) % 4 ? MOE_POOL_LAYOUT_EXACT : MOE_POOL_LAYOUT_UNIFORM;
        p.top_k = 1 + (int)(ft_rng_next(&rng) % 8);
        p.n_running = 1 + (int)(ft_rng_next(&rng) % 3);
        p.view_align = 1ull << (ft_rng_next(&rng) % 13);
        int n_min = moe_cache_plan_min_slots(&g, &p);
        p.n_slots = 1 + (int)(ft_rng_next(&rng) % (uint64_t)(3 * n_min + 2));
        moe_cache_plan plan;
        ft_err err = {{0}};
        bool ok = moe_cache_plan_make(&g, &p, &plan, &err);
        CHECK(ok == (p.n_slots >= n_min), "N %d, min %d: %s", p.n_slots, n_min, ok ? "planned" : err.msg);
        if (!ok) {
            n_floor++;
            moe_geometry_free(&g);
            continue;
        }
        n_ok++;
        CHECK(plan.n_pools == (p.layout == MOE_POOL_LAYOUT_EXACT ? g.n_groups : 1));
        int fpl = FT_MIN(p.top_k * p.n_running, g.layers[0].n_expert);
        int covered = 0;
        for (int k = 0; k < plan.n_pools; k++) {
            const moe_pool_plan *a = &plan.pools[k];
            covered += a->n_layers;
            CHECK(a->n_slots >= fpl * a->n_layers, "pool %d: %d slots for %d layers", k, a->n_slots, a->n_layers);
            CHECK(a->n_slots <= a->n_layers * g.layers[0].n_expert);
            for (int i = 0; i < a->n_layers; i++) CHECK(plan.pool_of_block[a->layers[i]] == k);
            for (int b = 0; b < MOE_BANK_COUNT; b++) {
                uint64_t len = (uint64_t)a->n_slots * a->stride[b];
                bool aligned = a->offset[b] % p.view_align == 0;
                CHECK(aligned);
                CHECK(a->offset[b] + len <= plan.arena_bytes[b], "pool %d bank %d past its arena", k, b);
                CHECK(plan.arena_bytes[b] == (uint64_t)p.n_slots * plan.max_stride[b]);
                for (int j = 0; j < k; j++)
                    CHECK(!ranges_overlap(a->offset[b], len, plan.pools[j].offset[b],
                                          (uint64_t)plan.pools[j].n_slots * plan.pools[j].stride[b]),
                          "pools %d and %d overlap in bank %d", j, k, b);
            }
            // maximal: one more slot in a pool that is not full would not fit
            if (p.layout == MOE_POOL_LAYOUT_EXACT && a->n_slots < a->n_expert_total) {
                bool fits = true;
                for (int b = 0; b < MOE_BANK_COUNT; b++) {
                    // the views after pool k move by at most one stride (plus alignment)
                    uint64_t end = 0;
                    for (int j = 0; j < plan.n_pools; j++) {
                        end = (end + p.view_align - 1) / p.view_align * p.view_align;
                        end += (uint64_t)(plan.pools[j].n_slots + (j == k)) * plan.pools[j].stride[b];
                    }
                    fits &= end <= plan.arena_bytes[b];
                }
                CHECK(!fits, "pool %d could hold one more slot", k);
            }
        }
        CHECK(covered == g.n_layers);
        // fair share: s, the fewest slots per layer of any pool that is not full, is the
        // largest share that fits: s + 1 per layer in every pool (capped at full) does not
        if (p.layout == MOE_POOL_LAYOUT_EXACT) {
            int64_t share = -1;
            for (int k = 0; k < plan.n_pools; k++) {
                const moe_pool_plan *a = &plan.pools[k];
                if (a->n_slots < a->n_expert_total && (share < 0 || a->n_slots / a->n_layers < share))
                    share = a->n_slots / a->n_layers;
            }
            for (int k = 0; k < plan.n_pools && share >= 0; k++)
                CHECK(plan.pools[k].n_slots >= FT_MIN(share * plan.pools[k].n_layers, (int64_t)plan.pools[k].n_expert_total));
            if (share >= 0) {
                bool fits = true;
                for (int b = 0; b < MOE_BANK_COUNT; b++) {
                    uint64_t end = 0;
                    for (int j = 0; j < plan.n_pools; j++) {
                        end = (end + p.view_align - 1) / p.view_align * p.view_align;
                        int64_t c = FT_MIN((share + 1) * plan.pools[j].n_layers, (int64_t)plan.pools[j].n_expert_total);
                        end += (uint64_t)c * plan.pools[j].stride[b];
                    }
                    fits &= end <= plan.arena_bytes[b];
                }
                CHECK(!fits, "a share of %lld per layer would fit", (long long)share + 1);
            }
        }
        moe_cache_plan_free(&plan);
        moe_geometry_free(&g);
    }
    CHECK(n_ok > 100 && n_floor > 20, "%d planned, %d below the floor", n_ok, n_floor);
}

TEST(moe_plan_sized_from_a_budget) {
    moe_geometry g;
    laguna_s(&g);
    moe_cache_plan_params p = laguna_params(0, MOE_POOL_LAYOUT_EXACT);
    p.vram_free = 16ull << 30;
    p.memory_ratio = 0.95;
    p.dense_bytes = 2000ull << 20;
    p.workspace_bytes = 500ull << 20;
    p.kv_bytes_per_token = 48 * 1024;
    p.kv_reserve_tokens = 8192;
    double budget = 16.0 * 1024 * 0.95 - 2000 - 500 - 48.0 * 8192 / 1024; // MiB
    moe_cache_plan plan;
    ft_err err = {{0}};
    REQUIRE(moe_cache_plan_make(&g, &p, &plan, &err), "%s", err.msg);
    CHECK(plan.n_slots == (int)(budget / 18.0), "%d slots from %.1f MiB", plan.n_slots, budget);
    CHECK(fabs(plan.budget / MiB - budget) < 1e-3 && plan.bytes <= plan.budget);
    moe_cache_plan_free(&plan);
    // a budget that holds fewer slots than the floor needs: the error names the floor
    p.dense_bytes = (uint64_t)((16.0 * 1024 * 0.95 - 500 - 384 - 100 * 18.0) * MiB);
    CHECK(!moe_cache_plan_make(&g, &p, &plan, &err));
    CHECK(strstr(err.msg, "an expert cache of 100 slots") && strstr(err.msg, "190 slots"), "%s", err.msg);
    // nothing left at all
    p.dense_bytes = 16ull << 30;
    CHECK(!moe_cache_plan_make(&g, &p, &plan, &err));
    CHECK(strstr(err.msg, "no room for an expert cache"), "%s", err.msg);
    // a budget beyond the whole model caches every expert and no more
    p.vram_free = 1ull << 40;
    p.dense_bytes = 0;
    REQUIRE(moe_cache_plan_make(&g, &p, &plan, &err), "%s", err.msg);
    CHECK(plan.n_slots == 47 * 256 && plan.pools[0].n_slots == 39 * 256 && plan.pools[1].n_slots == 8 * 256);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
}

// `ft inspect --moe-cache-size` prints the plan of a real file (mixed Q4_K and BF16 layers).
TEST(moe_plan_cli_prints_the_plan_of_a_file) {
    ft_synth_params sp = fixture_moe_params(5, 16);
    fixture_expert_types(&sp, "q4_K,q4_K,q4_K,bf16", NULL);
    const char *model = fixture_write(&sp, "plan_model.gguf");
    REQUIRE(model);
    char cmd[1024], out[16384];
    snprintf(cmd, sizeof(cmd), "%s inspect %s --moe-cache-size 12 | grep -A8 'expert cache plan'", test_ft_bin(), model);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    // BF16 256x256 is 128 KiB per bank; Q4_K 36 KiB: 12 slots = 4.5 MiB
    CHECK(strstr(out, "12 slots priced at 0.38 MiB each") && strstr(out, "pool 0: layers 0-2 (3)") &&
              strstr(out, "pool 1: layers 3-4 (2)") && strstr(out, "the uniform layout in the same bytes: 12 slots"),
          "%s", out);
    snprintf(cmd, sizeof(cmd), "%s inspect %s --moe-cache-size 12 --moe-pool-layout uniform --running 2 2>&1 >/dev/null",
             test_ft_bin(), model);
    CHECK(test_run(cmd, out, sizeof(out)) == 1 && strstr(out, "below its floor of 20"), "%s", out);
    snprintf(cmd, sizeof(cmd), "%s inspect %s --moe-pool-layout diagonal 2>&1", test_ft_bin(), model);
    CHECK(test_run(cmd, out, sizeof(out)) == 2, "%s", out);
}

// A model whose MoE layers all share one geometry has one pool in either layout, with the
// same slots: the exact layout changes nothing there.
TEST(moe_plan_uniform_geometry_is_one_pool) {
    moe_layer_geometry ls[6];
    for (int i = 0; i < 6; i++) ls[i] = (moe_layer_geometry){.layer = i, .n_expert = 128, .bytes = {1769472, 1769472, 2580480}};
    moe_geometry g;
    moe_geometry_from_layers(ls, 6, &g);
    moe_cache_plan a, b;
    moe_cache_plan_params p = laguna_params(100, MOE_POOL_LAYOUT_EXACT);
    p.top_k = 8;
    REQUIRE(moe_cache_plan_make(&g, &p, &a, NULL));
    p.layout = MOE_POOL_LAYOUT_UNIFORM;
    REQUIRE(moe_cache_plan_make(&g, &p, &b, NULL));
    CHECK(a.n_pools == 1 && b.n_pools == 1 && a.pools[0].n_slots == 100 && b.pools[0].n_slots == 100);
    CHECK(a.bytes == b.bytes && a.bytes_used == a.bytes && a.bytes == 100ull * (2 * 1769472 + 2580480));
    moe_cache_plan_free(&a);
    moe_cache_plan_free(&b);
    moe_geometry_free(&g);
}

// A calibrated trace replayed through Laguna-S's plans at 480 slots: exact pools, holding 2.5x
// the slots per layer in the same bytes, hit more often and copy fewer bytes per step than the
// uniform layout. Totals agree with the trace's size.
TEST(moe_plan_replay_exact_against_uniform_on_laguna_s) {
    moe_geometry g;
    laguna_s(&g);
    int blocks[47];
    for (int i = 0; i < 47; i++) blocks[i] = 1 + i;
    moe_trace_gen_params tp = moe_trace_gen_default_params(); // calibrated for 256 experts, top-10
    tp.n_layers = 47;
    tp.layers = blocks;
    tp.n_steps = 300;
    tp.seed = 9;
    moe_route_trace t;
    ft_err err = {{0}};
    REQUIRE(moe_trace_generate(&tp, &t, &err), "%s", err.msg);
    double rate[2], mib_per_step[2];
    for (int lay = 0; lay < 2; lay++) {
        moe_cache_plan plan;
        moe_cache_plan_params p = laguna_params(480, lay ? MOE_POOL_LAYOUT_UNIFORM : MOE_POOL_LAYOUT_EXACT);
        REQUIRE(moe_cache_plan_make(&g, &p, &plan, &err), "%s", err.msg);
        moe_replay_result r;
        REQUIRE(moe_cache_replay(&plan, &g, &t, 50, &r, &err), "%s", err.msg);
        CHECK(r.steps == 250 && r.total.selections == 250ull * 47 * 10 && r.total.hits + r.total.misses == r.total.selections);
        rate[lay] = (double)r.total.hits / (double)r.total.selections;
        mib_per_step[lay] = (double)r.total.bytes_copied / 250 / MiB;
        moe_replay_result_free(&r);
        moe_cache_plan_free(&plan);
    }
    CHECK(rate[0] > rate[1] + 0.1 && mib_per_step[0] < mib_per_step[1], "exact %.3f (%.0f MiB/step), uniform %.3f (%.0f)",
          rate[0], mib_per_step[0], rate[1], mib_per_step[1]);
    // a trace that does not fit the model is refused
    moe_cache_plan plan;
    moe_cache_plan_params p = laguna_params(480, MOE_POOL_LAYOUT_EXACT);
    REQUIRE(moe_cache_plan_make(&g, &p, &plan, &err));
    moe_replay_result r;
    t.layers[0] = 0; // block 0 is Laguna-S's dense layer
    CHECK(!moe_cache_replay(&plan, &g, &t, 0, &r, &err) && strstr(err.msg, "block 0"), "%s", err.msg);
    moe_cache_plan_free(&plan);
    moe_route_trace_free(&t);
    moe_geometry_free(&g);
}
