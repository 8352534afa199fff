// host_meeting.cuh: the device side of a host meeting's publication (host_meeting.h), shared by
// the export kernel and the decode router that exports for --moe-backend cpu.
#ifndef FT_CUDA_HOST_MEETING_CUH
#define FT_CUDA_HOST_MEETING_CUH

#include <stdint.h>

__device__ __forceinline__ uint32_t ft_meeting_load_acquire_sys(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void ft_meeting_store_release_sys(uint32_t *p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Advances the meeting count *seq (device memory) and publishes it to the host's flag. Call from
// one thread, once every thread that wrote the exported data has fenced it to the system
// (__threadfence_system) and met this one (__syncthreads, or __syncwarp within a warp).
__device__ __forceinline__ void ft_meeting_publish(uint32_t *flag, uint32_t *seq) {
    const uint32_t next = *seq + 1;
    *seq = next;
    __threadfence_system();
    ft_meeting_store_release_sys(flag, next);
}

#endif
