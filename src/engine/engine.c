// engine.c: the forward pass driver (see engine.h): embed, every layer over the batch,
// final norm and the output projection of the last token.
#include "engine.h"
#include "../backend/cpu/cpu.h"
#include "../backend/cuda/cuda.h"
#include "../backend/cuda/ft_cuda.h"

#include <stdio.h>

#include <stdlib.h>
#include <string.h>

struct ft_engine {
    const ft_model *m;
    ft_engine_params p;
    ft_backend *be;
    ft_kv_cache *kv;
    moe_placement place;
    ft_forward f;
    int pos;
    float *logits_dev;   // (n_vocab) backend buffer
    float *logits;       // (n_vocab) host copy returned to the caller
    void **kv_host;      // (2 * n_layer) the KV cache's host rows while it lives on the device
};

ft_engine_params ft_engine_default_params(void) {
    ft_engine_params p = {.n_threads = 0, .n_ctx = 0, .n_batch = 256, .kv_type = FT_TYPE_F16};
    return p;
}

enum ft_placement ft_engine_default_device(void) {
    return ft_cuda_device_count() > 0 ? FT_PLACEMENT_CUDA : FT_PLACEMENT_CPU;
}

bool ft_engine_device_from_name(const char *name, enum ft_placement *out) {
    if (!strcmp(name, "cpu")) *out = FT_PLACEMENT_CPU;
    else if (!strcmp(name, "cuda")) *out = FT_PLACEMENT_CUDA;
    else return false;
    return true;
}

// The parameters as the engine will use them (defaults filled in, limits checked).
static bool resolve_params(const ft_model *m, ft_engine_params *p, ft_err *err) {
    const ft_hparams *hp = &m->hp;
    if (p->n_ctx <= 0) p->n_ctx = hp->n_ctx_train;
    if (p->n_ctx > hp->n_ctx_train)
        return ft_err_set(err, "context %d exceeds the model's limit of %d tokens", p->n_ctx, hp->n_ctx_train);
    if (p->n_batch <= 0) p->n_batch = 256;
    p->n_batch = FT_MIN(p->n_batch, p->n_ctx);
    if (p->n_threads <= 0) p->n_threads = ft_cpu_physical_cores();
    const char *ref = getenv("FT_REFERENCE");
    if (ref && *ref && strcmp(ref, "0")) p->reference = true;
    return true;
}

static ft_backend_limits engine_limits(const ft_model *m, const ft_engine_params *p) {
    ft_backend_limits lim = {
        .max_tok = p->n_batch, .max_width = ft_model_max_width(m), .max_ctx = p->n_ctx,
        .max_head_dim = m->hp.head_dim, .n_expert = m->hp.n_expert, .n_expert_used = m->hp.n_expert_used,
    };
    return lim;
}

// Floats of the activation buffers ft_engine_init allocates.
static size_t activation_floats(const ft_model *m, const ft_engine_params *p) {
    const ft_hparams *hp = &m->hp;
    size_t B = (size_t)p->n_batch, E = (size_t)hp->n_embd, Q = (size_t)ft_model_max_q_width(m),
           KV = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    return B * (4 * E + 3 * Q + 2 * KV) + (size_t)hp->n_vocab + 64 * 9;
}

bool ft_engine_place_model(ft_model *m, const ft_engine_params *params, ft_err *err) {
    if (params->device != FT_PLACEMENT_CUDA) return true;
    ft_engine_params p = *params;
    if (!resolve_params(m, &p, err)) return false;
    ft_cuda_device_info info;
    if (!ft_cuda_device_get_info(0, &info)) return ft_err_set(err, "--device cuda: no CUDA device found");
    const ft_hparams *hp = &m->hp;
    size_t kv_row = ft_row_bytes(p.kv_type, (int64_t)hp->n_head_kv * hp->head_dim);
    size_t weights = ft_model_upload_bytes(m);
    size_t kv = 2 * (size_t)hp->n_layer * (size_t)p.n_ctx * kv_row;
    ft_backend_limits lim = engine_limits(m, &p);
    size_t work = ft_backend_cuda_scratch_bytes(&lim) + activation_floats(m, &p) * sizeof(float);
    size_t margin = (size_t)256 << 20; // the CUDA context's own allocations, fragmentation
    const double MiB = 1024.0 * 1024.0;
    fprintf(stderr, "cuda: %s (sm_%d%d), %.0f MiB free of %.0f: weights %.1f MiB, KV cache %.1f MiB (%d positions, %s), "
                    "workspace %.1f MiB (batch %d)\n",
            info.name, info.cc_major, info.cc_minor, info.free_mem / MiB, info.total_mem / MiB, weights / MiB, kv / MiB,
            p.n_ctx, ft_type_name(p.kv_type), work / MiB, p.n_batch);
    if (weights + kv + work + margin > info.free_mem)
        return ft_err_set(err, "the model does not fit on %s: it needs %.0f MiB (weights %.0f, KV %.0f, workspace %.0f, "
                               "reserve %.0f) and %.0f MiB are free; use a smaller -c, or --device cpu",
                          info.name, (weights + kv + work + margin) / MiB, weights / MiB, kv / MiB, work / MiB,
                          margin / MiB, info.free_mem / MiB);
    return ft_model_upload(m, err);
}

// Moves the KV cache's tensors to the device (zeroed); their host rows are kept aside and
// given back before ft_kv_free.
static bool kv_to_device(ft_engine *e, ft_err *err) {
    int nl = e->m->hp.n_layer;
    e->kv_host = ft_calloc(2 * (size_t)nl, sizeof(void *));
    for (int l = 0; l < nl; l++)
        for (int i = 0; i < 2; i++) {
            ft_tensor *t = i ? ft_kv_v(e->kv, l) : ft_kv_k(e->kv, l);
            void *d = ft_cuda_malloc(t->mat_bytes);
            if (!d) return ft_err_set(err, "out of device memory for the KV cache (%s)", t->name);
            ft_cuda_memset(d, 0, t->mat_bytes, NULL);
            e->kv_host[2 * l + i] = t->data;
            t->data = d;
            t->placement = FT_PLACEMENT_CUDA;
        }
    ft_cuda_device_sync(); // the memsets ran on the default stream, the backend has its own
    return true;
}

static void kv_to_host(ft_engine *e) {
    if (!e->kv_host) return;
    for (int l = 0; l < e->m->hp.n_layer; l++)
        for (int i = 0; i < 2; i++) {
            ft_tensor *t = i ? ft_kv_v(e->kv, l) : ft_kv_k(e->kv, l);
            if (!e->kv_host[2 * l + i]) continue;
            ft_cuda_free(t->data);
            t->data = e->kv_host[2 * l + i];
            t->placement = FT_PLACEMENT_CPU;
        }
    free(e->kv_host);
    e->kv_host = NULL;
}

ft_engine *ft_engine_init(const ft_model *m, const ft_engine_params *params, ft_err *err) {
    const ft_hparams *hp = &m->hp;
    ft_engine_params p = *params;
    if (!resolve_params(m, &p, err)) return NULL;
    bool cuda = p.device == FT_PLACEMENT_CUDA;
    if (cuda && m->output.placement != FT_PLACEMENT_CUDA)
        return ft_err_set(err, "--device cuda: the model's weights are not on the device (ft_engine_place_model)"), NULL;
    if (!cuda && m->output.placement != FT_PLACEMENT_CPU)
        return ft_err_set(err, "--device cpu: the model's weights were uploaded to the GPU"), NULL;
    ft_backend *cbe = NULL;
    if (cuda && !(cbe = ft_backend_cuda_init(0, err))) return NULL;

    int64_t *widths = ft_malloc((size_t)hp->n_layer * sizeof(int64_t));
    for (int l = 0; l < hp->n_layer; l++) widths[l] = (int64_t)hp->n_head_kv * hp->head_dim;
    ft_kv_params kp = {hp->n_layer, p.n_ctx, p.kv_type, widths, hp->head_dim};
    ft_kv_cache *kv = ft_kv_init(&kp, err);
    free(widths);
    if (!kv) {
        if (cbe) cbe->ops->free(cbe);
        return NULL;
    }

    ft_engine *e = ft_calloc(1, sizeof(*e));
    e->m = m;
    e->p = p;
    e->kv = kv;
    e->place = moe_placement_cpu();
    e->be = cuda ? cbe : ft_backend_cpu_init(p.n_threads, p.reference);
    if (cuda && !kv_to_device(e, err)) {
        ft_engine_free(e);
        return NULL;
    }
    ft_backend_limits lim = engine_limits(m, &p);
    e->be->ops->reserve(e->be, &lim);

    ft_backend *be = e->be;
    ft_forward *f = &e->f;
    ft_forward_alloc(f, m, be, p.n_batch);
    f->kv = kv;
    f->place = &e->place;
    e->logits_dev = be->ops->alloc(be, (size_t)hp->n_vocab);
    e->logits = ft_malloc((size_t)hp->n_vocab * sizeof(float));
    return e;
}

void ft_engine_free(ft_engine *e) {
    if (!e) return;
    e->be->ops->free(e->be);
    kv_to_host(e);
    ft_kv_free(e->kv);
    free(e->logits);
    free(e);
}

void ft_engine_reset(ft_engine *e) {
    e->pos = 0;
    e->be->min_route_gap = INFINITY;
}

float ft_engine_route_gap(const ft_engine *e) { return e->be->min_route_gap; }
int ft_engine_pos(const ft_engine *e) { return e->pos; }
int ft_engine_n_ctx(const ft_engine *e) { return e->p.n_ctx; }
const ft_model *ft_engine_model(const ft_engine *e) { return e->m; }

// One batch of at most n_batch tokens through every layer.
static void forward_batch(ft_engine *e, const int32_t *tokens, int n) {
    const ft_model *m = e->m;
    ft_backend *be = e->be;
    ft_forward *f = &e->f;
    f->n_tok = n;
    f->pos0 = e->pos;
    be->ops->get_rows(be, &m->tok_embd, tokens, f->x, n);
    for (int il = 0; il < m->hp.n_layer; il++) m->arch->layer(m, f, il);
    e->pos += n;
}

const float *ft_engine_eval(ft_engine *e, const int32_t *tokens, int n, ft_err *err) {
    const ft_model *m = e->m;
    if (n < 1) return ft_err_set(err, "no tokens to evaluate"), NULL;
    if (n > e->p.n_ctx - e->pos)
        return ft_err_set(err, "%d tokens do not fit in the context: %d of %d positions used", n, e->pos, e->p.n_ctx),
               NULL;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab)
            return ft_err_set(err, "token id %d at %d is outside the vocabulary of %d", tokens[i], i, m->hp.n_vocab),
                   NULL;
    ft_backend *be = e->be;
    if (be->ops->step_begin) be->ops->step_begin(be, n, e->pos);
    int last = 0;
    for (int i = 0; i < n; i += e->p.n_batch) {
        last = FT_MIN(e->p.n_batch, n - i);
        forward_batch(e, tokens + i, last);
    }
    const float *xl = e->f.x + (size_t)(last - 1) * m->hp.n_embd;
    be->ops->rms_norm(be, xl, &m->output_norm, e->f.xn, 1, m->hp.n_embd, m->hp.rms_eps);
    be->ops->matmul(be, &m->output, e->f.xn, e->logits_dev, 1);
    if (be->ops->step_end) be->ops->step_end(be);
    be->ops->read(be, e->logits_dev, e->logits, (size_t)m->hp.n_vocab);
    return e->logits;
}

// ---------------------------------------------------------------------------------------------
// Generation

static bool is_eog(int32_t t, const int32_t *eog, int n_eog) {
    for (int i = 0; i < n_eog; i++)
        if (eog[i] == t) return true;
    return false;
}

bool ft_generate(ft_engine *e, ft_sampler *s, const int32_t *prompt, int n_prompt, int n_predict,
                 const int32_t *eog, int n_eog, ft_token_fn on_token, void *ctx,
                 ft_generate_stats *stats, ft_err *err) {
    ft_generate_stats st = {.n_prompt = n_prompt};
    double t0 = ft_time_s();
    const float *logits = ft_engine_eval(e, prompt, n_prompt, err);
    if (!logits) return false;
    for (int i = 0; i < n_prompt; i++) ft_sampler_accept(s, prompt[i]);
    st.prompt_s = ft_time_s() - t0;
    t0 = ft_time_s();
    for (int i = 0; i < n_predict; i++) {
        int32_t t = ft_sampler_sample(s, logits);
        ft_sampler_accept(s, t);
        if (is_eog(t, eog, n_eog)) {
            st.stopped_eog = true;
            break;
        }
        st.n_gen++;
        if (!on_token(ctx, t)) break;
        if (i + 1 == n_predict || e->pos >= e->p.n_ctx) break;
        logits = ft_engine_eval(e, &t, 1, err);
        if (!logits) return false;
    }
    st.gen_s = ft_time_s() - t0;
    if (stats) *stats = st;
    return true;
}
