// placement.c: the expert placement policy (see placement.h). CPU only for now.
#include "placement.h"

moe_placement moe_placement_cpu(void) {
    moe_placement p = {FT_PLACEMENT_CPU};
    return p;
}

enum ft_placement moe_placement_expert(void *ctx, int layer, int expert) {
    (void)layer;
    (void)expert;
    return ((const moe_placement *)ctx)->default_placement;
}
