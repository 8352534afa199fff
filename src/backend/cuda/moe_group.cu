// moe_group.cu: sorts an MoE step's (token, slot) pairs by expert on the device and cuts each
// expert's pairs into tiles (moe_group.cuh).
//
// One CTA: a counting sort of the n_pairs pairs by expert: counts per expert (shared-memory
// atomics), exclusive sums (a block scan), then each pair's position in the sorted order (perm[position] =
// pair). Order inside an expert is whatever the atomics give; no result depends on it, because
// every output element is computed from its own row and token alone, in a fixed order over the
// slots. The same kernel writes the tile table: expert e's count is cut into tiles of bn
// positions, entries (e, first position, count, matrix); the entries past the last tile get
// expert -1. The matrix is there so that a grouped kernel's first dependent load (the entry)
// gives it the weights' address: its weight loads need not wait for perm and ids.
#include "moe_group.cuh"

enum { GROUP_THREADS = 1024 };
static_assert(GROUP_THREADS == FT_WARP * FT_WARP, "the block scan: warp 0 scans one total per warp");

// sum over experts of ceil(count / bn) <= n_pairs / bn + (experts with a count), each at most
// min(n_expert, n_pairs)
int ft_moe_group_max_tiles(int n_pairs, int n_expert, int bn) {
    return (n_pairs + bn - 1) / bn + (n_expert < n_pairs ? n_expert : n_pairs);
}

size_t ft_moe_group_work_bytes(int n_pairs, int n_expert, int bn) {
    return ((size_t)n_pairs + MOE_TILE_INTS * (size_t)ft_moe_group_max_tiles(n_pairs, n_expert, bn)) * sizeof(int32_t);
}

__global__ void __launch_bounds__(GROUP_THREADS)
moe_group_kernel(const int32_t *__restrict__ sel, const int32_t *__restrict__ ids, int n_pairs, int n_expert, int bn,
                 int n_tiles, int32_t *__restrict__ perm, int32_t *__restrict__ tiles) {
    extern __shared__ int sh[];
    int *cnt = sh;                  // (n_expert) pairs per expert
    int *next = sh + n_expert;      // (n_expert) next free position of each expert
    int *tile0 = sh + 2 * n_expert; // (n_expert) first tile of each expert
    __shared__ int total_tiles, warp_pos[GROUP_THREADS / FT_WARP], warp_tl[GROUP_THREADS / FT_WARP];
    const int tid = threadIdx.x;

    for (int e = tid; e < n_expert; e += GROUP_THREADS) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < n_pairs; p += GROUP_THREADS) {
        const int e = sel[p];
        if (e < 0 || e >= n_expert) __trap(); // the router wrote an impossible expert
        atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    // exclusive sums of the counts and of the tiles, 1024 experts at a time: inclusive sums
    // within each warp (shuffles), then of the warps' totals by warp 0
    const int lane = tid % FT_WARP, warp = tid / FT_WARP;
    int carry_pos = 0, carry_tile = 0;
    for (int e0 = 0; e0 < n_expert; e0 += GROUP_THREADS) {
        const int e = e0 + tid;
        const int c = e < n_expert ? cnt[e] : 0, nt = (c + bn - 1) / bn;
        int pos = c, tl = nt;
#pragma unroll
        for (int o = 1; o < FT_WARP; o <<= 1) {
            const int up_pos = __shfl_up_sync(0xffffffffu, pos, o), up_tl = __shfl_up_sync(0xffffffffu, tl, o);
            if (lane >= o) pos += up_pos, tl += up_tl;
        }
        if (lane == FT_WARP - 1) warp_pos[warp] = pos, warp_tl[warp] = tl;
        __syncthreads();
        if (warp == 0) {
            int wp = warp_pos[lane], wt = warp_tl[lane];
#pragma unroll
            for (int o = 1; o < FT_WARP; o <<= 1) {
                const int up_pos = __shfl_up_sync(0xffffffffu, wp, o), up_tl = __shfl_up_sync(0xffffffffu, wt, o);
                if (lane >= o) wp += up_pos, wt += up_tl;
            }
            warp_pos[lane] = wp; // inclusive over the warps
            warp_tl[lane] = wt;
        }
        __syncthreads();
        const int before_pos = carry_pos + (warp ? warp_pos[warp - 1] : 0) + pos - c;
        const int before_tl = carry_tile + (warp ? warp_tl[warp - 1] : 0) + tl - nt;
        if (e < n_expert) next[e] = before_pos, tile0[e] = before_tl;
        carry_pos += warp_pos[FT_WARP - 1];
        carry_tile += warp_tl[FT_WARP - 1];
        __syncthreads(); // warp_pos is rewritten by the next round
    }
    if (tid == 0) total_tiles = carry_tile;
    __syncthreads();
    for (int e = tid; e < n_expert; e += GROUP_THREADS) {
        const int nt = (cnt[e] + bn - 1) / bn;
        for (int i = 0; i < nt; i++) {
            int32_t *tl = tiles + MOE_TILE_INTS * (tile0[e] + i);
            tl[0] = e;
            tl[1] = next[e] + i * bn;
            tl[2] = min(bn, cnt[e] - i * bn);
            tl[3] = e; // the matrix, unless ids says otherwise (below)
        }
    }
    for (int i = total_tiles + tid; i < n_tiles; i += GROUP_THREADS) {
        int32_t *tl = tiles + MOE_TILE_INTS * i;
        tl[0] = -1;
        tl[1] = tl[2] = tl[3] = 0;
    }
    __syncthreads(); // next[] is read above before the scatter advances it
    for (int p = tid; p < n_pairs; p += GROUP_THREADS) perm[atomicAdd(&next[sel[p]], 1)] = p;
    if (!ids) return;
    __syncthreads(); // perm complete (this block's global writes are visible to it after the barrier)
    for (int i = tid; i < total_tiles; i += GROUP_THREADS) {
        int32_t *tl = tiles + MOE_TILE_INTS * i;
        tl[3] = ids[perm[tl[1]]];
        if (tl[3] < 0) __trap(); // a pair the CPU computes (hybrid) has no place in a grouped kernel
    }
}

void ft_moe_group(const int32_t *sel, const int32_t *ids, int n_pairs, int n_expert, int bn, void *work,
                  int32_t **perm, int32_t **tiles, cudaStream_t st) {
    FT_CUDA_ASSERT(n_pairs >= 1 && bn >= 1 && n_expert >= 1 && n_expert <= MOE_GROUP_MAX_EXPERT);
    *perm = (int32_t *)work;
    *tiles = *perm + n_pairs;
    const int n_tiles = ft_moe_group_max_tiles(n_pairs, n_expert, bn);
    const size_t shm = 3 * (size_t)n_expert * sizeof(int);
    moe_group_kernel<<<1, GROUP_THREADS, shm, st>>>(sel, ids, n_pairs, n_expert, bn, n_tiles, *perm, *tiles);
    CUDA_CHECK_LAUNCH();
}
