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
bool ft_cuda_modules_load_lazily(void) { return false; }
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
bool cuda_cpu_experts_overlay_takes(const ft_tensor *g, const ft_tensor *u, const ft_tensor *d) { (void)g; (void)u; (void)d; return false; }
size_t cuda_cpu_experts_buffer_bytes(const ft_tensor *g, const ft_tensor *u, const ft_tensor *d, int n) { (void)g; (void)u; (void)d; (void)n; return 0; }
size_t cuda_cpu_experts_staging_bytes(void) { return 0; }

bool ft_cuda_gemm_supported(uint32_t type) { (void)type; return false; }
void ft_cuda_gemm(const ft_cuda_gemm_params *p, ft_cuda_stream *s) { (void)p; (void)s; FT_CUDA_STUB_ABORT(); }
void ft_cuda_gemm_force_bn(int bn) { (void)bn; }
bool ft_cuda_moe_gemm_supported(uint32_t g, uint32_t u, uint32_t d) { (void)g; (void)u; (void)d; return false; }
size_t ft_cuda_moe_gemm_work_bytes(int n_pairs, int n_expert) { (void)n_pairs; (void)n_expert; return 0; }
void ft_cuda_moe_gemm(const ft_cuda_moe_gemm_params *p, ft_cuda_stream *s) { (void)p; (void)s; FT_CUDA_STUB_ABORT(); }
void ft_cuda_gemm_f(const ft_cuda_matvec_params *p, ft_cuda_stream *s) { (void)p; (void)s; FT_CUDA_STUB_ABORT(); }

// cuda_ops.h entry points the GPU tests call directly.
#include "cuda_ops.h"

void ft_cuda_moe_route(const ft_cuda_route_params *p, ft_cuda_stream *s) { (void)p; (void)s; FT_CUDA_STUB_ABORT(); }
bool ft_cuda_moe_router_fits(uint32_t w_type, int n_tok, int n_expert, int k) {
    (void)w_type; (void)n_tok; (void)n_expert; (void)k;
    return false;
}
void ft_cuda_moe_router(const ft_cuda_router_params *r, const ft_cuda_route_params *p, ft_cuda_stream *s) {
    (void)r; (void)p; (void)s;
    FT_CUDA_STUB_ABORT();
}

// The GPU expert cache (offload.h) in a build without nvcc: init fails with a message.
#include "offload.h"

static void *stub_host_alloc(void *ctx, size_t n) { (void)ctx; (void)n; return NULL; }
static void stub_host_free(void *ctx, void *p, size_t n) { (void)ctx; (void)p; (void)n; }
moe_host_allocator ft_offload_host_allocator(void) { return (moe_host_allocator){stub_host_alloc, stub_host_free, NULL, "none (no CUDA)"}; }
ft_offload *ft_offload_init(const moe_geometry *g, moe_expert_banks *hb, const ft_offload_params *p, ft_err *err) {
    (void)g; (void)p;
    moe_expert_banks_free(hb);
    ft_err_set(err, "--moe-backend offload: this ft was built without CUDA (no nvcc at build time)");
    return NULL;
}
void ft_offload_free(ft_offload *o) { if (o) FT_CUDA_STUB_ABORT(); }
const moe_cache_plan *ft_offload_plan(const ft_offload *o) { (void)o; FT_CUDA_STUB_ABORT(); }
uint64_t ft_offload_device_bytes(const ft_offload *o) { (void)o; FT_CUDA_STUB_ABORT(); }
bool ft_offload_rebuild(ft_offload *o, int n, enum moe_pool_layout l, ft_err *err) { (void)o; (void)n; (void)l; (void)err; FT_CUDA_STUB_ABORT(); }
uint64_t ft_offload_generation(const ft_offload *o) { (void)o; FT_CUDA_STUB_ABORT(); }
int ft_offload_n_layers(const ft_offload *o) { (void)o; FT_CUDA_STUB_ABORT(); }
int ft_offload_layer_block(const ft_offload *o, int i) { (void)o; (void)i; FT_CUDA_STUB_ABORT(); }
int ft_offload_n_pools(const ft_offload *o) { (void)o; FT_CUDA_STUB_ABORT(); }
int ft_offload_pool_of_layer(const ft_offload *o, int i) { (void)o; (void)i; FT_CUDA_STUB_ABORT(); }
void ft_offload_read_counts(ft_offload *o, ft_offload_counts *l, ft_offload_counts *p, ft_offload_counts *t) { (void)o; (void)l; (void)p; (void)t; FT_CUDA_STUB_ABORT(); }
double ft_offload_copy_gbps(ft_offload *o) { (void)o; FT_CUDA_STUB_ABORT(); }
void ft_offload_print(const ft_offload *o, FILE *out) { (void)o; (void)out; FT_CUDA_STUB_ABORT(); }
void ft_offload_reserve(ft_offload *o, int n) { (void)o; (void)n; FT_CUDA_STUB_ABORT(); }
bool ft_offload_uses_overlay(const ft_offload *o, int b, int t, int n, bool g, int m) { (void)o; (void)b; (void)t; (void)n; (void)g; (void)m; FT_CUDA_STUB_ABORT(); }
void ft_offload_layer_begin(ft_offload *o, int b, int32_t *s, int t, int k, bool ov, ft_cuda_stream *st, ft_offload_view *v) { (void)o; (void)b; (void)s; (void)t; (void)k; (void)ov; (void)st; (void)v; FT_CUDA_STUB_ABORT(); }
void ft_offload_debug_read(ft_offload *o, int n, ft_offload_debug *d) { (void)o; (void)n; (void)d; FT_CUDA_STUB_ABORT(); }
void ft_offload_debug_free(ft_offload_debug *d) { (void)d; FT_CUDA_STUB_ABORT(); }
const void *ft_offload_arena(const ft_offload *o, enum moe_bank b) { (void)o; (void)b; FT_CUDA_STUB_ABORT(); }
void ft_backend_cuda_attach_offload(ft_backend *be, struct ft_offload *o) { (void)be; (void)o; FT_CUDA_STUB_ABORT(); }
