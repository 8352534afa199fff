// test_kv.c: the KV cache: types, sizes, rotation sizes and rows round-tripping through the
// backend's set_rows.
#include "test.h"
#include "../src/backend/cpu/cpu.h"
#include "../src/kv/kv.h"

#include <string.h>

TEST(kv_types_and_rotation) {
    int64_t widths[2] = {128, 128};
    ft_err err = {{0}};
    ft_backend *be = ft_backend_cpu_init(1, false);
    ft_kv_params p = {2, 16, FT_TYPE_F16, widths, 64, NULL, NULL};
    ft_kv_cache *kv = ft_kv_init(&p, be, &err);
    REQUIRE(kv, "%s", err.msg);
    CHECK(ft_kv_rot_k(kv) == 0 && ft_kv_rot_v(kv) == 0, "f16 is not rotated");
    CHECK(ft_kv_bytes(kv) == 2 * 2 * 16 * 128 * 2);
    CHECK(ft_kv_k(kv, 1)->ne[1] == 16 && ft_kv_v(kv, 0)->type == FT_TYPE_F16);
    ft_kv_free(kv);
    p.type = FT_TYPE_Q8_0;
    p.head_dim = 128;
    kv = ft_kv_init(&p, be, &err);
    REQUIRE(kv, "%s", err.msg);
    CHECK(ft_kv_rot_k(kv) == 128 && ft_kv_rot_v(kv) == 64, "rotations %d %d", ft_kv_rot_k(kv), ft_kv_rot_v(kv));
    ft_kv_free(kv);
    widths[1] = 100; // not a multiple of q8_0's 32
    CHECK(!ft_kv_init(&p, be, &err));
    CHECK(strstr(err.msg, "layer 1"), "message: %s", err.msg);
    p.type = FT_TYPE_Q4_K;
    CHECK(!ft_kv_init(&p, be, &err));
    enum ft_type t;
    CHECK(ft_kv_type_from_name("q8_0", &t) && t == FT_TYPE_Q8_0);
    CHECK(!ft_kv_type_from_name("q4_0", &t));
    ft_kv_free(NULL);
    be->ops->free(be);
}

TEST(kv_rows_round_trip) {
    int64_t widths[1] = {64};
    ft_err err = {{0}};
    ft_backend *be = ft_backend_cpu_init(1, false);
    ft_backend_limits lim = {.max_tok = 4, .max_width = 64, .max_ctx = 8, .max_head_dim = 64, .n_expert = 1,
                             .n_expert_used = 1};
    be->ops->reserve(be, &lim);
    for (int q = 0; q < 2; q++) {
        ft_kv_params p = {1, 8, q ? FT_TYPE_Q8_0 : FT_TYPE_F16, widths, 64, NULL, NULL};
        ft_kv_cache *kv = ft_kv_init(&p, be, &err);
        REQUIRE(kv, "%s", err.msg);
        float x[2 * 64], y[64];
        for (int i = 0; i < 128; i++) x[i] = sinf((float)i) * 3;
        be->ops->set_rows(be, ft_kv_k(kv, 0), 5, x, 2);
        const ft_tensor *k = ft_kv_k(kv, 0);
        for (int r = 0; r < 2; r++) {
            ft_quant_ops_find(k->type)->to_float((uint8_t *)k->data + (5 + r) * k->row_bytes, y, 64);
            for (int i = 0; i < 64; i++)
                CHECK(fabsf(y[i] - x[r * 64 + i]) < (q ? 3.0f / 127 : 3e-3f), "%s row %d [%d]: %g vs %g",
                      ft_type_name(k->type), r, i, y[i], x[r * 64 + i]);
        }
        ft_kv_free(kv);
    }
    be->ops->free(be);
}
