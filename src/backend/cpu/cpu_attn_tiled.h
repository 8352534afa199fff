// cpu_attn_tiled.h: what the two tiled prefill attention kernels (cpu_attn_tiled_avx2.c,
// cpu_attn_tiled_avx512.c) share: a tile's queries and sums, and the loop over items of tiles
// (cpu_attn_tiled.c) that calls a kernel's steps. Internal to src/backend/cpu/.
//
// A tile is up to CPU_ATTN_TILE_ROWS rows: every query head of one KV head's group for each of
// a run of query tokens (row tl * group + g: token t0 + tl, query head hk * group + g). Its
// queries are kept transposed (qT: head_dim x ROWS) and its sums of values likewise (accT), so a
// kernel works on vectors of rows. An item is up to CPU_ATTN_TILE_GROUP consecutive tiles of one
// KV head: each block of keys any of them sees is converted to f32 once for all of them.
#ifndef FT_CPU_ATTN_TILED_H
#define FT_CPU_ATTN_TILED_H

#include "cpu_impl.h"

// The part of a tile the item loop reads; a kernel's tile state begins with it.
typedef struct cpu_attn_tile {
    float *qT, *accT;            // (hd, ROWS) each, in the thread's workspace
    int t0, nr, first_key, last; // first token, rows, the first block's key, the last key seen
} cpu_attn_tile;

// Bytes a kernel's tile state may take (it is kept on the thread's stack, 64-byte aligned).
enum { CPU_ATTN_TILE_STATE_BYTES = 1280 };

typedef struct cpu_attn_tiled_kernel {
    // Starts a tile whose common part the item loop has started (queries transposed, sums zero,
    // t0, nr, first_key, last): its rows' running maxima, denominators and positions.
    void (*start)(cpu_attn_tile *t, const ft_attn_params *p);
    // The tile against keys k0 .. k0 + nk - 1 (kb, vb: f32 rows of head_dim); ST: the
    // thread's (KEYS, ROWS) scratch.
    void (*block)(cpu_attn_tile *t, const float *kb, const float *vb, int k0, int nk, int hd, float scale,
                  float *ST);
    // The rows' running maxima and softmax denominators, ROWS each.
    void (*stats)(const cpu_attn_tile *t, float *M, float *L);
} cpu_attn_tiled_kernel;

// Runs p's attention with kernel k on c's threads; false, having done nothing, where the tiled
// path does not apply (a cache not f16, a group wider than a tile, head_dim not a multiple of
// 16 or above 1024, too small a workspace).
bool cpu_attn_tiled_run(cpu_backend *c, const ft_attn_params *p, const cpu_attn_tiled_kernel *k);

#endif
