// test_prefix_cache.c: prompts that reuse cached KV blocks (batch.h's prefix cache) give the
// bits computing them gives, on the CPU: a prompt diverging in the middle of a block (its rows
// copied up to there, for 1 to 63 of them), one that extends an earlier prompt, a reuse ending
// inside a -b chunk, 32 sequences sharing a system prompt that ends inside a block at once (the
// block accounting checked after every step), eviction while a sequence waits for blocks and
// of a block copied from, sequences closed in the middle of their prompt; and a model with
// recurrent layers reuses prefixes up to its state's snapshots.
#include "fixtures.h"
#include "../src/engine/batch.h"
#include "../src/model/synth.h"
#include "../src/util/rng.h"

#include <stdlib.h>
#include <string.h>

enum { CHUNK = 64, N_GEN = 4, MAX_SEQ = 64 };

static ft_model *prefix_model(const char *arch, const char *name) {
    ft_synth_params sp = ft_synth_default_params(); // the demo model's shape
    sp.n_ctx_train = 1024;
    if (arch) {
        sp.arch = arch;
        sp.n_layer = 4;
    }
    return fixture_model(&sp, name);
}

// A batch engine of n_seq sequences with prefill chunks of chunk; checkpoints: the recurrent-state
// snapshots its prefix cache may keep (ft_engine_params.ctx_checkpoints).
static ft_batch *prefix_batch_chunk(const ft_model *m, int n_seq, int64_t num_tokens, enum ft_type kv, bool cache,
                                    int checkpoints, int chunk) {
    ft_engine_params ep = ft_engine_default_params();
    ep.ctx_checkpoints = checkpoints;
    ep.n_threads = 2;
    ep.n_ctx = 512;
    ep.n_seq = n_seq;
    ep.n_batch = chunk;
    ep.kv_type = kv;
    ep.num_tokens = num_tokens;
    ep.prefix_cache = cache;
    ft_err err = {{0}};
    ft_batch *b = ft_batch_init(m, &ep, &err);
    if (!b) test_fail(__FILE__, __LINE__, "batch: %s", err.msg);
    return b;
}

static ft_batch *prefix_batch_with(const ft_model *m, int n_seq, int64_t num_tokens, enum ft_type kv, bool cache,
                                   int checkpoints) {
    return prefix_batch_chunk(m, n_seq, num_tokens, kv, cache, checkpoints, CHUNK);
}

static ft_batch *prefix_batch(const ft_model *m, int n_seq, int64_t num_tokens, enum ft_type kv, bool cache) {
    return prefix_batch_with(m, n_seq, num_tokens, kv, cache, ft_engine_default_params().ctx_checkpoints);
}

// One sequence of the driver below: a prompt, then greedy tokens; logits of every sampled one.
typedef struct run {
    const int32_t *prompt;
    int n_prompt, seq, done_prompt, n_out, reused;
    int32_t next;
    float *logits; // (N_GEN, n_vocab)
} run;

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++) best = x[i] > x[best] ? i : best;
    return best;
}

static bool kv_ok(const ft_batch *b) {
    ft_err err = {{0}};
    if (ft_batch_kv_check(b, &err)) return true;
    test_fail(__FILE__, __LINE__, "block accounting: %s", err.msg);
    return false;
}

// Opens a sequence for each of the n runs, on the cached prefix of its prompt.
static bool open_runs(ft_batch *b, run *rs, int n) {
    for (int r = 0; r < n; r++) {
        rs[r].seq = ft_batch_seq_open(b);
        if (rs[r].seq < 0) return false;
        rs[r].reused = ft_batch_seq_reuse(b, rs[r].seq, rs[r].prompt, rs[r].n_prompt);
        rs[r].done_prompt = rs[r].reused;
        rs[r].n_out = 0;
    }
    return true;
}

// Runs the n open runs together on b, as the server's scheduler cuts them (ft_batch_next_chunk:
// on the CPU to multiples of b's chunk from the prompt's start, a reused prefix skipped), checking the blocks after
// every step; closes each after N_GEN tokens. close_at >= 0: run 0 is closed after that many
// prefill steps.
static bool run_open(ft_batch *b, run *rs, int n, int n_vocab, int close_at) {
    ft_err err = {{0}};
    ft_batch_item items[MAX_SEQ];
    int idx[MAX_SEQ], steps = 0;
    for (;;) {
        int n_items = 0, room = ft_batch_max_tokens(b) - n; // a decode token for each of the others
        for (int r = 0; r < n; r++) {
            run *q = &rs[r];
            if (q->seq < 0) continue;
            if (q->done_prompt < q->n_prompt) {
                int len = ft_batch_next_chunk(b, q->done_prompt, q->n_prompt - q->done_prompt);
                if (len > room + 1 || !ft_batch_seq_reserve(b, q->seq, len)) continue;
                room -= len - 1;
                items[n_items] = (ft_batch_item){q->seq, q->prompt + q->done_prompt, len, q->done_prompt + len == q->n_prompt};
            } else {
                if (!ft_batch_seq_reserve(b, q->seq, 1)) continue;
                items[n_items] = (ft_batch_item){q->seq, &q->next, 1, true};
            }
            idx[n_items++] = r;
        }
        if (n_items == 0) break;
        if (!ft_batch_step(b, items, n_items, &err)) {
            test_fail(__FILE__, __LINE__, "step: %s", err.msg);
            return false;
        }
        steps++;
        for (int k = 0; k < n_items; k++) {
            run *q = &rs[idx[k]];
            if (q->done_prompt < q->n_prompt) q->done_prompt += items[k].n_tok;
            if (!items[k].logits) continue;
            const float *lg = ft_batch_logits(b, k);
            memcpy(q->logits + (size_t)q->n_out * n_vocab, lg, (size_t)n_vocab * sizeof(float));
            q->next = argmax(lg, n_vocab);
            if (++q->n_out == N_GEN) {
                ft_batch_seq_close(b, q->seq);
                q->seq = -1;
            }
        }
        if (close_at >= 0 && steps == close_at && rs[0].seq >= 0) {
            ft_batch_seq_close(b, rs[0].seq);
            rs[0].seq = -1;
        }
        if (!kv_ok(b)) return false;
    }
    for (int r = 0; r < n; r++)
        if (rs[r].seq >= 0) return false;
    return true;
}

static bool drive(ft_batch *b, run *rs, int n, int n_vocab, int close_at) {
    return open_runs(b, rs, n) && run_open(b, rs, n, n_vocab, close_at);
}

// The logits of prompt alone on a fresh engine without a prefix cache, in chunks of chunk.
static bool fresh_logits_chunk(const ft_model *m, enum ft_type kv, const int32_t *prompt, int n_prompt, float *logits,
                               int chunk) {
    ft_batch *b = prefix_batch_chunk(m, 1, 0, kv, false, 0, chunk);
    if (!b) return false;
    run q = {.prompt = prompt, .n_prompt = n_prompt, .logits = logits};
    bool ok = drive(b, &q, 1, m->hp.n_vocab, -1) && q.reused == 0;
    ft_batch_free(b);
    return ok;
}

static bool fresh_logits(const ft_model *m, enum ft_type kv, const int32_t *prompt, int n_prompt, float *logits) {
    return fresh_logits_chunk(m, kv, prompt, n_prompt, logits, CHUNK);
}

static bool same(const float *a, const float *b, int n_vocab);

// How many of the n runs gave the logits of their prompt computed alone.
static int n_same_as_alone(const ft_model *m, enum ft_type kv, const run *rs, int n) {
    int n_vocab = m->hp.n_vocab, k = 0;
    float *want = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float));
    for (int i = 0; i < n; i++)
        k += fresh_logits(m, kv, rs[i].prompt, rs[i].n_prompt, want) && same(rs[i].logits, want, n_vocab);
    free(want);
    return k;
}

static void random_tokens(ft_rng *r, int32_t *t, int n, int n_vocab) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(ft_rng_next(r) % (uint64_t)n_vocab);
}

static bool same(const float *a, const float *b, int n_vocab) {
    return !memcmp(a, b, (size_t)N_GEN * n_vocab * sizeof(float));
}

// A prompt sharing 200 tokens with an earlier one reuses them all: 3 whole blocks and the first
// 8 rows of the 4th (where it diverges); one extending an earlier prompt reuses all its kept
// blocks.
static void reuse_case(const ft_model *m, enum ft_type kv) {
    int n_vocab = m->hp.n_vocab;
    ft_rng r = ft_rng_init(3);
    int32_t a[300], c[300], d[400], e[400];
    random_tokens(&r, a, 300, n_vocab);
    random_tokens(&r, e, 400, n_vocab);
    memcpy(c, a, 200 * sizeof(int32_t));
    random_tokens(&r, c + 200, 100, n_vocab);
    memcpy(d, a, 300 * sizeof(int32_t));
    random_tokens(&r, d + 300, 100, n_vocab);
    float *got = ft_malloc((size_t)5 * N_GEN * n_vocab * sizeof(float));
    float *want = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float));
    ft_batch *b = prefix_batch(m, 2, 0, kv, true);
    REQUIRE(b);
    run ra = {.prompt = a, .n_prompt = 300, .logits = got};
    REQUIRE(drive(b, &ra, 1, n_vocab, -1));
    CHECK(ra.reused == 0, "nothing cached yet");
    run rc = {.prompt = c, .n_prompt = 300, .logits = got + (size_t)N_GEN * n_vocab};
    run rd = {.prompt = d, .n_prompt = 400, .logits = got + (size_t)2 * N_GEN * n_vocab};
    REQUIRE(drive(b, &rc, 1, n_vocab, -1));
    REQUIRE(drive(b, &rd, 1, n_vocab, -1));
    CHECK(rc.reused == 200, "%s: c reused %d tokens", ft_type_name(kv), rc.reused);
    // a's blocks hold 0..255 (its tail chunk of 44 and its decoded tokens are not kept)
    CHECK(rd.reused == 4 * FT_KV_BLOCK, "%s: d reused %d tokens", ft_type_name(kv), rd.reused);
    // e's first 254 tokens and its 2 decoded ones fill block 3 with rows of other kernel
    // classes than a whole chunk's (a tail chunk of 62, two decode steps), so that block is not
    // kept for f, which reads e and those two tokens on
    run re = {.prompt = e, .n_prompt = 254, .logits = got + (size_t)3 * N_GEN * n_vocab};
    REQUIRE(drive(b, &re, 1, n_vocab, -1));
    for (int g = 0; g < 2; g++) e[254 + g] = argmax(re.logits + (size_t)g * n_vocab, n_vocab);
    run rf = {.prompt = e, .n_prompt = 400, .logits = got + (size_t)4 * N_GEN * n_vocab};
    REQUIRE(drive(b, &rf, 1, n_vocab, -1));
    CHECK(rf.reused == 3 * FT_KV_BLOCK, "%s: f reused %d tokens", ft_type_name(kv), rf.reused);
    const run *rs[5] = {&ra, &rc, &rd, &re, &rf};
    for (int i = 0; i < 5; i++) {
        REQUIRE(fresh_logits(m, kv, rs[i]->prompt, rs[i]->n_prompt, want));
        CHECK(same(rs[i]->logits, want, n_vocab), "%s: prompt %d with %d tokens reused: logits differ from computing it",
              ft_type_name(kv), i, rs[i]->reused);
    }
    ft_batch_kv info;
    ft_batch_kv_info(b, &info);
    CHECK(info.prefix_cache && info.cached > 0 && info.evictable == info.cached && info.free + info.cached == info.blocks,
          "after: %lld blocks, %lld free, %lld cached, %lld evictable", (long long)info.blocks, (long long)info.free,
          (long long)info.cached, (long long)info.evictable);
    ft_batch_free(b);
    free(got);
    free(want);
}

TEST(prefix_reuse_is_bit_identical) {
    ft_model *m = prefix_model(NULL, "prefix.gguf");
    REQUIRE(m);
    reuse_case(m, FT_TYPE_F16);
    reuse_case(m, FT_TYPE_Q8_0);
    ft_model_free(m);
}

// A reused prefix that ends inside one of the prompt's -b chunks: the rest of that chunk takes
// the kernels of the whole chunk, not those of its own shorter length, and a last chunk whose
// kernels differ from a whole chunk's reuses none of its rows; so with an f16 cache (whose
// attention is tiled from 64 queries) and -b 256 or 100 each prompt gives the bits of computing
// it whole. A q8_0 cache has no tiled attention: there a last chunk of 60 tokens takes a whole
// chunk's kernels, and its rows are reused.
TEST(prefix_reuse_resumes_inside_a_chunk) {
    ft_model *m = prefix_model(NULL, "prefix_chunk.gguf");
    REQUIRE(m);
    int n_vocab = m->hp.n_vocab;
    ft_rng r = ft_rng_init(41);
    int32_t a[400], c[300];
    random_tokens(&r, a, 400, n_vocab);
    memcpy(c, a, 250 * sizeof(int32_t));
    random_tokens(&r, c + 250, 50, n_vocab);
    float *got = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float)),
          *want = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float));
    const struct {
        int chunk;
        enum ft_type kv;
        const int32_t *prompt;
        int n, reused;
    } cases[] = {
        // a's first chunk of 256 kept blocks 0-3; 200 tokens of it resume at 199, inside their
        // one chunk [0, 200), whose last token is left to compute
        {256, FT_TYPE_F16, a, 200, 199},
        // chunks of 100: a's blocks 0-4 kept; the last chunk [200, 260) is too short for the
        // tiled attention, so its rows are not reused
        {100, FT_TYPE_F16, a, 260, 200},
        {100, FT_TYPE_Q8_0, a, 260, 259},
        // c diverges at 250: resumes there, inside the chunk [200, 300)
        {100, FT_TYPE_F16, c, 300, 250},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases) && !test_failed(); i++) {
        ft_batch *b = prefix_batch_chunk(m, 1, 0, cases[i].kv, true, 0, cases[i].chunk);
        REQUIRE(b);
        run ra = {.prompt = a, .n_prompt = 400, .logits = got};
        REQUIRE(drive(b, &ra, 1, n_vocab, -1));
        run q = {.prompt = cases[i].prompt, .n_prompt = cases[i].n, .logits = got};
        REQUIRE(drive(b, &q, 1, n_vocab, -1));
        CHECK(q.reused == cases[i].reused, "case %zu: reused %d tokens, want %d", i, q.reused, cases[i].reused);
        // the CPU's cuts after a reused prefix end where the whole prompt's chunks end (every
        // chunk'th token from its start, and its end), here for a 400-token prompt resumed there
        for (int at = cases[i].reused, n = 400; at < n && !test_failed();) {
            int cut = ft_batch_next_chunk(b, at, n - at), end = at + cut;
            bool whole_cut = end % cases[i].chunk == 0 || end == n;
            CHECK(cut >= 1 && whole_cut, "case %zu: a chunk of %d after %d", i, cut, at);
            at = end;
        }
        REQUIRE(fresh_logits_chunk(m, cases[i].kv, q.prompt, q.n_prompt, want, cases[i].chunk));
        CHECK(same(got, want, n_vocab), "case %zu (-b %d, %d of %d tokens reused): logits differ from computing it",
              i, cases[i].chunk, q.reused, cases[i].n);
        ft_batch_free(b);
    }
    free(got);
    free(want);
    ft_model_free(m);
}

// p: the first common tokens of a, then tokens of its own (the first unlike a's), n in all.
static void diverge(ft_rng *r, int32_t *p, const int32_t *a, int common, int n, int n_vocab) {
    memcpy(p, a, (size_t)common * sizeof(int32_t));
    random_tokens(r, p + common, n - common, n_vocab);
    if (p[common] == a[common]) p[common] = (a[common] + 1) % n_vocab;
}

static void kv_info_ok(const ft_batch *b, const char *when) {
    ft_batch_kv info;
    ft_batch_kv_info(b, &info);
    CHECK(info.evictable == info.cached && info.free + info.cached == info.blocks,
          "%s: %lld blocks, %lld free, %lld cached, %lld evictable", when, (long long)info.blocks,
          (long long)info.free, (long long)info.cached, (long long)info.evictable);
}

// A prompt that leaves a cached one's tokens inside a block reuses the whole blocks before and
// the first j rows of that block, copied into a block of its own: j from 1 to 63 (in block 2;
// 40 in block 0; a prompt that is a cached one up to a block's end: 63 rows of that block, its
// last token left to compute), each on a fresh engine, bit-identical to computing the prompt,
// the accounting checked after every step. The copy's block, once full, is kept in turn: a
// prompt leaving it inside the next block reuses through it (250 tokens: a's 2 blocks, the
// copy's, 58 rows of the block after it).
static void into_a_block_case(const ft_model *m, enum ft_type kv) {
    int n_vocab = m->hp.n_vocab;
    ft_rng r = ft_rng_init(57);
    int32_t a[300], p[300], p2[300];
    random_tokens(&r, a, 300, n_vocab); // its blocks 0-3 are kept (rows 0-255)
    float *got = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float)),
          *want = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float));
    static const int commons[] = {2 * FT_KV_BLOCK + 1, 2 * FT_KV_BLOCK + 2, 2 * FT_KV_BLOCK + 37,
                                  3 * FT_KV_BLOCK - 1, 40, 4 * FT_KV_BLOCK};
    for (size_t i = 0; i < FT_ARRAY_LEN(commons) && !test_failed(); i++) {
        int common = commons[i], n = common == 4 * FT_KV_BLOCK ? common : 300, reused = FT_MIN(common, n - 1);
        diverge(&r, p, a, FT_MIN(common, 299), 300, n_vocab);
        ft_batch *b = prefix_batch(m, 1, 0, kv, true);
        REQUIRE(b);
        run ra = {.prompt = a, .n_prompt = 300, .logits = got};
        REQUIRE(drive(b, &ra, 1, n_vocab, -1));
        run q = {.prompt = p, .n_prompt = n, .logits = got};
        REQUIRE(drive(b, &q, 1, n_vocab, -1));
        CHECK(q.reused == reused, "%s: %d tokens shared: reused %d", ft_type_name(kv), common, q.reused);
        REQUIRE(fresh_logits(m, kv, p, n, want));
        CHECK(same(got, want, n_vocab), "%s: %d of %d tokens reused: logits differ from computing it", ft_type_name(kv),
              q.reused, n);
        kv_info_ok(b, "after");
        ft_batch_free(b);
    }
    ft_batch *b = prefix_batch(m, 1, 0, kv, true);
    REQUIRE(b);
    diverge(&r, p, a, 2 * FT_KV_BLOCK + 37, 300, n_vocab);
    diverge(&r, p2, p, 250, 300, n_vocab);
    const int32_t *prompts[3] = {a, p, p2};
    const int want_reused[3] = {0, 2 * FT_KV_BLOCK + 37, 250};
    for (int k = 0; k < 3; k++) {
        run q = {.prompt = prompts[k], .n_prompt = 300, .logits = got};
        REQUIRE(drive(b, &q, 1, n_vocab, -1));
        CHECK(q.reused == want_reused[k], "%s: prompt %d reused %d", ft_type_name(kv), k, q.reused);
        REQUIRE(fresh_logits(m, kv, prompts[k], 300, want));
        CHECK(same(got, want, n_vocab), "%s: prompt %d, %d tokens reused: logits differ", ft_type_name(kv), k,
              q.reused);
    }
    kv_info_ok(b, "after the chain");
    ft_batch_free(b);
    free(got);
    free(want);
}

TEST(prefix_reuse_into_a_block) {
    ft_model *m = prefix_model(NULL, "prefix_part.gguf");
    REQUIRE(m);
    into_a_block_case(m, FT_TYPE_F16);
    into_a_block_case(m, FT_TYPE_Q8_0);
    ft_model_free(m);
}

// The cached block whose rows a sequence copied is the sequence's no more: when other work needs
// blocks, it goes (a pool of 8: a's 4 kept blocks, p on a's first 2 and a copy of 32 rows of its
// third, then a sequence reserving 5 blocks takes a's last two back), and p, on its copy, gives
// the bits of its prompt computed alone; a again then reuses a's 2 blocks and 32 rows of p's
// kept copy. But while it copies, the block is held: with no block free it is not the one
// reclaimed for the copy.
TEST(prefix_reuse_into_a_block_source_evicted) {
    ft_model *m = prefix_model(NULL, "prefix_part_evict.gguf");
    REQUIRE(m);
    int n_vocab = m->hp.n_vocab;
    enum { N = 4 * FT_KV_BLOCK + 1 };
    ft_rng r = ft_rng_init(61);
    int32_t a[N], p[N];
    random_tokens(&r, a, N, n_vocab);
    diverge(&r, p, a, 2 * FT_KV_BLOCK + 32, N, n_vocab);
    float *logits = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float));
    ft_batch *b = prefix_batch(m, 2, 8 * FT_KV_BLOCK, FT_TYPE_Q8_0, true);
    REQUIRE(b);
    run ra = {.prompt = a, .n_prompt = N, .logits = logits};
    REQUIRE(drive(b, &ra, 1, n_vocab, -1));
    ft_batch_kv info;
    ft_batch_kv_info(b, &info);
    REQUIRE(info.cached == 4 && info.free == 4, "%lld cached, %lld free", (long long)info.cached, (long long)info.free);
    run q = {.prompt = p, .n_prompt = N, .logits = logits};
    REQUIRE(open_runs(b, &q, 1));
    CHECK(q.reused == 2 * FT_KV_BLOCK + 32, "p reused %d", q.reused);
    int z = ft_batch_seq_open(b);
    REQUIRE(z >= 0);
    CHECK(ft_batch_seq_reserve(b, z, 5 * FT_KV_BLOCK), "3 free blocks and a's last two");
    ft_batch_kv_info(b, &info);
    CHECK(info.cached == 2 && info.free == 0, "a's blocks 2 and 3 given back: %lld cached", (long long)info.cached);
    ft_batch_seq_close(b, z);
    REQUIRE(kv_ok(b));
    REQUIRE(run_open(b, &q, 1, n_vocab, -1));
    CHECK(n_same_as_alone(m, FT_TYPE_Q8_0, &q, 1) == 1, "p's logits differ from computing it");
    run again = {.prompt = a, .n_prompt = N, .logits = logits};
    REQUIRE(drive(b, &again, 1, n_vocab, -1));
    CHECK(again.reused == 2 * FT_KV_BLOCK + 32, "a again reused %d", again.reused);
    CHECK(n_same_as_alone(m, FT_TYPE_Q8_0, &again, 1) == 1, "a's logits differ from computing it");
    kv_info_ok(b, "after");
    ft_batch_free(b);

    // No block free, and the one to copy from the only one the cache could give back: it is not
    // taken for the copy (p reuses the whole blocks only), and p runs once a block is free.
    b = prefix_batch(m, 2, 8 * FT_KV_BLOCK, FT_TYPE_Q8_0, true);
    REQUIRE(b);
    run small = {.prompt = a, .n_prompt = 3 * FT_KV_BLOCK + 1, .logits = logits};
    REQUIRE(drive(b, &small, 1, n_vocab, -1)); // a's blocks 0-2 kept, 5 free
    int y = ft_batch_seq_open(b);
    REQUIRE(y >= 0 && ft_batch_seq_reserve(b, y, 5 * FT_KV_BLOCK)); // (taken while p starts)
    q = (run){.prompt = p, .n_prompt = 3 * FT_KV_BLOCK + 1, .logits = logits};
    REQUIRE(open_runs(b, &q, 1));
    CHECK(q.reused == 2 * FT_KV_BLOCK, "p reused %d with no block to copy into", q.reused);
    ft_batch_kv_info(b, &info);
    CHECK(info.cached == 3 && info.free == 0, "%lld cached, %lld free", (long long)info.cached, (long long)info.free);
    ft_batch_seq_close(b, y);
    REQUIRE(kv_ok(b));
    REQUIRE(run_open(b, &q, 1, n_vocab, -1));
    CHECK(n_same_as_alone(m, FT_TYPE_Q8_0, &q, 1) == 1, "p's logits differ from computing it");
    ft_batch_free(b);
    free(logits);
    ft_model_free(m);
}

// A sequence closed right after it copied a block's rows gives that block back (it was not
// full: nothing kept), and the cached blocks stay; one closed after its first chunk, which filled
// the copy, leaves the copy kept, and the prompt run again reuses it whole.
TEST(prefix_reuse_into_a_block_cancelled) {
    ft_model *m = prefix_model(NULL, "prefix_part_cancel.gguf");
    REQUIRE(m);
    int n_vocab = m->hp.n_vocab;
    ft_rng r = ft_rng_init(67);
    int32_t a[300], p[300];
    random_tokens(&r, a, 300, n_vocab);
    diverge(&r, p, a, 100, 300, n_vocab);
    float *logits = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float));
    ft_batch *b = prefix_batch(m, 1, 0, FT_TYPE_Q8_0, true);
    REQUIRE(b);
    run ra = {.prompt = a, .n_prompt = 300, .logits = logits};
    REQUIRE(drive(b, &ra, 1, n_vocab, -1));
    ft_batch_kv before, info;
    ft_batch_kv_info(b, &before);
    run q = {.prompt = p, .n_prompt = 300, .logits = logits};
    REQUIRE(open_runs(b, &q, 1));
    CHECK(q.reused == 100, "reused %d", q.reused);
    ft_batch_kv_info(b, &info);
    CHECK(info.free == before.free - 1 && info.cached == before.cached, "a block of its own: %lld free, %lld cached",
          (long long)info.free, (long long)info.cached);
    REQUIRE(kv_ok(b));
    ft_batch_seq_close(b, q.seq);
    ft_batch_kv_info(b, &info);
    CHECK(info.free == before.free && info.cached == before.cached, "closed: %lld free, %lld cached",
          (long long)info.free, (long long)info.cached);
    REQUIRE(kv_ok(b));
    // closed after its first chunk, [100, 128): the copy is full and kept beside a's block 1
    REQUIRE(drive(b, &q, 1, n_vocab, 1));
    ft_batch_kv_info(b, &info);
    CHECK(info.cached == before.cached + 1, "%lld cached", (long long)info.cached);
    kv_info_ok(b, "after the cut");
    run again = {.prompt = p, .n_prompt = 300, .logits = logits};
    REQUIRE(drive(b, &again, 1, n_vocab, -1));
    CHECK(again.reused == 2 * FT_KV_BLOCK, "p again reused %d: a's block 0 and its kept copy", again.reused);
    CHECK(n_same_as_alone(m, FT_TYPE_Q8_0, &again, 1) == 1, "logits differ from computing it");
    ft_batch_free(b);
    free(logits);
    ft_model_free(m);
}

// 64 sequences of mixed lengths (1 to 300 tokens, half of them after one of two shared
// prefixes) at once on one pool: the block accounting holds after every step, and each gives
// the bits of its prompt computed alone.
TEST(prefix_cache_64_mixed_sequences) {
    ft_model *m = prefix_model(NULL, "prefix64.gguf");
    REQUIRE(m);
    int n_vocab = m->hp.n_vocab;
    ft_rng r = ft_rng_init(21);
    static int32_t prompts[64][300], shared[2][200];
    random_tokens(&r, shared[0], 200, n_vocab);
    random_tokens(&r, shared[1], 200, n_vocab);
    run rs[64];
    float *logits = ft_malloc((size_t)64 * N_GEN * n_vocab * sizeof(float));
    for (int s = 0; s < 64; s++) {
        int n = 1 + (int)(ft_rng_next(&r) % 300);
        random_tokens(&r, prompts[s], n, n_vocab);
        if (s % 2) memcpy(prompts[s], shared[s / 2 % 2], (size_t)FT_MIN(n, 200) * sizeof(int32_t));
        rs[s] = (run){.prompt = prompts[s], .n_prompt = n, .logits = logits + (size_t)s * N_GEN * n_vocab};
    }
    // each holds at most 5 blocks (300 + 3 positions)
    ft_batch *b = prefix_batch(m, 64, 64 * 5 * FT_KV_BLOCK, FT_TYPE_Q8_0, true);
    REQUIRE(b);
    // the two shared prefixes cached first
    for (int k = 0; k < 2; k++) {
        run q = {.prompt = shared[k], .n_prompt = 200, .logits = logits};
        REQUIRE(drive(b, &q, 1, n_vocab, -1));
    }
    REQUIRE(drive(b, rs, 64, n_vocab, -1));
    int n_same = n_same_as_alone(m, FT_TYPE_Q8_0, rs, 64), n_reused = 0;
    for (int s = 0; s < 64; s++) n_reused += rs[s].reused > 0;
    CHECK(n_same == 64, "%d of 64 sequences match their prompt computed alone", n_same);
    CHECK(n_reused >= 16, "%d sequences reused a cached prefix", n_reused);
    printf("    64 sequences, prompts of 1 to 300 tokens: %d reused a prefix, %d/64 bit-identical to alone\n",
           n_reused, n_same);
    ft_batch_free(b);
    free(logits);
    ft_model_free(m);
}

// 32 sequences whose prompts share a 150-token system prompt, which ends inside block 2, run at
// once after an earlier prompt cached it (and the rest of that block): each reuses all 150
// tokens, 2 whole blocks by reference and block 2's first 22 rows copied into a block of its
// own; every step's block accounting holds, and each gives the bits of its prompt computed
// alone.
TEST(prefix_cache_shared_by_32_sequences) {
    ft_model *m = prefix_model(NULL, "prefix32.gguf");
    REQUIRE(m);
    int n_vocab = m->hp.n_vocab;
    ft_rng r = ft_rng_init(9);
    enum { SYS = 150, N32 = 32 };
    int32_t prompts[N32][SYS + 40], earlier[SYS + 60];
    random_tokens(&r, earlier, SYS + 60, n_vocab);
    for (int s = 0; s < N32; s++) {
        memcpy(prompts[s], earlier, SYS * sizeof(int32_t));
        random_tokens(&r, prompts[s] + SYS, 40, n_vocab);
        if (prompts[s][SYS] == earlier[SYS]) prompts[s][SYS] = (earlier[SYS] + 1) % n_vocab; // parts at SYS
    }
    float *logits = ft_malloc((size_t)N32 * N_GEN * n_vocab * sizeof(float));
    // the positions of 32 prompts of 190 + 4, each 4 blocks; 2 of them shared: 66 blocks, and
    // the 4 the earlier prompt kept (blocks 0-2 of it) or freed
    ft_batch *b = prefix_batch(m, N32, 70 * FT_KV_BLOCK, FT_TYPE_Q8_0, true);
    REQUIRE(b);
    run first = {.prompt = earlier, .n_prompt = SYS + 60, .logits = logits};
    REQUIRE(drive(b, &first, 1, n_vocab, -1));
    run rs[N32];
    for (int s = 0; s < N32; s++)
        rs[s] = (run){.prompt = prompts[s], .n_prompt = SYS + 40, .logits = logits + (size_t)s * N_GEN * n_vocab};
    REQUIRE(drive(b, rs, N32, n_vocab, -1));
    for (int s = 0; s < N32; s++) CHECK(rs[s].reused == SYS, "sequence %d reused %d", s, rs[s].reused);
    int n_same = n_same_as_alone(m, FT_TYPE_Q8_0, rs, N32);
    CHECK(n_same == N32, "%d of %d sequences match their prompt computed alone", n_same, N32);
    ft_batch_free(b);
    free(logits);
    ft_model_free(m);
}

// A pool of 10 blocks: after two 4-block prompts are cached, a third needs blocks the cache
// gives back (least recently used first), while a running sequence's blocks stay; a sequence
// closed in the middle of its prompt gives back its blocks but the whole ones it finished.
TEST(prefix_cache_evicts_and_cancels) {
    ft_model *m = prefix_model(NULL, "prefix_evict.gguf");
    REQUIRE(m);
    int n_vocab = m->hp.n_vocab;
    ft_rng r = ft_rng_init(17);
    int32_t p[3][4 * FT_KV_BLOCK + 1];
    for (int i = 0; i < 3; i++) random_tokens(&r, p[i], 4 * FT_KV_BLOCK + 1, n_vocab);
    float *logits = ft_malloc((size_t)2 * N_GEN * n_vocab * sizeof(float));
    ft_batch *b = prefix_batch(m, 2, 10 * FT_KV_BLOCK, FT_TYPE_Q8_0, true);
    REQUIRE(b);
    for (int i = 0; i < 2; i++) {
        run q = {.prompt = p[i], .n_prompt = 4 * FT_KV_BLOCK + 1, .logits = logits};
        REQUIRE(drive(b, &q, 1, n_vocab, -1));
    }
    ft_batch_kv info;
    ft_batch_kv_info(b, &info);
    CHECK(info.cached == 8 && info.free == 2, "two prompts of 4 whole blocks kept: %lld cached, %lld free",
          (long long)info.cached, (long long)info.free);
    // prompt 1 runs again (its blocks in use) beside prompt 2, which needs 5 blocks: prompt
    // 0's go, prompt 1's stay
    run two[2] = {{.prompt = p[1], .n_prompt = 4 * FT_KV_BLOCK + 1, .logits = logits},
                  {.prompt = p[2], .n_prompt = 4 * FT_KV_BLOCK + 1, .logits = logits + (size_t)N_GEN * n_vocab}};
    REQUIRE(drive(b, two, 2, n_vocab, -1));
    CHECK(two[0].reused == 4 * FT_KV_BLOCK && two[1].reused == 0, "reused %d and %d", two[0].reused, two[1].reused);
    CHECK(n_same_as_alone(m, FT_TYPE_Q8_0, two, 2) == 2, "prompts beside an eviction: logits differ");
    run again = {.prompt = p[0], .n_prompt = 4 * FT_KV_BLOCK + 1, .logits = logits};
    REQUIRE(drive(b, &again, 1, n_vocab, -1));
    CHECK(again.reused < 4 * FT_KV_BLOCK, "prompt 0 was evicted: reused %d", again.reused);
    // a fresh prompt closed after its second chunk: its two whole blocks stay
    int32_t fresh[4 * FT_KV_BLOCK + 1];
    random_tokens(&r, fresh, 4 * FT_KV_BLOCK + 1, n_vocab);
    run cut = {.prompt = fresh, .n_prompt = 4 * FT_KV_BLOCK + 1, .logits = logits};
    REQUIRE(drive(b, &cut, 1, n_vocab, 2));
    run after = {.prompt = fresh, .n_prompt = 4 * FT_KV_BLOCK + 1, .logits = logits};
    REQUIRE(drive(b, &after, 1, n_vocab, -1));
    CHECK(after.reused == 2 * FT_KV_BLOCK, "the cut prompt's two finished blocks were kept: %d", after.reused);
    ft_batch_free(b);
    free(logits);
    ft_model_free(m);
}

// Recurrent layers keep a state no block holds: a prefix is reused up to the deepest snapshot
// of that state (taken after whole chunks ending on a block boundary), with the bits computing
// it gives; a snapshot dropped for the cap (ctx_checkpoints) is not reused; with no snapshots
// allowed such a model reuses nothing.
TEST(prefix_cache_recurrent_snapshots) {
    ft_model *m = prefix_model("qwen35moe", "prefix_rec.gguf");
    REQUIRE(m);
    int n_vocab = m->hp.n_vocab;
    int32_t a[200], c[200], d[300], g[120];
    ft_rng r = ft_rng_init(1);
    random_tokens(&r, a, 200, n_vocab);
    memcpy(c, a, 150 * sizeof(int32_t));
    random_tokens(&r, c + 150, 50, n_vocab);
    memcpy(d, a, 200 * sizeof(int32_t));
    random_tokens(&r, d + 200, 100, n_vocab);
    memcpy(g, a, 100 * sizeof(int32_t));
    random_tokens(&r, g + 100, 20, n_vocab);
    float *got = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float)),
          *want = ft_malloc((size_t)N_GEN * n_vocab * sizeof(float));
    const struct {
        int checkpoints;
        const int32_t *prompt;
        int n, reused;
    } cases[] = {
        // a's chunks of 64 end at 64, 128, 192: three snapshots; c diverges inside block 2
        {32, c, 200, 2 * CHUNK},
        {32, d, 300, 3 * CHUNK},
        {32, g, 120, CHUNK},
        // two snapshots at most: the one at 64 went first, so g (one whole block of a) reuses none
        {2, c, 200, 2 * CHUNK},
        {2, g, 120, 0},
        {0, c, 200, 0},
    };
    for (size_t i = 0; i < FT_ARRAY_LEN(cases) && !test_failed(); i++) {
        ft_batch *b = prefix_batch_with(m, 1, 0, FT_TYPE_Q8_0, true, cases[i].checkpoints);
        REQUIRE(b);
        run ra = {.prompt = a, .n_prompt = 200, .logits = got};
        REQUIRE(drive(b, &ra, 1, n_vocab, -1));
        run q = {.prompt = cases[i].prompt, .n_prompt = cases[i].n, .logits = got};
        REQUIRE(drive(b, &q, 1, n_vocab, -1));
        CHECK(q.reused == cases[i].reused, "case %zu: reused %d tokens, want %d", i, q.reused,
              cases[i].reused);
        REQUIRE(fresh_logits(m, FT_TYPE_Q8_0, q.prompt, q.n_prompt, want));
        CHECK(same(got, want, n_vocab), "case %zu: %d tokens reused: logits differ from computing the prompt",
              i, q.reused);
        ft_batch_kv info;
        ft_batch_kv_info(b, &info);
        CHECK(info.prefix_cache == (cases[i].checkpoints > 0), "case %zu", i);
        ft_batch_free(b);
    }
    free(got);
    free(want);
    ft_model_free(m);
}
