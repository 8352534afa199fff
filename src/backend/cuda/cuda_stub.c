// cuda_stub.c: the CUDA interface (ft_cuda.h) for builds without nvcc. It reports no device,
// so callers take the CPU path; every other entry point is unreachable after that answer and
// aborts if called.
#include "ft_cuda.h"

#include "../../util/util.h"

int ft_cuda_device_count(void) {
    FT_LOG_DEBUG("cuda: built without CUDA (no nvcc at build time)");
    return 0;
}

bool ft_cuda_device_get_info(int dev, ft_cuda_device_info *out) {
    (void)dev;
    (void)out;
    return false;
}

#define FT_CUDA_STUB_ABORT() ft_abort(__FILE__, __LINE__, "%s: built without CUDA", __func__)

void ft_cuda_set_device(int dev) { (void)dev; FT_CUDA_STUB_ABORT(); }
void ft_cuda_device_sync(void) { FT_CUDA_STUB_ABORT(); }
void *ft_cuda_malloc(size_t n) { (void)n; return NULL; }
void ft_cuda_free(void *p) { if (p) FT_CUDA_STUB_ABORT(); }
void *ft_cuda_host_alloc(size_t n) { (void)n; FT_CUDA_STUB_ABORT(); }
void ft_cuda_host_free(void *p) { if (p) FT_CUDA_STUB_ABORT(); }
void ft_cuda_memcpy_h2d(void *d, const void *s, size_t n, ft_cuda_stream *st) { (void)d; (void)s; (void)n; (void)st; FT_CUDA_STUB_ABORT(); }
void ft_cuda_memcpy_d2h(void *d, const void *s, size_t n, ft_cuda_stream *st) { (void)d; (void)s; (void)n; (void)st; FT_CUDA_STUB_ABORT(); }
void ft_cuda_memcpy_d2d(void *d, const void *s, size_t n, ft_cuda_stream *st) { (void)d; (void)s; (void)n; (void)st; FT_CUDA_STUB_ABORT(); }
void ft_cuda_memset(void *d, int v, size_t n, ft_cuda_stream *st) { (void)d; (void)v; (void)n; (void)st; FT_CUDA_STUB_ABORT(); }
ft_cuda_stream *ft_cuda_stream_init(void) { FT_CUDA_STUB_ABORT(); }
void ft_cuda_stream_free(ft_cuda_stream *s) { if (s) FT_CUDA_STUB_ABORT(); }
void ft_cuda_stream_sync(ft_cuda_stream *s) { (void)s; FT_CUDA_STUB_ABORT(); }
ft_cuda_event *ft_cuda_event_init(void) { FT_CUDA_STUB_ABORT(); }
void ft_cuda_event_free(ft_cuda_event *e) { if (e) FT_CUDA_STUB_ABORT(); }
void ft_cuda_event_record(ft_cuda_event *e, ft_cuda_stream *s) { (void)e; (void)s; FT_CUDA_STUB_ABORT(); }
void ft_cuda_event_sync(ft_cuda_event *e) { (void)e; FT_CUDA_STUB_ABORT(); }
float ft_cuda_event_elapsed_ms(ft_cuda_event *a, ft_cuda_event *b) { (void)a; (void)b; FT_CUDA_STUB_ABORT(); }
void ft_cuda_launch_host_fn(ft_cuda_stream *s, void (*fn)(void *), void *arg) { (void)s; (void)fn; (void)arg; FT_CUDA_STUB_ABORT(); }
void ft_cuda_capture_begin(ft_cuda_stream *s) { (void)s; FT_CUDA_STUB_ABORT(); }
ft_cuda_graph *ft_cuda_capture_end(ft_cuda_stream *s) { (void)s; FT_CUDA_STUB_ABORT(); }
void ft_cuda_graph_launch(ft_cuda_graph *g, ft_cuda_stream *s) { (void)g; (void)s; FT_CUDA_STUB_ABORT(); }
void ft_cuda_graph_free(ft_cuda_graph *g) { if (g) FT_CUDA_STUB_ABORT(); }

size_t ft_cuda_q8_1_bytes(int64_t n_cols, int n_tok) {
    return (size_t)(n_cols / QK8_1) * (size_t)n_tok * sizeof(block_q8_1);
}

void ft_cuda_quantize_q8_1(const float *x, void *y, int64_t n_cols, int n_tok, ft_cuda_stream *s) {
    (void)x; (void)y; (void)n_cols; (void)n_tok; (void)s;
    FT_CUDA_STUB_ABORT();
}

bool ft_cuda_matvec_supported(uint32_t type) { (void)type; return false; }
bool ft_cuda_matvec_wants_q8_1(uint32_t type) { (void)type; return false; }
void ft_cuda_matvec(const ft_cuda_matvec_params *p, ft_cuda_stream *s) { (void)p; (void)s; FT_CUDA_STUB_ABORT(); }
void ft_cuda_matvec_ids(const ft_cuda_matvec_ids_params *p, ft_cuda_stream *s) { (void)p; (void)s; FT_CUDA_STUB_ABORT(); }
void ft_cuda_matvec_multi(const ft_cuda_matvec_params *p, int n, ft_cuda_stream *s) { (void)p; (void)n; (void)s; FT_CUDA_STUB_ABORT(); }
void ft_cuda_matvec_force_tpr(int tpr) { (void)tpr; }

// The CUDA backend (cuda.h) in a build without nvcc.
#include "cuda.h"

ft_backend *ft_backend_cuda_init(int dev, ft_err *err) {
    (void)dev;
    ft_err_set(err, "this ft was built without CUDA (no nvcc at build time)");
    return NULL;
}

size_t ft_backend_cuda_scratch_bytes(const ft_backend_limits *lim) { (void)lim; return 0; }
void ft_backend_cuda_set_graph_max_tok(ft_backend *be, int n) { (void)be; (void)n; FT_CUDA_STUB_ABORT(); }
void ft_backend_cuda_attach_cpu_experts(ft_backend *be, const cuda_cpu_experts_params *p) { (void)be; (void)p; FT_CUDA_STUB_ABORT(); }

bool ft_cuda_gemm_supported(uint32_t type) { (void)type; return false; }
void ft_cuda_gemm(const ft_cuda_gemm_params *p, ft_cuda_stream *s) { (void)p; (void)s; FT_CUDA_STUB_ABORT(); }
void ft_cuda_gemm_force_bn(int bn) { (void)bn; }
bool ft_cuda_moe_gemm_supported(uint32_t g, uint32_t u, uint32_t d) { (void)g; (void)u; (void)d; return false; }
size_t ft_cuda_moe_gemm_work_bytes(int n_pairs, int n_expert) { (void)n_pairs; (void)n_expert; return 0; }
void ft_cuda_moe_gemm(const ft_cuda_moe_gemm_params *p, ft_cuda_stream *s) { (void)p; (void)s; FT_CUDA_STUB_ABORT(); }
