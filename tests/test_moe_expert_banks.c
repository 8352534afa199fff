// test_moe_expert_banks.c: host expert banks (src/moe/expert_banks.c) against the file's bytes,
// read with stdio at the offsets the GGUF header gives, independently of the mapping.
#include "fixtures.h"
#include "../src/gguf/gguf.h"
#include "../src/model/synth.h"
#include "../src/moe/expert_banks.h"

#include <stdlib.h>
#include <string.h>

static const char *const g_banks[MOE_BANK_COUNT] = {"gate", "up", "down"};

// Three MoE layers of different types, and a down bank typed differently from gate/up.
static const char *write_mixed_model(void) {
    ft_synth_params p = fixture_moe_params(3, 6);
    fixture_expert_types(&p, "q4_K,bf16,q8_0", "q6_K,bf16,q4_0");
    return fixture_write(&p, "moe_banks_mixed.gguf");
}

typedef struct {
    int n_alloc, n_free;
    size_t bytes;
} counting_ctx;

static void *counting_alloc(void *ctx, size_t bytes) {
    counting_ctx *c = ctx;
    c->n_alloc++;
    c->bytes = bytes;
    return malloc(bytes);
}

static void counting_free(void *ctx, void *p, size_t bytes) {
    counting_ctx *c = ctx;
    c->n_free++;
    CHECK(bytes == c->bytes);
    free(p);
}

TEST(moe_banks_entries_equal_the_files_expert_slices) {
    const char *path = write_mixed_model();
    gguf_file *f;
    moe_geometry g;
    REQUIRE(path && fixture_open_moe(path, &f, &g));
    ft_err err = {{0}};
    REQUIRE(g.n_layers == 3);
    counting_ctx cc = {0};
    moe_expert_banks_params p = moe_expert_banks_default_params();
    p.alloc = (moe_host_allocator){counting_alloc, counting_free, &cc, "counting malloc"};
    moe_expert_banks *hb = moe_expert_banks_load(f, &g, &p, &err);
    REQUIRE(hb, "%s", err.msg);
    CHECK(cc.n_alloc == 1 && cc.bytes == hb->bytes && hb->bytes == moe_expert_banks_bytes(&g));

    FILE *fp = fopen(path, "rb");
    REQUIRE(fp);
    const enum ft_type want_gate[3] = {FT_TYPE_Q4_K, FT_TYPE_BF16, FT_TYPE_Q8_0};
    const enum ft_type want_down[3] = {FT_TYPE_Q6_K, FT_TYPE_BF16, FT_TYPE_Q4_0};
    uint64_t total = 0;
    for (int i = 0; i < hb->n_layers; i++) {
        const moe_host_layer *hl = &hb->layers[i];
        CHECK(hl->layer == i && hl->n_expert == 6);
        CHECK(hl->bank[MOE_BANK_GATE].type == want_gate[i] && hl->bank[MOE_BANK_UP].type == want_gate[i]);
        CHECK(hl->bank[MOE_BANK_DOWN].type == want_down[i]);
        for (int b = 0; b < MOE_BANK_COUNT; b++) {
            char name[64];
            snprintf(name, sizeof(name), "blk.%d.ffn_%s_exps.weight", i, g_banks[b]);
            const gguf_tensor *t = gguf_find_tensor(f, name);
            REQUIRE(t);
            // one expert = 256 x 256 weights at the type's block size: an independent size
            const ft_type_traits *tr = ft_type_traits_find(t->type);
            uint64_t want_bytes = 256ull * 256 / (uint64_t)tr->block_elems * (uint64_t)tr->block_bytes;
            CHECK(hl->bank[b].expert_bytes == want_bytes, "%s: %llu bytes per expert", name,
                  (unsigned long long)hl->bank[b].expert_bytes);
            bool aligned = (uint64_t)(hl->bank[b].data - (uint8_t *)hb->block) % MOE_BANK_ALIGN == 0;
            CHECK(aligned);
            uint8_t *buf = malloc(want_bytes);
            for (int e = 0; e < 6; e++) {
                fseek(fp, (long)(gguf_data_offset(f) + t->offset + (uint64_t)e * want_bytes), SEEK_SET);
                REQUIRE(fread(buf, 1, want_bytes, fp) == want_bytes);
                CHECK(!memcmp(buf, moe_expert_banks_entry(hb, i, b, e), want_bytes), "%s expert %d differs",
                      name, e);
            }
            free(buf);
            total += 6 * want_bytes;
        }
    }
    CHECK(total == g.bytes_native && hb->bytes >= total && hb->bytes < total + 9 * MOE_BANK_ALIGN);
    fclose(fp);
    moe_expert_banks_free(hb);
    CHECK(cc.n_free == 1);
    moe_geometry_free(&g);
    gguf_close(f);
}

TEST(moe_banks_refuse_when_ram_is_short_and_name_both_numbers) {
    const char *path = write_mixed_model();
    gguf_file *f;
    moe_geometry g;
    REQUIRE(path && fixture_open_moe(path, &f, &g));
    ft_err err = {{0}};
    counting_ctx cc = {0};
    moe_expert_banks_params p = moe_expert_banks_default_params();
    p.alloc = (moe_host_allocator){counting_alloc, counting_free, &cc, "counting malloc"};
    uint64_t need = moe_expert_banks_bytes(&g);
    p.ram_available = need - 1;
    CHECK(!moe_expert_banks_load(f, &g, &p, &err));
    char a[32], b[32];
    snprintf(a, sizeof(a), "%llu", (unsigned long long)need);
    snprintf(b, sizeof(b), "%llu", (unsigned long long)(need - 1));
    CHECK(strstr(err.msg, a) && strstr(err.msg, b), "message: %s", err.msg);
    CHECK(cc.n_alloc == 0, "allocated before checking the RAM");
    p.ram_available = need;
    moe_expert_banks *hb = moe_expert_banks_load(f, &g, &p, &err);
    CHECK(hb, "%s", err.msg);
    moe_expert_banks_free(hb);
    moe_expert_banks_free(NULL);
    CHECK(moe_mem_available(&err) > 0, "%s", err.msg);
    moe_geometry_free(&g);
    gguf_close(f);
}
