// test_cuda_moe_stats.c: the expert cache's telemetry and resize as ft bench, ft run and the
// server read them (ft_engine_moe_stats, ft_engine_moe_rebuild: the backend's expert cache), on a
// real `--moe-backend offload` engine. Over a window of one-token decode steps the counters must
// obey identities that hold whatever the cache decided:
//   - every MoE layer selected top-k experts per token: selections = tokens x top-k;
//   - each selection is a hit or a miss; each miss copied the layer's native expert bytes (gate,
//     up and down of one expert);
//   - a pool's counters are the sums of its layers', the total the sum of the pools'.
// The route counters (ft_engine_route_counts, counted by the routing kernels) agree: over the
// window each layer's row sums to its selections in the cache. A resize keeps the counters,
// changes the slots, refuses a size below the floor (keeping the cache) and the engine decodes on.
#include "gpu_test.h"
#include "../tests/fixtures.h"
#include "../src/engine/engine.h"
#include "../src/model/synth.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>

static bool counts_equal(const ft_moe_counts *a, const ft_moe_counts *b) {
    return a->selections == b->selections && a->hits == b->hits && a->misses == b->misses &&
           a->bytes_copied == b->bytes_copied && a->copy_ns == b->copy_ns;
}

TEST(cuda_moe_stats_decode_window_and_rebuild) {
    GPU_TEST_REQUIRE_DEVICE();
    ft_synth_params sp = ft_synth_default_params(); // 4 MoE layers, 8 experts, top-2
    fixture_expert_types(&sp, "q4_K,q4_K,q8_0,q8_0", NULL); // two geometries: two pools
    ft_model *m = fixture_model(&sp, "moe_stats.gguf");
    REQUIRE(m);
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 128;
    ep.device = FT_PLACEMENT_CUDA;
    ep.moe_backend = FT_MOE_BACKEND_OFFLOAD;
    ep.moe_cache_size = 12;
    ft_engine *e = ft_engine_init(m, &ep, &err);
    REQUIRE(e, "%s", err.msg);
    CHECK(ft_engine_moe_backend(e) == FT_MOE_BACKEND_OFFLOAD);
    int n_vocab = m->hp.n_vocab, k = m->hp.n_expert_used, n_dec = 16;
    int32_t tok[64];
    ft_rng r = ft_rng_init(3);
    for (int i = 0; i < 64; i++) tok[i] = (int32_t)(ft_rng_next(&r) % (uint64_t)n_vocab);
    REQUIRE(ft_engine_eval(e, tok, 20, &err), "%s", err.msg);
    ft_moe_stats a = {0}, b = {0}, c = {0};
    enum { NL = 4, NE = 8 };
    REQUIRE(m->hp.n_layer == NL && m->hp.n_expert == NE);
    uint64_t ra[NL * NE], rb[NL * NE];
    REQUIRE(ft_engine_moe_stats(e, &a));
    REQUIRE(ft_engine_route_counts(e, ra), "the CUDA backend counts its routing");
    for (int i = 0; i < n_dec; i++) REQUIRE(ft_engine_eval(e, &tok[20 + i], 1, &err), "%s", err.msg);
    REQUIRE(ft_engine_moe_stats(e, &b));
    REQUIRE(ft_engine_route_counts(e, rb));
    ft_moe_stats_copy(&c, &b);
    ft_moe_stats_sub(&c, &a);

    CHECK(c.n_layers == 4 && c.n_pools == 2 && c.n_slots == 12, "layers %d pools %d slots %d", c.n_layers, c.n_pools,
          c.n_slots);
    ft_moe_counts pools[8] = {{0}}, total = {0};
    for (int i = 0; i < c.n_layers && c.n_pools <= 8; i++) {
        const ft_moe_counts *l = &c.layers[i];
        const ft_layer *L = &m->layers[c.layer_block[i]];
        uint64_t expert = L->gate_exps.mat_bytes + L->up_exps.mat_bytes + L->down_exps.mat_bytes;
        CHECK(l->selections == (uint64_t)n_dec * (uint64_t)k, "layer %d: %llu selections", c.layer_block[i],
              (unsigned long long)l->selections);
        CHECK(l->hits + l->misses == l->selections, "layer %d", c.layer_block[i]);
        CHECK(l->bytes_copied == l->misses * expert, "layer %d: %llu bytes for %llu misses of %llu", c.layer_block[i],
              (unsigned long long)l->bytes_copied, (unsigned long long)l->misses, (unsigned long long)expert);
        CHECK(l->misses == 0 || l->copy_ns > 0, "layer %d copied without time", c.layer_block[i]);
        uint64_t routed = 0;
        for (int x = 0; x < NE; x++) routed += rb[c.layer_block[i] * NE + x] - ra[c.layer_block[i] * NE + x];
        CHECK(routed == l->selections, "layer %d: %llu routed, %llu selections in the cache", c.layer_block[i],
              (unsigned long long)routed, (unsigned long long)l->selections);
        ft_moe_counts *p = &pools[c.layer_pool[i]];
        p->selections += l->selections, p->hits += l->hits, p->misses += l->misses;
        p->bytes_copied += l->bytes_copied, p->copy_ns += l->copy_ns;
        total.selections += l->selections, total.hits += l->hits, total.misses += l->misses;
        total.bytes_copied += l->bytes_copied, total.copy_ns += l->copy_ns;
    }
    for (int p = 0; p < c.n_pools && p < 8; p++) CHECK(counts_equal(&pools[p], &c.pools[p]), "pool %d", p);
    CHECK(counts_equal(&total, &c.total));
    printf("    decode window: %llu selections, hit rate %.3f, %.1f KiB copied at %.1f GB/s\n",
           (unsigned long long)c.total.selections, ft_moe_hit_rate(&c.total), (double)c.total.bytes_copied / 1024,
           ft_moe_copy_gbps(&c.total));

    // resize: counters kept, slots changed, the engine goes on
    REQUIRE(ft_engine_moe_rebuild(e, 20, &err), "%s", err.msg);
    ft_moe_stats d = {0};
    REQUIRE(ft_engine_moe_stats(e, &d));
    CHECK(d.n_slots == 20 && counts_equal(&d.total, &b.total), "slots %d", d.n_slots);
    CHECK(!ft_engine_moe_rebuild(e, 1, &err) && err.msg[0], "one slot is below the floor of top-k per layer");
    ft_moe_stats_free(&d);
    REQUIRE(ft_engine_moe_stats(e, &d));
    CHECK(d.n_slots == 20, "a refused resize keeps the cache: %d", d.n_slots);
    for (int i = 0; i < 4; i++) CHECK(ft_engine_eval(e, &tok[40 + i], 1, &err) != NULL, "%s", err.msg);
    ft_moe_stats_free(&a);
    ft_moe_stats_free(&b);
    ft_moe_stats_free(&c);
    ft_moe_stats_free(&d);
    ft_engine_free(e);
    ft_model_free(m);
}
