// launch_profile.cu: FT_CUDA_PROFILE=1: the GPU time of each kernel launch site of the backend's
// steps, measured where it runs (inside the replayed CUDA graph of a decode step), printed as a
// table at exit. A measuring tool: off, it costs one branch per launch.
//
// Why not a profiler: Nsight Compute serializes the launches, and between them the clocks drop,
// so the small kernels of decode read longer than in a graph replay (docs/performance.md).
//
// How: between ft_cuda_profile_step_begin and _end, every checked launch (CUDA_CHECK_LAUNCH)
// records a timing event on the step's stream right after its kernel; in a graph capture the
// records become event nodes of the graph (cudaEventRecordExternal), so each replay stamps them
// again. After the step ran, the time from one event to the next is the kernel's (with the
// graph's launch latency of that node and any copy node before it), summed per launch site
// (file:line) over all steps of the kind (graph replays, direct steps).
#include "cuda_common.cuh"
#include "../../util/env.h"

#include <string.h>

enum { PROF_MAX_EVENTS = 4096, PROF_MAX_SITES = 128 };

struct prof_site {
    const char *file;
    int line;
    bool graph;   // a site of graph replays, or of direct steps
    double ms;
    long calls;
};

static int g_prof_enabled = -1; // -1: FT_CUDA_PROFILE not read yet

static struct {
    cudaStream_t stream; // the step being recorded, or NULL
    bool capture;
    int n;               // events recorded in the step: ev[0] at its start, ev[i] after launch i
    cudaEvent_t ev[PROF_MAX_EVENTS];
    const char *file[PROF_MAX_EVENTS];
    int line[PROF_MAX_EVENTS];
    // the captured step: its events' sites, collected after each of its replays
    const void *graph;
    int graph_n;
    const char *graph_file[PROF_MAX_EVENTS];
    int graph_line[PROF_MAX_EVENTS];
    long steps[2]; // direct, graph
    struct prof_site sites[PROF_MAX_SITES];
    int n_sites;
} g_prof;

static void prof_report(void) {
    for (int graph = 1; graph >= 0; graph--) {
        long steps = g_prof.steps[graph];
        if (!steps) continue;
        double total = 0;
        for (int i = 0; i < g_prof.n_sites; i++)
            if (g_prof.sites[i].graph == graph) total += g_prof.sites[i].ms;
        fprintf(stderr, "FT_CUDA_PROFILE: %s steps: %ld, %.1f us per step in kernels\n",
                graph ? "graph-replayed" : "direct", steps, 1e3 * total / (double)steps);
        fprintf(stderr, "  %10s %8s %10s %6s  %s\n", "us/step", "n/step", "us/launch", "%", "launch site");
        // sorted by time, largest first (selection: the table is small)
        bool done[PROF_MAX_SITES] = {false};
        for (;;) {
            int b = -1;
            for (int i = 0; i < g_prof.n_sites; i++)
                if (!done[i] && g_prof.sites[i].graph == graph && (b < 0 || g_prof.sites[i].ms > g_prof.sites[b].ms)) b = i;
            if (b < 0) break;
            done[b] = true;
            const prof_site *s = &g_prof.sites[b];
            const char *f = strrchr(s->file, '/');
            fprintf(stderr, "  %10.2f %8.1f %10.2f %6.1f  %s:%d\n", 1e3 * s->ms / (double)steps,
                    (double)s->calls / (double)steps, 1e3 * s->ms / (double)s->calls, 100 * s->ms / total,
                    f ? f + 1 : s->file, s->line);
        }
    }
}

static bool prof_on(void) {
    if (g_prof_enabled < 0) {
        g_prof_enabled = ft_env_flag(FT_ENV_CUDA_PROFILE);
        if (g_prof_enabled) {
            for (int i = 0; i < PROF_MAX_EVENTS; i++) CUDA_CHECK(cudaEventCreate(&g_prof.ev[i]));
            atexit(prof_report);
        }
    }
    return g_prof_enabled;
}

static void prof_record(int i) {
    if (g_prof.capture) CUDA_CHECK(cudaEventRecordWithFlags(g_prof.ev[i], g_prof.stream, cudaEventRecordExternal));
    else CUDA_CHECK(cudaEventRecord(g_prof.ev[i], g_prof.stream));
}

// Adds the time between consecutive events of a step that ran to its sites.
static void prof_collect(int n, const char *const *file, const int *line, bool graph) {
    if (n < 1) return;
    CUDA_CHECK(cudaEventSynchronize(g_prof.ev[n]));
    g_prof.steps[graph]++;
    for (int i = 1; i <= n; i++) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, g_prof.ev[i - 1], g_prof.ev[i]));
        int s = 0;
        while (s < g_prof.n_sites && !(g_prof.sites[s].line == line[i] && g_prof.sites[s].graph == graph &&
                                       !strcmp(g_prof.sites[s].file, file[i])))
            s++;
        if (s == g_prof.n_sites) {
            if (s == PROF_MAX_SITES) continue;
            g_prof.sites[g_prof.n_sites++] = (prof_site){file[i], line[i], graph, 0, 0};
        }
        g_prof.sites[s].ms += ms;
        g_prof.sites[s].calls++;
    }
}

extern "C" void ft_cuda_profile_step_begin(ft_cuda_stream *s, bool capture) {
    if (!prof_on()) return;
    g_prof.stream = ft_cuda_stream_handle(s);
    g_prof.capture = capture;
    g_prof.n = 0;
    prof_record(0);
}

void ft_cuda_profile_launch(const char *file, int line) {
    if (!g_prof.stream || g_prof.n + 1 >= PROF_MAX_EVENTS) return;
    const int i = ++g_prof.n;
    g_prof.file[i] = file;
    g_prof.line[i] = line;
    prof_record(i);
}

extern "C" void ft_cuda_profile_step_end(const ft_cuda_graph *captured) {
    if (!g_prof.stream) return;
    g_prof.stream = NULL;
    if (!g_prof.capture) {
        prof_collect(g_prof.n, g_prof.file, g_prof.line, false);
        return;
    }
    g_prof.graph = captured;
    g_prof.graph_n = g_prof.n;
    memcpy(g_prof.graph_file, g_prof.file, sizeof(g_prof.file));
    memcpy(g_prof.graph_line, g_prof.line, sizeof(g_prof.line));
}

extern "C" void ft_cuda_profile_replayed(const ft_cuda_graph *g) {
    if (g_prof_enabled > 0 && g && g == g_prof.graph) prof_collect(g_prof.graph_n, g_prof.graph_file, g_prof.graph_line, true);
}
