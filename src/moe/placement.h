// placement: where each selected expert of a MoE layer is computed.
//
// The backends execute, src/moe/ decides: moe_ffn asks moe_placement_expert for every
// selected (layer, expert). With the CPU backend alone every expert runs on the CPU from its
// host entry; the GPU expert cache (issue 7) will answer with its slots, misses and hybrid
// policy here. Read-only after init: safe to call from any thread.
#ifndef FT_MOE_PLACEMENT_H
#define FT_MOE_PLACEMENT_H

#include "../backend/backend.h"

typedef struct moe_placement {
    enum ft_placement default_placement;
} moe_placement;

// Everything on the CPU.
moe_placement moe_placement_cpu(void);

// The ft_expert_place_fn the backends call; ctx is a moe_placement.
enum ft_placement moe_placement_expert(void *ctx, int layer, int expert);

#endif
