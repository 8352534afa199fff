// test_cli_moe_stats.c: the expert cache's telemetry as ft bench, ft run and the server show it
// (src/moe/cache_stats.c, src/server/metrics.c), fed with known counters: snapshot arithmetic,
// the per-pool table, and the /metrics and /v1/stats series per pool and per layer. The counters
// themselves come from the GPU (tests_gpu); these need none.
#include "test.h"
#include "../src/server/srv_impl.h"

#include <stdlib.h>
#include <string.h>

// 3 MoE layers (blocks 1, 2, 5) in 2 pools: layers 1 and 2 in pool 0, layer 5 in pool 1. Layer
// i's counters are scaled by k so two snapshots differ.
static void make_stats(ft_moe_stats *s, uint64_t k) {
    memset(s, 0, sizeof(*s));
    s->n_slots = 40;
    s->cache_bytes = 123456789;
    s->n_layers = 3;
    s->n_pools = 2;
    s->layer_block = ft_malloc(3 * sizeof(int));
    s->layer_pool = ft_malloc(3 * sizeof(int));
    s->layer_slots = ft_malloc(3 * sizeof(int));
    s->layers = ft_calloc(3, sizeof(ft_moe_counts));
    s->pool_slots = ft_malloc(2 * sizeof(int));
    s->pool_layers = ft_malloc(2 * sizeof(int));
    s->pools = ft_calloc(2, sizeof(ft_moe_counts));
    int blocks[3] = {1, 2, 5}, pools[3] = {0, 0, 1};
    for (int i = 0; i < 3; i++) {
        s->layer_block[i] = blocks[i];
        s->layer_pool[i] = pools[i];
        s->layer_slots[i] = 13 + i;
        ft_moe_counts c = {.selections = 10 * k * (uint64_t)(i + 1), .hits = 7 * k * (uint64_t)(i + 1),
                           .misses = 3 * k * (uint64_t)(i + 1), .bytes_copied = 3000 * k * (uint64_t)(i + 1),
                           .copy_ns = 100 * k * (uint64_t)(i + 1), .prefetched = 4 * k, .prefetch_used = 3 * k,
                           .prefetch_bytes = 400 * k};
        s->layers[i] = c;
        ft_moe_counts *p = &s->pools[pools[i]];
        p->selections += c.selections, p->hits += c.hits, p->misses += c.misses;
        p->bytes_copied += c.bytes_copied, p->copy_ns += c.copy_ns;
        s->total.selections += c.selections, s->total.hits += c.hits, s->total.misses += c.misses;
        s->total.bytes_copied += c.bytes_copied, s->total.copy_ns += c.copy_ns;
    }
    s->pool_slots[0] = 26, s->pool_slots[1] = 14;
    s->pool_layers[0] = 2, s->pool_layers[1] = 1;
}

TEST(cli_moe_stats_snapshots) {
    ft_moe_stats a, b, c = {0};
    make_stats(&a, 3);
    make_stats(&b, 1);
    ft_moe_stats_copy(&c, &a);
    CHECK(c.layers != a.layers && c.pools != a.pools && c.layer_slots != a.layer_slots && c.layer_slots[2] == 15,
          "a deep copy");
    CHECK(ft_moe_prefetch_wasted_bytes(&a.layers[0]) == 300, "3 of 12 copies of 100 bytes unused");
    CHECK(!memcmp(c.layers, a.layers, 3 * sizeof(ft_moe_counts)) && c.total.hits == a.total.hits);
    // a window: 3x minus 1x is 2x, per layer, per pool and in all
    ft_moe_stats_sub(&c, &b);
    ft_moe_stats two;
    make_stats(&two, 2);
    CHECK(!memcmp(c.layers, two.layers, 3 * sizeof(ft_moe_counts)));
    CHECK(!memcmp(c.pools, two.pools, 2 * sizeof(ft_moe_counts)));
    CHECK(!memcmp(&c.total, &two.total, sizeof(ft_moe_counts)));
    ft_moe_stats_add(&c, &b); // two windows add up
    CHECK(!memcmp(c.layers, a.layers, 3 * sizeof(ft_moe_counts)) && c.total.bytes_copied == a.total.bytes_copied);
    CHECK(fabs(ft_moe_hit_rate(&a.total) - 0.7) < 1e-12);
    CHECK(fabs(ft_moe_copy_gbps(&a.total) - 30.0) < 1e-9, "3000 bytes per 100 ns are 30 GB/s");
    ft_moe_counts none = {0};
    CHECK(ft_moe_hit_rate(&none) == 0 && ft_moe_copy_gbps(&none) == 0);
    // the table ft bench and ft run print
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f);
    ft_moe_stats_print(&b, 10, f);
    fclose(f);
    CHECK(strstr(text, "expert cache: 40 slots (exact layout)") && strstr(text, "2 pools over 3 MoE layers"), "%s", text);
    const char *hit = "hit  70.0%"; // (a literal % in CHECK's condition would reach its format)
    CHECK(strstr(text, "pool 1 (1 layers, 14 slots)") && strstr(text, hit), "%s", text);
    CHECK(strstr(text, "misses        18") && strstr(text, "30.0 GB/s"), "all pools: 3 + 6 + 9 misses: %s", text);
    free(text);
    // no cache: a zeroed snapshot frees as a no-op, and a model without one reads as none
    ft_moe_stats z = {0};
    ft_moe_stats_free(&z);
    ft_moe_stats_free(&a);
    ft_moe_stats_free(&b);
    ft_moe_stats_free(&c);
    ft_moe_stats_free(&two);
}

TEST(cli_moe_stats_server_exports) {
    ft_moe_stats moe;
    make_stats(&moe, 1);
    srv_metrics *m = srv_metrics_init();
    srv_sched_stats st = {.kv_total = 100};
    char *prom = srv_metrics_prometheus(m, &st, &moe);
    REQUIRE(prom);
    CHECK(strstr(prom, "ft_moe_cache_slots 40\n"), "%s", prom);
    CHECK(strstr(prom, "# TYPE ft_moe_pool_hits_total counter\n"));
    CHECK(strstr(prom, "ft_moe_pool_hits_total{pool=\"0\"} 21\n"), "pool 0: 7 + 14");
    CHECK(strstr(prom, "ft_moe_pool_misses_total{pool=\"1\"} 9\n"));
    CHECK(strstr(prom, "ft_moe_layer_selections_total{layer=\"5\",pool=\"1\"} 30\n"));
    CHECK(strstr(prom, "ft_moe_layer_h2d_bytes_total{layer=\"2\",pool=\"0\"} 6000\n"));
    CHECK(strstr(prom, "# TYPE ft_moe_layer_slots gauge\nft_moe_layer_slots{layer=\"1\",pool=\"0\"} 13\n"), "%s", prom);
    CHECK(strstr(prom, "ft_moe_layer_slots{layer=\"5\",pool=\"1\"} 15\n"));
    const char *cs = strstr(prom, "ft_moe_pool_copy_seconds_total{pool=\"0\"} ");
    double secs = cs ? atof(cs + strlen("ft_moe_pool_copy_seconds_total{pool=\"0\"} ")) : 0;
    CHECK(fabs(secs - 300e-9) < 1e-15, "pool 0 copied for 100 + 200 ns: %g", secs);
    free(prom);
    char *plain = srv_metrics_prometheus(m, &st, NULL);
    CHECK(!strstr(plain, "ft_moe_"), "no cache, no series");
    free(plain);

    json_t *j = srv_metrics_json(m, &st, &moe, NULL);
    json_t *c = json_object_get(j, "moe_cache");
    REQUIRE(json_is_object(c));
    CHECK(json_integer_value(json_object_get(c, "slots")) == 40);
    CHECK(!strcmp(json_string_value(json_object_get(c, "layout")), "exact"));
    json_t *pools = json_object_get(c, "pools"), *layers = json_object_get(c, "layers");
    REQUIRE(json_array_size(pools) == 2 && json_array_size(layers) == 3);
    json_t *p1 = json_array_get(pools, 1), *l2 = json_array_get(layers, 2);
    CHECK(json_integer_value(json_object_get(p1, "slots")) == 14 && json_integer_value(json_object_get(p1, "layers")) == 1);
    CHECK(json_integer_value(json_object_get(p1, "misses")) == 9);
    CHECK(json_integer_value(json_object_get(l2, "layer")) == 5 && json_integer_value(json_object_get(l2, "pool")) == 1);
    CHECK(json_integer_value(json_object_get(l2, "slots")) == 15);
    CHECK(json_integer_value(json_object_get(json_object_get(l2, "prefetch"), "wasted_h2d_bytes")) == 100);
    CHECK(fabs(json_real_value(json_object_get(json_object_get(c, "total"), "hit_rate")) - 0.7) < 1e-12);
    CHECK(json_integer_value(json_object_get(json_object_get(c, "total"), "h2d_bytes")) == 18000);
    CHECK(json_is_null(json_object_get(j, "routing")), "no route counters: null");
    json_decref(j);
    // the route counters: MoE blocks 1 and 3 of 3 experts, row by row
    int blocks[2] = {1, 3};
    uint64_t counts[6] = {4, 0, 2, 1, 1, 4};
    srv_routes rt = {.n_moe = 2, .n_expert = 3, .n_expert_used = 2, .block = blocks, .counts = counts};
    j = srv_metrics_json(m, &st, NULL, &rt);
    CHECK(json_is_null(json_object_get(j, "moe_cache")));
    json_t *r = json_object_get(j, "routing");
    REQUIRE(json_is_object(r));
    CHECK(json_integer_value(json_object_get(r, "n_expert")) == 3 && json_integer_value(json_object_get(r, "n_expert_used")) == 2);
    CHECK(json_integer_value(json_object_get(r, "total")) == 12);
    json_t *rl = json_object_get(r, "layers"), *sel = json_object_get(r, "selections");
    REQUIRE(json_array_size(rl) == 2 && json_array_size(sel) == 2);
    CHECK(json_integer_value(json_array_get(rl, 1)) == 3);
    CHECK(json_array_size(json_array_get(sel, 1)) == 3 && json_integer_value(json_array_get(json_array_get(sel, 1), 2)) == 4);
    CHECK(json_integer_value(json_array_get(json_array_get(sel, 0), 1)) == 0);
    json_decref(j);
    srv_metrics_free(m);
    ft_moe_stats_free(&moe);
}
