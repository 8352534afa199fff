// llama_flags.c: llama.cpp's placement flags in ft's terms (llama_flags.h).
#include "llama_flags.h"
#include "args.h"

#include <stdlib.h>
#include <string.h>

static bool fail(const engine_args *a, bool *bad, const char *fmt, const char *flag, const char *value) {
    fprintf(stderr, "ft %s: ", a->cmd);
    fprintf(stderr, fmt, flag, value);
    fputc('\n', stderr);
    *bad = true;
    return true;
}

bool llama_flags_take(engine_args *a, int argc, char **argv, int *i, bool *bad) {
    const char *flag = argv[*i], *v;
    if (args_str(argc, argv, i, "-ngl|--n-gpu-layers|--gpu-layers", &v, bad)) {
        if (*bad) return true;
        long n = -1; // auto, all
        if (strcmp(v, "auto") && strcmp(v, "all")) {
            char *end;
            n = strtol(v, &end, 10);
            if (end == v || *end || n < -2)
                return fail(a, bad, "%s %s: expected a number of layers, auto or all", flag, v);
        }
        if (n == 0) {
            a->device = "cpu";
            return true;
        }
        engine_args_note_gpu_flag(a, flag); // (bench runs on the GPU, as llama-bench -ngl does)
        if (n > 0 && n < 99)
            fprintf(stderr, "ft %s: %s %ld: ft keeps every layer's attention and dense weights on the GPU; where "
                            "the model does not fit, the experts stay in host RAM with the hot ones cached "
                            "on the GPU (--moe-backend, --gpu-memory-limit)\n", a->cmd, flag, n);
        return true;
    }
    if (args_str(argc, argv, i, "-fa|--flash-attn", &v, bad)) {
        if (*bad) return true;
        if (!strcmp(v, "off") || !strcmp(v, "0") || !strcmp(v, "false"))
            fprintf(stderr, "ft %s: %s off: ft's attention kernels are always fused (flash); nothing to turn off\n",
                    a->cmd, flag);
        else if (strcmp(v, "on") && strcmp(v, "auto") && strcmp(v, "1") && strcmp(v, "true"))
            return fail(a, bad, "%s %s: expected on, off or auto", flag, v);
        return true;
    }
    if (args_str(argc, argv, i, "-ctk|--cache-type-k", &a->cache_type_k, bad) ||
        args_str(argc, argv, i, "-ctv|--cache-type-v", &a->cache_type_v, bad))
        return true;
    if (args_flag(argv, *i, "-cmoe|--cpu-moe")) {
        a->moe_backend = "cpu";
        engine_args_note_gpu_flag(a, flag);
        return true;
    }
    if (args_str(argc, argv, i, "-ot|--override-tensor", &v, bad)) {
        if (*bad) return true;
        size_t n = strlen(v);
        if (strstr(v, "exps") && n > 4 && !strcmp(v + n - 4, "=CPU")) {
            a->moe_backend = "cpu";
            engine_args_note_gpu_flag(a, flag);
            return true;
        }
        return fail(a, bad,
                    "%s %s: ft places weights itself; it reads only a pattern of the experts (exps) =CPU, as "
                    "--moe-backend cpu",
                    flag, v);
    }
    int64_t n;
    if (args_int(argc, argv, i, "-ncmoe|--n-cpu-moe", 0, 1 << 20, &n, bad)) {
        if (!*bad)
            fprintf(stderr, "ft %s: %s %lld: ft does not pin layers' experts to the CPU; where the model does not "
                            "fit, --moe-backend auto keeps every expert in host RAM and the hot ones in a GPU "
                            "cache (offload), or --moe-backend cpu computes them all on the CPU\n",
                    a->cmd, flag, (long long)n);
        return true;
    }
    return false;
}

bool llama_flags_kv_type(const engine_args *a, const char **kv_type) {
    *kv_type = a->kv_type;
    if (!a->cache_type_k && !a->cache_type_v) return true;
    // llama.cpp's default for the one not given is f16
    const char *k = a->cache_type_k ? a->cache_type_k : "f16", *v = a->cache_type_v ? a->cache_type_v : "f16";
    if (strcmp(k, v)) {
        fprintf(stderr, "ft %s: -ctk %s with -ctv %s: ft stores keys and values in one type; give both the same "
                        "(or --kv-cache-dtype)\n", a->cmd, k, v);
        return false;
    }
    if (a->kv_type && strcmp(a->kv_type, k)) {
        fprintf(stderr, "ft %s: --kv-cache-dtype %s contradicts -ctk/-ctv %s\n", a->cmd, a->kv_type, k);
        return false;
    }
    *kv_type = k;
    return true;
}
