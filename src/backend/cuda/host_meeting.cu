// host_meeting.cu: export and import kernels of a host meeting, and the stream wait (see
// host_meeting.h).
#include "cuda_common.cuh"
#include "host_meeting.cuh"
#include "host_meeting.h"

#include <cuda.h> // the driver API's types only: cuStreamWaitValue32 comes through the runtime's
                  // entry-point query, so nothing links libcuda

#define MEETING_THREADS 256
#define MEETING_MAX_CTAS 64

// CTAs for n floats: one float4 per thread per pass, at most MEETING_MAX_CTAS (a decode row of
// 2048 floats takes 2; large prefill steps loop).
static int meeting_ctas(size_t n) {
    size_t per = (size_t)MEETING_THREADS * 4;
    size_t c = (n + per - 1) / per;
    return c < 1 ? 1 : c > MEETING_MAX_CTAS ? MEETING_MAX_CTAS : (int)c;
}

struct meeting_pieces {
    ft_cuda_meeting_piece p[FT_CUDA_MEETING_MAX_PIECES];
    int n;
};

// Steps: 1. copy each piece (16-byte body where aligned, words after); 2. each thread fences
// its writes to the system, the CTA meets, its thread 0 counts the CTA done; 3. the last CTA
// resets the counter, advances the sequence and publishes it (a release store: the host sees
// the data first).
__global__ void __launch_bounds__(MEETING_THREADS)
    meeting_export_kernel(meeting_pieces pc, uint32_t *flag, uint32_t *seq, uint32_t *counter) {
    ft_pdl_begin();
    size_t stride = (size_t)gridDim.x * blockDim.x, i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll // (constant indices into pc: a run-time one would copy it into local memory)
    for (int k = 0; k < FT_CUDA_MEETING_MAX_PIECES; k++) {
        if (k >= pc.n) break;
        const uint32_t *x = (const uint32_t *)pc.p[k].src;
        uint32_t *xh = (uint32_t *)pc.p[k].dst;
        size_t n = pc.p[k].n, n4 = n / 4;
        bool aligned = ((uintptr_t)x % 16 == 0) && ((uintptr_t)xh % 16 == 0);
        if (aligned) {
            for (size_t i = i0; i < n4; i += stride) ((uint4 *)xh)[i] = ((const uint4 *)x)[i];
            for (size_t i = 4 * n4 + i0; i < n; i += stride) xh[i] = x[i];
        } else {
            for (size_t i = i0; i < n; i += stride) xh[i] = x[i];
        }
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t done = atomicAdd(counter, 1u);
        if (done == gridDim.x - 1) {
            *counter = 0;
            ft_meeting_publish(flag, seq);
        }
    }
}

// Steps: 1. thread 0 of each CTA spins on the flag (acquire, system scope) until it reaches the
// sequence the export before it published, unless flag is NULL (the stream already waited);
// 2. the CTA meets; 3. it copies its share with cache-bypassing loads (__ldcv).
__global__ void __launch_bounds__(MEETING_THREADS)
    meeting_import_kernel(const float *yh, float *y, size_t n, const uint32_t *flag, const uint32_t *seq) {
    ft_pdl_begin();
    if (flag && threadIdx.x == 0) {
        const uint32_t want = *seq;
        while ((int32_t)(ft_meeting_load_acquire_sys(flag) - want) < 0) {
        }
    }
    __syncthreads();
    size_t n4 = n / 4, stride = (size_t)gridDim.x * blockDim.x, i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool aligned = ((uintptr_t)y % 16 == 0) && ((uintptr_t)yh % 16 == 0);
    if (aligned) {
        for (size_t i = i0; i < n4; i += stride) ((float4 *)y)[i] = __ldcv((const float4 *)yh + i);
        for (size_t i = 4 * n4 + i0; i < n; i += stride) y[i] = __ldcv(yh + i);
    } else {
        for (size_t i = i0; i < n; i += stride) y[i] = __ldcv(yh + i);
    }
}

// The hybrid join: as the spinning import, but only where *count > 0 (else the host has nothing
// to give and does not answer), and adding the host's floats to y instead of copying them.
__global__ void __launch_bounds__(MEETING_THREADS)
    meeting_import_add_kernel(const float *yh, float *y, size_t n, const uint32_t *flag, const uint32_t *seq,
                              const int32_t *count) {
    ft_pdl_begin();
    if (*count == 0) return; // (the same value for every CTA: no barrier is skipped by part of one)
    if (threadIdx.x == 0) {
        const uint32_t want = *seq;
        while ((int32_t)(ft_meeting_load_acquire_sys(flag) - want) < 0) {
        }
    }
    __syncthreads();
    size_t stride = (size_t)gridDim.x * blockDim.x, i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = i0; i < n; i += stride) y[i] += __ldcv(yh + i);
}

extern "C" void ft_cuda_meeting_import_add(const float *y_host, float *y, size_t n, const uint32_t *flag,
                                           const uint32_t *seq, const int32_t *count, ft_cuda_stream *s) {
    ft_launch(meeting_import_add_kernel, meeting_ctas(n), MEETING_THREADS, 0, ft_cuda_stream_handle(s), y_host, y, n,
              flag, seq, count);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ft_cuda_meeting_export(const ft_cuda_meeting_piece *pieces, int n_pieces, uint32_t *flag,
                                       uint32_t *seq, uint32_t *counter, ft_cuda_stream *s) {
    FT_CUDA_ASSERT(n_pieces >= 1 && n_pieces <= FT_CUDA_MEETING_MAX_PIECES);
    meeting_pieces pc;
    size_t most = 0;
    pc.n = n_pieces;
    for (int k = 0; k < n_pieces; k++) {
        pc.p[k] = pieces[k];
        most = pieces[k].n > most ? pieces[k].n : most;
    }
    ft_launch(meeting_export_kernel, meeting_ctas(most), MEETING_THREADS, 0, ft_cuda_stream_handle(s), pc, flag, seq,
              counter);
    CUDA_CHECK_LAUNCH();
}

typedef CUresult (*wait_value32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// cuStreamWaitValue32 of the driver (the V2 stream memory operations, on by default since
// CUDA 11.7), or NULL where the driver does not give it; asked once.
static wait_value32_fn wait_value32(void) {
    static wait_value32_fn fn;
    static bool asked;
    if (!asked) {
        asked = true;
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (wait_value32_fn)p;
        else
            (void)cudaGetLastError();
    }
    return fn;
}

extern "C" bool ft_cuda_meeting_stream_wait_available(void) { return wait_value32() != NULL; }

extern "C" void ft_cuda_meeting_import(const float *y_host, float *y, size_t n, const uint32_t *flag,
                                       const uint32_t *seq, bool stream_wait, uint32_t wait_seq, ft_cuda_stream *s) {
    if (stream_wait) {
        wait_value32_fn wait = wait_value32();
        FT_CUDA_ASSERT(wait);
        CUresult r = wait((CUstream)ft_cuda_stream_handle(s), (CUdeviceptr)(uintptr_t)flag, wait_seq,
                          CU_STREAM_WAIT_VALUE_GEQ);
        if (r != CUDA_SUCCESS) {
            fprintf(stderr, "%s:%d: cuStreamWaitValue32 failed (CUresult %d)\n", __FILE__, __LINE__, (int)r);
            abort();
        }
        flag = NULL;
    }
    // after the stream wait a plain launch: a programmatic one may start before the stream
    // operation (it waits for kernels only), its ft_pdl_begin then a no-op
    if (stream_wait)
        meeting_import_kernel<<<meeting_ctas(n), MEETING_THREADS, 0, ft_cuda_stream_handle(s)>>>(y_host, y, n, flag, seq);
    else
        ft_launch(meeting_import_kernel, meeting_ctas(n), MEETING_THREADS, 0, ft_cuda_stream_handle(s), y_host, y, n,
                  flag, seq);
    CUDA_CHECK_LAUNCH();
}
