// kv: the key/value cache, paged: a store of blocks and the sequences that read through it.
//
// The store holds, per attention layer, one K and one V tensor of n_blocks x FT_KV_BLOCK rows
// (f16 or q8_0); a row holds the keys (values) of one position for all KV heads, head after
// head. A sequence (ft_kv_cache) owns no rows: it lists the store's blocks that hold its
// positions, in order (its block table, kv_block.h), and the ops read and write through that
// table. Which blocks a sequence gets, and which sequences share one, is kv_pool.h's business.
// A recurrent layer (gated DeltaNet) keeps a state instead, per sequence and whatever the
// position (ft_kv_conv, ft_kv_state).
//
// Everything lives in buffers of one backend, like weights; the store and the sequences are
// freed before it. Not thread-safe: one writer.
#ifndef FT_KV_H
#define FT_KV_H

#include "../backend/backend.h"

typedef struct ft_kv_store ft_kv_store;
typedef struct ft_kv_cache ft_kv_cache;

typedef struct ft_kv_params {
    int n_layer;
    int n_ctx;              // positions of one sequence at most
    enum ft_type type;      // FT_TYPE_F16 or FT_TYPE_Q8_0
    const int64_t *width;   // (n_layer) floats per K/V row: n_head_kv * head_dim; 0: no KV (a recurrent layer)
    int head_dim;           // largest head size (K and V)
    // Recurrent layers (gated DeltaNet) keep a state instead, f32, whatever the position:
    // (n_layer) each, or NULL for none; 0 for a layer without
    const int64_t *conv_floats;  // the causal conv's last inputs: (d_conv - 1) x channels
    const int64_t *state_floats; // the delta rule's matrices: n_v_heads x head_dim x head_dim
    int64_t n_blocks;       // blocks of FT_KV_BLOCK rows in the store; 0: one sequence's n_ctx
    const int64_t *head_dims; // (n_layer) each layer's head size where they differ (gemma4), or
                              // NULL: head_dim for every layer
} ft_kv_params;

// Allocates the store, zeroed, in be's buffers. Returns NULL and sets *err on an unsupported
// type, a row width the type cannot hold (q8_0 needs multiples of 32), head sizes a quantized
// cache's rotation cannot take (see ft_kv_rot_k) or too little memory.
ft_kv_store *ft_kv_store_init(const ft_kv_params *p, ft_backend *be, ft_err *err);
void ft_kv_store_free(ft_kv_store *st); // NULL is a no-op
int64_t ft_kv_store_n_blocks(const ft_kv_store *st);
size_t ft_kv_store_bytes(const ft_kv_store *st);
// Bytes of the K and V rows of one block over all layers.
size_t ft_kv_block_bytes(const ft_kv_params *p);

// A sequence on the store st (same p), with an empty block table and its recurrent state in
// be's buffers. Returns NULL and sets *err when memory runs out.
ft_kv_cache *ft_kv_init(ft_kv_store *st, const ft_kv_params *p, ft_backend *be, ft_err *err);
void ft_kv_free(ft_kv_cache *kv); // NULL is a no-op
// Bytes the sequence itself holds (its table and recurrent state), and their sum over a params.
size_t ft_kv_seq_bytes(const ft_kv_params *p);

// The block table: n blocks, which hold positions 0 .. n * FT_KV_BLOCK - 1.
int ft_kv_n_blocks(const ft_kv_cache *kv);
const int32_t *ft_kv_block_ids(const ft_kv_cache *kv); // host memory
// Appends a block of the store; aborts past ft_kv_blocks_for(n_ctx) blocks.
void ft_kv_push_block(ft_kv_cache *kv, int32_t block);
void ft_kv_clear(ft_kv_cache *kv); // empties the table
// Copies the table to the backend's memory where it changed since the last sync, in order with
// the ops (buffer_write_ordered: the device is not waited for). Call before the ops that read
// it, outside a backend's step bracket (a recorded step would not repeat the copy).
void ft_kv_sync(ft_kv_cache *kv);
// The table as the ops take it (ft_attn_params.blocks, set_rows): in the backend's memory.
const int32_t *ft_kv_blocks(const ft_kv_cache *kv);
// Copies the first n rows (0 <= n <= FT_KV_BLOCK) of the store's block src into the
// sequence's block i (its positions i * FT_KV_BLOCK ..), another block, in every attention
// layer's K and V, in order with the ops (the backend's copy_rows). Not inside a step bracket.
void ft_kv_copy_block_rows(ft_kv_cache *kv, int i, int32_t src, int n);

ft_tensor *ft_kv_k(ft_kv_cache *kv, int layer);
ft_tensor *ft_kv_v(ft_kv_cache *kv, int layer);
// A recurrent layer's state (f32, one row; absent, data NULL, for other layers). A sequence at
// position 0 starts from zeros, whatever they hold: the ops never read them then.
ft_tensor *ft_kv_conv(ft_kv_cache *kv, int layer);
ft_tensor *ft_kv_state(ft_kv_cache *kv, int layer);
int ft_kv_n_ctx(const ft_kv_cache *kv);

// A quantized cache loses less when Q, K and V are first rotated by a Walsh-Hadamard
// matrix (the dot products are unchanged; the attention output is rotated back). llama.cpp
// does this for quantized caches when the first layer's head size is a multiple of 64, so we
// do the same, with the same chunk sizes: for K (and Q) the largest power of two from 64 that
// divides the layer's head size, for V 64. (With head sizes of which some are not multiples of
// 64 llama.cpp's chunks would span heads; such a store is refused.) Returns layer's chunk size
// for K and for V, or 0: no rotation.
int ft_kv_rot_k(const ft_kv_cache *kv, int layer);
int ft_kv_rot_v(const ft_kv_cache *kv, int layer);

// Parses "f16" or "q8_0" (the --kv-cache-dtype values). Returns false if neither.
bool ft_kv_type_from_name(const char *name, enum ft_type *out);

#endif
