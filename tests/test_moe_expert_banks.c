// test_moe_expert_banks.c: host expert banks (src/moe/expert_banks.c) against the file's bytes,
// read with stdio at the offsets the GGUF header gives, independently of the mapping; the
// geometry of fused gate/up experts (src/moe/geometry.c) they are read by.
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

// A fused file (qwen35moe with ffn_gate_up_exps, three layers of different types): each layer's
// geometry says so, with gate and up of half the fused expert's bytes each, and the banks' gate
// and up entries are the two halves of each expert's matrix in the file.
TEST(moe_banks_fused_gate_up_entries_equal_the_files_halves) {
    ft_synth_params sp = fixture_moe_params(3, 6);
    sp.arch = "qwen35moe";
    sp.fused_gate_up = true;
    fixture_expert_types(&sp, "q4_K,bf16,mxfp4", "q6_K,bf16,q4_0");
    const char *path = fixture_write(&sp, "moe_banks_fused.gguf");
    gguf_file *f;
    moe_geometry g;
    REQUIRE(path && fixture_open_moe(path, &f, &g));
    REQUIRE(g.n_layers == 3);
    ft_err err = {{0}};
    moe_expert_banks_params p = moe_expert_banks_default_params();
    moe_expert_banks *hb = moe_expert_banks_load(f, &g, &p, &err);
    REQUIRE(hb, "%s", err.msg);
    FILE *fp = fopen(path, "rb");
    REQUIRE(fp);
    const enum ft_type want_gate[3] = {FT_TYPE_Q4_K, FT_TYPE_BF16, FT_TYPE_MXFP4};
    uint64_t total = 0;
    for (int i = 0; i < 3; i++) {
        const moe_layer_geometry *lg = &g.layers[i];
        CHECK(lg->gate_up_fused, "layer %d", i);
        CHECK(lg->type[MOE_BANK_GATE] == want_gate[i] && lg->type[MOE_BANK_UP] == want_gate[i]);
        // one expert's gate (or up) = 256 x 256 weights at the type's block size: an independent size
        const ft_type_traits *tr = ft_type_traits_find(want_gate[i]);
        uint64_t half = 256ull * 256 / (uint64_t)tr->block_elems * (uint64_t)tr->block_bytes;
        CHECK(lg->bytes[MOE_BANK_GATE] == half && lg->bytes[MOE_BANK_UP] == half, "layer %d: %llu, %llu", i,
              (unsigned long long)lg->bytes[MOE_BANK_GATE], (unsigned long long)lg->bytes[MOE_BANK_UP]);
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.ffn_gate_up_exps.weight", i);
        const gguf_tensor *t = gguf_find_tensor(f, name);
        REQUIRE(t && t->ne[1] == 512 && t->bytes == 6 * 2 * half, "%s", name);
        uint8_t *buf = malloc(half);
        for (int e = 0; e < 6; e++)
            for (int b = MOE_BANK_GATE; b <= MOE_BANK_UP; b++) {
                // expert e: its 256 gate rows, then its 256 up rows
                fseek(fp, (long)(gguf_data_offset(f) + t->offset + (2 * (uint64_t)e + (uint64_t)b) * half), SEEK_SET);
                REQUIRE(fread(buf, 1, half, fp) == half);
                CHECK(hb->layers[i].bank[b].expert_bytes == half);
                CHECK(!memcmp(buf, moe_expert_banks_entry(hb, i, b, e), half), "layer %d %s of expert %d differs", i,
                      g_banks[b], e);
            }
        free(buf);
        snprintf(name, sizeof(name), "blk.%d.ffn_down_exps.weight", i);
        t = gguf_find_tensor(f, name);
        REQUIRE(t);
        uint64_t down = t->bytes / 6;
        buf = malloc(down);
        fseek(fp, (long)(gguf_data_offset(f) + t->offset + 5 * down), SEEK_SET);
        REQUIRE(fread(buf, 1, down, fp) == down);
        CHECK(!memcmp(buf, moe_expert_banks_entry(hb, i, MOE_BANK_DOWN, 5), down), "layer %d down differs", i);
        free(buf);
        total += 6 * (2 * half + down);
    }
    CHECK(total == g.bytes_native, "%llu of %llu", (unsigned long long)total, (unsigned long long)g.bytes_native);
    fclose(fp);
    moe_expert_banks_free(hb);
    moe_geometry_free(&g);
    gguf_close(f);
}

typedef struct {
    const char *name;
    int64_t ne[3];
} expert_tensor;

// A GGUF of f32 expert tensors alone, element j of tensor k holding k * 1e5 + j (tests that do
// not go through an architecture).
static const char *write_experts(const char *file, const expert_tensor *ts, int n) {
    const char *path = test_path(file);
    ft_err err = {{0}};
    gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", "experts");
    for (int k = 0; k < n; k++) {
        const int64_t ne[4] = {ts[k].ne[0], ts[k].ne[1], ts[k].ne[2], 1};
        gguf_writer_add_tensor(w, ts[k].name, FT_TYPE_F32, 3, ne);
    }
    bool ok = gguf_writer_begin(w, path, &err);
    for (int k = 0; ok && k < n; k++) {
        size_t count = (size_t)(ts[k].ne[0] * ts[k].ne[1] * ts[k].ne[2]);
        float *d = malloc(count * sizeof(float));
        for (size_t j = 0; j < count; j++) d[j] = (float)(k * 100000 + (int)j);
        ok = gguf_writer_tensor_data(w, d, count * sizeof(float), &err);
        free(d);
    }
    ok = ok && gguf_writer_finish(w, &err);
    gguf_writer_free(w);
    if (!ok) test_fail(__FILE__, __LINE__, "%s: %s", file, err.msg);
    return ok ? path : NULL;
}

// The geometry refuses a layer with gate and up both fused and split (in either order), a
// fused tensor of odd rows, and a layer with neither, naming the tensor; a file may fuse some
// layers and not others.
TEST(moe_geometry_fused_gate_up_one_layout_per_layer) {
    static const struct {
        expert_tensor t[3];
        const char *msg;
    } bad[] = {
        {{{"blk.0.ffn_gate_up_exps.weight", {32, 8, 2}}, {"blk.0.ffn_gate_exps.weight", {32, 4, 2}},
          {"blk.0.ffn_down_exps.weight", {4, 32, 2}}},
         "tensor 'blk.0.ffn_gate_exps.weight': layer 0 has fused gate/up experts too"},
        {{{"blk.0.ffn_up_exps.weight", {32, 4, 2}}, {"blk.0.ffn_gate_up_exps.weight", {32, 8, 2}},
          {"blk.0.ffn_down_exps.weight", {4, 32, 2}}},
         "tensor 'blk.0.ffn_gate_up_exps.weight': layer 0 has split gate/up experts too"},
        {{{"blk.0.ffn_gate_up_exps.weight", {32, 7, 2}}, {"blk.0.ffn_down_exps.weight", {4, 32, 2}}},
         "tensor 'blk.0.ffn_gate_up_exps.weight': layer 0 has an odd number of gate/up rows"},
        {{{"blk.0.ffn_up_exps.weight", {32, 4, 2}}, {"blk.0.ffn_down_exps.weight", {4, 32, 2}}},
         "blk.0.ffn_gate_exps.weight is missing (nor are gate and up fused in ffn_gate_up_exps)"},
    };
    for (size_t c = 0; c < FT_ARRAY_LEN(bad); c++) {
        int n = bad[c].t[2].name ? 3 : 2;
        const char *path = write_experts("experts_bad.gguf", bad[c].t, n);
        REQUIRE(path);
        ft_err err = {{0}};
        gguf_file *f = gguf_open(path, &err);
        REQUIRE(f, "%s", err.msg);
        moe_geometry g;
        CHECK(!moe_geometry_read(f, &g, &err) && strstr(err.msg, bad[c].msg), "case %zu: %s", c, err.msg);
        gguf_close(f);
    }
    // layer 0 fused, layer 1 split: both load, each bank entry its expert's values
    const expert_tensor mixed[] = {
        {"blk.0.ffn_gate_up_exps.weight", {32, 8, 2}}, {"blk.0.ffn_down_exps.weight", {4, 32, 2}},
        {"blk.1.ffn_gate_exps.weight", {32, 4, 2}},    {"blk.1.ffn_up_exps.weight", {32, 4, 2}},
        {"blk.1.ffn_down_exps.weight", {4, 32, 2}},
    };
    const char *path = write_experts("experts_mixed.gguf", mixed, 5);
    gguf_file *f;
    moe_geometry g;
    REQUIRE(path && fixture_open_moe(path, &f, &g));
    REQUIRE(g.n_layers == 2);
    CHECK(g.layers[0].gate_up_fused && !g.layers[1].gate_up_fused);
    CHECK(g.n_groups == 1, "one geometry: %d groups", g.n_groups);
    ft_err err = {{0}};
    moe_expert_banks_params p = moe_expert_banks_default_params();
    moe_expert_banks *hb = moe_expert_banks_load(f, &g, &p, &err);
    REQUIRE(hb, "%s", err.msg);
    for (int i = 0; i < 2; i++)
        for (int b = 0; b < MOE_BANK_COUNT; b++)
            for (int e = 0; e < 2; e++) {
                const float *entry = (const float *)moe_expert_banks_entry(hb, i, b, e);
                CHECK(hb->layers[i].bank[b].expert_bytes == 4 * 32 * sizeof(float));
                // the tensor of the file this entry comes from, and the entry's first element there
                int k = i == 0 ? (b == MOE_BANK_DOWN ? 1 : 0) : 2 + b;
                int first = i == 0 && b != MOE_BANK_DOWN ? (2 * e + b) * 128 : e * 128;
                bool ok = true;
                for (int j = 0; j < 128; j++) ok = ok && entry[j] == (float)(k * 100000 + first + j);
                CHECK(ok, "layer %d %s expert %d", i, g_banks[b], e);
            }
    moe_expert_banks_free(hb);
    moe_geometry_free(&g);
    gguf_close(f);
}
