// llama_flags: llama.cpp's placement flags, read in ft's terms by every command that takes the
// engine flags (internal to cli/), so a llama-server command line runs as its user means it:
//   -ngl, --n-gpu-layers N|auto|all   0: --device cpu; otherwise a GPU flag (bench runs on the
//                                     GPU) and every layer is on the GPU already (a notice where
//                                     N names fewer; ft fits a smaller GPU by keeping experts in
//                                     host RAM instead)
//   -fa, --flash-attn on|off|auto     ft's attention is always fused (a notice for off)
//   -ctk, -ctv, --cache-type-k|v T    --kv-cache-dtype T (keys and values share one type)
//   -cmoe, --cpu-moe                  --moe-backend cpu
//   -ot, --override-tensor P=CPU      --moe-backend cpu where P names the experts (exps)
//   -ncmoe, --n-cpu-moe N             a notice: ft's expert cache places the experts instead
// Values ft cannot honour are errors that say what to use.
#ifndef FT_CLI_LLAMA_FLAGS_H
#define FT_CLI_LLAMA_FLAGS_H

#include "engine_args.h"

// Takes one of the flags above at argv[*i] into a (its value checked; an error sets *bad).
bool llama_flags_take(engine_args *a, int argc, char **argv, int *i, bool *bad);

// The KV cache type's name that --kv-cache-dtype, -ctk and -ctv give together (NULL: none
// given); false after printing the error where -ctk and -ctv differ or contradict --kv-cache-dtype.
bool llama_flags_kv_type(const engine_args *a, const char **kv_type);

#endif
