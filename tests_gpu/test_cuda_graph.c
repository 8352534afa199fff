// test_cuda_graph.c: a decode through CUDA graphs (one captured one-token step replayed at
// every later position, src/backend/cuda/cuda_backend.c) gives bit-identical logits to the
// same decode with every kernel launched directly (FT_CUDA_GRAPHS=0).
//
// The two paths run the same kernels with the same arguments except the position, which the
// graphed one reads from device memory: so any difference is a graph bug (a stale position,
// staging copied before it was filled, a KV row written at the wrong place, an attention
// split chosen differently). Decode runs from 100 to 280 cached keys, over which the number
// of attention splits changes many times, and the models cover a sliding window (laguna)
// and both KV cache types.
#include "gpu_test.h"
#include "../tests/fixtures.h"

#include "../src/engine/batch.h"
#include "../src/engine/engine.h"
#include "../src/model/synth.h"

#include <stdlib.h>
#include <string.h>

static ft_engine *engine_with_graphs(ft_model *m, const ft_engine_params *ep, bool graphs, ft_err *err) {
    setenv("FT_CUDA_GRAPHS", graphs ? "1" : "0", 1); // read when the backend starts
    ft_engine *e = ft_engine_init(m, ep, err);
    unsetenv("FT_CUDA_GRAPHS");
    return e;
}

static void graph_case(const char *arch, enum ft_type kv_type, int n_swa) {
    ft_synth_params sp = ft_synth_default_params();
    sp.arch = arch;
    sp.n_layer = 2;
    sp.n_ctx_train = 512;
    sp.head_dim = 128;
    if (n_swa) {
        sp.n_dense_lead = 1;
        sp.n_swa = n_swa;
    }
    ft_model *m = fixture_model(&sp, arch);
    REQUIRE(m);
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 400;
    ep.n_batch = 64;
    ep.kv_type = kv_type;
    ep.device = FT_PLACEMENT_CUDA;
    ft_engine *ed = NULL, *eg = NULL;
    ed = engine_with_graphs(m, &ep, false, &err);
    if (ed) eg = engine_with_graphs(m, &ep, true, &err);
    if (!ed || !eg) {
        test_fail(__FILE__, __LINE__, "engine: %s", err.msg);
    } else {
        int n_vocab = m->hp.n_vocab;
        float *keep = malloc((size_t)n_vocab * sizeof(float));
        ft_rng r = ft_rng_init(11);
        int32_t prompt[100];
        for (int i = 0; i < 100; i++) prompt[i] = (int32_t)(ft_rng_next(&r) % (uint64_t)n_vocab);
        const float *ld = ft_engine_eval(ed, prompt, 100, &err), *lg = NULL;
        memcpy(keep, ld, (size_t)n_vocab * sizeof(float));
        lg = ft_engine_eval(eg, prompt, 100, &err);
        CHECK(!memcmp(keep, lg, (size_t)n_vocab * sizeof(float)), "%s prefill (not graphed) differs", arch);
        int n_diff = 0, first_diff = -1;
        int32_t t = prompt[3];
        for (int step = 0; step < 180; step++) { // positions 100..279
            ld = ft_engine_eval(ed, &t, 1, &err);
            memcpy(keep, ld, (size_t)n_vocab * sizeof(float));
            lg = ft_engine_eval(eg, &t, 1, &err);
            if (!ld || !lg) {
                test_fail(__FILE__, __LINE__, "eval: %s", err.msg);
                break;
            }
            if (memcmp(keep, lg, (size_t)n_vocab * sizeof(float))) {
                if (first_diff < 0) first_diff = step;
                n_diff++;
            }
            // the next token from the logits (greedy), as a decode would
            int best = 0;
            for (int i = 1; i < n_vocab; i++)
                if (keep[i] > keep[best]) best = i;
            t = best;
        }
        CHECK(n_diff == 0, "%s kv %s swa %d: %d of 180 graphed steps differ, the first at position %d", arch,
              ft_type_name(kv_type), n_swa, n_diff, 100 + first_diff);
        printf("    %s kv %s swa %d: 180 graphed decode steps bit-identical: %s\n", arch, ft_type_name(kv_type),
               n_swa, n_diff ? "no" : "yes");
        fflush(stdout);
        free(keep);
    }
    ft_engine_free(ed);
    ft_engine_free(eg);
    ft_model_free(m);
}

TEST(cuda_graph_decode_equals_direct) {
    GPU_TEST_REQUIRE_DEVICE();
    graph_case("qwen3moe", FT_TYPE_F16, 0);
    graph_case("qwen3moe", FT_TYPE_Q8_0, 0);
    graph_case("laguna", FT_TYPE_F16, 8);
}

// Sequences that take turns: each one-token step of a sequence replays that sequence's own
// graph (its KV cache pointers are baked in), so three sequences decoding in turn on one
// batch engine, one item per step, must equal the same steps launched directly.
static ft_batch *batch_with_graphs(ft_model *m, const ft_engine_params *ep, bool graphs, ft_err *err) {
    setenv("FT_CUDA_GRAPHS", graphs ? "1" : "0", 1);
    ft_batch *b = ft_batch_init(m, ep, err);
    unsetenv("FT_CUDA_GRAPHS");
    return b;
}

// A 2-layer model and two batch engines of n_seq sequences on it, *bd launching every step
// directly and *bg through graphs. Returns the model, or NULL (the test failed, nothing is left).
static ft_model *graph_pair(int n_seq, ft_batch **bd, ft_batch **bg) {
    ft_synth_params sp = ft_synth_default_params();
    sp.n_layer = 2;
    sp.n_ctx_train = 512;
    ft_model *m = fixture_model(&sp, "graph-seq");
    if (!m) {
        test_fail(__FILE__, __LINE__, "no model");
        return NULL;
    }
    ft_err err = {{0}};
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 256;
    ep.n_batch = 16;
    ep.n_seq = n_seq;
    ep.device = FT_PLACEMENT_CUDA;
    *bd = batch_with_graphs(m, &ep, false, &err);
    *bg = *bd ? batch_with_graphs(m, &ep, true, &err) : NULL;
    if (*bd && *bg) return m;
    test_fail(__FILE__, __LINE__, "batch: %s", err.msg);
    ft_batch_free(*bd);
    ft_batch_free(*bg);
    ft_model_free(m);
    return NULL;
}

TEST(cuda_graph_per_sequence) {
    GPU_TEST_REQUIRE_DEVICE();
    ft_batch *bd, *bg;
    ft_model *m = graph_pair(3, &bd, &bg);
    if (!m) return;
    ft_err err = {{0}};
    {
        int n_vocab = m->hp.n_vocab, n_diff = 0, n_steps = 0;
        float *keep = malloc((size_t)n_vocab * sizeof(float));
        int32_t tok[3] = {5, 17, 29};
        for (int s = 0; s < 3; s++) {
            CHECK(ft_batch_seq_open(bd) == s && ft_batch_seq_open(bg) == s);
            // different prompt lengths: the sequences sit at different positions
            int32_t prompt[12];
            for (int i = 0; i < 12; i++) prompt[i] = (int32_t)((s * 31 + i * 7) % n_vocab);
            ft_batch_item it = {.seq = s, .tokens = prompt, .n_tok = 4 + 4 * s, .logits = true};
            CHECK(ft_batch_step(bd, &it, 1, &err) && ft_batch_step(bg, &it, 1, &err), "%s", err.msg);
        }
        for (int round = 0; round < 40; round++)
            for (int s = 0; s < 3; s++) {
                if (round % 5 == 4 && s == 1) continue; // not always in the same order
                ft_batch_item it = {.seq = s, .tokens = &tok[s], .n_tok = 1, .logits = true};
                if (!ft_batch_step(bd, &it, 1, &err)) break;
                memcpy(keep, ft_batch_logits(bd, 0), (size_t)n_vocab * sizeof(float));
                if (!ft_batch_step(bg, &it, 1, &err)) break;
                n_steps++;
                if (memcmp(keep, ft_batch_logits(bg, 0), (size_t)n_vocab * sizeof(float))) n_diff++;
                int best = 0;
                for (int i = 1; i < n_vocab; i++)
                    if (keep[i] > keep[best]) best = i;
                tok[s] = best;
            }
        CHECK(n_steps == 112, "steps run: %d (%s)", n_steps, err.msg);
        CHECK(n_diff == 0, "%d of %d graphed steps of interleaved sequences differ", n_diff, n_steps);
        printf("    3 interleaved sequences: %d graphed steps, %d differ\n", n_steps, n_diff);
        free(keep);
    }
    ft_batch_free(bd);
    ft_batch_free(bg);
    ft_model_free(m);
}

// Several sequences decoding together: a step of their decode rows is recorded once per row
// count and replayed whichever sequences fill it and wherever they stand (their positions and
// block tables are device arrays), so steps of changing sets, orders and positions, some with a
// prompt chunk among the rows (not recorded), must equal the same steps launched directly.
TEST(cuda_graph_several_sequences) {
    GPU_TEST_REQUIRE_DEVICE();
    enum { S = 5 };
    ft_batch *bd, *bg;
    ft_model *m = graph_pair(S, &bd, &bg);
    if (!m) return;
    ft_err err = {{0}};
    {
        int n_vocab = m->hp.n_vocab, n_diff = 0, n_rows = 0;
        int32_t tok[S], prompt[S][16];
        for (int s = 0; s < S; s++) {
            CHECK(ft_batch_seq_open(bd) == s && ft_batch_seq_open(bg) == s);
            for (int i = 0; i < 16; i++) prompt[s][i] = (int32_t)((s * 31 + i * 7) % n_vocab);
            ft_batch_item it = {.seq = s, .tokens = prompt[s], .n_tok = 3 + 3 * s, .logits = true};
            CHECK(ft_batch_step(bd, &it, 1, &err) && ft_batch_step(bg, &it, 1, &err), "%s", err.msg);
            tok[s] = prompt[s][0];
        }
        for (int round = 0; round < 30 && !test_failed(); round++) {
            // a changing set in a changing order: all five, then subsets; every seventh step a
            // prompt chunk of sequence 4 after the decode rows
            ft_batch_item it[S];
            int n = 0;
            for (int j = 0; j < S; j++) {
                int s = (j + round) % S;
                if (round % 3 == 1 && s % 2) continue;
                if (round % 7 == 6 && s == 4) continue;
                it[n++] = (ft_batch_item){.seq = s, .tokens = &tok[s], .n_tok = 1, .logits = true};
            }
            if (round % 7 == 6) it[n++] = (ft_batch_item){.seq = 4, .tokens = prompt[4], .n_tok = 9, .logits = true};
            if (!ft_batch_step(bd, it, n, &err)) break;
            float *keep = malloc((size_t)n * n_vocab * sizeof(float));
            for (int i = 0; i < n; i++) memcpy(keep + (size_t)i * n_vocab, ft_batch_logits(bd, i), (size_t)n_vocab * sizeof(float));
            if (!ft_batch_step(bg, it, n, &err)) {
                free(keep);
                break;
            }
            for (int i = 0; i < n; i++) {
                const float *kd = keep + (size_t)i * n_vocab;
                n_diff += memcmp(kd, ft_batch_logits(bg, i), (size_t)n_vocab * sizeof(float)) != 0;
                n_rows++;
                if (it[i].n_tok != 1) continue;
                int best = 0;
                for (int v = 1; v < n_vocab; v++)
                    if (kd[v] > kd[best]) best = v;
                tok[it[i].seq] = best;
            }
            free(keep);
        }
        CHECK(n_rows > 100, "rows compared: %d (%s)", n_rows, err.msg);
        CHECK(n_diff == 0, "%d of %d sequences' logits differ between graphed and direct steps", n_diff, n_rows);
        printf("    %d sequences in changing sets: %d rows' logits from graphed steps, %d differ\n", S, n_rows, n_diff);
    }
    ft_batch_free(bd);
    ft_batch_free(bg);
    ft_model_free(m);
}
