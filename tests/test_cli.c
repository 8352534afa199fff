// test_cli.c: the `ft` command's conventions (exit status, stdout/stderr, --json) and
// `ft inspect` / `ft synth` end to end through the process boundary.
#include "test.h"
#include "../src/gguf/gguf.h"

#include <jansson.h>
#include <string.h>

static int ft(const char *args, char *out, size_t cap) {
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s %s", test_ft_bin(), args);
    return test_run(cmd, out, cap);
}

TEST(cli_exit_status_for_usage_and_input_errors) {
    char out[4096];
    CHECK(ft("2>/dev/null", NULL, 0) == 2);
    CHECK(ft("nosuchcommand 2>/dev/null", NULL, 0) == 2);
    CHECK(ft("--help", out, sizeof(out)) == 0 && strstr(out, "inspect"));
    CHECK(ft("inspect 2>/dev/null", NULL, 0) == 2);
    CHECK(ft("inspect --bogus x.gguf 2>/dev/null", NULL, 0) == 2);
    CHECK(ft("synth 2>/dev/null", NULL, 0) == 2);
    CHECK(ft("synth x.gguf --layers 0 2>/dev/null", NULL, 0) == 2);
    CHECK(ft("synth x.gguf --expert-types q4_K,nope 2>/dev/null", NULL, 0) == 2);
    CHECK(ft("synth x.gguf --dense-lead 1 2>/dev/null", NULL, 0) == 2, "dense layers are laguna's");
    CHECK(ft("synth x.gguf --fused-gate-up 2>/dev/null", NULL, 0) == 2, "qwen3moe's experts are never fused");
    // an empty API key would serve without one: refused before the model loads
    CHECK(ft("serve --api-key '' -m /nonexistent.gguf 2>&1", out, sizeof(out)) == 2 && strstr(out, "--api-key"),
          "%s", out);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "%s serve -m /nonexistent.gguf 2>&1", test_ft_bin());
    char env_cmd[512];
    snprintf(env_cmd, sizeof(env_cmd), "FT_API_KEY= %s", cmd);
    CHECK(test_run(env_cmd, out, sizeof(out)) == 2 && strstr(out, "FT_API_KEY"), "%s", out);
    // bad input: the message names the file and says what is wrong, on stderr only
    CHECK(ft("inspect /nonexistent/model.gguf 2>&1", out, sizeof(out)) == 1);
    CHECK(strstr(out, "/nonexistent/model.gguf") != NULL, "message: %s", out);
    CHECK(ft("inspect /nonexistent/model.gguf 2>/dev/null", out, sizeof(out)) == 1 && out[0] == 0);
}

TEST(cli_inspect_rejects_a_truncated_file) {
    const char *path = test_path("cli_trunc.gguf"), *cut = test_path("cli_trunc_cut.gguf");
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof(cmd), "synth '%s' --layers 1 2>/dev/null", path);
    REQUIRE(ft(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof(cmd), "head -c 100000 '%s' > '%s'", path, cut);
    REQUIRE(test_run(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof(cmd), "inspect '%s' 2>&1", cut);
    CHECK(ft(cmd, out, sizeof(out)) == 1, "truncated file must be exit 1: %s", out);
    CHECK(strstr(out, "cli_trunc_cut.gguf") != NULL, "message: %s", out);
}

TEST(cli_synth_writes_laguna_leading_dense_layers) {
    const char *path = test_path("cli_laguna_dense.gguf");
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "synth '%s' --arch laguna --layers 3 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 4 "
             "--top-k 2 --ff 256 --dense-lead 1 --dense-ff 512 --expert-types q8_0,q4_K,bf16 2>/dev/null", path);
    REQUIRE(ft(cmd, NULL, 0) == 0);
    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    uint64_t lead = 0, ff = 0;
    CHECK(gguf_get_uint(f, "laguna.leading_dense_block_count", &lead) && lead == 1);
    CHECK(gguf_get_uint(f, "laguna.feed_forward_length", &ff) && ff == 512);
    const gguf_tensor *dense_up = gguf_find_tensor(f, "blk.0.ffn_up.weight");
    CHECK(dense_up && dense_up->ne[1] == 512, "layer 0's dense FFN, 512 wide");
    CHECK(!gguf_find_tensor(f, "blk.0.ffn_up_exps.weight"), "layer 0 has no experts");
    const gguf_tensor *e1 = gguf_find_tensor(f, "blk.1.ffn_up_exps.weight");
    const gguf_tensor *e2 = gguf_find_tensor(f, "blk.2.ffn_up_exps.weight");
    CHECK(e1 && e1->type == FT_TYPE_Q4_K, "--expert-types entry L is layer L's");
    CHECK(e2 && e2->type == FT_TYPE_BF16);
    gguf_close(f);
    // and the engine runs it
    snprintf(cmd, sizeof(cmd), "run -m '%s' -p hi -n 2 -t 1 >/dev/null 2>&1", path);
    CHECK(ft(cmd, NULL, 0) == 0);
}

// --fused-gate-up: each layer's gate and up experts in one ffn_gate_up_exps tensor, with the
// types --expert-types gives; the engine runs it.
TEST(cli_synth_writes_fused_gate_up_experts) {
    const char *path = test_path("cli_fused.gguf");
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "synth '%s' --arch qwen3next --layers 2 --experts 4 --ff 256 --fused-gate-up "
             "--expert-types q4_K,bf16 2>/dev/null", path);
    REQUIRE(ft(cmd, NULL, 0) == 0);
    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    for (int l = 0; l < 2; l++) {
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.ffn_gate_up_exps.weight", l);
        const gguf_tensor *t = gguf_find_tensor(f, name);
        CHECK(t && t->ne[0] == 256 && t->ne[1] == 512 && t->ne[2] == 4, "%s: [n_embd, 2 x ff, experts]", name);
        CHECK(t && t->type == (l ? FT_TYPE_BF16 : FT_TYPE_Q4_K), "%s", name);
        snprintf(name, sizeof(name), "blk.%d.ffn_gate_exps.weight", l);
        CHECK(!gguf_find_tensor(f, name), "%s", name);
        snprintf(name, sizeof(name), "blk.%d.ffn_up_exps.weight", l);
        CHECK(!gguf_find_tensor(f, name), "%s", name);
    }
    gguf_close(f);
    snprintf(cmd, sizeof(cmd), "run -m '%s' -p hi -n 2 -t 1 >/dev/null 2>&1", path);
    CHECK(ft(cmd, NULL, 0) == 0);
}

TEST(cli_inspect_json_matches_the_file) {
    const char *path = test_path("cli_mixed.gguf");
    char cmd[2048];
    static char out[1 << 20];
    snprintf(cmd, sizeof(cmd),
             "synth '%s' --layers 4 --experts 4 --expert-types q4_K,q4_K,bf16 --expert-down-types q6_K,q6_K,bf16 "
             "2>/dev/null", path);
    REQUIRE(ft(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof(cmd), "inspect --json '%s'", path);
    REQUIRE(ft(cmd, out, sizeof(out)) == 0);
    char *nl = strchr(out, '\n');
    CHECK(nl && nl[1] == 0, "--json output must be exactly one line");
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    REQUIRE(o, "not JSON: %s", je.text);
    CHECK(!strcmp(json_string_value(json_object_get(o, "arch")), "qwen3moe"));

    ft_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    REQUIRE(f, "%s", err.msg);
    json_t *tensors = json_object_get(o, "tensors");
    CHECK((int64_t)json_array_size(tensors) == gguf_n_tensors(f));
    for (size_t i = 0; i < json_array_size(tensors) && i < (size_t)gguf_n_tensors(f); i++) {
        json_t *t = json_array_get(tensors, i);
        const gguf_tensor *gt = gguf_tensor_at(f, (int64_t)i);
        CHECK(gguf_str_eq(gt->name, json_string_value(json_object_get(t, "name"))));
        CHECK(!strcmp(json_string_value(json_object_get(t, "type")), ft_type_name(gt->type)));
        CHECK((uint64_t)json_integer_value(json_object_get(t, "bytes")) == gt->bytes);
        CHECK(json_integer_value(json_array_get(json_object_get(t, "shape"), 0)) == gt->ne[0]);
    }
    // one expert of layer 2 (bf16 [256 x 256]) and of layer 0 (q4_K gate, q6_K down)
    json_t *eg = json_object_get(o, "expert_geometry");
    REQUIRE(json_array_size(eg) == 4);
    CHECK(json_integer_value(json_object_get(json_array_get(eg, 2), "gate_bytes")) == 256 * 256 * 2);
    CHECK(json_integer_value(json_object_get(json_array_get(eg, 0), "gate_bytes")) == 256 * 144);
    CHECK(json_integer_value(json_object_get(json_array_get(eg, 0), "down_bytes")) == 256 * 210);
    json_t *groups = json_object_get(o, "geometry_groups");
    CHECK(json_array_size(groups) == 2, "layers 0,1 and 2,3 share geometries");
    json_t *g1 = json_object_get(json_array_get(groups, 1), "layers");
    CHECK(json_array_size(g1) == 2 && json_integer_value(json_array_get(g1, 0)) == 2);
    json_int_t native = json_integer_value(json_object_get(o, "expert_bytes_native"));
    json_int_t padded = json_integer_value(json_object_get(o, "expert_bytes_padded"));
    CHECK(native == 4 * (2 * (2 * 256 * 144 + 256 * 210) + 2 * 3 * 256 * 256 * 2), "native %lld", (long long)native);
    CHECK(padded == 4 * 4 * 3 * 256 * 256 * 2, "padded %lld", (long long)padded);
    gguf_close(f);
    json_decref(o);

    snprintf(cmd, sizeof(cmd), "inspect '%s'", path);
    REQUIRE(ft(cmd, out, sizeof(out)) == 0);
    CHECK(strstr(out, "group 1: 2 layers [2-3]") != NULL, "text output:\n%s", out);
    CHECK(strstr(out, "expert bytes: native") != NULL);
}

// make install puts the binary the suite runs under DESTDIR/PREFIX/bin, where it runs.
TEST(cli_make_install) {
    char bin[1024], cmd[4096], out[4096];
    snprintf(bin, sizeof(bin), "%s", test_ft_bin());
    char *slash = strrchr(bin, '/');
    REQUIRE(slash, "FT_BIN %s has no directory", bin);
    *slash = 0; // the build directory
    const char *dest = test_path("install-root");
    snprintf(cmd, sizeof(cmd), "make -s --no-print-directory install BUILD='%s' DESTDIR='%s' PREFIX=/opt/ft 2>&1", bin,
             dest);
    CHECK(test_run(cmd, out, sizeof(out)) == 0, "%s: %s", cmd, out);
    snprintf(cmd, sizeof(cmd), "'%s/opt/ft/bin/ft' --help", dest);
    CHECK(test_run(cmd, out, sizeof(out)) == 0 && strstr(out, "serve"), "installed ft: %s", out);
}

