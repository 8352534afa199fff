// delta_rule_chunked.cuh: the chunked delta rule (delta_rule_chunked.cu), which delta_net.cu
// runs in place of its token loop over a prefill batch (internal to src/backend/cuda/).
#ifndef FT_DELTA_RULE_CHUNKED_CUH
#define FT_DELTA_RULE_CHUNKED_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda_ops.h"

enum { DN_CHUNK = 64 }; // tokens per chunk

// Workspace floats the chunked rule needs for n_tok tokens of n_v_heads heads.
size_t dn_chunk_ws_floats(int n_tok, int n_v_heads, int head_dim);
// Whether it takes a batch: a chunk's tokens at least, head size 64 or 128, and a workspace of
// ws_floats large enough.
bool dn_chunked_fits(int n_tok, int n_v_heads, int head_dim, size_t ws_floats);
// The delta rule on p.qkv, the conv's output with q and k normalised (C channels a row), into
// p.out and p.state; p.chunk_ws is the workspace. Aborts unless dn_chunked_fits.
void dn_chunked_rule(const ft_cuda_delta_params &p, int C, cudaStream_t st);
// Lets the kernels take their shared memory (once, before any capture).
void dn_chunked_init(void);

#endif
