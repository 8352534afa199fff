// cuda_runtime.cu: device detection, memory, copies, streams and events (no kernels).
//
// Detection asks the statically linked runtime for the device count; on a machine without an
// NVIDIA driver that call fails (cudaErrorInsufficientDriver / cudaErrorNoDevice) and we
// report 0 devices, with the reason at debug level only, so the CPU path takes over quietly.
#include "cuda_common.cuh"
#include "../../util/env.h"

#include <cuda.h> // the driver API's types only: cuModuleGetLoadingMode comes through the runtime's
                  // entry point query (no link to libcuda)
#include <stdlib.h>
#include <string.h>

// util.h is C11 (_Noreturn); declare the one function used here. Levels as in util.h.
extern "C" void ft_log(int level, const char *fmt, ...);
enum { FT_CUDA_LOG_DEBUG = 3 };

// Every kernel is loaded when the CUDA context is created (CUDA_MODULE_LOADING=EAGER), not at
// its first launch (lazy: the default since CUDA 12.2), unless the environment already says
// which. Loading a kernel may make the context synchronize (CUDA programming guide, Lazy
// Loading, possible issues), and --moe-backend cpu launches kernels while the stream waits
// for the launching thread: a direct step's layer is computed on the CPU only once the next
// layer's ops are enqueued (cuda_cpu_experts.h), so the first launch of a kernel there (the
// output head after the last MoE layer, in a process's first direct step) would wait for a
// stream that waits for it. Set before main, so before the runtime initializes.
__attribute__((constructor)) static void eager_module_loading(void) { setenv("CUDA_MODULE_LOADING", "EAGER", 0); }

typedef CUresult (*loading_mode_fn)(CUmoduleLoadingMode *);

extern "C" bool ft_cuda_modules_load_lazily(void) {
    static int lazy = -1;
    if (lazy >= 0) return lazy;
    void *p = NULL;
    cudaDriverEntryPointQueryResult q;
    CUmoduleLoadingMode mode = CU_MODULE_EAGER_LOADING;
    if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &p, 11070, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess) {
        if (((loading_mode_fn)p)(&mode) != CUDA_SUCCESS) mode = CU_MODULE_EAGER_LOADING;
    } else {
        (void)cudaGetLastError();
        // a driver without the query predates lazy loading's default; only the environment asks for it
        const char *e = getenv("CUDA_MODULE_LOADING");
        mode = e && !strcmp(e, "LAZY") ? CU_MODULE_LAZY_LOADING : CU_MODULE_EAGER_LOADING;
    }
    lazy = mode == CU_MODULE_LAZY_LOADING;
    return lazy;
}

static int g_device_count = -1;

extern "C" int ft_cuda_device_count(void) {
    if (g_device_count >= 0) return g_device_count;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        ft_log(FT_CUDA_LOG_DEBUG, "cuda: no device (%s: %s)", cudaGetErrorName(err),
               cudaGetErrorString(err));
        (void)cudaGetLastError(); // clear the sticky error so later queries start clean
        n = 0;
    }
    g_device_count = n;
    return n;
}

extern "C" bool ft_cuda_device_get_info(int dev, ft_cuda_device_info *out) {
    if (dev < 0 || dev >= ft_cuda_device_count()) return false;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", prop.name);
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->sm_count = prop.multiProcessorCount;
    out->total_mem = prop.totalGlobalMem;
    out->l2_bytes = (size_t)prop.l2CacheSize;
    out->mem_bus_bits = prop.memoryBusWidth;
    int cur = 0;
    CUDA_CHECK(cudaGetDevice(&cur));
    CUDA_CHECK(cudaSetDevice(dev));
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    CUDA_CHECK(cudaSetDevice(cur));
    out->free_mem = free_b;
    char bus[32];
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) != cudaSuccess || !ft_cuda_process_memory(bus, &out->process_mem))
        out->process_mem = 0;
    return true;
}

// Read at the first launch, for the device current then (ft uses one device per process).
bool ft_cuda_pdl_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) {
        int dev = 0, major = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        enabled = major >= 9 && ft_env_flag(FT_ENV_CUDA_PDL);
    }
    return enabled;
}

extern "C" void ft_cuda_set_device(int dev) {
    FT_CUDA_ASSERT(dev >= 0 && dev < ft_cuda_device_count());
    CUDA_CHECK(cudaSetDevice(dev));
}

extern "C" void ft_cuda_device_sync(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

extern "C" void *ft_cuda_malloc(size_t n) {
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, n ? n : 1);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return NULL;
    }
    CUDA_CHECK(err);
    return p;
}

extern "C" void ft_cuda_free(void *p) {
    if (p) CUDA_CHECK(cudaFree(p));
}

extern "C" void *ft_cuda_host_alloc(size_t n) {
    void *p = NULL;
    CUDA_CHECK(cudaMallocHost(&p, n ? n : 1));
    return p;
}

extern "C" void *ft_cuda_host_alloc_or_null(size_t n) {
    void *p = NULL;
    if (cudaMallocHost(&p, n ? n : 1) == cudaSuccess) return p;
    (void)cudaGetLastError(); // (an allocation failure is not sticky: clear it)
    return NULL;
}

extern "C" void ft_cuda_host_free(void *p) {
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

extern "C" void ft_cuda_memcpy_h2d(void *dst, const void *src, size_t n, ft_cuda_stream *s) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, ft_cuda_stream_handle(s)));
}

extern "C" void ft_cuda_memcpy_d2h(void *dst, const void *src, size_t n, ft_cuda_stream *s) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, ft_cuda_stream_handle(s)));
}

extern "C" void ft_cuda_memcpy_d2d(void *dst, const void *src, size_t n, ft_cuda_stream *s) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, ft_cuda_stream_handle(s)));
}

extern "C" void ft_cuda_memset(void *dst, int value, size_t n, ft_cuda_stream *s) {
    CUDA_CHECK(cudaMemsetAsync(dst, value, n, ft_cuda_stream_handle(s)));
}

extern "C" ft_cuda_stream *ft_cuda_stream_init(void) {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return (ft_cuda_stream *)s;
}

extern "C" void ft_cuda_stream_free(ft_cuda_stream *s) {
    if (s) CUDA_CHECK(cudaStreamDestroy(ft_cuda_stream_handle(s)));
}

extern "C" void ft_cuda_stream_sync(ft_cuda_stream *s) {
    CUDA_CHECK(cudaStreamSynchronize(ft_cuda_stream_handle(s)));
}

extern "C" ft_cuda_event *ft_cuda_event_init(void) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    return (ft_cuda_event *)e;
}

extern "C" void ft_cuda_event_free(ft_cuda_event *e) {
    if (e) CUDA_CHECK(cudaEventDestroy((cudaEvent_t)e));
}

extern "C" void ft_cuda_event_record(ft_cuda_event *e, ft_cuda_stream *s) {
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)e, ft_cuda_stream_handle(s)));
}

extern "C" void ft_cuda_event_sync(ft_cuda_event *e) { CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e)); }

extern "C" float ft_cuda_event_elapsed_ms(ft_cuda_event *start, ft_cuda_event *stop) {
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)stop));
    return ms;
}

extern "C" void ft_cuda_capture_begin(ft_cuda_stream *s) {
    CUDA_CHECK(cudaStreamBeginCapture(ft_cuda_stream_handle(s), cudaStreamCaptureModeThreadLocal));
}

extern "C" ft_cuda_graph *ft_cuda_capture_end(ft_cuda_stream *s) {
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamEndCapture(ft_cuda_stream_handle(s), &g));
    cudaGraphExec_t x;
    CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
    return (ft_cuda_graph *)x;
}

extern "C" void ft_cuda_graph_launch(ft_cuda_graph *g, ft_cuda_stream *s) {
    CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)g, ft_cuda_stream_handle(s)));
}

extern "C" void ft_cuda_graph_free(ft_cuda_graph *g) {
    if (g) CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)g));
}
