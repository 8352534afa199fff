// kv_block: the layout of a paged KV cache, shared by the ops of every backend (C and CUDA).
//
// A layer's K (V) cache tensor holds the rows of all sequences, in blocks of FT_KV_BLOCK
// consecutive rows. A sequence owns a list of blocks in position order, its block table: its
// position p lives in row table[p / FT_KV_BLOCK] * FT_KV_BLOCK + p % FT_KV_BLOCK. Sequences
// then share one budget of rows, and a prefix cache can hand the same block to several of
// them (kv/kv_pool.h). A NULL table means an unpaged cache: row p is position p.
//
// 64 positions a block: a 32k context needs a table of only 512 entries, and a prefix reused
// into the middle of a block copies at most 63 rows of it (the whole blocks before are shared).
#ifndef FT_KV_BLOCK_H
#define FT_KV_BLOCK_H

#include <stdint.h>

#define FT_KV_BLOCK 64

#ifdef __CUDACC__
#define FT_KV_BLOCK_FN __host__ __device__ static inline
#else
#define FT_KV_BLOCK_FN static inline
#endif

// The cache row of position pos for the block table blocks (NULL: unpaged).
FT_KV_BLOCK_FN int64_t ft_kv_row(const int32_t *blocks, int64_t pos) {
    return blocks ? (int64_t)blocks[pos / FT_KV_BLOCK] * FT_KV_BLOCK + pos % FT_KV_BLOCK : pos;
}

// The row of pos in a walk over increasing positions: *off (the row's offset from the
// position) holds for positions up to *last, so a walk looks the table up once a block. Start
// with *last = -1.
FT_KV_BLOCK_FN int64_t ft_kv_row_walk(const int32_t *blocks, int64_t pos, int64_t *off, int64_t *last) {
    if (pos > *last) {
        *off = ft_kv_row(blocks, pos) - pos;
        *last = blocks ? (pos / FT_KV_BLOCK + 1) * FT_KV_BLOCK - 1 : INT64_MAX;
    }
    return *off + pos;
}

// Blocks that hold n positions.
FT_KV_BLOCK_FN int ft_kv_blocks_for(int64_t n) { return (int)((n + FT_KV_BLOCK - 1) / FT_KV_BLOCK); }

#endif
