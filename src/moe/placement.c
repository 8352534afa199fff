// placement.c: the placement policy (see placement.h).
#include "placement.h"
#include "mode_cost.h"

#include <string.h>

static const char *const moe_backend_names[] = {"auto", "fused", "offload", "cpu", "hybrid"};

bool ft_moe_backend_from_name(const char *name, enum ft_moe_backend *out) {
    for (size_t i = 0; i < sizeof(moe_backend_names) / sizeof(moe_backend_names[0]); i++)
        if (!strcmp(name, moe_backend_names[i])) {
            *out = (enum ft_moe_backend)i;
            return true;
        }
    return false;
}

const char *ft_moe_backend_name(enum ft_moe_backend b) {
    return (size_t)b < sizeof(moe_backend_names) / sizeof(moe_backend_names[0]) ? moe_backend_names[b] : "?";
}

enum ft_moe_backend moe_placement_auto(const moe_auto_facts *f) {
    if (f->n_expert == 0) return FT_MOE_BACKEND_FUSED;
    if (!f->device_takes_types) return FT_MOE_BACKEND_CPU;
    if (f->fused_need <= f->budget) return FT_MOE_BACKEND_FUSED;
    enum ft_moe_backend best = FT_MOE_BACKEND_OFFLOAD;
    if (!f->costs) return best;
    double best_us = f->costs->offload_us;
    const struct {
        enum ft_moe_backend mode;
        double us;
    } other[] = {{FT_MOE_BACKEND_HYBRID, f->costs->hybrid_us}, {FT_MOE_BACKEND_CPU, f->costs->cpu_us}};
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        if (other[i].us * (1 + MOE_AUTO_MARGIN) < best_us) best = other[i].mode, best_us = other[i].us;
    return best;
}

bool moe_placement_offload_overlay(int n_sel, int n_own, int n_tok, bool gemm, int gemm_min_tok) {
    return n_sel > n_own || (gemm && n_tok >= gemm_min_tok);
}

bool moe_placement_host_overlay(bool gemm, int n_tok, int gemm_min_tok) { return gemm && n_tok >= gemm_min_tok; }

moe_placement moe_placement_cpu(void) {
    moe_placement p = {FT_PLACEMENT_CPU};
    return p;
}

enum ft_placement moe_placement_expert(void *ctx, int layer, int expert) {
    (void)layer;
    (void)expert;
    return ((const moe_placement *)ctx)->default_placement;
}
