// cpu: the CPU backend, an implementation of ft_backend_ops (backend.h) over host memory.
//
// Matmuls quantize the activations once to the weight type's vec_dot_type and split output
// rows over a thread pool created with the backend. With reference = true every op takes its
// scalar path (vec_dot_ref, one thread): the readable twin the fast path is tested against.
#ifndef FT_BACKEND_CPU_H
#define FT_BACKEND_CPU_H

#include "../backend.h"

// A CPU backend with n_threads threads (>= 1). Free with be->ops->free(be).
ft_backend *ft_backend_cpu_init(int n_threads, bool reference);

// The FT_OPS_* features its ops compute: all of them.
unsigned ft_backend_cpu_features(void);

// Physical cores the calling thread may run on (its affinity mask: taskset, a container's
// cpuset; hyper-threads not counted), at least 1.
int ft_cpu_physical_cores(void);

#endif
