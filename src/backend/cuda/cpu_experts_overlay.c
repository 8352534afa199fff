// cpu_experts_overlay.c: the prefill overlay of --moe-backend cpu: a layer's expert banks
// staged from the mapping through pinned buffers into device buffers (cpu_experts_overlay.h).
#include "cpu_experts_overlay.h"
#include "../../util/pool.h"
#include "expert_cache_kernels.h" // sync-only events, the copy stream's timers

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_BANK = 3 }; // gate, up, down

// The overlay's staging ring: pieces of a layer's banks go through these pinned buffers.
#define STAGE_SLOTS 4
#define STAGE_BYTES ((size_t)16 << 20)

struct cpu_experts_overlay {
    ft_tensor *banks[N_BANK];        // (n_layer) host descriptors of gate, up, down
    int n_layer;
    int n_buf;                       // 1 or 2
    size_t bank_bytes[N_BANK];       // one buffer's share of each bank (256-aligned)
    uint8_t *buf[2];                 // device, bank_bytes summed each
    int buf_layer[2];                // layer a buffer holds (or is being copied), -1
    int last_buf;                    // buffer of the last overlay layer, -1
    ft_cuda_stream *copy_stream;
    ft_cuda_event *copied[2];        // on the copy stream, after a buffer's copy
    ft_cuda_event *released[2];      // on the backend's stream, after the work reading a buffer
    ft_pool *stage_pool;             // host threads that fill the staging ring
    uint8_t *stage[STAGE_SLOTS];     // pinned
    ft_cuda_event *stage_free[STAGE_SLOTS]; // on the copy stream, after the copy that read a slot
    bool stage_used[STAGE_SLOTS];
    int stage_next;
    uint64_t *timer;                 // device (2): the copy stream's clock at a copy's start, and
                                     // the nanoseconds of copies so far
    uint64_t layers_on_gpu, layers_copied, bytes_copied;
    double stage_s;                  // host seconds filling the staging ring
};

bool cuda_cpu_experts_overlay_takes(const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down) {
    return ft_tensor_present(gate) && ft_tensor_present(up) && ft_tensor_present(down) &&
           gate->placement == FT_PLACEMENT_CPU && up->placement == FT_PLACEMENT_CPU &&
           down->placement == FT_PLACEMENT_CPU && up->mat_bytes == gate->mat_bytes && up->ne[2] == gate->ne[2] &&
           down->ne[2] == gate->ne[2] && ft_cuda_moe_gemm_supported(gate->type, up->type, down->type);
}

// (packed, as the overlay holds it)
static size_t bank_total(const ft_tensor *t) { return t->mat_bytes * (size_t)t->ne[2]; }
static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static void max_bank_bytes(const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down, int n_layer,
                           size_t out[N_BANK]) {
    for (int b = 0; b < N_BANK; b++) out[b] = 0;
    for (int il = 0; il < n_layer; il++) {
        if (!cuda_cpu_experts_overlay_takes(&gate[il], &up[il], &down[il])) continue;
        const ft_tensor *t[N_BANK] = {&gate[il], &up[il], &down[il]};
        for (int b = 0; b < N_BANK; b++) out[b] = FT_MAX(out[b], align256(bank_total(t[b])));
    }
}

size_t cuda_cpu_experts_buffer_bytes(const ft_tensor *gate, const ft_tensor *up, const ft_tensor *down, int n_layer) {
    size_t m[N_BANK];
    max_bank_bytes(gate, up, down, n_layer, m);
    return m[0] + m[1] + m[2];
}

size_t cuda_cpu_experts_staging_bytes(void) { return STAGE_SLOTS * STAGE_BYTES; }

cpu_experts_overlay *cpu_experts_overlay_init(const ft_host_experts_params *p) {
    if (p->overlay_buffers <= 0 || !p->gate_exps) return NULL;
    FT_ASSERT(p->overlay_buffers <= 2 && p->up_exps && p->down_exps);
    size_t bank_bytes[N_BANK];
    max_bank_bytes(p->gate_exps, p->up_exps, p->down_exps, p->n_layer, bank_bytes);
    size_t bytes = bank_bytes[0] + bank_bytes[1] + bank_bytes[2];
    if (bytes == 0) return NULL; // no layer's types are the grouped GEMM's
    cpu_experts_overlay *o = ft_calloc(1, sizeof(*o));
    o->n_layer = p->n_layer;
    o->last_buf = o->buf_layer[0] = o->buf_layer[1] = -1;
    const ft_tensor *src[N_BANK] = {p->gate_exps, p->up_exps, p->down_exps};
    for (int b = 0; b < N_BANK; b++) {
        o->banks[b] = ft_malloc((size_t)p->n_layer * sizeof(ft_tensor));
        memcpy(o->banks[b], src[b], (size_t)p->n_layer * sizeof(ft_tensor));
        o->bank_bytes[b] = bank_bytes[b];
    }
    o->n_buf = p->overlay_buffers;
    for (int i = 0; i < o->n_buf; i++) {
        if (!(o->buf[i] = ft_cuda_malloc(bytes)))
            ft_abort(__FILE__, __LINE__, "cpu experts: out of device memory for the prefill overlay (%.1f MiB)",
                     bytes / 1048576.0);
        o->copied[i] = ft_cuda_event_init_sync_only();
        o->released[i] = ft_cuda_event_init_sync_only();
    }
    o->copy_stream = ft_cuda_stream_init();
    if (!(o->timer = ft_cuda_malloc(2 * sizeof(uint64_t))))
        ft_abort(__FILE__, __LINE__, "cpu experts: out of device memory");
    ft_cuda_memset(o->timer, 0, 2 * sizeof(uint64_t), o->copy_stream);
    o->stage_pool = ft_pool_init(p->reference ? 1 : p->n_threads);
    for (int r = 0; r < STAGE_SLOTS; r++) {
        o->stage[r] = ft_cuda_host_alloc(STAGE_BYTES);
        o->stage_free[r] = ft_cuda_event_init_sync_only();
    }
    return o;
}

void cpu_experts_overlay_free(cpu_experts_overlay *o) {
    if (!o) return;
    uint64_t copy_ns = 0;
    ft_cuda_memcpy_d2h(&copy_ns, &o->timer[1], sizeof(copy_ns), o->copy_stream);
    ft_cuda_stream_sync(o->copy_stream);
    if (o->layers_on_gpu)
        fprintf(stderr, "cpu experts: %llu MoE layer steps of prefill on the GPU, %llu layer copies (%.1f MiB) at "
                        "%.1f GB/s on the copy stream, %.2f s of host time filling the pinned staging\n",
                (unsigned long long)o->layers_on_gpu, (unsigned long long)o->layers_copied,
                o->bytes_copied / 1048576.0, copy_ns ? (double)o->bytes_copied / (double)copy_ns : 0.0,
                o->stage_s);
    ft_cuda_free(o->timer);
    for (int r = 0; r < STAGE_SLOTS; r++) {
        ft_cuda_host_free(o->stage[r]);
        ft_cuda_event_free(o->stage_free[r]);
    }
    ft_pool_free(o->stage_pool);
    for (int i = 0; i < 2; i++) {
        ft_cuda_free(o->buf[i]);
        ft_cuda_event_free(o->copied[i]);
        ft_cuda_event_free(o->released[i]);
    }
    ft_cuda_stream_free(o->copy_stream);
    for (int b = 0; b < N_BANK; b++) free(o->banks[b]);
    free(o);
}

bool cpu_experts_overlay_takes_layer(const cpu_experts_overlay *o, int il) {
    return o && il >= 0 && il < o->n_layer &&
           cuda_cpu_experts_overlay_takes(&o->banks[0][il], &o->banks[1][il], &o->banks[2][il]);
}

// A piece of a bank to stage: bytes [off, off + n) of its packed image, whose matrices lie
// run bytes each, stride apart, from src in the mapping (the halves of a fused gate/up tensor;
// else one run of the whole bank).
typedef struct stage_job {
    uint8_t *dst;
    const uint8_t *src;
    size_t off, n;
    size_t run, stride;
} stage_job;

// Thread ith copies its share of the piece, in whole 4 KiB units, a run at a time.
static void stage_worker(void *ctx, int ith, int nth) {
    const stage_job *j = ctx;
    int64_t units = (int64_t)((j->n + 4095) / 4096), u0, u1;
    ft_pool_split(units, ith, nth, &u0, &u1);
    size_t a = j->off + (size_t)u0 * 4096, b = j->off + FT_MIN((size_t)u1 * 4096, j->n);
    while (a < b) {
        size_t i = a / j->run, in = a % j->run, len = FT_MIN(j->run - in, b - a);
        memcpy(j->dst + (a - j->off), j->src + i * j->stride + in, len);
        a += len;
    }
}

// Copies bank t (packed) from the mapping to device memory at dst on the copy stream, piece by
// piece through the staging ring: a slot is refilled once the copy that read it has run. The
// staging threads gather a strided bank's matrices as they fill a slot.
static void stage_copy(cpu_experts_overlay *o, uint8_t *dst, const ft_tensor *t) {
    size_t n = bank_total(t);
    bool packed = ft_tensor_packed(t);
    for (size_t off = 0; off < n; off += STAGE_BYTES) {
        size_t piece = FT_MIN(STAGE_BYTES, n - off);
        int r = o->stage_next;
        o->stage_next = (r + 1) % STAGE_SLOTS;
        if (o->stage_used[r]) ft_cuda_event_sync(o->stage_free[r]);
        double t0 = ft_time_s();
        stage_job j = {o->stage[r], t->data, off, piece, packed ? n : t->mat_bytes, ft_tensor_mat_stride(t)};
        ft_pool_run(o->stage_pool, stage_worker, &j);
        o->stage_s += ft_time_s() - t0;
        ft_cuda_memcpy_h2d(dst + off, o->stage[r], piece, o->copy_stream);
        ft_cuda_event_record(o->stage_free[r], o->copy_stream);
        o->stage_used[r] = true;
    }
}

// Copies layer il's banks into buffer i on the copy stream, after the work that read the
// buffer last (released[i]; a buffer never used has no record, so no wait).
static void stream_in(cpu_experts_overlay *o, int il, int i) {
    ft_cuda_stream_wait_event(o->copy_stream, o->released[i]);
    ft_cuda_cache_timer_start(&o->timer[0], o->copy_stream);
    uint8_t *dst = o->buf[i];
    for (int b = 0; b < N_BANK; b++) {
        const ft_tensor *t = &o->banks[b][il];
        stage_copy(o, dst, t);
        o->bytes_copied += bank_total(t);
        dst += o->bank_bytes[b];
    }
    ft_cuda_cache_timer_stop(&o->timer[0], &o->timer[1], o->copy_stream);
    ft_cuda_event_record(o->copied[i], o->copy_stream);
    o->buf_layer[i] = il;
    o->layers_copied++;
}

// The next layer after il that the overlay takes, wrapping around to the first (the next
// step's); -1 if il is the only one.
static int next_overlay_layer(const cpu_experts_overlay *o, int il) {
    for (int d = 1; d < o->n_layer; d++) {
        int j = (il + d) % o->n_layer;
        if (cpu_experts_overlay_takes_layer(o, j)) return j;
    }
    return -1;
}

void cpu_experts_overlay_begin(cpu_experts_overlay *o, const ft_moe_params *p, ft_cuda_stream *s, ft_tensor views[3]) {
    FT_ASSERT(cpu_experts_overlay_takes_layer(o, p->layer));
    int il = p->layer;
    // everything s enqueued so far includes the last overlay layer's experts: its buffer may
    // be overwritten after that
    if (o->last_buf >= 0) ft_cuda_event_record(o->released[o->last_buf], s);
    int i = -1;
    for (int j = 0; j < o->n_buf; j++)
        if (o->buf_layer[j] == il) i = j;
    if (i < 0) {
        i = o->n_buf == 2 && o->last_buf >= 0 ? 1 - o->last_buf : 0;
        stream_in(o, il, i);
    }
    ft_cuda_stream_wait_event(s, o->copied[i]);
    o->last_buf = i;
    o->layers_on_gpu++;
    const ft_tensor *src[N_BANK] = {p->gate_exps, p->up_exps, p->down_exps};
    uint8_t *at = o->buf[i];
    for (int b = 0; b < N_BANK; b++) {
        FT_ASSERT(src[b]->type == o->banks[b][il].type && src[b]->mat_bytes == o->banks[b][il].mat_bytes);
        views[b] = *src[b];
        views[b].data = at;
        views[b].mat_stride = 0; // packed here
        views[b].placement = FT_PLACEMENT_CUDA;
        at += o->bank_bytes[b];
    }
}

void cpu_experts_overlay_end(cpu_experts_overlay *o) {
    if (!o || o->n_buf != 2 || o->last_buf < 0) return;
    int i = o->last_buf, next = next_overlay_layer(o, o->buf_layer[i]);
    if (next >= 0 && o->buf_layer[1 - i] != next) stream_in(o, next, 1 - i);
}
