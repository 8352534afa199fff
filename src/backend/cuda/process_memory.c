// process_memory.c: the device memory this process holds, as nvidia-smi reads it: NVML's
// per-process accounting, which counts the CUDA context (its code, stacks and the driver's own
// allocations) beside what cudaMalloc handed out. NVML ships with the driver, not the toolkit,
// so it is opened at run time and only the few declarations used here are written out (the
// ABI of nvmlDeviceGetComputeRunningProcesses_v3 and its nvmlProcessInfo_v2_t).
#include "ft_cuda.h"
#include "../../util/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct nvml_device *nvml_device;
typedef struct {
    unsigned int pid;
    unsigned long long used_bytes;
    unsigned int gpu_instance, compute_instance;
} nvml_process_info;

static struct {
    int (*init)(void);
    int (*by_bus_id)(const char *bus_id, nvml_device *dev);
    int (*processes)(nvml_device dev, unsigned int *count, nvml_process_info *infos);
    bool ok;
} g_nvml;

static pthread_once_t g_nvml_once = PTHREAD_ONCE_INIT;

static void nvml_open(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    *(void **)&g_nvml.init = dlsym(lib, "nvmlInit_v2");
    *(void **)&g_nvml.by_bus_id = dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&g_nvml.processes = dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    g_nvml.ok = g_nvml.init && g_nvml.by_bus_id && g_nvml.processes && g_nvml.init() == 0;
    if (!g_nvml.ok) FT_LOG_DEBUG("cuda: NVML's per-process memory is not available");
}

bool ft_cuda_process_memory(const char *pci_bus_id, size_t *bytes) {
    pthread_once(&g_nvml_once, nvml_open);
    if (!g_nvml.ok) return false;
    nvml_device dev;
    if (g_nvml.by_bus_id(pci_bus_id, &dev) != 0) return false;
    // a process that starts between the two calls makes the second one ask for more room
    for (unsigned int cap = 16; cap <= 4096; cap *= 4) {
        nvml_process_info *infos = ft_malloc(cap * sizeof(*infos));
        unsigned int n = cap;
        int rc = g_nvml.processes(dev, &n, infos);
        bool found = false;
        // NVML reports the PIDs of the host's namespace: inside a container with its own,
        // this process is not among them and the share stays unknown
        for (unsigned int i = 0; rc == 0 && i < n && !found; i++)
            if (infos[i].pid == (unsigned int)getpid()) {
                *bytes = infos[i].used_bytes;
                found = true;
            }
        free(infos);
        if (rc == 0) return found;
        if (rc != 7) return false; // 7: NVML_ERROR_INSUFFICIENT_SIZE
    }
    return false;
}
