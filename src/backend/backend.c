// backend.c: the backend constructors behind one entry point (see backend.h).
#include "backend.h"
#include "cpu/cpu.h"
#include "cuda/cuda.h"

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
