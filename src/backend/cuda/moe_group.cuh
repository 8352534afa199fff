// moe_group.cuh: the (token, slot) pairs of an MoE step sorted by expert on the device, with a
// table of tiles of at most bn pairs of one expert each (moe_group.cu). The grouped expert
// kernels (moe_gemm.cu's GEMMs, moe_rows.cu's decode rows) take one tile per CTA row, so each
// expert's weights are read once per tile of its tokens. Internal to src/backend/cuda/.
#ifndef FT_CUDA_MOE_GROUP_CUH
#define FT_CUDA_MOE_GROUP_CUH

#include "cuda_common.cuh"

// A tile table entry: expert, first position, count, and the matrix its weights are (the
// expert, or its cache slot).
enum { MOE_GROUP_MAX_EXPERT = 2048, MOE_TILE_INTS = 4 };

// An upper bound of the tiles of n_pairs pairs over n_expert experts in tiles of bn: the grid
// rows a grouped kernel launches (the host never learns the counts).
int ft_moe_group_max_tiles(int n_pairs, int n_expert, int bn);

// Workspace bytes of ft_moe_group: perm, then the tile table.
size_t ft_moe_group_work_bytes(int n_pairs, int n_expert, int bn);

// Enqueues the grouping of sel (n_pairs experts, each in [0, n_expert); n_expert <=
// MOE_GROUP_MAX_EXPERT) on st: perm[position] = pair in expert order, and n_tiles =
// ft_moe_group_max_tiles(...) entries of (expert, first position, count, matrix), expert -1
// past the last; the matrix is ids[pair] of the tile's pairs (the cache slot), or the expert
// where ids is NULL. work holds ft_moe_group_work_bytes(...); *perm and *tiles are set to its
// two parts.
void ft_moe_group(const int32_t *sel, const int32_t *ids, int n_pairs, int n_expert, int bn, void *work,
                  int32_t **perm, int32_t **tiles, cudaStream_t st);

#endif
