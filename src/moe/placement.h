// placement: where each selected expert of a MoE layer is computed.
//
// The backends execute, src/moe/ decides: the CPU backend's moe_ffn asks moe_placement_expert
// for every selected (layer, expert), and today it always answers the CPU. The CUDA modes'
// policies (offload's cache, cpu mode) are still decided in src/backend/cuda/; they and the
// hybrid split belong here. Read-only after init: safe to call from any thread.
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
