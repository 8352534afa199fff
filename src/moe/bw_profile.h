// bw_profile: what moving and computing an expert costs on this machine, measured once by `ft
// bench bw` and read by the engine: `--moe-backend hybrid` splits its misses by it and `auto`
// chooses a mode by it. One text file per (GPU, CPU, thread count) under the cache folder, so
// another GPU, CPU or -t measures again.
//
// The costs of one expert (its gate, up and down matrices) for one decoded token:
//   copied host to device:  copy_fixed_us + bytes / copy_gbps (pinned memory, one copy an expert)
//   computed on the CPU:    sum over its banks of bytes / cpu_gbps of the bank's type, plus
//                           a fixed cost once per layer (the pool's wake-up, the routing rows,
//                           the input's quantization): the largest of its banks' types' own
//                           where measured, else the profile's cpu_fixed_us
//   computed on the GPU:    sum over its banks of bytes / gpu_gbps of the bank's type (a whole
//                           step's rate, its launches shared by its top-k experts)
//   the CPU road's meeting: meet_us once per layer (GPU to host and back, host_meeting.h)
//
// Plain data and pure functions, except load and save (files); thread-safe.
#ifndef FT_MOE_BW_PROFILE_H
#define FT_MOE_BW_PROFILE_H

#include "hybrid.h"
#include "../quant/quant.h"
#include "../util/util.h"

#include <stdbool.h>
#include <stddef.h>

enum { MOE_BW_MAX_TYPES = 24, MOE_BW_NAME = 128 };

typedef struct moe_bw_rate {
    enum ft_type type;
    double cpu_gbps; // expert bytes a second, one token on the CPU at the profile's threads; 0: not measured
    double gpu_gbps; // the GPU's decode expert kernels: a step of top-k experts, their bytes over its
                     // time (one token, launches included); 0: not measured
    double cpu_fixed_us; // the CPU's fixed cost of a layer of this type (it quantizes the input to
                         // the type's partner blocks); 0: not measured (the profile's applies)
} moe_bw_rate;

typedef struct moe_bw_profile {
    // the key: what the figures belong to
    char gpu[MOE_BW_NAME]; // the device's name, or "none"
    char cpu[MOE_BW_NAME]; // the CPU's model name
    int threads;           // the CPU's worker threads (-t)
    // the figures (0: not measured)
    double copy_fixed_us, copy_gbps;
    double meet_us;
    double cpu_fixed_us; // the largest of the rates' (files of version 1: the only one)
    int n_rates;
    moe_bw_rate rates[MOE_BW_MAX_TYPES];
} moe_bw_profile;

// The rate entry of type t, or NULL.
const moe_bw_rate *moe_bw_rate_of(const moe_bw_profile *p, enum ft_type t);
// The entry of type t, added (zeroed) when missing; NULL when the table is full.
moe_bw_rate *moe_bw_rate_add(moe_bw_profile *p, enum ft_type t);

// Do a and b belong to the same machine, GPU and thread count?
bool moe_bw_same_key(const moe_bw_profile *a, const moe_bw_profile *b);

// One expert of three banks (types t, bytes b): its copy and its CPU time in us, or a negative
// value where the profile lacks a figure it needs; its GPU time, where a bank's type has no GPU
// rate counting 0 (what offload and hybrid share: mode_cost.h).
double moe_bw_copy_us(const moe_bw_profile *p, const uint64_t b[3]);
double moe_bw_cpu_us(const moe_bw_profile *p, const enum ft_type t[3], const uint64_t b[3]);
double moe_bw_gpu_us(const moe_bw_profile *p, const enum ft_type t[3], const uint64_t b[3]);
// The CPU's fixed cost (us) of a layer whose banks have types t (bytes b: a bank of 0 bytes is
// absent): the largest of their rates' own, the profile's cpu_fixed_us where one lacks it.
double moe_bw_cpu_fixed_us(const moe_bw_profile *p, const enum ft_type t[3], const uint64_t b[3]);

// The hybrid split's costs (hybrid.h) of a layer whose experts are (t, b); false where the
// profile lacks the copy, the meeting or a type's CPU rate.
bool moe_bw_hybrid_costs(const moe_bw_profile *p, const enum ft_type t[3], const uint64_t b[3],
                         moe_hybrid_costs *out);

// The text form (a line per field, `type NAME cpu_gbps X gpu_gbps Y cpu_fixed_us Z` per rate;
// version 1 files, whose rate lines end at Y, are read too) and its parser, which rejects what
// it does not know, any number that is not finite and >= 0, and any line longer than the format
// writes. format returns a malloc'd string.
char *moe_bw_profile_format(const moe_bw_profile *p);
bool moe_bw_profile_parse(const char *text, size_t len, moe_bw_profile *out, ft_err *err);

// The file of key's machine in dir: DIR/bw-HASH.txt, HASH a function of the key's fields.
void moe_bw_profile_path(const moe_bw_profile *key, const char *dir, char *out, size_t cap);

// Reads path into out. Returns false (err set) when it cannot be read or parsed.
bool moe_bw_profile_load(const char *path, moe_bw_profile *out, ft_err *err);
// Writes p to path (through a temporary file and a rename), creating its folders.
bool moe_bw_profile_save(const moe_bw_profile *p, const char *path, ft_err *err);

#endif
