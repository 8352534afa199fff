// backend.c: the backend constructors behind one entry point (see backend.h).
#include "backend.h"
#include "cpu/cpu.h"
#include "cuda/cuda.h"

#include <stdio.h>

ft_backend *ft_backend_init(const ft_backend_params *p, ft_err *err) {
    switch (p->device) {
    case FT_PLACEMENT_CPU: return ft_backend_cpu_init(p->n_threads, p->reference);
    case FT_PLACEMENT_CUDA: return ft_backend_cuda_init(p, err);
    }
    ft_err_set(err, "unknown device %d", (int)p->device);
    return NULL;
}

int ft_backend_device_count(enum ft_placement device) {
    return device == FT_PLACEMENT_CUDA ? ft_backend_cuda_device_count() : 1;
}

unsigned ft_backend_features(enum ft_placement device) {
    return device == FT_PLACEMENT_CUDA ? ft_backend_cuda_features() : ft_backend_cpu_features();
}

const char *ft_ops_features_name(unsigned f, char *buf, size_t cap) {
    static const char *const names[] = {"attention sinks", "expert and router biases",
                                        "softmax-weighted routing", "the clamped SwiGLU (swiglu_oai)",
                                        "GELU-gated FFNs", "scaling and soft-capping",
                                        "RMSNorm without a weight", "RoPE frequency factors",
                                        "per-expert down scales", "a router input of its own"};
    _Static_assert(FT_ARRAY_LEN(names) == 10 && FT_OPS_ALL == (1 << 10) - 1, "a name for every FT_OPS_* bit");
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < (int)FT_ARRAY_LEN(names) && n < cap; i++)
        if (f & (1u << i)) n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", names[i]);
    return buf;
}
