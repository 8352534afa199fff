// placement: where a model's experts go and are computed, and the policy that decides it.
//
// The backends execute, this module decides. The engine asks moe_placement_auto which
// --moe-backend an `auto` run takes, from facts it gathered (device bytes against the budget,
// whether the device's expert kernels take the types); the CUDA backend asks, per MoE layer
// step, whether the step streams the whole layer through the prefill overlay
// (moe_placement_offload_overlay, moe_placement_host_overlay); moe_ffn asks moe_placement_expert
// where each selected expert is computed. Plain C with no dependencies, so every module below
// and above it can include it. Everything here is a pure function, safe from any thread.
#ifndef FT_MOE_PLACEMENT_H
#define FT_MOE_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>

// Where a buffer lives and an op runs.
enum ft_placement { FT_PLACEMENT_CPU, FT_PLACEMENT_CUDA };

// Where the routed experts of a GPU engine live and run (--moe-backend):
//   fused:   every expert resident in device memory with the rest of the model;
//   offload: experts in page-locked host banks, a GPU expert cache in front of them;
//   cpu:     experts computed on the CPU from host memory, everything else on the GPU;
//   hybrid:  offload's cache, with each decode step's misses split between copies and the CPU
//            (src/moe/hybrid.h);
//   auto:    moe_placement_auto's choice.
// The CPU device ignores it (everything runs on the CPU).
enum ft_moe_backend {
    FT_MOE_BACKEND_AUTO,
    FT_MOE_BACKEND_FUSED,
    FT_MOE_BACKEND_OFFLOAD,
    FT_MOE_BACKEND_CPU,
    FT_MOE_BACKEND_HYBRID,
};

// Parses "auto", "fused", "offload", "cpu" or "hybrid". Returns false if none.
bool ft_moe_backend_from_name(const char *name, enum ft_moe_backend *out);
const char *ft_moe_backend_name(enum ft_moe_backend b);

// What `auto` decides from, measured by the engine on the device it will run on.
typedef struct moe_auto_facts {
    int n_expert;            // routed experts per MoE layer; 0: a model without experts
    bool device_takes_types; // the device's expert kernels take every routed expert's type
    size_t fused_need;       // device bytes of the whole model resident (weights, KV, workspace)
    size_t budget;           // device bytes ft may use
    // the predicted expert time of a decoded token under offload, hybrid and cpu (mode_cost.h:
    // the bandwidth profile and the cache's predicted misses), or NULL where there is none
    const struct moe_mode_costs *costs;
} moe_auto_facts;

// A mode other than offload must be predicted this much faster to be chosen: the prediction
// leaves out what the profile cannot see (the host threads' wake-ups under load, the copies of
// the CPU's misses into the cache behind the step).
#define MOE_AUTO_MARGIN 0.10

// fused for a model without experts or one that fits the budget whole; cpu when the device's
// kernels do not take the experts' types (neither fused nor offload could run them); else,
// with costs, the fastest predicted of offload, hybrid and cpu (the latter two by
// MOE_AUTO_MARGIN over offload), without them offload.
enum ft_moe_backend moe_placement_auto(const moe_auto_facts *f);

// --moe-backend offload: does a step of one MoE layer stream the whole layer into the overlay
// instead of looking its experts up in the cache? It does when the step selects more experts
// (n_sel, over all tokens) than the layer owns slots (n_own), or when it is a prefill step the
// grouped GEMM takes (gemm, from gemm_min_tok tokens): streaming every expert once costs less
// than copying them into slots one miss at a time.
bool moe_placement_offload_overlay(int n_sel, int n_own, int n_tok, bool gemm, int gemm_min_tok);

// --moe-backend cpu: does a step of one MoE layer run its experts on the device from the
// overlay instead of on the CPU? Only a prefill step the grouped GEMM takes (gemm: its kernels
// take the layer's types; from gemm_min_tok tokens): there the device computes faster than the
// PCIe copy of the layer costs, at decode the CPU is faster than the copy.
bool moe_placement_host_overlay(bool gemm, int n_tok, int gemm_min_tok);

// The per-expert placement hook of moe_ffn (ft_moe_params.place): every selected expert of a
// layer is computed at default_placement, the device the op runs on.
typedef struct moe_placement {
    enum ft_placement default_placement;
} moe_placement;

// Everything on the CPU.
moe_placement moe_placement_cpu(void);

// The ft_expert_place_fn the backends call; ctx is a moe_placement.
enum ft_placement moe_placement_expert(void *ctx, int layer, int expert);

#endif
