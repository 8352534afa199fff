// test_moe_expert_cache.c: the C reference of the expert cache's slot maps and LRU policy
// (src/moe/expert_cache.c) against a brute-force model of the policy written differently (keys
// found by linear search, victims by sorting the candidates) and, for one selection per step,
// against the textbook LRU criterion (hit iff fewer than C distinct other experts since the
// last use); frecency victims against a model of their rule.
#include "fixtures.h"
#include "../src/gguf/gguf.h"
#include "../src/model/synth.h"
#include "../src/moe/expert_cache.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>

// Blocks 1, 2 and 4 share a geometry, block 3 another: two pools.
static void two_pool_geometry(moe_geometry *g, int n_expert) {
    moe_layer_geometry ls[4];
    const int blocks[4] = {1, 2, 3, 4};
    for (int i = 0; i < 4; i++) {
        ls[i] = (moe_layer_geometry){.layer = blocks[i], .n_expert = n_expert};
        for (int b = 0; b < MOE_BANK_COUNT; b++) ls[i].bytes[b] = blocks[i] == 3 ? 1000 : 300 + 100 * b;
    }
    moe_geometry_from_layers(ls, 4, g);
}

static bool make_plan(const moe_geometry *g, int n_slots, int top_k, moe_cache_plan *plan) {
    moe_cache_plan_params p = moe_cache_plan_default_params();
    p.n_slots = n_slots;
    p.top_k = top_k;
    p.view_align = 64;
    ft_err err = {{0}};
    bool ok = moe_cache_plan_make(g, &p, plan, &err);
    CHECK(ok, "%s", err.msg);
    return ok;
}

// ---------------------------------------------------------------------------------------------
// Brute-force model of the policy

typedef struct {
    int layer, expert; // -1: empty
    long last;         // step count of the last use, -1: never (empty or invalidated)
} model_slot;

typedef struct {
    int n;
    model_slot *s;
    long time;
} model_pool;

static int model_find(const model_pool *m, int layer, int expert) {
    for (int i = 0; i < m->n; i++)
        if (m->s[i].layer == layer && m->s[i].expert == expert) return i;
    return -1;
}

static const model_pool *g_sort_pool;
static int by_age(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    long lx = g_sort_pool->s[x].last, ly = g_sort_pool->s[y].last;
    return lx != ly ? (lx < ly ? -1 : 1) : x - y;
}

// The layer's own slots, from the rule as the header states it: the pool's n slots split
// evenly among its layers in order, the first n % n_layers one more.
static void model_range(const moe_pool_plan *pool, int layer, int *first, int *n) {
    int j = 0;
    while (pool->layers[j] != layer) j++;
    int q = pool->n_slots / pool->n_layers, r = pool->n_slots % pool->n_layers;
    *first = j * q + (j < r ? j : r);
    *n = q + (j < r);
}

// One step of a layer owning slots [first, first + n_own); writes the victims (slot, in order
// of first appearance of the missed expert).
static int model_step(model_pool *m, int first, int n_own, int layer, const int32_t *ex, int n, int *victims,
                      int *missed) {
    long t = ++m->time;
    bool *used = calloc((size_t)m->n, 1);
    int k = 0;
    for (int i = 0; i < n; i++) {
        int s = model_find(m, layer, ex[i]);
        if (s >= 0) used[s] = true;
    }
    for (int i = 0; i < n; i++) {
        if (model_find(m, layer, ex[i]) >= 0) continue;
        bool dup = false;
        for (int j = 0; j < k; j++) dup |= missed[j] == ex[i];
        if (!dup) missed[k++] = ex[i];
    }
    int *cand = malloc((size_t)m->n * sizeof(int)), nc = 0;
    for (int s = first; s < first + n_own; s++)
        if (!used[s]) cand[nc++] = s;
    g_sort_pool = m;
    qsort(cand, (size_t)nc, sizeof(int), by_age);
    for (int j = 0; j < k; j++) {
        victims[j] = cand[j];
        m->s[cand[j]] = (model_slot){layer, missed[j], t};
    }
    for (int i = 0; i < n; i++) m->s[model_find(m, layer, ex[i])].last = t;
    free(cand);
    free(used);
    return k;
}

// Experts with skewed popularity: a step draws from a small hot set most of the time.
static int32_t draw_expert(ft_rng *rng, int n_expert) {
    uint64_t r = ft_rng_next(rng);
    return (int32_t)(r % 4 ? (r >> 8) % (uint64_t)(n_expert / 4) : (r >> 8) % (uint64_t)n_expert);
}

TEST(moe_cache_matches_a_brute_force_lru_model) {
    enum { N_EXPERT = 48, TOP_K = 6, STEPS = 6000 };
    moe_geometry g;
    two_pool_geometry(&g, N_EXPERT);
    moe_cache_plan plan;
    REQUIRE(make_plan(&g, 40, 2 * TOP_K, &plan));
    REQUIRE(plan.n_pools == 2);
    moe_expert_cache *c = moe_expert_cache_init(&plan, &g);
    model_pool model[2];
    for (int k = 0; k < 2; k++) {
        model[k].n = plan.pools[k].n_slots;
        model[k].s = malloc((size_t)model[k].n * sizeof(model_slot));
        for (int s = 0; s < model[k].n; s++) model[k].s[s] = (model_slot){-1, -1, -1};
        model[k].time = 0;
    }
    ft_rng rng = ft_rng_init(11);
    int32_t ex[2 * TOP_K], slots[2 * TOP_K];
    moe_cache_copy copies[2 * TOP_K];
    int victims[2 * TOP_K], missed[2 * TOP_K];
    uint64_t n_hits = 0, n_evictions = 0;
    for (int step = 0; step < STEPS && !test_failed(); step++) {
        int layer = 1 + (int)(ft_rng_next(&rng) % 4);
        int pool = moe_expert_cache_pool_of(c, layer);
        // two running sequences, each selecting TOP_K distinct experts: duplicates across them
        int n = 0;
        for (int seq = 0; seq < 2; seq++)
            for (int j = 0; j < TOP_K; j++) {
                int32_t e;
                bool dup;
                do {
                    e = draw_expert(&rng, N_EXPERT);
                    dup = false;
                    for (int q = seq * TOP_K; q < n; q++) dup |= ex[q] == e;
                } while (dup);
                ex[n++] = e;
            }
        if (step % 997 == 500) { // now and then the prefill overlay destroys a few slots
            int first = (int)(ft_rng_next(&rng) % (uint64_t)model[pool].n);
            moe_expert_cache_invalidate(c, pool, first, 5);
            for (int s = first; s < first + 5 && s < model[pool].n; s++) model[pool].s[s] = (model_slot){-1, -1, -1};
        }
        int n_copies;
        ft_err err = {{0}};
        REQUIRE(moe_expert_cache_step(c, layer, ex, n, slots, copies, &n_copies, &err), "%s", err.msg);
        int first, n_own;
        model_range(&plan.pools[pool], layer, &first, &n_own);
        int k = model_step(&model[pool], first, n_own, layer, ex, n, victims, missed);
        for (int j = 0; j < k; j++)
            CHECK(copies[j].slot >= first && copies[j].slot < first + n_own, "step %d: slot %d outside the layer's range",
                  step, copies[j].slot);
        REQUIRE(n_copies == k, "step %d: %d copies, model %d", step, n_copies, k);
        for (int j = 0; j < k; j++) {
            CHECK(copies[j].slot == victims[j] && copies[j].expert == missed[j] && copies[j].layer == layer &&
                      copies[j].pool == pool,
                  "step %d copy %d: slot %d expert %d, model slot %d expert %d", step, j, copies[j].slot,
                  copies[j].expert, victims[j], missed[j]);
            // never evict what the same step uses
            for (int i = 0; i < n; i++)
                CHECK(!(copies[j].evicted_layer == layer && copies[j].evicted_expert == ex[i]),
                      "step %d evicted selected expert %d", step, ex[i]);
            n_evictions += copies[j].evicted_layer >= 0;
        }
        for (int i = 0; i < n; i++) {
            CHECK(slots[i] == model_find(&model[pool], layer, ex[i]), "step %d selection %d", step, i);
            CHECK(moe_expert_cache_lookup(c, layer, ex[i]) == slots[i]);
            int l, e;
            CHECK(moe_expert_cache_slot(c, pool, slots[i], &l, &e) && l == layer && e == ex[i]);
        }
        n_hits += (uint64_t)(n - k);
    }
    // the forward and reverse maps agree everywhere
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < model[k].n; s++) {
            int l, e;
            bool held = moe_expert_cache_slot(c, k, s, &l, &e);
            CHECK(held == (model[k].s[s].layer >= 0) && (!held || moe_expert_cache_lookup(c, l, e) == s));
        }
    uint64_t sel = 0;
    for (int k = 0; k < 2; k++) sel += moe_expert_cache_pool_stats(c, k, false).selections;
    CHECK(sel == (uint64_t)STEPS * 2 * TOP_K);
    CHECK(n_hits > sel / 4 && n_evictions > 1000, "%llu hits, %llu evictions: the test must exercise both",
          (unsigned long long)n_hits, (unsigned long long)n_evictions);
    for (int k = 0; k < 2; k++) free(model[k].s);
    moe_expert_cache_free(c);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
}

// One selection per step has no ties, so the textbook criterion decides every hit.
TEST(moe_cache_single_selection_hits_follow_reuse_distance) {
    enum { N_EXPERT = 64, STEPS = 5000 };
    moe_layer_geometry l = {.layer = 0, .n_expert = N_EXPERT, .bytes = {10, 10, 10}};
    moe_geometry g;
    moe_geometry_from_layers(&l, 1, &g);
    moe_cache_plan plan;
    REQUIRE(make_plan(&g, 13, 1, &plan));
    int C = plan.pools[0].n_slots;
    REQUIRE(C == 13);
    moe_expert_cache *c = moe_expert_cache_init(&plan, &g);
    int32_t *seq = malloc(STEPS * sizeof(int32_t));
    ft_rng rng = ft_rng_init(5);
    int hits = 0;
    for (int i = 0; i < STEPS; i++) {
        seq[i] = draw_expert(&rng, N_EXPERT);
        bool want = false;
        for (int j = i - 1; j >= 0; j--)
            if (seq[j] == seq[i]) {
                bool seen[N_EXPERT] = {0};
                int distinct = 0;
                for (int q = j + 1; q < i; q++) distinct += !seen[seq[q]], seen[seq[q]] = true;
                want = distinct < C;
                break;
            }
        int32_t slot;
        moe_cache_copy cp;
        int n_copies;
        REQUIRE(moe_expert_cache_step(c, 0, &seq[i], 1, &slot, &cp, &n_copies, NULL));
        CHECK((n_copies == 0) == want, "access %d of expert %d: %s, LRU says %s", i, seq[i],
              n_copies ? "miss" : "hit", want ? "hit" : "miss");
        hits += want;
    }
    moe_cache_stats st = moe_expert_cache_layer_stats(c, 0, false);
    CHECK(st.hits == (uint64_t)hits && st.misses == (uint64_t)(STEPS - hits) && st.selections == STEPS);
    CHECK(st.bytes_copied == st.misses * 30);
    CHECK(hits > STEPS / 4 && hits < STEPS * 9 / 10, "%d hits", hits);
    free(seq);
    moe_expert_cache_free(c);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
}

TEST(moe_cache_stats_per_layer_pool_and_request) {
    moe_geometry g;
    two_pool_geometry(&g, 16);
    moe_cache_plan plan;
    REQUIRE(make_plan(&g, 20, 4, &plan));
    moe_expert_cache *c = moe_expert_cache_init(&plan, &g);
    ft_rng rng = ft_rng_init(3);
    int32_t ex[4], slots[4];
    moe_cache_copy copies[4];
    for (int round = 0; round < 2; round++) {
        moe_cache_stats want_pool[2] = {{0}}, want_layer[5] = {{0}};
        for (int step = 0; step < 500; step++) {
            int layer = 1 + (int)(ft_rng_next(&rng) % 4), n = 1 + (int)(ft_rng_next(&rng) % 4), k;
            for (int i = 0; i < n; i++) ex[i] = (int32_t)(ft_rng_next(&rng) % 16);
            REQUIRE(moe_expert_cache_step(c, layer, ex, n, slots, copies, &k, NULL));
            int pool = moe_expert_cache_pool_of(c, layer);
            uint64_t bytes = (uint64_t)k * moe_pool_slot_bytes(&plan.pools[pool]);
            moe_cache_stats *w[2] = {&want_pool[pool], &want_layer[layer]};
            for (int q = 0; q < 2; q++) {
                w[q]->selections += (uint64_t)n;
                w[q]->misses += (uint64_t)k;
                w[q]->hits += (uint64_t)(n - k);
                w[q]->bytes_copied += bytes;
            }
        }
        for (int k = 0; k < 2; k++) {
            moe_cache_stats r = moe_expert_cache_pool_stats(c, k, true), t = moe_expert_cache_pool_stats(c, k, false);
            CHECK(!memcmp(&r, &want_pool[k], sizeof(r)), "pool %d request stats", k);
            CHECK(t.selections == t.hits + t.misses && t.selections >= r.selections);
            CHECK(round == 0 ? !memcmp(&t, &r, sizeof(t)) : t.selections > r.selections);
        }
        for (int L = 1; L <= 4; L++) {
            moe_cache_stats r = moe_expert_cache_layer_stats(c, L, true);
            CHECK(!memcmp(&r, &want_layer[L], sizeof(r)), "layer %d request stats", L);
        }
        moe_expert_cache_reset_request(c);
        CHECK(moe_expert_cache_pool_stats(c, 0, true).selections == 0);
        CHECK(moe_expert_cache_pool_stats(c, 0, false).selections > 0);
    }
    moe_expert_cache_free(c);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
}

TEST(moe_cache_invalidation_and_errors) {
    moe_geometry g;
    two_pool_geometry(&g, 16);
    moe_cache_plan plan;
    REQUIRE(make_plan(&g, 20, 4, &plan));
    moe_expert_cache *c = moe_expert_cache_init(&plan, &g);
    // fill both pools completely
    for (int L = 1; L <= 4; L++)
        for (int e = 0; e < 16; e++) {
            int32_t ex = e, slot;
            moe_cache_copy cp;
            int k;
            REQUIRE(moe_expert_cache_step(c, L, &ex, 1, &slot, &cp, &k, NULL));
        }
    // a byte range of the down arena: every slot whose down bytes meet it goes, no other
    uint64_t off = plan.pools[0].offset[MOE_BANK_DOWN] + 3 * plan.pools[0].stride[MOE_BANK_DOWN] + 7;
    uint64_t len = 2 * plan.pools[0].stride[MOE_BANK_DOWN];
    int n_gone = moe_expert_cache_invalidate_bytes(c, MOE_BANK_DOWN, off, len);
    int n_want = 0;
    for (int k = 0; k < plan.n_pools; k++)
        for (int s = 0; s < plan.pools[k].n_slots; s++) {
            uint64_t a = plan.pools[k].offset[MOE_BANK_DOWN] + (uint64_t)s * plan.pools[k].stride[MOE_BANK_DOWN];
            bool overlaps = a < off + len && off < a + plan.pools[k].stride[MOE_BANK_DOWN];
            int l, e;
            CHECK(moe_expert_cache_slot(c, k, s, &l, &e) == !overlaps, "pool %d slot %d", k, s);
            CHECK((moe_expert_cache_stamp(c, k, s) == 0) == overlaps);
            n_want += overlaps;
        }
    CHECK(n_gone == 3 && n_want == 3, "%d invalidated, %d overlap", n_gone, n_want);
    // single bytes at the edges of a slot take exactly that slot
    uint64_t s8 = plan.pools[0].offset[MOE_BANK_UP] + 8 * plan.pools[0].stride[MOE_BANK_UP];
    int l8, e8;
    CHECK(moe_expert_cache_invalidate_bytes(c, MOE_BANK_UP, s8, 1) == 1);
    CHECK(!moe_expert_cache_slot(c, 0, 8, &l8, &e8) && moe_expert_cache_slot(c, 0, 7, &l8, &e8));
    CHECK(moe_expert_cache_invalidate_bytes(c, MOE_BANK_UP, s8 + 2 * plan.pools[0].stride[MOE_BANK_UP] - 1, 1) == 1);
    CHECK(!moe_expert_cache_slot(c, 0, 9, &l8, &e8) && moe_expert_cache_slot(c, 0, 10, &l8, &e8));
    CHECK(moe_expert_cache_invalidate_bytes(c, MOE_BANK_UP, s8, 0) == 0);
    // the invalidated slots are the next victims, lowest index first
    int32_t ex = 15, slot;
    moe_cache_copy cp;
    int k;
    int32_t lookup_before = moe_expert_cache_lookup(c, 1, 15);
    if (lookup_before >= 0) { // make the request a miss: pick an expert of layer 1 not cached
        for (ex = 0; ex < 16 && moe_expert_cache_lookup(c, 1, ex) >= 0; ex++) {}
    }
    REQUIRE(ex < 16);
    REQUIRE(moe_expert_cache_step(c, 1, &ex, 1, &slot, &cp, &k, NULL));
    CHECK(k == 1 && slot == 3 && cp.evicted_layer == -1, "slot %d", slot);
    // errors change nothing
    ft_err err = {{0}};
    int32_t bad[2] = {0, 16};
    int32_t out[21];
    moe_cache_copy copies[21];
    uint64_t stamp = moe_expert_cache_stamp(c, 0, 3);
    CHECK(!moe_expert_cache_step(c, 1, bad, 2, out, copies, &k, &err) && strstr(err.msg, "expert 16"), "%s", err.msg);
    CHECK(!moe_expert_cache_step(c, 0, bad, 1, out, copies, &k, &err) && strstr(err.msg, "not a MoE layer"));
    int32_t many[21];
    for (int i = 0; i < 16; i++) many[i] = i;
    int small_pool = plan.pools[0].n_slots < plan.pools[1].n_slots ? 0 : 1;
    int small_layer = plan.pools[small_pool].layers[0];
    if (plan.pools[small_pool].n_slots < 16)
        CHECK(!moe_expert_cache_step(c, small_layer, many, 16, out, copies, &k, &err) && strstr(err.msg, "distinct"),
              "%s", err.msg);
    CHECK(moe_expert_cache_stamp(c, 0, 3) == stamp);
    moe_expert_cache_free(c);
    moe_expert_cache_free(NULL);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
}

// ---------------------------------------------------------------------------------------------
// The copies on real expert bytes: host banks of a mixed-type model, arenas simulated in host
// memory, copies applied with memcpy, prefill overlays scribbling over arena ranges.

typedef struct {
    moe_expert_cache *c;
    uint8_t *arena[MOE_BANK_COUNT];
    uint64_t arena_bytes[MOE_BANK_COUNT];
} sim_cache;

static void sim_init(sim_cache *s, const moe_cache_plan *plan, const moe_geometry *g) {
    s->c = moe_expert_cache_init(plan, g);
    for (int b = 0; b < MOE_BANK_COUNT; b++) {
        s->arena_bytes[b] = plan->arena_bytes[b];
        s->arena[b] = malloc(plan->arena_bytes[b]);
        memset(s->arena[b], 0xAA, plan->arena_bytes[b]);
    }
}

static void sim_free(sim_cache *s) {
    moe_expert_cache_free(s->c);
    for (int b = 0; b < MOE_BANK_COUNT; b++) free(s->arena[b]);
}

// Every slot that holds an expert holds exactly its host entry's bytes.
static int sim_check_all(const sim_cache *s, const moe_cache_plan *plan, const moe_expert_banks *hb) {
    int held = 0;
    for (int k = 0; k < plan->n_pools; k++)
        for (int slot = 0; slot < plan->pools[k].n_slots; slot++) {
            moe_cache_copy cp = {.pool = k, .slot = slot};
            if (!moe_expert_cache_slot(s->c, k, slot, &cp.layer, &cp.expert)) continue;
            held++;
            moe_copy_region r[MOE_BANK_COUNT];
            moe_expert_cache_copy_regions(s->c, hb, &cp, r);
            for (int b = 0; b < MOE_BANK_COUNT; b++)
                CHECK(!memcmp(s->arena[b] + r[b].dst_offset, r[b].src, r[b].bytes),
                      "pool %d slot %d (layer %d expert %d) bank %d differs from its host entry", k, slot, cp.layer,
                      cp.expert, b);
        }
    return held;
}

static void run_sim(const moe_geometry *g, const moe_expert_banks *hb, enum moe_pool_layout layout, int n_slots,
                    uint64_t seed) {
    moe_cache_plan_params pp = moe_cache_plan_default_params();
    pp.layout = layout;
    pp.n_slots = n_slots;
    pp.top_k = 2;
    pp.n_running = 2;
    moe_cache_plan plan;
    ft_err err = {{0}};
    REQUIRE(moe_cache_plan_make(g, &pp, &plan, &err), "%s", err.msg);
    sim_cache s;
    sim_init(&s, &plan, g);
    ft_rng rng = ft_rng_init(seed);
    int32_t ex[4], slots[4];
    moe_cache_copy copies[4];
    uint64_t n_copies_total = 0, n_invalidated = 0, bytes_moved = 0;
    for (int step = 0; step < 3000 && !test_failed(); step++) {
        int li = (int)(ft_rng_next(&rng) % (uint64_t)g->n_layers), layer = g->layers[li].layer;
        for (int i = 0; i < 4; i++) ex[i] = draw_expert(&rng, g->layers[li].n_expert);
        if (ex[1] == ex[0]) ex[1] = (ex[0] + 1) % g->layers[li].n_expert;
        if (ex[3] == ex[2]) ex[3] = (ex[2] + 1) % g->layers[li].n_expert;
        // the other pools' state must not move (each pool has its own LRU)
        int pool = moe_expert_cache_pool_of(s.c, layer), other = (pool + 1) % plan.n_pools;
        uint64_t other_stamp = moe_expert_cache_stamp(s.c, other, 0);
        int k;
        REQUIRE(moe_expert_cache_step(s.c, layer, ex, 4, slots, copies, &k, &err), "%s", err.msg);
        if (other != pool) CHECK(moe_expert_cache_stamp(s.c, other, 0) == other_stamp);
        for (int j = 0; j < k; j++) {
            moe_copy_region r[MOE_BANK_COUNT];
            moe_expert_cache_copy_regions(s.c, hb, &copies[j], r);
            for (int b = 0; b < MOE_BANK_COUNT; b++) {
                REQUIRE(r[b].dst_offset + r[b].bytes <= s.arena_bytes[b]);
                memcpy(s.arena[b] + r[b].dst_offset, r[b].src, r[b].bytes);
            }
        }
        n_copies_total += (uint64_t)k;
        for (int j = 0; j < k; j++) {
            moe_copy_region r[MOE_BANK_COUNT];
            moe_expert_cache_copy_regions(s.c, hb, &copies[j], r);
            for (int b = 0; b < MOE_BANK_COUNT; b++) bytes_moved += r[b].bytes;
        }
        // what the kernels would read: every selection's slot holds its expert
        for (int i = 0; i < 4; i++) {
            moe_cache_copy cp = {pool, slots[i], layer, ex[i], -1, -1};
            moe_copy_region r[MOE_BANK_COUNT];
            moe_expert_cache_copy_regions(s.c, hb, &cp, r);
            for (int b = 0; b < MOE_BANK_COUNT; b++)
                CHECK(!memcmp(s.arena[b] + r[b].dst_offset, r[b].src, r[b].bytes), "step %d selection %d bank %d",
                      step, i, b);
        }
        if (step % 250 == 249) { // a prefill overlay scribbles over a range of one bank's arena
            int b = (int)(ft_rng_next(&rng) % MOE_BANK_COUNT);
            uint64_t len = 1 + ft_rng_next(&rng) % (s.arena_bytes[b] / 3);
            uint64_t off = ft_rng_next(&rng) % (s.arena_bytes[b] - len + 1);
            n_invalidated += (uint64_t)moe_expert_cache_invalidate_bytes(s.c, (enum moe_bank)b, off, len);
            memset(s.arena[b] + off, 0x5C, len);
            sim_check_all(&s, &plan, hb);
        }
    }
    int held = sim_check_all(&s, &plan, hb);
    uint64_t bytes_counted = 0;
    for (int k = 0; k < plan.n_pools; k++) bytes_counted += moe_expert_cache_pool_stats(s.c, k, false).bytes_copied;
    CHECK(bytes_counted == bytes_moved, "statistics count %llu bytes copied, the copies moved %llu",
          (unsigned long long)bytes_counted, (unsigned long long)bytes_moved);
    CHECK(n_copies_total > 500 && n_invalidated > 0 && held > 0, "%llu copies, %llu invalidated, %d held",
          (unsigned long long)n_copies_total, (unsigned long long)n_invalidated, held);
    sim_free(&s);
    moe_cache_plan_free(&plan);
}

TEST(moe_cache_copies_keep_every_slot_byte_exact) {
    ft_synth_params sp = fixture_moe_params(4, 24);
    fixture_expert_types(&sp, "q4_K,bf16,q4_K,q8_0", "q6_K,bf16,q6_K,q8_0");
    const char *path = fixture_write(&sp, "moe_cache_sim.gguf");
    gguf_file *f;
    moe_geometry g;
    REQUIRE(path && fixture_open_moe(path, &f, &g));
    ft_err err = {{0}};
    REQUIRE(g.n_groups == 3);
    moe_expert_banks_params bp = moe_expert_banks_default_params();
    moe_expert_banks *hb = moe_expert_banks_load(f, &g, &bp, &err);
    REQUIRE(hb, "%s", err.msg);
    uint64_t sum_before = 0;
    for (uint64_t i = 0; i < hb->bytes; i += 97) sum_before = sum_before * 31 + ((uint8_t *)hb->block)[i];
    run_sim(&g, hb, MOE_POOL_LAYOUT_EXACT, 14, 1);
    // rebuild at another size and layout: the host banks are reused as they are
    run_sim(&g, hb, MOE_POOL_LAYOUT_EXACT, 30, 2);
    run_sim(&g, hb, MOE_POOL_LAYOUT_UNIFORM, 20, 3);
    uint64_t sum_after = 0;
    for (uint64_t i = 0; i < hb->bytes; i += 97) sum_after = sum_after * 31 + ((uint8_t *)hb->block)[i];
    CHECK(sum_before == sum_after, "the host banks changed");
    moe_expert_banks_free(hb);
    moe_geometry_free(&g);
    gguf_close(f);
}

// ---------------------------------------------------------------------------------------------
// The hybrid split (src/moe/hybrid.h, moe_expert_cache_step_split)

// The share against every n tried, from the definition: the smallest n reaching the least
// max(copies' time, the CPU road's time); and its limits.
TEST(moe_hybrid_cpu_share_is_the_least_time) {
    ft_rng rng = ft_rng_init(5);
    for (int trial = 0; trial < 20000; trial++) {
        moe_hybrid_costs c = {(uint32_t)(ft_rng_next(&rng) % 100000), (uint32_t)(ft_rng_next(&rng) % 100000),
                              (uint32_t)(ft_rng_next(&rng) % 200000)};
        int k = (int)(ft_rng_next(&rng) % 33), got = moe_hybrid_cpu_share(k, &c);
        double best = 1e300;
        int want = -1;
        for (int n = 0; n <= k; n++) {
            double copy = (double)(k - n) * c.copy_ns, cpu = n ? (double)c.meet_ns + (double)n * c.cpu_ns : 0.0;
            double t = copy > cpu ? copy : cpu;
            if (t < best) best = t, want = n;
        }
        REQUIRE(got == want, "k %d costs %u %u %u: share %d, want %d", k, c.copy_ns, c.cpu_ns, c.meet_ns, got, want);
    }
    moe_hybrid_costs free_cpu = {1000, 0, 0}, free_copy = {0, 1000, 1000}, none = {0, 0, 0};
    CHECK(moe_hybrid_cpu_share(7, &free_cpu) == 7 && moe_hybrid_cpu_share(7, &free_copy) == 0);
    CHECK(moe_hybrid_cpu_share(7, &none) == 0 && moe_hybrid_cpu_share(7, NULL) == 0 && moe_hybrid_cpu_share(0, &free_cpu) == 0);
    moe_hybrid_costs even = {100, 100, 0}; // two equal roads: half each, the odd one copied
    CHECK(moe_hybrid_cpu_share(8, &even) == 4 && moe_hybrid_cpu_share(7, &even) == 3);
}

// A split step is the plain step (the same tables, victims and copies: a CPU miss is copied
// behind the step), with the selections of its last n_cpu copies' experts at slot -1. A twin
// cache stepped plainly with the same selections must agree on everything else.
TEST(moe_cache_split_step_is_the_plain_step) {
    moe_geometry g;
    two_pool_geometry(&g, 16);
    moe_cache_plan plan;
    REQUIRE(make_plan(&g, 24, 4, &plan));
    moe_expert_cache *a = moe_expert_cache_init(&plan, &g), *b = moe_expert_cache_init(&plan, &g);
    ft_rng rng = ft_rng_init(9);
    int32_t ex[8], slots_a[8], slots_b[8];
    moe_cache_copy ca[8], cb[8];
    uint64_t cpu_total = 0;
    int cpu_steps = 0, copy_steps = 0;
    for (int step = 0; step < 5000 && !test_failed(); step++) {
        int layer = 1 + (int)(ft_rng_next(&rng) % 4), n = 1 + (int)(ft_rng_next(&rng) % 4);
        for (int i = 0; i < n; i++) ex[i] = (int32_t)(ft_rng_next(&rng) % 16);
        moe_hybrid_costs c = {(uint32_t)(ft_rng_next(&rng) % 50), (uint32_t)(ft_rng_next(&rng) % 40),
                              (uint32_t)(ft_rng_next(&rng) % 60)};
        int ka, kb, n_cpu;
        ft_err err = {{0}};
        REQUIRE(moe_expert_cache_step_split(a, layer, ex, n, &c, slots_a, ca, &ka, &n_cpu, &err), "%s", err.msg);
        REQUIRE(moe_expert_cache_step(b, layer, ex, n, slots_b, cb, &kb, &err), "%s", err.msg);
        REQUIRE(ka == kb && n_cpu >= 0 && n_cpu <= ka && n_cpu == moe_hybrid_cpu_share(ka, &c),
                "step %d: %d copies (twin %d), %d on the CPU", step, ka, kb, n_cpu);
        cpu_total += (uint64_t)n_cpu;
        cpu_steps += n_cpu > 0;
        copy_steps += ka > n_cpu;
        for (int j = 0; j < ka; j++)
            CHECK(ca[j].slot == cb[j].slot && ca[j].expert == cb[j].expert, "step %d copy %d", step, j);
        for (int i = 0; i < n; i++) {
            bool cpu = false;
            for (int j = ka - n_cpu; j < ka; j++) cpu |= ca[j].expert == ex[i];
            CHECK(slots_a[i] == (cpu ? -1 : slots_b[i]), "step %d selection %d: slot %d, twin %d%s", step, i,
                  slots_a[i], slots_b[i], cpu ? " (the CPU's)" : "");
        }
    }
    for (int k = 0; k < plan.n_pools; k++)
        for (int s = 0; s < plan.pools[k].n_slots; s++) {
            int la, ea, lb, eb;
            bool ha = moe_expert_cache_slot(a, k, s, &la, &ea), hb = moe_expert_cache_slot(b, k, s, &lb, &eb);
            CHECK(ha == hb && (!ha || (la == lb && ea == eb)) &&
                      moe_expert_cache_stamp(a, k, s) == moe_expert_cache_stamp(b, k, s), "pool %d slot %d", k, s);
        }
    uint64_t sum_cpu = 0;
    for (int k = 0; k < plan.n_pools; k++) {
        moe_cache_stats sa = moe_expert_cache_pool_stats(a, k, false), sb = moe_expert_cache_pool_stats(b, k, false);
        sum_cpu += sa.cpu_computed;
        CHECK(sa.hits == sb.hits && sa.misses == sb.misses && sa.bytes_copied == sb.bytes_copied, "pool %d stats", k);
    }
    CHECK(sum_cpu == cpu_total && cpu_steps > 100 && copy_steps > 100, "cpu %llu of %llu, %d CPU steps, %d copy steps",
          (unsigned long long)sum_cpu, (unsigned long long)cpu_total, cpu_steps, copy_steps);
    moe_expert_cache_free(a);
    moe_expert_cache_free(b);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
}

// Frecency victims (the header's "Frecency victims"): a layer whose expert A served three steps
// and then B and C one each gives up B (fewest uses, the older of the two), where the LRU gives up
// A; then random steps of one layer against a model of the rule written from the header: each
// expert's list of the steps that selected it, w and c counted from it, the candidates sorted.
typedef struct {
    int expert; // -1: empty
    long last;  // the step of the last use (the pool clock of a one-layer pool)
} frec_slot;

static long frec_model_score(int n_uses, const long *uses, long u) {
    int w = 0;
    for (int i = 0; i < n_uses; i++) w += uses[i] >= u - 8 && uses[i] <= u - 1;
    return 8L * w + (u ? 80L * n_uses / u : 0);
}

TEST(moe_cache_frecency_victims_follow_the_rule) {
    moe_layer_geometry l = {.layer = 0, .n_expert = 32, .bytes = {10, 10, 10}};
    moe_geometry g;
    moe_geometry_from_layers(&l, 1, &g);
    moe_cache_plan plan;
    REQUIRE(make_plan(&g, 3, 1, &plan));
    REQUIRE(plan.pools[0].n_slots == 3);
    moe_cache_policy_params fp = moe_cache_policy_default_params();
    fp.victims = MOE_VICTIMS_FRECENCY;
    const int32_t steps[6] = {0, 0, 0, 1, 2, 3}; // A A A B C, then D misses
    for (int v = 0; v < 2; v++) {
        moe_cache_policy_params pp = moe_cache_policy_default_params();
        moe_expert_cache *c = moe_expert_cache_init_policy(&plan, &g, v ? &fp : &pp);
        int32_t slot = -1;
        moe_cache_copy cp;
        int n_copies = 0;
        for (int i = 0; i < 6; i++)
            REQUIRE(moe_expert_cache_step(c, 0, &steps[i], 1, &slot, &cp, &n_copies, NULL));
        CHECK(n_copies == 1 && cp.evicted_expert == (v ? 1 : 0), "%s: D evicted expert %d",
              v ? "frecency" : "LRU", cp.evicted_expert);
        moe_expert_cache_free(c);
    }
    moe_cache_plan_free(&plan);

    enum { N_EXPERT = 32, SLOTS = 7, STEPS = 3000, MAX_N = 3 };
    REQUIRE(make_plan(&g, SLOTS, MAX_N, &plan));
    REQUIRE(plan.pools[0].n_slots == SLOTS);
    moe_expert_cache *c = moe_expert_cache_init_policy(&plan, &g, &fp);
    frec_slot ms[SLOTS];
    for (int s = 0; s < SLOTS; s++) ms[s] = (frec_slot){-1, 0};
    long *uses = calloc((size_t)N_EXPERT * STEPS, sizeof(long));
    int n_uses[N_EXPERT] = {0};
    ft_rng rng = ft_rng_init(23);
    int bad = 0, misses = 0;
    for (long u = 1; u <= STEPS && bad < 3; u++) {
        int32_t ex[MAX_N], slots[MAX_N];
        int n = 1 + (int)(ft_rng_next(&rng) % MAX_N);
        for (int i = 0; i < n; i++) ex[i] = draw_expert(&rng, N_EXPERT); // duplicates allowed
        // the model: uses first, then hits, then each missed expert takes the least candidate
        bool first[MAX_N];
        for (int i = 0; i < n; i++) {
            first[i] = true;
            for (int j = 0; j < i; j++) first[i] &= ex[j] != ex[i];
            if (first[i]) uses[(size_t)ex[i] * STEPS + n_uses[ex[i]]++] = u;
        }
        int want[MAX_N];
        bool used[SLOTS] = {0};
        for (int i = 0; i < n; i++) {
            want[i] = -1;
            for (int s = 0; s < SLOTS; s++)
                if (ms[s].expert == ex[i]) want[i] = s, used[s] = true;
        }
        for (int i = 0; i < n; i++) {
            if (want[i] >= 0 || !first[i]) continue;
            int best = -1;
            long bs = 0;
            for (int s = 0; s < SLOTS; s++) {
                if (used[s]) continue;
                int e = ms[s].expert;
                long sc = e < 0 ? -1 : frec_model_score(n_uses[e], uses + (size_t)e * STEPS, u);
                if (best < 0 || sc < bs || (sc == bs && ms[s].last < ms[best].last)) best = s, bs = sc;
            }
            ms[best].expert = ex[i];
            used[best] = true;
            want[i] = best;
            misses++;
            for (int j = i + 1; j < n; j++)
                if (ex[j] == ex[i]) want[j] = best;
        }
        for (int s = 0; s < SLOTS; s++)
            if (used[s]) ms[s].last = u;
        moe_cache_copy cps[MAX_N];
        int n_copies;
        REQUIRE(moe_expert_cache_step(c, 0, ex, n, slots, cps, &n_copies, NULL));
        for (int i = 0; i < n; i++)
            if (slots[i] != want[i] && bad++ < 3)
                CHECK(false, "step %ld selection %d (expert %d): slot %d, the rule's %d", u, i, ex[i], slots[i],
                      want[i]);
    }
    CHECK(bad == 0);
    CHECK(misses > STEPS / 4 && misses < STEPS * MAX_N, "%d misses", misses);
    free(uses);
    moe_expert_cache_free(c);
    moe_cache_plan_free(&plan);
    moe_geometry_free(&g);
}
