// mode_cost: what the routed experts of one decoded token cost under --moe-backend offload,
// hybrid and cpu, predicted from the bandwidth profile (bw_profile.h) and the share of each
// layer's selections that miss the GPU expert cache; `auto` compares them (placement.h).
//
// Per MoE layer with k selections, m of them misses (m ~ Binomial(k, the layer's miss rate):
// a step's selections taken as independent), c one expert's copy, p its CPU time, g its GPU
// time, f the CPU's fixed cost of a layer and t the meeting of the GPU with the host:
//   offload: k g + m c (the misses copied one after another before the experts run);
//   hybrid:  k g, plus n = moe_hybrid_cpu_share(m) misses on the CPU and the rest copied:
//            max((m - n) c, t + f + n p) where n > 0, else m c + t (the meeting's launches run
//            in every layer, whether the CPU computes or not);
//   cpu:     t + f + k p (every selection on the CPU, none on the GPU).
// What all modes share (the dense layers, attention) is left out: only differences matter.
//
// Plain data and a pure function; thread-safe.
#ifndef FT_MOE_MODE_COST_H
#define FT_MOE_MODE_COST_H

#include "bw_profile.h"
#include "geometry.h"

typedef struct moe_mode_costs {
    double offload_us, hybrid_us, cpu_us; // one decoded token's expert layers
    double misses;                        // expected misses a token, all layers
    // one expert of the layer with the largest experts: its copy, CPU and GPU time (us)
    double copy_us, cpu_expert_us, gpu_expert_us;
} moe_mode_costs;

// The costs of g's layers with top-k selections, miss_rate[i] of layer i's selections missing
// the cache. Returns false where the profile lacks a figure they need (the copy rate, the
// meeting, a type's CPU rate); a missing GPU rate counts as 0 (it adds the same to offload and
// hybrid).
bool moe_mode_costs_predict(const moe_bw_profile *prof, const moe_geometry *g, const double *miss_rate, int k,
                            moe_mode_costs *out);

#endif
