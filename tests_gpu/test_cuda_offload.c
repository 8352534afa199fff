// test_cuda_offload.c: the GPU expert cache (src/backend/cuda/offload.c, expert_cache.cu).
//
// - The device's decisions against the C reference (src/moe/expert_cache.c), bit for bit,
//   over long random access sequences: the slot of every selection, the copy list, and now
//   and then every stamp, slot and clock; then every held slot's bytes against its host entry
//   (byte-exact: a fingerprint per (layer, expert)); exact pools of mixed geometry and the
//   uniform layout, from the smallest cache to one that holds everything. Device memory is
//   the same before and after copies of any size (no temporary as large as the payload).
// - Logits in offload mode against fused, bit for bit (the same kernels on the same bytes),
//   for a model with q4_K and bf16 expert layers: a prefill through the overlay (grouped
//   GEMM and matvec layers), then a greedy decode, graphed and not, at several cache sizes
//   down to the minimum, the uniform layout, serial prefill, and across a rebuild; the same
//   with gate and up experts fused in the file, which in both modes also equals its split twin.
// - The copy kernel's bandwidth next to cudaMemcpy's from the same pinned rows (printed).
#include "gpu_test.h"
#include "../tests/fixtures.h"

#include "../src/backend/cuda/offload.h"
#include "../src/engine/engine.h"
#include "../src/model/model.h"
#include "../src/model/synth.h"
#include "../src/moe/expert_cache.h"
#include "../src/util/mapping.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>

// Four layers: q4_K, q4_K, bf16, q4_K experts (two geometry pools in the exact layout); with
// fused_gate_up, each layer's gate and up experts in one ffn_gate_up_exps tensor. Returns the
// path, or NULL after a recorded failure.
static const char *write_arch_model_layout(const char *arch, const char *name, int n_expert, int top_k, int n_embd,
                                           int n_ff, bool fused_gate_up) {
    ft_synth_params sp = ft_synth_default_params();
    sp.arch = arch;
    sp.fused_gate_up = fused_gate_up;
    sp.n_layer = 4;
    sp.n_expert = n_expert;
    sp.n_expert_used = top_k;
    sp.n_embd = n_embd;
    sp.n_ff_exp = n_ff;
    sp.n_ctx_train = 512;
    fixture_expert_types(&sp, "q4_K,q4_K,bf16,q4_K", NULL);
    if (!strcmp(arch, "glm4moe")) fixture_glm4moe(&sp);
    if (!strcmp(arch, "gpt-oss")) fixture_gptoss(&sp);
    if (!strcmp(arch, "gemma4")) sp.expert_down_scale = true;
    return fixture_write(&sp, name);
}

static const char *write_arch_model(const char *arch, const char *name, int n_expert, int top_k, int n_embd,
                                    int n_ff) {
    return write_arch_model_layout(arch, name, n_expert, top_k, n_embd, n_ff, false);
}

static const char *write_mixed_model(const char *name, int n_expert, int top_k, int n_embd, int n_ff) {
    return write_arch_model("qwen3moe", name, n_expert, top_k, n_embd, n_ff);
}

typedef struct rig {
    gguf_file *f;
    moe_geometry g;
    ft_offload *o;
    moe_expert_cache *ref;
    const moe_expert_banks *hb; // owned by o
} rig;

static bool rig_init_policy(rig *r, const char *path, int n_slots, enum moe_pool_layout layout, int top_k,
                            int n_running, const moe_route_trace *trace, enum moe_victims victims, bool sizing) {
    memset(r, 0, sizeof(*r));
    if (!fixture_open_moe(path, &r->f, &r->g)) return false;
    ft_err err = {{0}};
    moe_expert_banks_params bp = moe_expert_banks_default_params();
    bp.alloc = ft_offload_host_allocator();
    moe_expert_banks *hb = moe_expert_banks_load(r->f, &r->g, &bp, &err);
    if (!hb) return test_fail(__FILE__, __LINE__, "banks: %s", err.msg), false;
    r->hb = hb;
    ft_offload_params op = {0};
    op.plan = moe_cache_plan_default_params();
    op.plan.n_slots = n_slots;
    op.plan.layout = layout;
    op.plan.top_k = top_k;
    op.plan.n_running = n_running;
    op.trace = trace;
    op.victims = victims;
    op.self_sizing = sizing;
    r->o = ft_offload_init(&r->g, hb, &op, &err);
    if (!r->o) return test_fail(__FILE__, __LINE__, "offload: %s", err.msg), false;
    moe_cache_policy_params policy = sizing ? moe_cache_sizing_default_params() : moe_cache_policy_default_params();
    policy.victims = victims;
    r->ref = moe_expert_cache_init_policy(ft_offload_plan(r->o), &r->g, &policy);
    return true;
}

static bool rig_init_trace(rig *r, const char *path, int n_slots, enum moe_pool_layout layout, int top_k, int n_running,
                           const moe_route_trace *trace) {
    return rig_init_policy(r, path, n_slots, layout, top_k, n_running, trace, MOE_VICTIMS_LRU, false);
}

static bool rig_init(rig *r, const char *path, int n_slots, enum moe_pool_layout layout, int top_k, int n_running) {
    return rig_init_trace(r, path, n_slots, layout, top_k, n_running, NULL);
}

static void rig_free(rig *r) {
    moe_expert_cache_free(r->ref);
    ft_offload_free(r->o);
    moe_geometry_free(&r->g);
    gguf_close(r->f);
}

// Every stamp, slot and clock of the device against the reference.
static int compare_tables(rig *r, int n, ft_offload_debug *d) {
    int bad = 0;
    ft_offload_debug_read(r->o, n, d);
    const moe_cache_plan *pl = ft_offload_plan(r->o);
    for (int k = 0; k < pl->n_pools; k++)
        for (int s = 0; s < pl->pools[k].n_slots; s++) {
            int l, e;
            bool held = moe_expert_cache_slot(r->ref, k, s, &l, &e);
            if ((held ? e : -1) != d->slot_expert[k][s] || moe_expert_cache_stamp(r->ref, k, s) != d->stamp[k][s] ||
                moe_expert_cache_slot_owner(r->ref, k, s) != d->slot_owner[k][s])
                bad++;
        }
    return bad;
}

// The bytes of every held slot against its host entry.
static int compare_slot_bytes(rig *r) {
    const moe_cache_plan *pl = ft_offload_plan(r->o);
    int bad = 0;
    ft_cuda_device_sync();
    for (int k = 0; k < pl->n_pools; k++)
        for (int s = 0; s < pl->pools[k].n_slots; s++) {
            int l, e;
            if (!moe_expert_cache_slot(r->ref, k, s, &l, &e)) continue;
            moe_cache_copy cp = {k, s, l, e, -1, -1};
            moe_copy_region reg[MOE_BANK_COUNT];
            moe_expert_cache_copy_regions(r->ref, r->hb, &cp, reg);
            for (int b = 0; b < MOE_BANK_COUNT; b++) {
                uint8_t *buf = malloc(reg[b].bytes);
                ft_cuda_memcpy_d2h(buf, (const uint8_t *)ft_offload_arena(r->o, (enum moe_bank)b) + reg[b].dst_offset,
                                   reg[b].bytes, NULL);
                ft_cuda_stream_sync(NULL);
                bad += memcmp(buf, reg[b].src, reg[b].bytes) != 0;
                free(buf);
            }
        }
    return bad;
}

static void no_hook(void *ctx, const ft_offload_view *v) {
    (void)ctx;
    (void)v;
}

// Random decode-like steps: layers in order, n_running sequences of top_k distinct experts
// with a skewed popularity, checked against the reference at every step. hybrid: each layer
// gets random split costs (copies only, CPU only, and mixes), and the device's split (slots,
// copies, the CPU's selections) must be the reference's (moe_expert_cache_step_split).
// prefetch: before two steps of three, a prefetch of random guesses (half of them the step's
// own selections, duplicates allowed) whose copies must be the reference's
// (moe_expert_cache_prefetch), and whose counters (guesses selected, copies hit) the step's.
// victims: the reference's and the device's; with frecency, an LRU reference fed the same calls
// must decide differently at some step (else the case would not tell the two apart). sizing:
// self-sizing layers, a token ending after each round of the layers (moe_expert_cache_end_step
// against ft_offload_end_token), the layers' popular sets of different sizes so that slots
// move (the case requires some), and every table (owners too) compared at each token's end.
static void decisions_case_sizing(const char *path, int n_slots, enum moe_pool_layout layout, int steps, bool hybrid,
                                  bool prefetch, enum moe_victims victims, bool sizing) {
    enum { TOP_K = 4, RUNNING = 2 };
    rig r;
    if (!rig_init_policy(&r, path, n_slots, layout, TOP_K, RUNNING, NULL, victims, sizing)) return;
    bool frecency = victims == MOE_VICTIMS_FRECENCY;
    moe_expert_cache *lru = frecency ? moe_expert_cache_init(ft_offload_plan(r.o), &r.g) : NULL;
    int lru_differs = 0; // steps whose copies or slots the LRU reference chose otherwise
    ft_offload_reserve(r.o, TOP_K * RUNNING);
    if (prefetch) ft_offload_enable_prefetch(r.o);
    moe_hybrid_costs *costs = calloc((size_t)r.g.n_layers, sizeof(*costs));
    ft_rng crng = ft_rng_init(77 + (uint64_t)n_slots);
    for (int i = 0; i < r.g.n_layers; i++)
        costs[i] = (moe_hybrid_costs){(uint32_t)(ft_rng_next(&crng) % 60000), (uint32_t)(ft_rng_next(&crng) % 40000),
                                      (uint32_t)(ft_rng_next(&crng) % 50000)};
    if (hybrid) {
        costs[0] = (moe_hybrid_costs){50000, 0, 0}; // every miss to the CPU
        costs[1] = (moe_hybrid_costs){0, 0, 0};     // every miss copied
        ft_offload_set_hybrid_costs(r.o, costs);
    }
    ft_offload_hook hook = {no_hook, NULL};
    int n_cpu_total = 0;
    ft_cuda_stream *s = ft_cuda_stream_init();
    int32_t *sel_dev = ft_cuda_malloc(TOP_K * RUNNING * sizeof(int32_t));
    ft_rng rng = ft_rng_init(3 + (uint64_t)n_slots);
    int n_expert = r.g.layers[0].n_expert;
    int32_t ex[TOP_K * RUNNING], slots[TOP_K * RUNNING];
    moe_cache_copy copies[TOP_K * RUNNING];
    int bad_steps = 0, bad_tables = 0, n_copies_total = 0;
    int bad_prefetch = 0;
    uint64_t pf_guesses = 0, pf_right = 0, pf_copies = 0, pf_used = 0;
    int32_t guess[TOP_K * RUNNING];
    moe_cache_copy pf[TOP_K * RUNNING];
    size_t free_before = 0;
    for (int step = 0; step < steps && !test_failed(); step++) {
        int li = step % r.g.n_layers, L = r.g.layers[li].layer;
        int n = 0;
        for (int q = 0; q < RUNNING; q++)
            for (int j = 0; j < TOP_K; j++) {
                int32_t e;
                bool dup;
                // the popular third of the experts (with sizing: a layer's own share of them)
                int hot = sizing ? FT_MAX(TOP_K, n_expert * (1 + 2 * (li % 3)) / 12) : n_expert / 3;
                do {
                    uint64_t x = ft_rng_next(&rng);
                    e = (int32_t)(x % 3 ? (x >> 8) % (uint64_t)hot : (x >> 8) % (uint64_t)n_expert);
                    dup = false;
                    for (int p = q * TOP_K; p < n; p++) dup |= ex[p] == e;
                } while (dup);
                ex[n++] = e;
            }
        int nc, n_cpu;
        ft_err err = {{0}};
        int n_pf = 0;
        bool prefetched = prefetch && step % 3 != 2 && step > 0; // (after a cache step)
        if (prefetched) {
            for (int i = 0; i < n; i++) {
                uint64_t x = ft_rng_next(&rng);
                guess[i] = x % 2 ? ex[(x >> 8) % (uint64_t)n] : (int32_t)((x >> 8) % (uint64_t)n_expert);
            }
            int max_copies = 1 + (int)(ft_rng_next(&rng) % (uint64_t)n); // capped or not
            REQUIRE(moe_expert_cache_prefetch(r.ref, L, guess, n, max_copies, pf, &n_pf, &err), "%s", err.msg);
            if (lru) {
                moe_cache_copy lpf[TOP_K * RUNNING];
                int ln;
                REQUIRE(moe_expert_cache_prefetch(lru, L, guess, n, max_copies, lpf, &ln, &err), "%s", err.msg);
            }
            int32_t *guess_dev = NULL;
            ft_cuda_stream *ps = ft_offload_prefetch_begin(r.o, L, &guess_dev);
            REQUIRE(ps && guess_dev, "a prefetch for layer %d", L);
            ft_cuda_memcpy_h2d(guess_dev, guess, (size_t)n * sizeof(int32_t), ps);
            ft_offload_prefetch(r.o, L, n, max_copies);
            ft_offload_debug d;
            ft_offload_debug_read(r.o, n, &d);
            bool ok = d.n_prefetch == n_pf;
            for (int j = 0; ok && j < n_pf; j++) ok = d.prefetch_expert[j] == pf[j].expert && d.prefetch_slot[j] == pf[j].slot;
            if (!ok && bad_prefetch++ < 3)
                test_fail(__FILE__, __LINE__, "N %d step %d layer %d: prefetch: device %d copies, reference %d", n_slots,
                          step, L, d.n_prefetch, n_pf);
            ft_offload_debug_free(&d);
            pf_guesses += (uint64_t)n;
            pf_copies += (uint64_t)n_pf;
            for (int i = 0; i < n; i++) {
                bool right = false;
                for (int q = 0; q < n; q++) right |= ex[q] == guess[i];
                pf_right += right;
            }
            for (int j = 0; j < n_pf; j++) {
                bool used = false;
                for (int q = 0; q < n; q++) used |= ex[q] == pf[j].expert;
                pf_used += used;
            }
        }
        REQUIRE(moe_expert_cache_step_split(r.ref, L, ex, n, hybrid ? &costs[li] : NULL, slots, copies, &nc, &n_cpu, &err),
                "%s", err.msg);
        if (lru) {
            int32_t lslots[TOP_K * RUNNING];
            moe_cache_copy lcopies[TOP_K * RUNNING];
            int lnc, ln_cpu;
            REQUIRE(moe_expert_cache_step_split(lru, L, ex, n, hybrid ? &costs[li] : NULL, lslots, lcopies, &lnc, &ln_cpu,
                                                &err),
                    "%s", err.msg);
            bool same = lnc == nc && !memcmp(lslots, slots, (size_t)n * sizeof(int32_t));
            for (int j = 0; same && j < nc; j++) same = lcopies[j].slot == copies[j].slot;
            lru_differs += !same;
        }
        ft_cuda_memcpy_h2d(sel_dev, ex, sizeof(ex), s);
        ft_offload_view v;
        ft_offload_layer_begin(r.o, L, sel_dev, RUNNING, TOP_K, false, s, &v, hybrid ? &hook : NULL);
        ft_offload_debug d;
        ft_offload_debug_read(r.o, n, &d);
        // the reference's copies: the step's own, then (hybrid) the fills of the CPU's experts
        int n_now = hybrid ? nc - d.n_fill : nc;
        bool ok = d.n_copies == n_now && (!hybrid || d.n_fill == n_cpu) && !memcmp(d.slots, slots, (size_t)n * sizeof(int32_t));
        for (int j = 0; ok && j < n_now; j++) ok = d.copy_expert[j] == copies[j].expert && d.copy_slot[j] == copies[j].slot;
        for (int j = n_now; ok && j < nc; j++)
            ok = d.fill_expert[j - n_now] == copies[j].expert && d.fill_slot[j - n_now] == copies[j].slot;
        int cpu_sels = 0;
        for (int i = 0; ok && i < n; i++) {
            ok = d.cpu_sel[i] == (slots[i] < 0 ? ex[i] : -1);
            cpu_sels += slots[i] < 0;
        }
        ok = ok && (!hybrid || d.n_cpu == cpu_sels);
        n_cpu_total += n_cpu;
        if (!ok && bad_steps++ < 3)
            test_fail(__FILE__, __LINE__, "N %d step %d layer %d: device %d copies, reference %d", n_slots, step, L,
                      d.n_copies, nc);
        ft_offload_debug_free(&d);
        n_copies_total += nc;
        bool token_end = sizing && li == r.g.n_layers - 1;
        if (token_end) {
            moe_expert_cache_end_step(r.ref, NULL);
            ft_offload_end_token(r.o, s);
        }
        if (step % 97 == 0 || step == steps - 1 || token_end) {
            bad_tables += compare_tables(&r, n, &d);
            ft_offload_debug_free(&d);
        }
        if (step == 10) {
            ft_cuda_device_info info;
            ft_cuda_device_get_info(0, &info);
            free_before = info.free_mem;
        }
    }
    ft_cuda_device_info info;
    ft_cuda_device_get_info(0, &info);
    CHECK(info.free_mem == free_before, "device memory changed during copies: %zu -> %zu free", free_before, info.free_mem);
    CHECK(bad_steps == 0 && bad_tables == 0, "N %d: %d steps and %d table entries differ", n_slots, bad_steps, bad_tables);
    int bad_bytes = compare_slot_bytes(&r);
    CHECK(bad_bytes == 0, "N %d: %d slot banks differ from their host entries", n_slots, bad_bytes);
    ft_offload_counts t;
    ft_offload_read_counts(r.o, NULL, NULL, &t);
    CHECK(t.selections == (uint64_t)steps * TOP_K * RUNNING && t.misses == (uint64_t)n_copies_total &&
          t.cpu_computed == (uint64_t)n_cpu_total && t.hits + t.misses == t.selections);
    CHECK(!hybrid || (n_cpu_total > 0 && n_copies_total > n_cpu_total), "hybrid: %d copies, %d on the CPU",
          n_copies_total, n_cpu_total);
    CHECK(bad_prefetch == 0 && t.guesses == pf_guesses && t.guesses_right == pf_right && t.prefetched == pf_copies &&
              t.prefetch_used == pf_used,
          "prefetch: %d differ; device guesses %llu right %llu copies %llu used %llu, reference %llu %llu %llu %llu",
          bad_prefetch, (unsigned long long)t.guesses, (unsigned long long)t.guesses_right,
          (unsigned long long)t.prefetched, (unsigned long long)t.prefetch_used, (unsigned long long)pf_guesses,
          (unsigned long long)pf_right, (unsigned long long)pf_copies, (unsigned long long)pf_used);
    CHECK(!prefetch || (pf_copies > 0 && pf_used > 0 && pf_used < pf_copies), "prefetch: %llu copies, %llu used",
          (unsigned long long)pf_copies, (unsigned long long)pf_used);
    CHECK(!frecency || lru_differs > 0, "frecency: the LRU decided every step alike");
    uint64_t ref_moves = 0;
    for (int k = 0; k < ft_offload_plan(r.o)->n_pools; k++) ref_moves += moe_expert_cache_pool_moves(r.ref, k);
    uint64_t dev_moves = ft_offload_slot_moves(r.o);
    CHECK(!sizing || (ref_moves > 0 && dev_moves == ref_moves), "self-sizing: %llu slot moves on the device, %llu in "
          "the reference", (unsigned long long)dev_moves, (unsigned long long)ref_moves);
    printf("    %s%s%s%s%s N %d: %d steps, hit rate %.3f, %d copies, of which %d behind the CPU, %llu prefetched, "
           "device = reference",
           frecency ? "frecency, " : "", sizing ? "self-sizing, " : "", hybrid ? "hybrid, " : "", prefetch ? "prefetch, " : "",
           layout == MOE_POOL_LAYOUT_UNIFORM ? "uniform" : "exact", n_slots, steps, (double)t.hits / (double)t.selections,
           n_copies_total, n_cpu_total, (unsigned long long)pf_copies);
    if (frecency) printf(" (the LRU's decisions differ at %d steps)", lru_differs);
    if (sizing) printf(" (%llu slot moves)", (unsigned long long)ref_moves);
    printf("\n");
    fflush(stdout);
    moe_expert_cache_free(lru);
    free(costs);
    ft_cuda_free(sel_dev);
    ft_cuda_stream_free(s);
    rig_free(&r);
}

static void decisions_case_policy(const char *path, int n_slots, enum moe_pool_layout layout, int steps, bool hybrid,
                                  bool prefetch, enum moe_victims victims) {
    decisions_case_sizing(path, n_slots, layout, steps, hybrid, prefetch, victims, false);
}

static void decisions_case_prefetch(const char *path, int n_slots, enum moe_pool_layout layout, int steps, bool hybrid,
                                    bool prefetch) {
    decisions_case_policy(path, n_slots, layout, steps, hybrid, prefetch, MOE_VICTIMS_LRU);
}

static void decisions_case_split(const char *path, int n_slots, enum moe_pool_layout layout, int steps, bool hybrid) {
    decisions_case_prefetch(path, n_slots, layout, steps, hybrid, false);
}

static void decisions_case(const char *path, int n_slots, enum moe_pool_layout layout, int steps) {
    decisions_case_split(path, n_slots, layout, steps, false);
}

// The smallest cache of the model at path in a layout, for the random steps' top-4 of 2
// sequences (-1 after a recorded failure).
static int min_slots(const char *path, enum moe_pool_layout layout) {
    gguf_file *f;
    moe_geometry g;
    if (!fixture_open_moe(path, &f, &g)) return -1;
    moe_cache_plan_params pp = moe_cache_plan_default_params();
    pp.top_k = 4;
    pp.n_running = 2;
    pp.layout = layout;
    int n = moe_cache_plan_min_slots(&g, &pp);
    moe_geometry_free(&g);
    gguf_close(f);
    return n;
}

TEST(cuda_offload_decisions_equal_reference) {
    GPU_TEST_REQUIRE_DEVICE();
    const char *path = write_mixed_model("offload_mixed.gguf", 48, 4, 256, 256);
    REQUIRE(path);
    int min_exact = min_slots(path, MOE_POOL_LAYOUT_EXACT), min_uniform = min_slots(path, MOE_POOL_LAYOUT_UNIFORM);
    REQUIRE(min_exact > 0 && min_uniform > 0);
    decisions_case(path, min_exact, MOE_POOL_LAYOUT_EXACT, 3000);
    decisions_case(path, min_exact + 13, MOE_POOL_LAYOUT_EXACT, 3000);
    decisions_case(path, 90, MOE_POOL_LAYOUT_EXACT, 2000);
    decisions_case(path, 4 * 48, MOE_POOL_LAYOUT_EXACT, 1000);
    decisions_case(path, min_uniform, MOE_POOL_LAYOUT_UNIFORM, 2000);
    decisions_case(path, min_uniform + 37, MOE_POOL_LAYOUT_UNIFORM, 2000);
}

// --moe-backend hybrid's split on the device against moe_expert_cache_step_split.
TEST(cuda_offload_hybrid_split_equal_reference) {
    GPU_TEST_REQUIRE_DEVICE();
    const char *path = write_mixed_model("offload_mixed.gguf", 48, 4, 256, 256);
    REQUIRE(path);
    decisions_case_split(path, 90, MOE_POOL_LAYOUT_EXACT, 3000, true);
    decisions_case_split(path, 4 * 48, MOE_POOL_LAYOUT_EXACT, 1000, true);
}

// The prefetch (the next layer's predicted experts copied ahead) on the device against
// moe_expert_cache_prefetch, and the counts its steps keep: the smallest cache (where a guess
// may find no victim), a middle one, and one that holds every expert.
TEST(cuda_offload_prefetch_equal_reference) {
    GPU_TEST_REQUIRE_DEVICE();
    const char *path = write_mixed_model("offload_mixed.gguf", 48, 4, 256, 256);
    REQUIRE(path);
    int min_exact = min_slots(path, MOE_POOL_LAYOUT_EXACT);
    REQUIRE(min_exact > 0);
    decisions_case_prefetch(path, min_exact, MOE_POOL_LAYOUT_EXACT, 2000, false, true);
    decisions_case_prefetch(path, 90, MOE_POOL_LAYOUT_EXACT, 3000, false, true);
    decisions_case_prefetch(path, 4 * 48, MOE_POOL_LAYOUT_UNIFORM, 1000, false, true);
}

// Frecency victims (--moe-cache-policy frecency) or self-sizing layers (--moe-layer-slots
// adaptive) on the device against the reference with the same policy: plain steps, the uniform
// layout, hybrid's split and the prefetch, at sizes where the policy decides otherwise than the
// fixed LRU (at 90 slots the hot experts all fit and the victims agree; self-sizing needs room
// to move slots).
static void policy_cases(bool sizing) {
    const char *path = write_mixed_model("offload_mixed.gguf", 48, 4, 256, 256);
    REQUIRE(path);
    int min_exact = min_slots(path, MOE_POOL_LAYOUT_EXACT), min_uniform = min_slots(path, MOE_POOL_LAYOUT_UNIFORM);
    REQUIRE(min_exact > 0 && min_uniform > 0);
    const enum moe_victims F = MOE_VICTIMS_FRECENCY;
    int extra = sizing ? 40 : 13, steps = sizing ? 6000 : 3000;
    if (sizing) decisions_case_sizing(path, min_exact + extra, MOE_POOL_LAYOUT_EXACT, steps, false, false, MOE_VICTIMS_LRU, true);
    else decisions_case_policy(path, min_exact, MOE_POOL_LAYOUT_EXACT, steps, false, false, F);
    decisions_case_sizing(path, min_exact + extra, MOE_POOL_LAYOUT_EXACT, steps, false, false, F, sizing);
    decisions_case_sizing(path, min_uniform + (sizing ? 40 : 9), MOE_POOL_LAYOUT_UNIFORM, 4000, false, false, F, sizing);
    decisions_case_sizing(path, min_exact + extra, MOE_POOL_LAYOUT_EXACT, 4000, true, false, F, sizing);
    decisions_case_sizing(path, min_exact + extra, MOE_POOL_LAYOUT_EXACT, 4000, false, true, F, sizing);
}

TEST(cuda_offload_frecency_equal_reference) {
    GPU_TEST_REQUIRE_DEVICE();
    policy_cases(false);
}

// With self-sizing, slot moves and owners too, with either victims.
TEST(cuda_offload_self_sizing_equal_reference) {
    GPU_TEST_REQUIRE_DEVICE();
    policy_cases(true);
}

// Route-trace replay: whatever the router selected, each layer step takes the trace's
// selections at the step counter (device memory), which the last layer advances and wraps;
// the decisions then equal the reference's on the trace.
TEST(cuda_offload_trace_replay) {
    GPU_TEST_REQUIRE_DEVICE();
    enum { TOP_K = 4, SEQ = 2, STEPS = 37, RUN = 100 };
    const char *path = write_mixed_model("offload_trace.gguf", 48, TOP_K, 256, 256);
    REQUIRE(path);
    int blocks[4] = {0, 1, 2, 3};
    moe_trace_gen_params tp = moe_trace_gen_default_params();
    tp.n_layers = 4;
    tp.layers = blocks;
    tp.n_expert = 48;
    tp.top_k = TOP_K;
    tp.n_seq = SEQ;
    tp.n_steps = STEPS;
    tp.seed = 4;
    moe_route_trace t;
    ft_err err = {{0}};
    REQUIRE(moe_trace_generate(&tp, &t, &err), "%s", err.msg);
    rig r;
    if (!rig_init_trace(&r, path, 30, MOE_POOL_LAYOUT_EXACT, TOP_K, SEQ, &t)) {
        moe_route_trace_free(&t);
        return;
    }
    ft_offload_reserve(r.o, TOP_K * SEQ);
    ft_cuda_stream *s = ft_cuda_stream_init();
    int32_t *sel_dev = ft_cuda_malloc(TOP_K * SEQ * sizeof(int32_t));
    int32_t ex[TOP_K * SEQ], got[TOP_K * SEQ], slots[TOP_K * SEQ], router[TOP_K * SEQ];
    moe_cache_copy copies[TOP_K * SEQ];
    int bad = 0;
    for (int step = 0; step < RUN && !test_failed(); step++)
        for (int li = 0; li < 4; li++) {
            const uint16_t *at = moe_route_trace_at(&t, step % STEPS, li);
            for (int i = 0; i < TOP_K * SEQ; i++) {
                ex[i] = at[i];
                router[i] = (step * 7 + i * 5) % 48; // what the router would have chosen
            }
            int nc;
            REQUIRE(moe_expert_cache_step(r.ref, li, ex, TOP_K * SEQ, slots, copies, &nc, &err), "%s", err.msg);
            ft_cuda_memcpy_h2d(sel_dev, router, sizeof(router), s);
            ft_offload_view v;
            ft_offload_layer_begin(r.o, li, sel_dev, SEQ, TOP_K, false, s, &v, NULL);
            ft_cuda_memcpy_d2h(got, sel_dev, sizeof(got), s);
            ft_offload_debug d;
            ft_offload_debug_read(r.o, TOP_K * SEQ, &d);
            bool ok = !memcmp(got, ex, sizeof(ex)) && d.n_copies == nc && !memcmp(d.slots, slots, sizeof(slots));
            if (!ok && bad++ < 3) test_fail(__FILE__, __LINE__, "step %d layer %d: replay differs", step, li);
            ft_offload_debug_free(&d);
        }
    CHECK(bad == 0, "%d layer steps differ", bad);
    printf("    %d steps replayed over a %d-step trace (wrapping): selections and decisions as the reference's\n", RUN,
           STEPS);
    ft_cuda_free(sel_dev);
    ft_cuda_stream_free(s);
    rig_free(&r);
    moe_route_trace_free(&t);
}

// ---------------------------------------------------------------------------------------------
// Logits: offload against fused

static ft_engine *engine_graphs(ft_model *m, const ft_engine_params *ep, bool graphs, ft_err *err) {
    setenv("FT_CUDA_GRAPHS", graphs ? "1" : "0", 1);
    ft_engine *e = ft_engine_init(m, ep, err);
    unsetenv("FT_CUDA_GRAPHS");
    return e;
}

// Runs the same prompt and greedy decode on a fused and an offload engine; returns the
// number of evaluations whose logits differ (-1: an error).
static int run_pair(ft_engine *ef, ft_engine *eo, const int32_t *prompt, int n_prompt, int n_decode, ft_err *err) {
    int n_vocab = ft_engine_model(ef)->hp.n_vocab, n_diff = 0;
    float *keep = malloc((size_t)n_vocab * sizeof(float));
    const float *lf = ft_engine_eval(ef, prompt, n_prompt, err);
    if (!lf) return free(keep), -1;
    memcpy(keep, lf, (size_t)n_vocab * sizeof(float));
    const float *lo = ft_engine_eval(eo, prompt, n_prompt, err);
    if (!lo) return free(keep), -1;
    n_diff += memcmp(keep, lo, (size_t)n_vocab * sizeof(float)) != 0;
    for (int step = 0; step < n_decode; step++) {
        int32_t t = 0;
        for (int i = 1; i < n_vocab; i++)
            if (keep[i] > keep[t]) t = i;
        if (!(lf = ft_engine_eval(ef, &t, 1, err))) return free(keep), -1;
        memcpy(keep, lf, (size_t)n_vocab * sizeof(float));
        if (!(lo = ft_engine_eval(eo, &t, 1, err))) return free(keep), -1;
        n_diff += memcmp(keep, lo, (size_t)n_vocab * sizeof(float)) != 0;
    }
    free(keep);
    return n_diff;
}

enum { OFFLOAD_N_EXPERT = 16, OFFLOAD_TOP_K = 4 };

// The engine parameters of the logits comparisons: a 256-token context, prefill chunks of 64.
static ft_engine_params offload_test_params(void) {
    ft_engine_params ep = ft_engine_default_params();
    ep.n_ctx = 256;
    ep.n_batch = 64;
    ep.device = FT_PLACEMENT_CUDA;
    return ep;
}

// Fused and offload engines on one model of arch, every case (or the first n_cases) of cache
// size, pool layout and prefill order, with graphs and without: logits equal to the bit. With
// fused_gate_up the model's gate and up experts are fused in one tensor per layer (the host
// banks then split each expert's halves, the fused placement packs its gate and up views).
static void offload_equal_fused(const char *arch, size_t n_cases, bool fused_gate_up) {
    enum { N_EXPERT = OFFLOAD_N_EXPERT, TOP_K = OFFLOAD_TOP_K };
    char name[64];
    snprintf(name, sizeof(name), "offload_logits_%s%s.gguf", arch, fused_gate_up ? "_fused_gate_up" : "");
    const char *path = write_arch_model_layout(arch, name, N_EXPERT, TOP_K, 256, 256, fused_gate_up);
    REQUIRE(path);
    ft_err err = {{0}};
    ft_model *mf = ft_model_load(path, &err);
    REQUIRE(mf, "%s", err.msg);
    ft_engine_params ep = offload_test_params();
    int n_vocab = mf->hp.n_vocab;
    ft_rng rng = ft_rng_init(17);
    int32_t prompt[48];
    for (int i = 0; i < 48; i++) prompt[i] = (int32_t)(ft_rng_next(&rng) % (uint64_t)n_vocab);
    gguf_file *f;
    moe_geometry g;
    REQUIRE(fixture_open_moe(path, &f, &g));
    moe_geometry_keep_below(&g, mf->hp.n_layer); // (an MTP block's experts are never cached)
    moe_cache_plan_params pp = moe_cache_plan_default_params();
    pp.top_k = TOP_K;
    int min_exact = moe_cache_plan_min_slots(&g, &pp);
    uint64_t all_experts_bytes = 0; // every MoE layer's experts: what a chunk streams in cold
    for (int i = 0; i < g.n_layers; i++)
        for (int b = 0; b < MOE_BANK_COUNT; b++) all_experts_bytes += (uint64_t)g.layers[i].n_expert * g.layers[i].bytes[b];
    moe_geometry_free(&g);
    gguf_close(f);
    // the smallest cache: top-k slots per layer (exact: two pools; uniform: one)
    struct {
        int n_slots;
        int layout;
        bool serial;
        bool lru;      // --moe-cache-policy lru (else the default, frecency)
        bool adaptive; // --moe-layer-slots adaptive
    } cases[] = {
        {min_exact, MOE_POOL_LAYOUT_EXACT, false, false, false},
        {min_exact + 5, MOE_POOL_LAYOUT_EXACT, true, false, false},
        {40, MOE_POOL_LAYOUT_EXACT, false, false, false},
        {4 * N_EXPERT, MOE_POOL_LAYOUT_EXACT, false, false, false},
        {4 * TOP_K, MOE_POOL_LAYOUT_UNIFORM, false, false, false},
        {30, MOE_POOL_LAYOUT_UNIFORM, false, false, false},
        {min_exact + 3, MOE_POOL_LAYOUT_EXACT, false, true, false},
        {min_exact + 9, MOE_POOL_LAYOUT_EXACT, false, false, true},
    };
    for (size_t c = 0; c < FT_ARRAY_LEN(cases) && c < n_cases && !test_failed(); c++) {
        ft_engine_params eo_p = ep;
        eo_p.moe_backend = FT_MOE_BACKEND_OFFLOAD;
        eo_p.moe_cache_size = cases[c].n_slots;
        eo_p.moe_pool_layout = cases[c].layout;
        eo_p.moe_prefill_serial = cases[c].serial;
        eo_p.moe_cache_lru = cases[c].lru;
        eo_p.moe_self_sizing = cases[c].adaptive;
        for (int graphs = 0; graphs < 2; graphs++) {
            // both engines on the one model: each places its own copy (fused: every weight;
            // offload: the dense weights, the experts in its backend's host banks and cache)
            ft_engine *ef = engine_graphs(mf, &ep, graphs, &err), *eo = ef ? engine_graphs(mf, &eo_p, graphs, &err) : NULL;
            if (!ef || !eo) {
                test_fail(__FILE__, __LINE__, "case %zu: %s", c, err.msg);
                ft_engine_free(ef);
                break;
            }
            // a long prompt (grouped GEMM / matvec through the overlay), a short one (5 tokens:
            // overlay or cache by size), each followed by a greedy decode
            int d1 = run_pair(ef, eo, prompt, 40, 24, &err);
            ft_engine_reset(ef);
            ft_engine_reset(eo);
            int d2 = run_pair(ef, eo, prompt + 40, 5, 24, &err);
            // a long prompt on the same sequence after that decode (with graphs, replays whose
            // lookups the host never saw refilled the overlay's slots): its stream-ins claim the
            // overlay again, find the layers' slots filled and copy those experts from them
            ft_moe_stats s0 = {0}, s1 = {0};
            CHECK(ft_engine_moe_stats(eo, &s0), "the offload engine has an expert cache");
            int d4 = run_pair(ef, eo, prompt + 4, 40, 0, &err);
            CHECK(ft_engine_moe_stats(eo, &s1), "the offload engine has an expert cache");
            uint64_t host_bytes = s1.total.bytes_copied - s0.total.bytes_copied;
            // (the case whose cache holds every expert: the overlay claims only part of it)
            if (cases[c].n_slots == 4 * N_EXPERT)
                CHECK(host_bytes < all_experts_bytes, "case %zu graphs %d: a prefill after decode read %llu bytes from "
                      "the host, every expert's (%llu): none from the cache", c, graphs,
                      (unsigned long long)host_bytes, (unsigned long long)all_experts_bytes);
            ft_moe_stats_free(&s0);
            ft_moe_stats_free(&s1);
            int d3 = 0;
            if (c == 2 && graphs) { // a rebuild mid-sequence: graphs are re-captured, slots refilled
                REQUIRE(ft_engine_moe_rebuild(eo, 24, &err), "%s", err.msg);
                d3 = run_pair(ef, eo, prompt + 10, 1, 20, &err);
            }
            CHECK(d1 == 0 && d2 == 0 && d3 == 0 && d4 == 0,
                  "case %zu (N %d, %s%s%s%s), graphs %d: %d, %d, %d, %d evaluations differ (%s)", c, cases[c].n_slots,
                  cases[c].layout ? "uniform" : "exact", cases[c].serial ? ", serial" : "",
                  cases[c].lru ? ", lru" : "", cases[c].adaptive ? ", adaptive" : "", graphs, d1, d2, d3, d4,
                  err.msg);
            ft_moe_stats st = {0};
            CHECK(ft_engine_moe_stats(eo, &st), "the offload engine has an expert cache");
            // decode steps guessed the next layer's experts (the last MoE layer has none to guess)
            CHECK(st.total.guesses > 0 && st.total.guesses_right <= st.total.guesses &&
                      st.total.prefetch_used <= st.total.prefetched,
                  "case %zu graphs %d: prefetch: %llu guesses, %llu right, %llu copies, %llu used", c, graphs,
                  (unsigned long long)st.total.guesses, (unsigned long long)st.total.guesses_right,
                  (unsigned long long)st.total.prefetched, (unsigned long long)st.total.prefetch_used);
            printf("    %s N %d %s%s%s%s graphs %d: logits equal to fused: %s (hit rate %.3f over %llu "
                   "selections; prefetch accuracy %.3f, %llu copies, %.3f used; a prefill after decode read "
                   "%.0f%% of its experts' bytes from the host)\n",
                   arch, cases[c].n_slots, cases[c].layout ? "uniform" : "exact",
                   cases[c].serial ? " serial" : "", cases[c].lru ? " lru" : "", cases[c].adaptive ? " adaptive" : "",
                   graphs,
                   d1 || d2 || d3 || d4 ? "no" : "yes",
                   ft_moe_hit_rate(&st.total), (unsigned long long)st.total.selections,
                   ft_moe_predict_accuracy(&st.total), (unsigned long long)st.total.prefetched,
                   ft_moe_prefetch_used(&st.total), 100.0 * (double)host_bytes / (double)all_experts_bytes);
            fflush(stdout);
            ft_moe_stats_free(&st);
            ft_engine_free(ef);
            ft_engine_free(eo);
        }
    }
    ft_model_free(mf);
}

TEST(cuda_offload_logits_equal_fused) {
    GPU_TEST_REQUIRE_DEVICE();
    offload_equal_fused("qwen3moe", SIZE_MAX, false);
}

// A prompt of three prefill chunks on a fresh cache: with FT_MOE_PREFILL_FILL=1 the first
// chunk's overlay steps fill the empty slots outside the overlay, so the next chunks read fewer
// bytes from the host than without (every expert streamed every chunk), and the logits stay the
// fused engine's to the bit both ways.
TEST(cuda_offload_prefill_fills) {
    GPU_TEST_REQUIRE_DEVICE();
    const char *path = write_arch_model_layout("qwen3moe", "offload_fills.gguf", OFFLOAD_N_EXPERT, OFFLOAD_TOP_K, 256, 256,
                                               false);
    REQUIRE(path);
    ft_err err = {{0}};
    ft_model *m = ft_model_load(path, &err);
    REQUIRE(m, "%s", err.msg);
    ft_engine_params ep = offload_test_params();
    ft_rng rng = ft_rng_init(23);
    int32_t prompt[150];
    for (int i = 0; i < 150; i++) prompt[i] = (int32_t)(ft_rng_next(&rng) % (uint64_t)m->hp.n_vocab);
    uint64_t bytes[2] = {0, 0}; // fills off, on
    for (int fills = 0; fills < 2 && !test_failed(); fills++) {
        ft_engine_params eo_p = ep;
        eo_p.moe_backend = FT_MOE_BACKEND_OFFLOAD;
        eo_p.moe_cache_size = 4 * OFFLOAD_N_EXPERT; // room beside the overlay
        ft_engine *ef = engine_graphs(m, &ep, true, &err);
        setenv("FT_MOE_PREFILL_FILL", fills ? "1" : "0", 1);
        ft_engine *eo = ef ? engine_graphs(m, &eo_p, true, &err) : NULL;
        unsetenv("FT_MOE_PREFILL_FILL");
        if (!ef || !eo) {
            test_fail(__FILE__, __LINE__, "fills %d: %s", fills, err.msg);
            ft_engine_free(ef);
            break;
        }
        int d = run_pair(ef, eo, prompt, 150, 8, &err);
        ft_moe_stats st = {0};
        CHECK(ft_engine_moe_stats(eo, &st), "the offload engine has an expert cache");
        bytes[fills] = st.total.bytes_copied;
        CHECK(d == 0, "fills %d: %d evaluations differ from fused (%s)", fills, d, err.msg);
        printf("    fills %s: a 150-token prompt in chunks of 64, then 8 tokens: %llu bytes from the host, logits equal "
               "to fused: %s\n", fills ? "on" : "off", (unsigned long long)bytes[fills], d ? "no" : "yes");
        ft_moe_stats_free(&st);
        ft_engine_free(ef);
        ft_engine_free(eo);
    }
    CHECK(bytes[1] < bytes[0], "the fills saved nothing: %llu bytes with them, %llu without", (unsigned long long)bytes[1],
          (unsigned long long)bytes[0]);
    ft_model_free(m);
}

// Gated DeltaNet layers (their recurrent state beside the cache) with offloaded experts: the
// smallest exact cache, a serial prefill, and the mid-sequence rebuild of the third case.
TEST(cuda_offload_logits_equal_fused_qwen35moe) {
    GPU_TEST_REQUIRE_DEVICE();
    offload_equal_fused("qwen35moe", 3, false);
}

// qwen3next: beta and alpha in one projection, V heads grouped by K head; the same cases.
TEST(cuda_offload_logits_equal_fused_qwen3next) {
    GPU_TEST_REQUIRE_DEVICE();
    offload_equal_fused("qwen3next", 3, false);
}

// glm4moe (fixture_glm4moe): a dense lead layer, which no pool holds, and an MTP block after
// the layers, whose experts no bank or cache may hold (the smallest cache is sized without
// them); sigmoid routing with a selection bias, a shared expert. The same cases.
TEST(cuda_offload_logits_equal_fused_glm4moe) {
    GPU_TEST_REQUIRE_DEVICE();
    offload_equal_fused("glm4moe", 3, false);
}

// gpt-oss (fixture_gptoss): the experts' biases, indexed by the global expert while the weights
// come from cache slots, and softmax-weighted routing with the router's bias. The same cases.
TEST(cuda_offload_logits_equal_fused_gptoss) {
    GPU_TEST_REQUIRE_DEVICE();
    offload_equal_fused("gpt-oss", 3, false);
}

// gemma4 (the synth's default gemma4 on these layers: GELU experts with per-expert down scales,
// the router on its own input): the scales by the global expert, the weights from slots.
TEST(cuda_offload_logits_equal_fused_gemma4) {
    GPU_TEST_REQUIRE_DEVICE();
    offload_equal_fused("gemma4", 3, false);
}

// The same with gate and up experts fused in the file (ffn_gate_up_exps).
TEST(cuda_offload_logits_equal_fused_qwen35moe_fused_gate_up) {
    GPU_TEST_REQUIRE_DEVICE();
    offload_equal_fused("qwen35moe", 3, true);
}

// A model with fused gate/up experts and its split twin (the same weights: fixtures.h) give
// the same logits bit for bit on the GPU, every weight resident (--moe-backend fused: the
// placement packs the fused tensor's gate and up halves) and offloaded (the host banks split
// them), a prompt in prefill chunks (grouped GEMM) then a greedy decode, graphed and not.
TEST(cuda_fused_gate_up_equals_split_twin) {
    GPU_TEST_REQUIRE_DEVICE();
    const char *fused = write_arch_model_layout("qwen35moe", "twin_gpu_fused.gguf", OFFLOAD_N_EXPERT, OFFLOAD_TOP_K, 256,
                                                256, true);
    REQUIRE(fused);
    const char *split = fixture_split_gate_up(fused, "twin_gpu_split.gguf");
    REQUIRE(split);
    ft_err err = {{0}};
    ft_model *mf = ft_model_load(fused, &err), *ms = mf ? ft_model_load(split, &err) : NULL;
    REQUIRE(mf && ms, "%s", err.msg);
    ft_rng rng = ft_rng_init(23);
    int32_t prompt[48];
    for (int i = 0; i < 48; i++) prompt[i] = (int32_t)(ft_rng_next(&rng) % (uint64_t)mf->hp.n_vocab);
    for (int mode = 0; mode < 2; mode++)
        for (int graphs = 0; graphs < 2 && !test_failed(); graphs++) {
            ft_engine_params ep = ft_engine_default_params();
            ep.n_ctx = 256;
            ep.n_batch = 64;
            ep.device = FT_PLACEMENT_CUDA;
            ep.moe_backend = mode ? FT_MOE_BACKEND_OFFLOAD : FT_MOE_BACKEND_FUSED;
            if (mode) ep.moe_cache_size = 40;
            ft_engine *ef = engine_graphs(mf, &ep, graphs, &err), *es = ef ? engine_graphs(ms, &ep, graphs, &err) : NULL;
            if (!ef || !es) {
                test_fail(__FILE__, __LINE__, "%s: %s", mode ? "offload" : "fused", err.msg);
                ft_engine_free(ef);
                break;
            }
            if (!mode) {
                const ft_layer *l = &ft_engine_weights(ef)->layers[0];
                CHECK(l->gate_exps.placement == FT_PLACEMENT_CUDA && ft_tensor_packed(&l->gate_exps) &&
                      ft_tensor_packed(&l->up_exps), "the fused tensor's halves are packed on the device");
            }
            int d1 = run_pair(ef, es, prompt, 40, 16, &err);
            ft_engine_reset(ef);
            ft_engine_reset(es);
            int d2 = run_pair(ef, es, prompt + 40, 5, 16, &err);
            CHECK(d1 == 0 && d2 == 0, "%s, graphs %d: %d, %d evaluations differ from the split twin's (%s)",
                  mode ? "offload" : "fused", graphs, d1, d2, err.msg);
            ft_engine_free(ef);
            ft_engine_free(es);
        }
    ft_model_free(mf);
    ft_model_free(ms);
}

// ---------------------------------------------------------------------------------------------
// Bandwidth (printed, not asserted): every step misses all its experts.

// The command's default prefill chunk (n_batch_auto) rises to 2048 tokens on a GPU in every mode
// (bounded by the context, and by a tenth of the budget for its workspace, far off here); a -b
// the user gave stands.
TEST(cuda_prefill_chunk_default) {
    GPU_TEST_REQUIRE_DEVICE();
    ft_synth_params sp = ft_synth_default_params();
    sp.arch = "qwen3moe";
    sp.n_layer = 2;
    sp.n_expert = OFFLOAD_N_EXPERT;
    sp.n_expert_used = OFFLOAD_TOP_K;
    sp.n_embd = 256;
    sp.n_ff_exp = 256;
    sp.n_ctx_train = 4096;
    fixture_expert_types(&sp, "q4_K,q4_K", NULL);
    const char *path = fixture_write(&sp, "offload_chunk.gguf");
    REQUIRE(path);
    ft_err err = {{0}};
    ft_model *m = ft_model_load(path, &err);
    REQUIRE(m, "%s", err.msg);
    const struct {
        enum ft_moe_backend mode;
        bool auto_batch;
        int n_ctx, want;
    } cases[] = {
        {FT_MOE_BACKEND_OFFLOAD, true, 4096, 2048}, {FT_MOE_BACKEND_OFFLOAD, true, 1000, 1000},
        {FT_MOE_BACKEND_OFFLOAD, false, 4096, 256}, {FT_MOE_BACKEND_FUSED, true, 4096, 2048},
        {FT_MOE_BACKEND_FUSED, false, 4096, 256},   {FT_MOE_BACKEND_AUTO, true, 4096, 2048},
        {FT_MOE_BACKEND_CPU, true, 4096, 2048},
    };
    for (size_t c = 0; c < FT_ARRAY_LEN(cases); c++) {
        ft_engine_params ep = ft_engine_default_params();
        ep.device = FT_PLACEMENT_CUDA;
        ep.n_ctx = cases[c].n_ctx;
        ep.n_batch = 256;
        ep.n_batch_auto = cases[c].auto_batch;
        ep.moe_backend = cases[c].mode;
        ft_engine *e = ft_engine_init(m, &ep, &err);
        REQUIRE(e, "case %zu: %s", c, err.msg);
        int got = ft_engine_n_batch(e);
        CHECK(got == cases[c].want, "case %zu (%s, auto %d, ctx %d): chunk %d, want %d", c,
              ft_moe_backend_name(cases[c].mode), cases[c].auto_batch, cases[c].n_ctx, got, cases[c].want);
        ft_engine_free(e);
    }
    ft_model_free(m);
}

TEST(cuda_offload_copy_bandwidth) {
    GPU_TEST_REQUIRE_DEVICE();
    enum { N_EXPERT = 64, TOP_K = 8 };
    // Qwen3-30B-A3B's expert shape (2048 x 768, q4_K): 2.53 MiB per expert
    const char *path = write_mixed_model("offload_bw.gguf", N_EXPERT, TOP_K, 2048, 768);
    REQUIRE(path);
    rig r;
    // uniform: 16 slots per layer, so a layer's experts from two steps back are gone
    if (!rig_init(&r, path, 64, MOE_POOL_LAYOUT_UNIFORM, TOP_K, 1)) return;
    // the banks are registered anonymous memory in huge pages where the kernel gives them
    size_t anon = 0, huge = 0, span = (r.hb->bytes + FT_HUGE_PAGE - 1) / FT_HUGE_PAGE * FT_HUGE_PAGE;
    ft_mapping_usage(r.hb->block, span, &anon, &huge);
    printf("    host banks %.1f MiB: %.1f MiB anonymous, %.1f MiB in huge pages (THP %s)\n", r.hb->bytes / 1048576.0,
           anon / 1048576.0, huge / 1048576.0, ft_huge_pages_available() ? "available" : "off");
    CHECK(anon >= r.hb->bytes, "the banks are not the registered anonymous memory (%zu of %llu bytes)", anon,
          (unsigned long long)r.hb->bytes);
    if (ft_huge_pages_available()) CHECK(huge > 0, "no huge page in %zu bytes of banks", anon);
    ft_offload_reserve(r.o, TOP_K);
    ft_cuda_stream *s = ft_cuda_stream_init();
    int32_t *sel_dev = ft_cuda_malloc(TOP_K * sizeof(int32_t));
    int32_t ex[TOP_K];
    int next[4] = {0};
    uint64_t q4_bytes = 0;
    ft_offload_counts before[4], after[4];
    ft_offload_read_counts(r.o, before, NULL, NULL);
    for (int step = 0; step < 400; step++) {
        int li = step % 4;
        for (int j = 0; j < TOP_K; j++) ex[j] = (next[li] + j) % N_EXPERT; // never cached: 16 slots, 64 experts
        next[li] = (next[li] + TOP_K) % N_EXPERT;
        ft_cuda_memcpy_h2d(sel_dev, ex, sizeof(ex), s);
        ft_offload_view v;
        ft_offload_layer_begin(r.o, r.g.layers[li].layer, sel_dev, 1, TOP_K, false, s, &v, NULL);
    }
    ft_cuda_stream_sync(s);
    ft_offload_read_counts(r.o, after, NULL, NULL);
    for (int li = 0; li < 4; li++) {
        uint64_t b = after[li].bytes_copied - before[li].bytes_copied, ns = after[li].copy_ns - before[li].copy_ns;
        CHECK(after[li].misses - before[li].misses == 100 * TOP_K, "layer %d: every selection must miss", li);
        printf("    layer %d (%s): %.1f MiB per step, copy kernel %.1f GB/s\n", li, li == 2 ? "bf16" : "q4_K",
               b / 100.0 / 1048576.0, ns ? (double)b / (double)ns : 0.0);
        if (li != 2) q4_bytes += b;
    }
    // cudaMemcpy of the same amount from the pinned banks, for comparison
    const moe_host_layer *hl = &r.hb->layers[0];
    size_t n = (size_t)hl->n_expert * hl->bank[0].expert_bytes;
    void *dst = ft_cuda_malloc(n);
    ft_cuda_event *e0 = ft_cuda_event_init(), *e1 = ft_cuda_event_init();
    ft_cuda_event_record(e0, s);
    for (int i = 0; i < 20; i++) ft_cuda_memcpy_h2d(dst, hl->bank[0].data, n, s);
    ft_cuda_event_record(e1, s);
    float ms = ft_cuda_event_elapsed_ms(e0, e1);
    printf("    cudaMemcpyAsync from the same pinned banks: %.1f GB/s (%.1f MiB x 20)\n", 20.0 * n / (ms * 1e6),
           n / 1048576.0);
    fflush(stdout);
    (void)q4_bytes;
    ft_cuda_event_free(e0);
    ft_cuda_event_free(e1);
    ft_cuda_free(dst);
    ft_cuda_free(sel_dev);
    ft_cuda_stream_free(s);
    rig_free(&r);
}
