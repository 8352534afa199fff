// test_moe_cache_replay.c: the replay of route traces (src/moe/cache_replay.c) and the cache's
// self-sizing, frecency victims and prefetch (src/moe/expert_cache.c): the self-sizing machinery
// with no moves decides as the fixed ranges do, the shadow tags and a move by the contract on a
// hand-made case, the invariants and churn bound of every rebalance, Belady above every policy on
// generated traces, prefetch's accounting against perfect and useless guesses, `ft replay`.
#include "fixtures.h"
#include "../src/model/synth.h"
#include "../src/moe/cache_replay.h"
#include "../src/util/rng.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

// n_layers blocks 0.. of one geometry (one pool), or with two_pools the odd blocks another.
static void geometry(moe_geometry *g, int n_layers, int n_expert, bool two_pools) {
    moe_layer_geometry *ls = calloc((size_t)n_layers, sizeof(*ls));
    for (int i = 0; i < n_layers; i++) {
        ls[i] = (moe_layer_geometry){.layer = i, .n_expert = n_expert};
        for (int b = 0; b < MOE_BANK_COUNT; b++) ls[i].bytes[b] = two_pools && i % 2 ? 700 : 100 + 100 * b;
    }
    moe_geometry_from_layers(ls, n_layers, g);
    free(ls);
}

static bool plan_for(const moe_geometry *g, int n_slots, int top_k, int n_running, moe_cache_plan *plan) {
    moe_cache_plan_params p = moe_cache_plan_default_params();
    p.n_slots = n_slots;
    p.top_k = top_k;
    p.n_running = n_running;
    p.view_align = 1;
    ft_err err = {{0}};
    bool ok = moe_cache_plan_make(g, &p, plan, &err);
    CHECK(ok, "%s", err.msg);
    return ok;
}

static moe_route_trace heterogeneous_trace(int n_layers, int n_expert, int top_k, int n_seq, int64_t steps,
                                           uint64_t seed, double accuracy) {
    moe_trace_gen_params p = moe_trace_gen_default_params();
    p.n_layers = n_layers;
    p.n_expert = n_expert;
    p.top_k = top_k;
    p.n_seq = n_seq;
    p.n_steps = steps;
    p.zipf_s = 0;
    p.zipf_max = 3;
    p.reuse_next = 0.25;
    p.reuse = 0.35;
    p.reuse_window = 8;
    p.predict_accuracy = accuracy;
    p.seed = seed;
    moe_route_trace t;
    FT_ASSERT(moe_trace_generate(&p, &t, NULL));
    return t;
}

// Self-sizing that never moves (max_moves 0) scans a layer's slots by owner over the whole pool
// instead of its range: every decision must equal the fixed ranges'.
TEST(moe_sizing_without_moves_decides_as_fixed_ranges) {
    moe_geometry g;
    geometry(&g, 6, 32, true);
    moe_cache_plan plan;
    REQUIRE(plan_for(&g, 40, 3, 2, &plan));
    moe_route_trace t = heterogeneous_trace(6, 32, 3, 2, 300, 5, 0);
    moe_cache_policy_params still = moe_cache_sizing_default_params();
    still.max_moves = 0;
    moe_expert_cache *a = moe_expert_cache_init(&plan, &g), *b = moe_expert_cache_init_policy(&plan, &g, &still);
    int32_t ex[6], sa[6], sb[6];
    moe_cache_copy ca[6], cb[6];
    for (int64_t step = 0; step < t.n_steps; step++) {
        for (int li = 0; li < 6; li++) {
            for (int i = 0; i < 6; i++) ex[i] = moe_route_trace_at(&t, step, li)[i];
            int ka, kb;
            REQUIRE(moe_expert_cache_step(a, li, ex, 6, sa, ca, &ka, NULL) &&
                    moe_expert_cache_step(b, li, ex, 6, sb, cb, &kb, NULL));
            REQUIRE(ka == kb && !memcmp(sa, sb, sizeof(sa)) && !memcmp(ca, cb, (size_t)ka * sizeof(*ca)),
                    "step %lld layer %d differs", (long long)step, li);
        }
        CHECK(moe_expert_cache_end_step(b, NULL) == 0);
    }
    moe_expert_cache_free(a);
    moe_expert_cache_free(b);
    moe_route_trace_free(&t);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
}

// Two layers of one pool, 3 slots each, top-1: layer 0 cycles over 4 experts (LRU misses every
// step, each missed expert evicted 0 evictions before: ghost depth 0), layer 1 uses one expert
// (its hits sit at position 2 from the LRU end, above its two empty slots: no tail hit at 0).
// The rebalance must move exactly one slot, layer 1's lowest empty slot, to layer 0 (its next
// ghost depth, 1, has no hits), after which layer 0 hits every step.
TEST(moe_sizing_moves_a_slot_by_its_shadow_tags) {
    moe_geometry g;
    geometry(&g, 2, 8, false);
    moe_cache_plan plan;
    REQUIRE(plan_for(&g, 6, 1, 1, &plan));
    moe_cache_policy_params pp = moe_cache_sizing_default_params();
    pp.period = 8;
    pp.max_moves = 4;
    moe_expert_cache *c = moe_expert_cache_init_policy(&plan, &g, &pp);
    CHECK(moe_expert_cache_layer_slot_count(c, 0) == 3 && moe_expert_cache_layer_slot_count(c, 1) == 3);
    int32_t slot;
    moe_cache_copy cp;
    moe_cache_move mv[8];
    int k, moves = 0;
    for (int step = 0; step < 8; step++) {
        int32_t e0 = step % 4, e1 = 5;
        REQUIRE(moe_expert_cache_step(c, 0, &e0, 1, &slot, &cp, &k, NULL));
        CHECK(k == 1, "step %d: layer 0 should miss", step);
        REQUIRE(moe_expert_cache_step(c, 1, &e1, 1, &slot, &cp, &k, NULL));
        moves = moe_expert_cache_end_step(c, mv);
        CHECK(moves == 0 || step == 7, "a move before the period's end (step %d)", step);
    }
    REQUIRE(moves == 1, "%d moves", moves);
    // layer 1 owns slots 3..5: expert 5 in slot 3, 4 and 5 empty
    CHECK(mv[0].pool == 0 && mv[0].slot == 4 && mv[0].from_layer == 1 && mv[0].to_layer == 0 &&
          mv[0].evicted_expert == -1, "move: slot %d from %d to %d, evicted %d", mv[0].slot, mv[0].from_layer,
          mv[0].to_layer, mv[0].evicted_expert);
    CHECK(moe_expert_cache_slot_owner(c, 0, 4) == 0 && moe_expert_cache_layer_slot_count(c, 0) == 4 &&
          moe_expert_cache_layer_slot_count(c, 1) == 2 && moe_expert_cache_pool_moves(c, 0) == 1);
    int hits = 0;
    for (int step = 8; step < 16; step++) {
        int32_t e0 = step % 4;
        REQUIRE(moe_expert_cache_step(c, 0, &e0, 1, &slot, &cp, &k, NULL));
        hits += step >= 12 && k == 0;
        moe_expert_cache_end_step(c, mv);
    }
    CHECK(hits == 4, "layer 0 with 4 slots hit %d of 4", hits);
    moe_expert_cache_free(c);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
}

// Every rebalance on a heterogeneous trace over two pools: at most max_moves per pool, only at
// the period, within a pool, never below the floor or above a layer's experts; owners, counts
// and the map agree; two runs decide alike.
TEST(moe_sizing_rebalances_keep_the_invariants) {
    moe_geometry g;
    geometry(&g, 8, 64, true);
    moe_cache_plan plan;
    REQUIRE(plan_for(&g, 8 * 16, 4, 2, &plan));
    moe_route_trace t = heterogeneous_trace(8, 64, 4, 2, 1200, 11, 0);
    moe_cache_policy_params pp = moe_cache_sizing_default_params();
    pp.period = 8;
    pp.max_moves = 5;
    moe_expert_cache *c[2] = {moe_expert_cache_init_policy(&plan, &g, &pp), moe_expert_cache_init_policy(&plan, &g, &pp)};
    int32_t ex[8], slots[8];
    moe_cache_copy cp[8];
    moe_cache_move mv[2][16];
    uint64_t total = 0;
    for (int64_t step = 0; step < t.n_steps; step++) {
        for (int r = 0; r < 2; r++)
            for (int li = 0; li < 8; li++) {
                for (int i = 0; i < 8; i++) ex[i] = moe_route_trace_at(&t, step, li)[i];
                int k;
                REQUIRE(moe_expert_cache_step(c[r], li, ex, 8, slots, cp, &k, NULL));
                for (int i = 0; i < 8; i++) REQUIRE(moe_expert_cache_slot_owner(c[r], moe_expert_cache_pool_of(c[r], li), slots[i]) == li);
            }
        int n0 = moe_expert_cache_end_step(c[0], mv[0]), n1 = moe_expert_cache_end_step(c[1], mv[1]);
        REQUIRE(n0 == n1 && !memcmp(mv[0], mv[1], (size_t)n0 * sizeof(moe_cache_move)), "step %lld", (long long)step);
        bool at_period = (step + 1) % pp.period == 0;
        CHECK(n0 == 0 || at_period);
        int per_pool[2] = {0, 0};
        for (int m = 0; m < n0; m++) {
            const moe_cache_move *v = &mv[0][m];
            per_pool[v->pool]++;
            CHECK(moe_expert_cache_pool_of(c[0], v->from_layer) == v->pool &&
                  moe_expert_cache_pool_of(c[0], v->to_layer) == v->pool && v->from_layer != v->to_layer);
        }
        CHECK(per_pool[0] <= pp.max_moves && per_pool[1] <= pp.max_moves);
        total += (uint64_t)n0;
        for (int k = 0; k < plan.n_pools; k++) {
            int owned = 0;
            for (int j = 0; j < plan.pools[k].n_layers; j++) {
                int L = plan.pools[k].layers[j], n = moe_expert_cache_layer_slot_count(c[0], L), count = 0;
                CHECK(n >= plan.floor_per_layer && n <= 64, "layer %d owns %d", L, n);
                owned += n;
                for (int s = 0; s < plan.pools[k].n_slots; s++) {
                    int layer, expert;
                    count += moe_expert_cache_slot_owner(c[0], k, s) == L;
                    if (moe_expert_cache_slot(c[0], k, s, &layer, &expert))
                        CHECK(layer == moe_expert_cache_slot_owner(c[0], k, s) &&
                              moe_expert_cache_lookup(c[0], layer, expert) == s);
                }
                CHECK(count == n);
            }
            CHECK(owned == plan.pools[k].n_slots);
        }
        if (test_failed()) break;
    }
    CHECK(total > 20, "only %llu moves on a heterogeneous trace", (unsigned long long)total);
    CHECK(moe_expert_cache_pool_moves(c[0], 0) + moe_expert_cache_pool_moves(c[0], 1) == total);
    moe_expert_cache_free(c[0]);
    moe_expert_cache_free(c[1]);
    moe_route_trace_free(&t);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
}

static double rate(const moe_replay_result *r) { return (double)r->total.hits / (double)r->total.selections; }

// On generated traces (one and two sequences, one and two pools, three sizes): Belady for fixed
// ranges hits at least as often as the LRU and frecency victims in every layer, pool-wide Belady
// at least as often as fixed Belady and self-sizing (with either victims); counted from the start
// these are theorems, after a warm-up they hold by a wide margin. Self-sizing gains on the
// heterogeneous trace, and frecency victims over the LRU's.
TEST(moe_replay_belady_bounds_every_policy) {
    struct {
        int n_seq, per_layer;
        bool two_pools;
    } cases[] = {{1, 8, false}, {1, 16, true}, {2, 24, false}, {1, 32, false}};
    for (size_t c = 0; c < FT_ARRAY_LEN(cases); c++) {
        moe_geometry g;
        geometry(&g, 8, 64, cases[c].two_pools);
        moe_cache_plan plan;
        REQUIRE(plan_for(&g, 8 * cases[c].per_layer, 4, cases[c].n_seq, &plan));
        moe_route_trace t = heterogeneous_trace(8, 64, 4, cases[c].n_seq, 1500, 21 + c, 0);
        for (int64_t warmup = 0; warmup <= 150; warmup += 150) {
            moe_replay_params rp = moe_replay_default_params();
            rp.warmup = warmup;
            moe_replay_result lru, ss, fr, fs, bf, bp;
            ft_err err = {{0}};
            REQUIRE(moe_cache_replay_params(&plan, &g, &t, &rp, &lru, &err), "%s", err.msg);
            rp.policy = moe_cache_sizing_default_params();
            REQUIRE(moe_cache_replay_params(&plan, &g, &t, &rp, &ss, &err), "%s", err.msg);
            rp.policy.victims = MOE_VICTIMS_FRECENCY;
            REQUIRE(moe_cache_replay_params(&plan, &g, &t, &rp, &fs, &err), "%s", err.msg);
            rp.policy = moe_cache_policy_default_params();
            rp.policy.victims = MOE_VICTIMS_FRECENCY;
            REQUIRE(moe_cache_replay_params(&plan, &g, &t, &rp, &fr, &err), "%s", err.msg);
            REQUIRE(moe_cache_replay_belady(&plan, &g, &t, warmup, false, &bf, &err), "%s", err.msg);
            REQUIRE(moe_cache_replay_belady(&plan, &g, &t, warmup, true, &bp, &err), "%s", err.msg);
            CHECK(lru.total.selections == bf.total.selections && bp.total.selections == ss.total.selections &&
                  lru.steps == t.n_steps - warmup);
            for (int li = 0; li < 8; li++)
                CHECK(bf.layers[li].stats.misses <= lru.layers[li].stats.misses &&
                          bf.layers[li].stats.misses <= fr.layers[li].stats.misses,
                      "case %zu layer %d: %llu > %llu or %llu", c, li,
                      (unsigned long long)bf.layers[li].stats.misses, (unsigned long long)lru.layers[li].stats.misses,
                      (unsigned long long)fr.layers[li].stats.misses);
            CHECK(bp.total.misses <= bf.total.misses && bp.total.misses <= ss.total.misses &&
                      bp.total.misses <= fs.total.misses,
                  "case %zu: pool-wide %llu, fixed %llu, self-sizing %llu, with frecency %llu", c,
                  (unsigned long long)bp.total.misses, (unsigned long long)bf.total.misses,
                  (unsigned long long)ss.total.misses, (unsigned long long)fs.total.misses);
            // frecency victims gain over the LRU's on these traces, with fixed ranges and with self-sizing
            CHECK(rate(&fr) > rate(&lru) && rate(&fs) > rate(&ss), "case %zu: frecency %.4f, LRU %.4f; with "
                  "self-sizing %.4f, %.4f", c, rate(&fr), rate(&lru), rate(&fs), rate(&ss));
            CHECK(rate(&bf) > rate(&lru) + 0.03, "case %zu: Belady %.3f, LRU %.3f", c, rate(&bf), rate(&lru));
            // the larger caches leave room to move: self-sizing must gain there
            if (cases[c].per_layer >= 24 && warmup)
                CHECK(rate(&ss) > rate(&lru) + 0.01, "case %zu: self-sizing %.4f, LRU %.4f", c, rate(&ss), rate(&lru));
            moe_replay_result_free(&lru);
            moe_replay_result_free(&ss);
            moe_replay_result_free(&fr);
            moe_replay_result_free(&fs);
            moe_replay_result_free(&bf);
            moe_replay_result_free(&bp);
        }
        moe_route_trace_free(&t);
        moe_cache_plan_free(&plan);
        moe_geometry_free(&g);
    }
}

// Prefetch's accounting: guesses equal to the selections leave no demand miss after the first
// step and waste nothing; guesses disjoint from them are all wasted and change no hit into a
// miss's count of guessed-right; the cache's prefetch maps only what was not resident.
TEST(moe_replay_prefetch_accounting) {
    moe_geometry g;
    geometry(&g, 4, 32, false);
    moe_cache_plan plan;
    REQUIRE(plan_for(&g, 4 * 12, 4, 1, &plan));
    moe_route_trace t = heterogeneous_trace(4, 32, 4, 1, 400, 3, 0.5);
    size_t n_ids = (size_t)t.n_steps * 4 * 4;
    moe_replay_params rp = moe_replay_default_params();
    rp.prefetch = true;
    rp.prefetch_copies = 4; // every guess
    moe_replay_result r;
    ft_err err = {{0}};
    // perfect guesses
    memcpy(t.predicted, t.experts, n_ids * sizeof(uint16_t));
    REQUIRE(moe_cache_replay_params(&plan, &g, &t, &rp, &r, &err), "%s", err.msg);
    CHECK(r.total.misses == 0 && r.total.hits == n_ids, "%llu demand misses", (unsigned long long)r.total.misses);
    uint64_t fetched = 0;
    for (int li = 0; li < 4; li++) {
        const moe_replay_layer *l = &r.layers[li];
        CHECK(l->guessed == l->guessed_right && l->prefetched == l->prefetch_used && l->prefetch_wasted_bytes == 0 &&
              l->prefetch_used_bytes == l->prefetched * 600);
        fetched += l->prefetched;
    }
    moe_replay_result plain;
    moe_replay_params rq = moe_replay_default_params();
    REQUIRE(moe_cache_replay_params(&plan, &g, &t, &rq, &plain, &err), "%s", err.msg);
    CHECK(fetched == plain.total.misses, "prefetched %llu, the LRU's misses %llu", (unsigned long long)fetched,
          (unsigned long long)plain.total.misses);
    moe_replay_result_free(&r);
    // perfect guesses, at most one copy a layer's step: each copy is used and saves one demand miss
    rp.prefetch_copies = 1;
    REQUIRE(moe_cache_replay_params(&plan, &g, &t, &rp, &r, &err), "%s", err.msg);
    fetched = 0;
    for (int li = 0; li < 4; li++) {
        const moe_replay_layer *l = &r.layers[li];
        CHECK(l->prefetched == l->prefetch_used && l->prefetched <= (uint64_t)r.steps && l->prefetched > 0);
        fetched += l->prefetched;
    }
    CHECK(r.total.misses + fetched == plain.total.misses && r.total.misses > 0, "%llu demand misses, %llu prefetched",
          (unsigned long long)r.total.misses, (unsigned long long)fetched);
    moe_replay_result_free(&r);
    rp.prefetch_copies = 4;
    // guesses that are never right: each group's guess is experts the step does not select
    for (size_t gi = 0; gi < n_ids / 4; gi++) {
        int n = 0;
        for (int e = 0; e < 32 && n < 4; e++) {
            bool sel = false;
            for (int j = 0; j < 4; j++) sel |= t.experts[gi * 4 + j] == e;
            if (!sel) t.predicted[gi * 4 + n++] = (uint16_t)e;
        }
    }
    REQUIRE(moe_cache_replay_params(&plan, &g, &t, &rp, &r, &err), "%s", err.msg);
    for (int li = 0; li < 4; li++) {
        const moe_replay_layer *l = &r.layers[li];
        CHECK(l->guessed == 400 * 4 && l->guessed_right == 0 && l->prefetch_used == 0 && l->prefetched > 0 &&
              l->prefetch_wasted_bytes == l->prefetched * 600);
    }
    CHECK(r.total.misses >= plain.total.misses, "useless prefetch lowered the demand misses");
    moe_replay_result_free(&r);
    moe_replay_result_free(&plain);
    // the cache's prefetch: copies only for what is not resident, nothing counted
    moe_expert_cache *c = moe_expert_cache_init(&plan, &g);
    int32_t ex[4] = {1, 2, 3, 4}, guess[5] = {3, 9, 9, 10, 1}, slots[4];
    moe_cache_copy cp[5];
    int k;
    REQUIRE(moe_expert_cache_step(c, 2, ex, 4, slots, cp, &k, NULL) && k == 4);
    REQUIRE(moe_expert_cache_prefetch(c, 2, guess, 5, 5, cp, &k, NULL));
    CHECK(k == 2 && cp[0].expert == 9 && cp[1].expert == 10 && cp[0].evicted_layer == -1 &&
          moe_expert_cache_lookup(c, 2, 9) == cp[0].slot);
    // capped: the first unmapped guesses in order
    int32_t more[3] = {11, 12, 13};
    REQUIRE(moe_expert_cache_prefetch(c, 2, more, 3, 1, cp, &k, NULL));
    CHECK(k == 1 && cp[0].expert == 11 && moe_expert_cache_lookup(c, 2, 11) == cp[0].slot &&
          moe_expert_cache_lookup(c, 2, 12) < 0 && moe_expert_cache_lookup(c, 2, 13) < 0);
    moe_cache_stats s = moe_expert_cache_layer_stats(c, 2, false);
    CHECK(s.selections == 4 && s.misses == 4);
    int32_t bad = 32;
    CHECK(!moe_expert_cache_prefetch(c, 2, &bad, 1, 1, cp, &k, &err) && strstr(err.msg, "outside"));
    moe_expert_cache_free(c);
    t.predicted = (free(t.predicted), NULL);
    CHECK(!moe_cache_replay_params(&plan, &g, &t, &rp, &r, &err) && strstr(err.msg, "predictions"));
    moe_route_trace_free(&t);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
}

// `ft replay`: the text names every policy; --json holds them in the order the bounds demand;
// --model prices the copies; bad input is refused.
TEST(moe_replay_cli) {
    moe_route_trace t = heterogeneous_trace(6, 64, 4, 1, 600, 8, 0.8);
    const char *trace = test_path("replay.ftrt");
    ft_err err = {{0}};
    REQUIRE(moe_route_trace_write(&t, trace, &err), "%s", err.msg);
    moe_route_trace_free(&t);
    char cmd[1024], out[16384];
    snprintf(cmd, sizeof(cmd), "%s replay %s --slots-per-layer 24 --per-layer", test_ft_bin(), trace);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    CHECK(strstr(out, "LRU, fixed ranges") && strstr(out, "self-sizing layers") &&
          strstr(out, "frecency, fixed ranges") && strstr(out, "frecency, self-sizing") &&
          strstr(out, "Belady, fixed ranges") &&
          strstr(out, "Belady, pool-wide") && strstr(out, "LRU with prefetch") && strstr(out, "144 slots") &&
          strstr(out, "prefetch (at most 1 copies a layer's step): accuracy 0.8"), "%s", out);
    snprintf(cmd, sizeof(cmd), "%s replay %s --slots-per-layer 24 --json", test_ft_bin(), trace);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    json_t *o = json_loads(out, 0, NULL);
    REQUIRE(o, "%s", out);
    json_t *pol = json_object_get(o, "policies");
    double lru = json_real_value(json_object_get(json_object_get(pol, "lru"), "hit_rate"));
    double ss = json_real_value(json_object_get(json_object_get(pol, "self_sizing"), "hit_rate"));
    double bf = json_real_value(json_object_get(json_object_get(pol, "belady_fixed"), "hit_rate"));
    double bp = json_real_value(json_object_get(json_object_get(pol, "belady_pool"), "hit_rate"));
    double fr = json_real_value(json_object_get(json_object_get(pol, "frecency"), "hit_rate"));
    double fs = json_real_value(json_object_get(json_object_get(pol, "frecency_self_sizing"), "hit_rate"));
    CHECK(lru > 0.3 && bf >= lru && bp >= bf && bp >= ss && fr > 0.3 && bf >= fr && bp >= fs, "%s", out);
    CHECK(json_array_size(json_object_get(o, "layers")) == 6 &&
          json_real_value(json_object_get(json_object_get(o, "prefetch"), "accuracy")) > 0.75, "%s", out);
    json_int_t pf1 = json_integer_value(json_object_get(json_object_get(o, "prefetch"), "prefetched"));
    json_decref(o);
    // a larger cap copies more of the guesses
    snprintf(cmd, sizeof(cmd), "%s replay %s --slots-per-layer 24 --prefetch-copies 4 --json", test_ft_bin(), trace);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    o = json_loads(out, 0, NULL);
    REQUIRE(o, "%s", out);
    json_int_t pf4 = json_integer_value(json_object_get(json_object_get(o, "prefetch"), "prefetched"));
    CHECK(pf1 > 0 && pf4 > pf1, "prefetched %lld at most 1 a step, %lld at most 4", (long long)pf1, (long long)pf4);
    json_decref(o);
    // a model gives the geometry: its 3 layers of 16 experts, copies in MiB
    ft_synth_params sp = fixture_moe_params(3, 16);
    const char *model = fixture_write(&sp, "replay_model.gguf");
    REQUIRE(model);
    const char *small = test_path("replay_small.ftrt");
    snprintf(cmd, sizeof(cmd), "%s trace-gen --model %s -o %s --steps 200 >/dev/null && %s replay %s --model %s "
             "--moe-cache-size 12", test_ft_bin(), model, small, test_ft_bin(), small, model);
    REQUIRE(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
    CHECK(strstr(out, "MiB/step") && strstr(out, "12 slots"), "%s", out);
    snprintf(cmd, sizeof(cmd), "%s replay %s --model %s --moe-cache-size 2 2>&1", test_ft_bin(), small, model);
    CHECK(test_run(cmd, out, sizeof(out)) == 1, "%s", out);
    snprintf(cmd, sizeof(cmd), "%s replay %s --slots-per-layer 4 --moe-cache-size 9 2>&1", test_ft_bin(), trace);
    CHECK(test_run(cmd, out, sizeof(out)) == 2, "%s", out);
}
