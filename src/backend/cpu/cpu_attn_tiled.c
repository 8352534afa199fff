// cpu_attn_tiled.c: the item loop of the tiled prefill attention (cpu_attn_tiled.h) and what
// its kernels share: a tile's start, its rows' output, the workspace's size.
//
// Items go to threads round-robin in token order, which balances the causal triangle; a group
// of tiles per item where that leaves every thread several items. A tile's blocks of keys start
// at multiples of CPU_ATTN_TILE_KEYS whatever the item, so its rows' arithmetic is that of the
// tile alone.
#include "cpu_attn_tiled.h"

#include <math.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

enum { ROWS = CPU_ATTN_TILE_ROWS, KEYS = CPU_ATTN_TILE_KEYS };

size_t cpu_attn_tiled_ws_floats(int head_dim) {
    return (size_t)ROWS * head_dim * 2 * CPU_ATTN_TILE_GROUP + (size_t)KEYS * head_dim * 2 + (size_t)ROWS * KEYS + 64;
}

// The common start of a tile: its rows' queries transposed into t->qT (rows past nr zero), the
// sums zero, t0, nr, first_key and last.
static void tile_start(cpu_attn_tile *t, const ft_attn_params *p, int hk, int t0, int nt) {
    const int hd = p->head_dim, group = p->n_head / p->n_head_kv;
    t->t0 = t0;
    t->nr = nt * group;
    for (int r = 0; r < ROWS; r++) {
        const float *q = r < t->nr ? p->q + ((size_t)(t0 + r / group) * p->n_head + (size_t)hk * group + r % group) * hd
                                   : NULL;
        for (int d = 0; d < hd; d++) t->qT[(size_t)d * ROWS + r] = q ? q[d] : 0.0f;
    }
    memset(t->accT, 0, (size_t)ROWS * hd * sizeof(float));
    t->first_key = cpu_attn_tiled_first_key(p, p->pos0 + t0);
    t->last = p->pos0 + t0 + nt - 1;
}

// The tile's rows of the output: the sums over the denominator (and the head's sink).
static void tile_write(const cpu_attn_tile *t, const cpu_attn_tiled_kernel *k, const ft_attn_params *p, int hk,
                       const float *sinks) {
    const int hd = p->head_dim, group = p->n_head / p->n_head_kv;
    float M[ROWS], L[ROWS], row[1024]; // (hd <= 1024)
    k->stats(t, M, L);
    for (int r = 0; r < t->nr; r++) {
        for (int d = 0; d < hd; d++) row[d] = t->accT[(size_t)d * ROWS + r];
        if (sinks) cpu_attn_sink(sinks[hk * group + r % group], M[r], &L[r], row, hd);
        const float inv = L[r] == 0.0f ? 0.0f : 1.0f / L[r];
        float *o = p->out + ((size_t)(t->t0 + r / group) * p->n_head + (size_t)hk * group + r % group) * hd;
        for (int d = 0; d < hd; d++) o[d] = row[d] * inv;
    }
}

typedef struct {
    cpu_backend *c;
    const ft_attn_params *p;
    const cpu_attn_tiled_kernel *k;
    int tile_tok; // query tokens per tile
    int group;    // tiles per item (at most CPU_ATTN_TILE_GROUP), all of one KV head
} tiled_job;

static void tiled_worker(void *ctx, int ith, int nth) {
    tiled_job *j = ctx;
    const ft_attn_params *p = j->p;
    const int hd = p->head_dim, tt = j->tile_tok;
    float *kb = j->c->attn_ws + (size_t)ith * j->c->attn_ws_per_thread; // (KEYS, hd)
    float *vb = kb + (size_t)KEYS * hd;                                  // (KEYS, hd)
    float *ST = vb + (size_t)KEYS * hd;                                  // (KEYS, ROWS): scores, then P
    float *qs = ST + (size_t)KEYS * ROWS;                                // per tile: qT, accT
    const float *sinks = cpu_attn_sinks(p);
    alignas(64) unsigned char states[CPU_ATTN_TILE_GROUP][CPU_ATTN_TILE_STATE_BYTES];
    cpu_attn_tile *ts[CPU_ATTN_TILE_GROUP];
    const int n_tiles = (p->n_tok + tt - 1) / tt, n_items = (n_tiles + j->group - 1) / j->group;
    for (int64_t it = ith; it < (int64_t)n_items * p->n_head_kv; it += nth) {
        const int tile0 = (int)(it / p->n_head_kv) * j->group, hk = (int)(it % p->n_head_kv);
        const int n = FT_MIN(j->group, n_tiles - tile0);
        int first = INT32_MAX, last = -1;
        for (int i = 0; i < n; i++) {
            const int t0 = (tile0 + i) * tt;
            ts[i] = (cpu_attn_tile *)states[i];
            ts[i]->qT = qs + (size_t)i * 2 * ROWS * hd;
            ts[i]->accT = ts[i]->qT + (size_t)ROWS * hd;
            tile_start(ts[i], p, hk, t0, FT_MIN(tt, p->n_tok - t0));
            j->k->start(ts[i], p);
            first = FT_MIN(first, ts[i]->first_key);
            last = FT_MAX(last, ts[i]->last);
        }
        int64_t off = 0, walked = -1;
        for (int k0 = first; k0 <= last; k0 += KEYS) {
            cpu_attn_tiled_load_block(p, hk, k0, FT_MIN(KEYS, last - k0 + 1), kb, vb, &off, &walked);
            for (int i = 0; i < n; i++)
                if (k0 >= ts[i]->first_key && k0 <= ts[i]->last)
                    j->k->block(ts[i], kb, vb, k0, FT_MIN(KEYS, ts[i]->last - k0 + 1), hd, p->scale, ST);
        }
        for (int i = 0; i < n; i++) tile_write(ts[i], j->k, p, hk, sinks);
    }
}

bool cpu_attn_tiled_run(cpu_backend *c, const ft_attn_params *p, const cpu_attn_tiled_kernel *k) {
    const int group = p->n_head / p->n_head_kv;
    if (p->k_cache->type != FT_TYPE_F16 || p->v_cache->type != FT_TYPE_F16) return false;
    if (group > ROWS || p->head_dim % 16 != 0 || p->head_dim > 1024) return false;
    if (cpu_attn_tiled_ws_floats(p->head_dim) > c->attn_ws_per_thread) return false;
    const int n_tiles = (p->n_tok + ROWS / group - 1) / (ROWS / group);
    const int tiles_per_item = FT_MAX(1, FT_MIN(CPU_ATTN_TILE_GROUP, n_tiles * p->n_head_kv / (4 * cpu_threads(c))));
    tiled_job j = {c, p, k, ROWS / group, tiles_per_item};
    cpu_run(c, tiled_worker, &j);
    return true;
}
