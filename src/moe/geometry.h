// geometry: the expert geometry of a MoE model, read from its GGUF tensor infos.
//
// Expert tensors are 3-D in GGUF order [in, out, n_expert] (blk.L.ffn_{gate,up,down}_exps). One
// expert of a bank is one [in, out] matrix at the bank's native type, so its bytes are out x
// (in / block_elems) x block_bytes. A layer may hold gate and up fused in one tensor,
// blk.L.ffn_gate_up_exps [in, 2 x out, n_expert] (llama.cpp's converter, --fuse-gate-up-exps):
// each expert's first out rows are its gate, the next out its up; it reads as a gate and an up
// bank of half its bytes per expert each, of its type. Layers (and banks) may differ in type;
// layers with an identical (gate, up, down) byte tuple form one geometry group, the unit the
// GPU expert cache carves its exact-geometry pools by. Pure functions of the file: thread-safe.
#ifndef FT_MOE_GEOMETRY_H
#define FT_MOE_GEOMETRY_H

#include "../gguf/gguf.h"

enum moe_bank { MOE_BANK_GATE, MOE_BANK_UP, MOE_BANK_DOWN, MOE_BANK_COUNT };

typedef struct moe_layer_geometry {
    int layer;                            // block index L
    int n_expert;
    enum ft_type type[MOE_BANK_COUNT];    // native type of each bank
    uint64_t bytes[MOE_BANK_COUNT];       // bytes of one expert in each bank
    bool gate_up_fused;                   // gate and up are the halves of blk.L.ffn_gate_up_exps
} moe_layer_geometry;

typedef struct moe_geometry_group {
    int n_layers;
    int *layers;                          // (n_layers) block indices, ascending
    uint64_t bytes[MOE_BANK_COUNT];       // the shared per-expert bytes
} moe_geometry_group;

typedef struct moe_geometry {
    int n_layers;                         // MoE layers only
    moe_layer_geometry *layers;           // (n_layers), ascending block index
    int n_groups;
    moe_geometry_group *groups;           // in order of first layer
    uint64_t bytes_native;                // all experts of all layers at their own size
    uint64_t bytes_padded;                // as if every expert were the widest of each bank
} moe_geometry;

// Reads the geometry of every layer that has expert tensors. A model without experts gives
// n_layers == 0. Returns false and sets *err when expert tensors are inconsistent (a bank
// missing, expert counts that differ between banks, not 3-D, gate and up both fused and split,
// a fused tensor of odd rows). Free with moe_geometry_free.
bool moe_geometry_read(const gguf_file *f, moe_geometry *out, ft_err *err);
void moe_geometry_free(moe_geometry *g);

// Keeps the layers before block end_layer, the groups rebuilt: a model's file may hold blocks
// it does not run (the multi-token-prediction blocks after its trunk), whose experts no bank,
// cache or plan should hold.
void moe_geometry_keep_below(moe_geometry *g, int end_layer);

// Builds a geometry from a list of layers (copied; any order, distinct block indices), as
// moe_geometry_read does from a file: for plans of models described by their shape alone.
void moe_geometry_from_layers(const moe_layer_geometry *layers, int n_layers, moe_geometry *out);

#endif
