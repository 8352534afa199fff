// expert_banks: the host copy of every routed expert, at each layer's native size.
//
// Per MoE layer and per bank (gate, up, down) one array with one entry per expert; an entry is
// that expert's whole [in, out] matrix exactly as the GGUF stores it (expert e of tensor
// blk.L.ffn_<bank>_exps.weight is bytes [e * expert_bytes, (e + 1) * expert_bytes) of the
// tensor; a layer with gate and up fused in blk.L.ffn_gate_up_exps.weight has its gate and up
// entries copied out of each expert's two halves there). Entries are never padded to a wider
// layer: a Q4_K layer's entries stay Q4_K-sized next to a BF16 layer's. All arrays are carved
// from one allocation made through a caller's allocator (the CUDA backend passes page-locked
// memory so copies to the GPU read the entries directly; the default is plain page-aligned
// memory). Each array starts MOE_BANK_ALIGN bytes (a multiple of) after the start of the
// allocation, so it is page-aligned when the allocator's memory is.
//
// Ownership: moe_expert_banks owns its allocation; the GGUF file is only read while loading.
// After loading the banks are read-only and may be read from any thread.
#ifndef FT_MOE_EXPERT_BANKS_H
#define FT_MOE_EXPERT_BANKS_H

#include "geometry.h"

#define MOE_BANK_ALIGN 4096

// Where the banks' memory comes from. alloc returns NULL on failure; free gets back the same
// pointer and size.
typedef struct moe_host_allocator {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p, size_t bytes);
    void *ctx;
    const char *name; // for messages: "page-aligned malloc", "cudaHostAlloc"
} moe_host_allocator;

// Plain page-aligned allocation (aligned_alloc).
moe_host_allocator moe_host_allocator_default(void);

typedef struct moe_expert_bank {
    enum ft_type type;
    uint64_t expert_bytes;  // bytes of one entry
    uint8_t *data;          // (n_expert, expert_bytes)
} moe_expert_bank;

typedef struct moe_host_layer {
    int layer;              // block index
    int n_expert;
    moe_expert_bank bank[MOE_BANK_COUNT];
} moe_host_layer;

typedef struct moe_expert_banks {
    int n_layers;
    moe_host_layer *layers; // (n_layers), the order of moe_geometry.layers
    uint64_t bytes;         // the one allocation, alignment padding included
    void *block;
    moe_host_allocator alloc;
} moe_expert_banks;

typedef struct moe_expert_banks_params {
    moe_host_allocator alloc;
    // RAM the banks may take: 0 reads MemAvailable from /proc/meminfo (tests pass a number).
    uint64_t ram_available;
} moe_expert_banks_params;

moe_expert_banks_params moe_expert_banks_default_params(void);

// Bytes the banks of geometry g will allocate (entries plus alignment padding).
uint64_t moe_expert_banks_bytes(const moe_geometry *g);

// MemAvailable of /proc/meminfo in bytes. Returns 0 and sets *err when it cannot be read.
uint64_t moe_mem_available(ft_err *err);

// Copies every expert of every MoE layer of f (whose geometry g was read from f) into host
// banks. Checks the total against the available RAM first. Returns NULL and sets *err when the
// banks do not fit (the message names both numbers), the allocator fails, or a tensor of the
// file does not match g. Free with moe_expert_banks_free (NULL is a no-op).
moe_expert_banks *moe_expert_banks_load(const gguf_file *f, const moe_geometry *g,
                                        const moe_expert_banks_params *p, ft_err *err);
void moe_expert_banks_free(moe_expert_banks *b);

// The entry of expert e in bank b of the i-th MoE layer (index into layers, not block index).
static inline const uint8_t *moe_expert_banks_entry(const moe_expert_banks *hb, int i, enum moe_bank b,
                                                    int e) {
    const moe_expert_bank *k = &hb->layers[i].bank[b];
    return k->data + (uint64_t)e * k->expert_bytes;
}

#endif
