// kv: the key/value cache of one sequence, f16 or q8_0.
//
// Per layer one K and one V tensor of n_ctx rows; row p holds the keys (values) of position
// p for all KV heads, head after head. A recurrent layer has its state instead (ft_kv_conv,
// ft_kv_state). Rows are written by the backend's set_rows op and read
// by its attention op, so the cache is a pair of ft_tensors with a placement, like weights,
// in buffers of that backend. The cache owns them (free it before the backend). Not
// thread-safe: one sequence, one writer.
#ifndef FT_KV_H
#define FT_KV_H

#include "../backend/backend.h"

typedef struct ft_kv_cache ft_kv_cache;

typedef struct ft_kv_params {
    int n_layer;
    int n_ctx;              // positions
    enum ft_type type;      // FT_TYPE_F16 or FT_TYPE_Q8_0
    const int64_t *width;   // (n_layer) floats per K/V row: n_head_kv * head_dim; 0: no KV (a recurrent layer)
    int head_dim;           // largest head size (K and V)
    // Recurrent layers (gated DeltaNet) keep a state instead, f32, whatever the position:
    // (n_layer) each, or NULL for none; 0 for a layer without
    const int64_t *conv_floats;  // the causal conv's last inputs: (d_conv - 1) x channels
    const int64_t *state_floats; // the delta rule's matrices: n_v_heads x head_dim x head_dim
} ft_kv_params;

// Allocates the cache, zeroed, in be's buffers. Returns NULL and sets *err on an unsupported
// type, a row width the type cannot hold (q8_0 needs multiples of 32) or too little memory.
ft_kv_cache *ft_kv_init(const ft_kv_params *p, ft_backend *be, ft_err *err);
void ft_kv_free(ft_kv_cache *kv); // NULL is a no-op

ft_tensor *ft_kv_k(ft_kv_cache *kv, int layer);
ft_tensor *ft_kv_v(ft_kv_cache *kv, int layer);
// A recurrent layer's state (f32, one row; absent, data NULL, for other layers). A sequence at
// position 0 starts from zeros, whatever they hold: the ops never read them then.
ft_tensor *ft_kv_conv(ft_kv_cache *kv, int layer);
ft_tensor *ft_kv_state(ft_kv_cache *kv, int layer);
int ft_kv_n_ctx(const ft_kv_cache *kv);
size_t ft_kv_bytes(const ft_kv_cache *kv);

// A quantized cache loses less when Q, K and V are first rotated by a Walsh-Hadamard
// matrix (the dot products are unchanged; the attention output is rotated back). llama.cpp
// does this for quantized caches whose head size is a multiple of 64, so we do the same, with
// the same chunk sizes. Returns the chunk size for K (and Q) and for V, or 0: no rotation.
int ft_kv_rot_k(const ft_kv_cache *kv);
int ft_kv_rot_v(const ft_kv_cache *kv);

// Parses "f16" or "q8_0" (the --kv-cache-dtype values). Returns false if neither.
bool ft_kv_type_from_name(const char *name, enum ft_type *out);

#endif
